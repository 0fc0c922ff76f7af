package chunkstore

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/chunkserver/servertest"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/chunkop"
	"github.com/chunkraft/chunkraft/internal/location"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// FuzzDecodeChunkOp: chunkop.DecodeOwned never panics, and what it
// accepts re-encodes to the same request, data, pre-image and owner.
func FuzzDecodeChunkOp(f *testing.F) {
	for _, req := range []*pb.ChunkRequest{
		servertest.WriteReq(1, 0, []byte("data")),
		servertest.ReadReq(2, 4096, 4096),
		{OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_CREATE_CLONE.Enum(), LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(3), Location: proto.String("1/1/2:0@cs")},
	} {
		for _, pre := range []*chunkop.PreImage{nil, {ViewSeq: 7 << 8, Lo: 3, Data: []byte("pre-image")}} {
			for _, owner := range []string{"", "mig:task"} {
				op, err := chunkop.EncodeOwned(req, req.GetData(), pre, owner)
				if err != nil {
					f.Fatal(err)
				}
				f.Add(op[copyset.OpHeaderLen:])
			}
		}
	}
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0})
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1})
	f.Add([]byte{0, 0, 0, 2, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, payload []byte) {
		req, data, pre, owner, err := chunkop.DecodeOwned(payload)
		if err != nil {
			return
		}
		op, err := chunkop.EncodeOwned(req, data, pre, owner)
		if err != nil {
			t.Fatal(err)
		}
		req2, data2, pre2, owner2, err := chunkop.DecodeOwned(op[copyset.OpHeaderLen:])
		if err != nil {
			t.Fatalf("re-encoded op does not decode: %v", err)
		}
		req.Data = nil // carried after the header, not in it
		if !proto.Equal(req, req2) || !bytes.Equal(data, data2) || owner != owner2 {
			t.Fatalf("round trip changed the op: %v %x %q -> %v %x %q", req, data, owner, req2, data2, owner2)
		}
		if (pre == nil) != (pre2 == nil) || pre != nil && (pre.ViewSeq != pre2.ViewSeq || pre.Lo != pre2.Lo || !bytes.Equal(pre.Data, pre2.Data)) {
			t.Fatalf("round trip changed the pre-image: %+v -> %+v", pre, pre2)
		}
	})
}

// FuzzParseLocation: parseLocation never panics; an accepted cs location
// has a 4 KiB aligned offset below 16 MiB and formats back to a location
// that parses to the same value.
func FuzzParseLocation(f *testing.F) {
	for _, s := range []string{"", "1/2/3:4096@cs", "1/2/3:0@cs", "obj/name@s3", "a@b@s3", "1/2/3:4097@cs",
		"1/2:0@cs", "1/2/3@cs", "x@ftp", "@s3", "4294967296/1/1:0@cs", "1/1/1:16777216@cs", strings.Repeat("a", 3001) + "@s3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		loc, err := parseLocation(s)
		if err != nil {
			return
		}
		if len(s) == 0 || len(s) > location.MaxLen {
			t.Fatalf("accepted a location of %d bytes", len(s))
		}
		if loc.s3 {
			if !strings.HasSuffix(s, "@s3") || loc.object != strings.TrimSuffix(s, "@s3") {
				t.Fatalf("%q parsed to object %q", s, loc.object)
			}
			return
		}
		if !strings.HasSuffix(s, "@cs") || loc.offset%4096 != 0 || loc.offset >= 16<<20 {
			t.Fatalf("%q parsed to %+v", s, loc)
		}
	})
}
