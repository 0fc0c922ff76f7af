package chunkstore

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"unsafe"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

func chunkReq(data []byte) *pb.ChunkRequest {
	return &pb.ChunkRequest{
		OpType:      pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE.Enum(),
		LogicPoolId: proto.Uint32(1),
		CopysetId:   proto.Uint32(7),
		ChunkId:     proto.Uint64(42),
		Offset:      proto.Uint32(4096),
		Size:        proto.Uint32(uint32(len(data))),
		Sn:          proto.Uint64(3),
		Data:        data,
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>9)
	}
	return b
}

// chunked splits b into 16 KiB buffers, as gRPC delivers a large message.
func chunked(b []byte) mem.BufferSlice {
	var s mem.BufferSlice
	for len(b) > 0 {
		n := min(len(b), 16<<10)
		s = append(s, mem.SliceBuffer(append([]byte(nil), b[:n]...)))
		b = b[n:]
	}
	return s
}

func inside(p, b []byte) bool {
	if len(p) == 0 || len(b) == 0 {
		return false
	}
	start, end := uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&b[0]))+uintptr(len(b))
	q := uintptr(unsafe.Pointer(&p[0]))
	return q >= start && q < end
}

func TestChunkCodecMatchesProto(t *testing.T) {
	big := pattern(1 << 20)
	withUnknown := protowire.AppendVarint(protowire.AppendTag(mustMarshal(t, chunkReq(big)), 500, protowire.VarintType), 9)
	dup := protowire.AppendBytes(protowire.AppendTag(mustMarshal(t, chunkReq(big)), chunkDataField, protowire.BytesType), pattern(70 << 10)[1:])
	noRequired, err := proto.MarshalOptions{AllowPartial: true}.Marshal(&pb.ChunkRequest{Data: big}) // Unmarshal must refuse it
	if err != nil {
		t.Fatal(err)
	}
	wrongType := protowire.AppendVarint(protowire.AppendTag(mustMarshal(t, chunkReq(big[:100<<10])), chunkDataField, protowire.VarintType), 1)
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"1 MiB write", mustMarshal(t, chunkReq(big))},
		{"64 KiB write", mustMarshal(t, chunkReq(big[:64<<10]))},
		{"unknown field kept", withUnknown},
		{"data twice: last wins", dup},
		{"required fields missing", noRequired},
		{"data with a varint wire type", wrongType},
		{"truncated", mustMarshal(t, chunkReq(big))[:300<<10]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := &pb.ChunkRequest{}
			wantErr := proto.Unmarshal(tc.b, want)
			codec := encoding.GetCodecV2(protoenc.Name)
			for _, in := range []mem.BufferSlice{{mem.SliceBuffer(slices.Clip(tc.b))}, chunked(tc.b)} {
				got := &pb.ChunkRequest{}
				err := codec.Unmarshal(in, got)
				if (err != nil) != (wantErr != nil) {
					t.Fatalf("codec error %v, proto.Unmarshal error %v", err, wantErr)
				}
				if err != nil {
					continue
				}
				if !proto.Equal(got, want) || !bytes.Equal(got.GetData(), want.GetData()) {
					t.Fatalf("codec decoded a different message")
				}
				if fallback := tc.name == "data with a varint wire type"; !fallback && got.Data != nil && cap(got.Data) != len(got.Data) {
					t.Fatalf("Data not cap-limited: len %d cap %d", len(got.Data), cap(got.Data))
				}
			}
			// One well-fitting buffer is decoded in place.
			if wantErr == nil && len(want.GetData()) > 0 && tc.name != "data with a varint wire type" {
				got := &pb.ChunkRequest{}
				if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(slices.Clip(tc.b))}, got); err != nil {
					t.Fatal(err)
				}
				if !inside(got.Data, tc.b) {
					t.Fatalf("Data was copied, not aliased")
				}
			}
		})
	}
}

