package chunkstore

import (
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	_ "github.com/chunkraft/chunkraft/copyset" // its "proto" codec is the one chunkCodec wraps
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
)

// chunkCodec moves the large payloads of two messages without copying
// them: ChunkRequests (WriteChunk, PasteChunk payloads) and SendDataRequests
// (sync packets), both with their bytes in field 100. It decodes a large one
// with Data aliasing the received message instead of copying it out: one
// copy of every large write less on the leader, which then copies the
// payload once into the replicated op (encodeChunkOp), and of every sync
// packet on the SyncTool, which writes it as it came. It encodes a large
// SendDataRequest as its other fields followed by Data where it lies, so
// that gRPC frames the packet straight from the exporter's buffer instead
// of from a marshalled copy (sync_codec.go). It is registered as gRPC's
// "proto" codec on top of the one registered before it (copyset's
// AppendEntries codec, itself on top of gRPC's), to which it hands every
// other message and every message smaller than aliasDataMin.
//
// Invariant: for every input it decodes the same value (proto.Equal) and
// returns an error exactly when proto.Unmarshal does; what it encodes
// decodes (by proto.Unmarshal) to the message encoded.
type chunkCodec struct {
	next encoding.CodecV2
}

// aliasDataMin is the smallest message chunkCodec decodes itself: below it
// the copy it saves is cheaper than the field split.
const aliasDataMin = 64 << 10

// chunkDataField is ChunkRequest.data's field number (chunk.proto) and
// SendDataRequest.data's (data_sync.proto).
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

// Marshal implements encoding.CodecV2: a *dspb.SendDataRequest with at
// least aliasDataMin bytes of Data as marshalSendData does, anything else
// the next codec's.
func (c *chunkCodec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*dspb.SendDataRequest); ok && r != nil && len(r.Data) >= aliasDataMin {
		return marshalSendData(r)
	}
	return c.next.Marshal(v)
}

// Unmarshal implements encoding.CodecV2. A *pb.ChunkRequest or a
// *dspb.SendDataRequest of at least aliasDataMin bytes gets Data aliasing
// bytes borrowed from the received message (unmarshalPooled); anything else,
// and anything it does not parse, goes to the next codec.
func (c *chunkCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if data.Len() >= aliasDataMin {
		switch r := v.(type) {
		case *pb.ChunkRequest:
			if r != nil {
				return c.unmarshalPooled(data, r, setChunkData)
			}
		case *dspb.SendDataRequest:
			if r != nil {
				return c.unmarshalPooled(data, r, setSendData)
			}
		}
	}
	return c.next.Unmarshal(data, v)
}

// setChunkData sets a ChunkRequest's data (unmarshalAliasingData's set).
func setChunkData(m proto.Message, d []byte) { m.(*pb.ChunkRequest).Data = d }

// unmarshalChunkRequest is unmarshalAliasingData for a ChunkRequest.
func unmarshalChunkRequest(b []byte, req *pb.ChunkRequest) (aliased, ok bool) {
	return unmarshalAliasingData(b, req, setChunkData)
}

// unmarshalAliasingData decodes b into m (reset first), a message whose
// field 100 is bytes, with that field (set by set) aliasing
// b, cap-limited so that an append reallocates: every field but data is
// decoded by proto.Unmarshal from a copy of b without the data fields (in
// their order, unknown fields included), and data, a singular bytes field,
// takes its last occurrence as protobuf does. ok is false, and req must be
// decoded another way, for anything malformed or a data field of another
// wire type.
func unmarshalAliasingData(b []byte, m proto.Message, set func(m proto.Message, d []byte)) (aliased, ok bool) {
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
	if err := proto.Unmarshal(rest, m); err != nil {
		return false, false
	}
	if found {
		if d == nil {
			d = []byte{} // present but empty, as proto.Unmarshal decodes it
		}
		set(m, d[:len(d):len(d)])
	}
	return found && len(d) > 0, true
}
