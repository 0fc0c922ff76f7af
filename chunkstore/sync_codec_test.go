package chunkstore

import (
	"bytes"
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/protobuf/proto"

	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
)

func sendDataReq(data []byte) *dspb.SendDataRequest {
	return &dspb.SendDataRequest{
		Tid: proto.Uint32(1), Pid: proto.Uint32(7), Token: proto.String("tok"), Count: proto.Uint64(3),
		StartPoint: &dspb.SyncPoint{Type: dspb.SyncType_kSNAPSHOT.Enum(), Pk: proto.String("42")},
		NextPoint:  &dspb.SyncPoint{Type: dspb.SyncType_kBINLOG.Enum(), Offset: proto.Uint64(9)},
		Finished:   proto.Bool(true), Data: data,
	}
}

// TestSyncCodecRoundTrip: a large SendDataRequest the process codec
// encodes is proto.Marshal's bytes, carries Data without copying it, and
// decodes, through the codec, to the request with Data aliasing the
// received bytes; a small one and one with unknown fields decode the same
// as proto.Unmarshal decodes them.
func TestSyncCodecRoundTrip(t *testing.T) {
	codec := encoding.GetCodecV2(protoenc.Name)
	big := sendDataReq(pattern(1 << 20))
	withUnknown := sendDataReq(pattern(aliasDataMin))
	withUnknown.ProtoReflect().SetUnknown([]byte{0xa8, 0x1f, 0x01}) // field 501, varint 1
	for name, req := range map[string]*dspb.SendDataRequest{
		"large": big, "small": sendDataReq(pattern(100)), "no data": sendDataReq(nil), "unknown fields": withUnknown,
	} {
		out, err := codec.Marshal(req)
		if err != nil {
			t.Fatalf("%s: marshal: %v", name, err)
		}
		wire := out.Materialize()
		want := &dspb.SendDataRequest{}
		if err := proto.Unmarshal(wire, want); err != nil || !proto.Equal(want, req) {
			t.Fatalf("%s: the codec's bytes decode to %v (%v), want %v", name, want, err, req)
		}
		if name == "large" {
			if !bytes.Equal(wire, mustMarshal(t, req)) {
				t.Fatalf("large: the codec's bytes differ from proto.Marshal's")
			}
			if last := out[len(out)-1].ReadOnlyData(); len(last) != len(req.Data) || &last[0] != &req.Data[0] {
				t.Fatalf("large: Data was copied: the last buffer is %d bytes, not the request's own", len(last))
			}
		}
		got := &dspb.SendDataRequest{}
		in := chunked(wire)
		if err := codec.Unmarshal(in, got); err != nil || !proto.Equal(got, want) {
			t.Fatalf("%s: the codec decodes %v (%v), want %v", name, got, err, want)
		}
		_, held := pooledBufs.Load(got)
		if pooled := len(wire) >= aliasDataMin && len(got.Data) > 0; held != pooled {
			t.Fatalf("%s: decoded into a pooled buffer %t, want %t", name, held, pooled)
		}
		// The call's end gives the buffer back after a success only.
		ok := name != "unknown fields"
		_, err = RecyclePooled(context.Background(), got, &grpc.UnaryServerInfo{}, func(context.Context, any) (any, error) {
			if !ok {
				return &dspb.SendDataResponse{Response: &dspb.GeneralResponse{Code: proto.Int32(-1)}}, nil
			}
			return &dspb.SendDataResponse{Response: &dspb.GeneralResponse{Code: proto.Int32(0)}}, nil
		})
		if _, still := pooledBufs.Load(got); err != nil || still {
			t.Fatalf("%s: after the call: err %v, buffer still held %t", name, err, still)
		}
		if held && (got.Data == nil) != ok {
			t.Fatalf("%s: after a call that succeeded %t, Data released %t", name, ok, got.Data == nil)
		}
	}
	b := mustMarshal(t, big)
	got := &dspb.SendDataRequest{}
	if aliased, ok := unmarshalAliasingData(b, got, func(m proto.Message, d []byte) { m.(*dspb.SendDataRequest).Data = d }); !ok || !aliased {
		t.Fatalf("unmarshalAliasingData of a large request: aliased %t ok %t", aliased, ok)
	}
	if !inside(got.Data, b) || !proto.Equal(got, big) {
		t.Fatalf("Data does not alias the received bytes, or the request differs")
	}
}