func TestChunkCodecEmptyData(t *testing.T) {
	// Present but empty data stays present (proto2 optional bytes).
	b := mustMarshal(t, chunkReq(nil))
	b = protowire.AppendBytes(protowire.AppendTag(b, chunkDataField, protowire.BytesType), nil)
	b = protowire.AppendBytes(protowire.AppendTag(b, 501, protowire.BytesType), make([]byte, aliasDataMin)) // large enough for the codec
	want, got := &pb.ChunkRequest{}, &pb.ChunkRequest{}
	if err := proto.Unmarshal(b, want); err != nil {
		t.Fatal(err)
	}
	if err := encoding.GetCodecV2(protoenc.Name).Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) || got.Data == nil {
		t.Fatalf("empty data: got Data %v (nil %t), want present and empty", got.Data, got.Data == nil)
	}
}

// FuzzChunkRequestAlias: whatever unmarshalChunkRequest accepts,
// proto.Unmarshal accepts and decodes the same.
func FuzzChunkRequestAlias(f *testing.F) {
	f.Add(mustMarshalF(chunkReq(pattern(100))))
	f.Add(mustMarshalF(chunkReq(nil)))
	f.Add([]byte{0xa2, 0x06, 0x02, 1, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		got := &pb.ChunkRequest{}
		_, ok := unmarshalChunkRequest(b, got)
		if !ok {
			return
		}
		want := &pb.ChunkRequest{}
		if err := proto.Unmarshal(b, want); err != nil {
			t.Fatalf("accepted what proto.Unmarshal refuses: %v", err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("decoded %v, proto.Unmarshal %v", got, want)
		}
	})
}

func mustMarshalF(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// TestChunkCodecRegistered: the process's "proto" codec is chunkCodec,
// stacked on another codec (copyset's AppendEntries codec), so both
// zero-copy decoders are in effect in a chunkserver.
func TestChunkCodecRegistered(t *testing.T) {
	c, ok := encoding.GetCodecV2(protoenc.Name).(*chunkCodec)
	if !ok {
		t.Fatalf("gRPC proto codec is %T, want *chunkCodec", encoding.GetCodecV2(protoenc.Name))
	}
	if _, stacked := c.next.(*chunkCodec); stacked || c.next == nil {
		t.Fatalf("chunkCodec's next codec is %T, want copyset's", c.next)
	}
	if got := fmt.Sprintf("%T", c.next); got != "*copyset.wireCodec" {
		t.Fatalf("chunkCodec's next codec is %s, want *copyset.wireCodec", got)
	}
}

// TestChunkCodecRecycles: a large ChunkRequest decodes with Data in
// borrowed bytes, which the end of its call gives back whether the call
// succeeded or not (the chunk service copies the data into the proposed op
// within the call); a small one borrows nothing.
func TestChunkCodecRecycles(t *testing.T) {
	codec := encoding.GetCodecV2(protoenc.Name)
	for _, tc := range []struct {
		name   string
		size   int
		failed bool
	}{{"1 MiB, answered", 1 << 20, false}, {"1 MiB, call failed", 1 << 20, true}, {"4 KiB", 4 << 10, false}} {
		want := chunkReq(pattern(tc.size))
		got := &pb.ChunkRequest{}
		if err := codec.Unmarshal(chunked(mustMarshal(t, want)), got); err != nil || !proto.Equal(got, want) {
			t.Fatalf("%s: decoded %v (%v)", tc.name, got, err)
		}
		_, held := pooledBufs.Load(got)
		if large := tc.size >= aliasDataMin; held != large {
			t.Fatalf("%s: borrowed %t, want %t", tc.name, held, large)
		}
		_, err := RecyclePooled(context.Background(), got, &grpc.UnaryServerInfo{}, func(context.Context, any) (any, error) {
			if tc.failed {
				return nil, fmt.Errorf("call failed")
			}
			return chunkResponse(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS), nil
		})
		if (err != nil) != tc.failed {
			t.Fatalf("%s: interceptor returned %v", tc.name, err)
		}
		if _, still := pooledBufs.Load(got); still || held && got.Data != nil {
			t.Fatalf("%s: after the call: still held %t, Data released %t", tc.name, still, got.Data == nil)
		}
	}
}
