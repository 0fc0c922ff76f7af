package chunkserver

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	_ "github.com/chunkraft/chunkraft/copyset" // its "proto" codec is the one chunkCodec wraps
	"github.com/chunkraft/chunkraft/internal/grpcbuf"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// chunkCodec decodes large ChunkRequests (WriteChunk, PasteChunk payloads)
// with Data aliasing the received message instead of copying it out: one
// copy of every large write less on the leader, which then copies the
// payload once into the replicated op (encodeChunkOp). It is registered as
// gRPC's "proto" codec on top of the one registered before it (copyset's
// AppendEntries codec, itself on top of gRPC's), to which it hands every
// other message and every ChunkRequest smaller than aliasDataMin.
//
// Invariant: for every input it decodes the same value (proto.Equal) and
// returns an error exactly when proto.Unmarshal does; the wire bytes are
// untouched (Marshal is the next codec's).
type chunkCodec struct {
	next encoding.CodecV2
}

// aliasDataMin is the smallest message chunkCodec decodes itself: below it
// the copy it saves is cheaper than the field split.
const aliasDataMin = 64 << 10

// chunkDataField is ChunkRequest.data's field number (chunk.proto).
const chunkDataField protowire.Number = 100

func init() {
	next := encoding.GetCodecV2(protoenc.Name)
	if next == nil {
		panic("chunkserver: no gRPC proto codec registered")
	}
	encoding.RegisterCodecV2(&chunkCodec{next: next})
}

// Name implements encoding.CodecV2.
func (c *chunkCodec) Name() string { return protoenc.Name }

// Marshal implements encoding.CodecV2: the next codec's.
func (c *chunkCodec) Marshal(v any) (mem.BufferSlice, error) { return c.next.Marshal(v) }

// Unmarshal implements encoding.CodecV2. A *pb.ChunkRequest of at least
// aliasDataMin bytes gets Data aliasing the received bytes (grpcbuf.Hold:
// never recycled while Data lives); anything it does not parse goes to the
// next codec.
func (c *chunkCodec) Unmarshal(data mem.BufferSlice, v any) error {
	req, ok := v.(*pb.ChunkRequest)
	if !ok || req == nil || data.Len() < aliasDataMin {
		return c.next.Unmarshal(data, v)
	}
	b, ref := grpcbuf.Hold(data)
	aliased, ok := unmarshalChunkRequest(b, req)
	if ok {
		if ref != nil && !aliased {
			ref.Free()
		}
		return nil
	}
	err := c.next.Unmarshal(data, v) // resets req: nothing in it points into b
	if ref != nil {
		ref.Free()
	}
	if err != nil {
		return fmt.Errorf("chunkserver: unmarshal ChunkRequest: %w", err)
	}
	return nil
}

// unmarshalChunkRequest decodes b into req (reset first) with Data aliasing
// b, cap-limited so that an append reallocates: every field but data is
// decoded by proto.Unmarshal from a copy of b without the data fields (in
// their order, unknown fields included), and data, a singular bytes field,
// takes its last occurrence as protobuf does. ok is false, and req must be
// decoded another way, for anything malformed or a data field of another
// wire type.
func unmarshalChunkRequest(b []byte, req *pb.ChunkRequest) (aliased, ok bool) {
	var rest, d []byte
	found := false
	for p := b; len(p) > 0; {
		num, typ, n := protowire.ConsumeTag(p)
		if n < 0 {
			return false, false
		}
		m := protowire.ConsumeFieldValue(num, typ, p[n:])
		if m < 0 {
			return false, false
		}
		if num == chunkDataField {
			if typ != protowire.BytesType {
				return false, false
			}
			v, _ := protowire.ConsumeBytes(p[n : n+m])
			d, found = v, true
		} else {
			rest = append(rest, p[:n+m]...)
		}
		p = p[n+m:]
	}
	if err := proto.Unmarshal(rest, req); err != nil {
		return false, false
	}
	if found {
		req.Data = d[:len(d):len(d)]
		if req.Data == nil {
			req.Data = []byte{} // present but empty, as proto.Unmarshal decodes it
		}
	}
	return found && len(d) > 0, true
}
