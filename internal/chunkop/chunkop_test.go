package chunkop

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/copyset"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

func writeReq() *pb.ChunkRequest {
	return &pb.ChunkRequest{OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE.Enum(), LogicPoolId: proto.Uint32(1),
		CopysetId: proto.Uint32(2), ChunkId: proto.Uint64(3), Sn: proto.Uint64(1), Offset: proto.Uint32(4096),
		Size: proto.Uint32(8)}
}

// An owner rides after the data and the pre-image and comes back out of
// DecodeOwned; Decode leaves it out; an op without one is Encode's, byte
// for byte.
func TestOwnerRoundTrip(t *testing.T) {
	data := []byte("8 bytes!")
	for _, pre := range []*PreImage{nil, {ViewSeq: 7 << 8, Lo: 3, Data: []byte("pre-image")}} {
		plain, err := Encode(writeReq(), data, pre)
		if err != nil {
			t.Fatal(err)
		}
		same, err := EncodeOwned(writeReq(), data, pre, "")
		if err != nil || !bytes.Equal(same, plain) {
			t.Fatalf("pre %v: an op without an owner differs from Encode's (%v)", pre != nil, err)
		}
		for _, owner := range []string{"", "dm:task-1", strings.Repeat("o", 300)} {
			op, err := EncodeOwned(writeReq(), data, pre, owner)
			if err != nil {
				t.Fatal(err)
			}
			req, got, gotPre, gotOwner, err := DecodeOwned(op[copyset.OpHeaderLen:])
			if err != nil {
				t.Fatalf("owner %q, pre %v: %v", owner, pre != nil, err)
			}
			if !proto.Equal(req, writeReq()) || !bytes.Equal(got, data) || gotOwner != owner {
				t.Fatalf("owner %q, pre %v: decoded %v %q owner %q", owner, pre != nil, req, got, gotOwner)
			}
			if (pre == nil) != (gotPre == nil) || pre != nil && (gotPre.ViewSeq != pre.ViewSeq || gotPre.Lo != pre.Lo || !bytes.Equal(gotPre.Data, pre.Data)) {
				t.Fatalf("owner %q: pre-image %+v, want %+v", owner, gotPre, pre)
			}
			if _, got, _, err := Decode(op[copyset.OpHeaderLen:]); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("owner %q: Decode gave data %q, %v", owner, got, err)
			}
		}
	}
	if _, err := EncodeOwned(writeReq(), data, nil, strings.Repeat("o", MaxOwner+1)); err == nil {
		t.Fatal("an owner over MaxOwner was encoded")
	}
}

// EncodeOwnedParts joined is EncodeOwned's op, with and without data,
// pre-image and owner; the data is a part of its own, not a copy.
func TestEncodeParts(t *testing.T) {
	for _, data := range [][]byte{nil, []byte("8 bytes!")} {
		for _, pre := range []*PreImage{nil, {ViewSeq: 9, Lo: 1, Data: []byte("pre")}} {
			for _, owner := range []string{"", "dm:t"} {
				whole, err := EncodeOwned(writeReq(), data, pre, owner)
				if err != nil {
					t.Fatal(err)
				}
				parts, err := EncodeOwnedParts(writeReq(), data, pre, owner)
				if err != nil {
					t.Fatal(err)
				}
				if got := bytes.Join(parts, nil); !bytes.Equal(got, whole) {
					t.Fatalf("data %q pre %v owner %q: parts join to %x, want %x", data, pre != nil, owner, got, whole)
				}
				if len(data) > 0 && &parts[1][0] != &data[0] {
					t.Fatalf("data %q pre %v owner %q: the data part is a copy", data, pre != nil, owner)
				}
				if len(parts[0]) < copyset.OpHeaderLen {
					t.Fatalf("first part of %d bytes holds no op header", len(parts[0]))
				}
			}
		}
	}
}

// A cut or damaged owner trailer is an error, never a panic nor an owner
// made of other bytes.
func TestOwnerTrailerChecked(t *testing.T) {
	op, err := EncodeOwned(writeReq(), []byte("8 bytes!"), nil, "dm:a")
	if err != nil {
		t.Fatal(err)
	}
	payload := op[copyset.OpHeaderLen:]
	for _, bad := range [][]byte{
		payload[:len(payload)-1],                                  // the length cut
		append(bytes.Clone(payload[:len(payload)-2]), 0, 0),       // an empty owner
		append(bytes.Clone(payload[:len(payload)-2]), 0xff, 0xff), // longer than the op
	} {
		if _, _, _, owner, err := DecodeOwned(bad); err == nil {
			t.Fatalf("a damaged trailer decoded, owner %q: %x", owner, bad)
		}
	}
}

// A Decoder decodes every payload to a request proto.Equal to
// DecodeOwned's, with the same data, pre-image, owner and error, also
// when one Decoder decodes requests with different fields one after the
// other, and for payloads a fresh decode refuses.
func TestDecoderMatchesDecodeOwned(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var d Decoder
	for i := range 3000 {
		req := &pb.ChunkRequest{}
		set := func(f func()) {
			if r.IntN(2) == 0 {
				f()
			}
		}
		set(func() { req.OpType = pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE.Enum() })
		set(func() { req.LogicPoolId = proto.Uint32(r.Uint32()) })
		set(func() { req.CopysetId = proto.Uint32(r.Uint32N(3)) })
		set(func() { req.ChunkId = proto.Uint64(r.Uint64()) })
		set(func() { req.AppliedIndex = proto.Uint64(r.Uint64N(3)) })
		set(func() { req.Offset = proto.Uint32(r.Uint32()) })
		set(func() { req.Size = proto.Uint32(r.Uint32()) })
		set(func() { req.Sn = proto.Uint64(r.Uint64()) })
		set(func() { req.CorrectedSn = proto.Uint64(r.Uint64()) })
		set(func() { req.Location = proto.String("loc") })
		set(func() { req.CloneFileSource = proto.String("src") })
		set(func() { req.CloneFileOffset = proto.Uint64(r.Uint64()) })
		set(func() { req.SendScanMapTimeoutMs = proto.Uint64(r.Uint64()) })
		set(func() { req.SendScanMapRetryTimes = proto.Uint32(r.Uint32()) })
		set(func() { req.SendScanMapRetryIntervalUs = proto.Uint64(r.Uint64()) })
		set(func() { req.ReadMetaPage = proto.Bool(r.IntN(2) == 0) })
		set(func() { req.FileId = proto.Uint64(r.Uint64()) })
		set(func() { req.Epoch = proto.Uint64(r.Uint64()) })
		if i%2 == 0 {
			// Mostly complete requests, as the chunk machine decodes.
			req.OpType, req.LogicPoolId = pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE.Enum(), proto.Uint32(1)
			req.CopysetId, req.ChunkId = proto.Uint32(1), proto.Uint64(7)
		}
		b, err := proto.MarshalOptions{AllowPartial: true}.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		switch i % 7 {
		case 1: // an unknown field
			b = protowire.AppendVarint(protowire.AppendTag(b, 60, protowire.VarintType), 5)
		case 2: // a known field with another wire type
			b = protowire.AppendBytes(protowire.AppendTag(b, fSn, protowire.BytesType), []byte("x"))
		case 3: // truncated
			if len(b) > 0 {
				b = b[:r.IntN(len(b))]
			}
		case 4: // a repeated scalar: the last one counts
			b = protowire.AppendVarint(protowire.AppendTag(b, fOffset, protowire.VarintType), 9)
		}
		payload := binary.BigEndian.AppendUint32(nil, uint32(len(b)))
		payload = append(append(payload, b...), "data"...)
		want, wantData, _, _, wantErr := DecodeOwned(payload)
		got, gotData, _, _, gotErr := d.DecodeOwned(payload)
		if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
			t.Fatalf("case %d: error %v, DecodeOwned's %v", i, gotErr, wantErr)
		}
		if wantErr != nil {
			continue
		}
		if !proto.Equal(got, want) || string(gotData) != string(wantData) {
			t.Fatalf("case %d: decoded %v, DecodeOwned's %v", i, got, want)
		}
	}
}

// Decoding a write with a Decoder allocates nothing for its fields.
func TestDecoderAllocs(t *testing.T) {
	req := &pb.ChunkRequest{OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE.Enum(), LogicPoolId: proto.Uint32(1),
		CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(7), Offset: proto.Uint32(4096),
		Size: proto.Uint32(4096), Sn: proto.Uint64(1)}
	op, err := Encode(req, make([]byte, 4096), nil)
	if err != nil {
		t.Fatal(err)
	}
	payload := op[copyset.OpHeaderLen:]
	var d Decoder
	// OpType, an enum, is not held by the Decoder: one allocation.
	if n := testing.AllocsPerRun(100, func() { d.DecodeOwned(payload) }); n > 1 {
		t.Fatalf("%v allocations per decode", n)
	}
}
