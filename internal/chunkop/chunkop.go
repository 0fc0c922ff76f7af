package chunkop

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/kinds"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	"google.golang.org/protobuf/proto"
)

// Encode builds the replicated op for req carrying data.
// The request is marshalled without its data field (set aside for the
// call, so the payload is copied once, into the op) and req is left as it
// was.
func Encode(req *pb.ChunkRequest, data []byte) ([]byte, error) {
	saved := req.Data
	req.Data = nil
	size := proto.Size(req)
	head := make([]byte, copyset.OpHeaderLen+4, copyset.OpHeaderLen+4+size)
	head, err := proto.MarshalOptions{}.MarshalAppend(head, req)
	req.Data = saved
	if err != nil {
		return nil, fmt.Errorf("encode chunk op: %w", err)
	}
	copyset.PutOpHeader(head, kinds.Chunk)
	binary.BigEndian.PutUint32(head[copyset.OpHeaderLen:], uint32(len(head)-copyset.OpHeaderLen-4))
	if len(data) == 0 {
		return head, nil
	}
	// bytes.Join allocates exactly the op without clearing it first, where a
	// make would zero a 1 MiB payload only to overwrite it.
	return bytes.Join([][]byte{head, data}, nil), nil
}

// Decode is the inverse of Encode on the payload (without the
// copyset op header). data aliases payload.
func Decode(payload []byte) (*pb.ChunkRequest, []byte, error) {
	if len(payload) < 4 {
		return nil, nil, fmt.Errorf("decode chunk op: %d bytes, want at least 4", len(payload))
	}
	n := binary.BigEndian.Uint32(payload)
	if uint64(n) > uint64(len(payload)-4) {
		return nil, nil, fmt.Errorf("decode chunk op: request length %d exceeds payload %d", n, len(payload)-4)
	}
	req := &pb.ChunkRequest{}
	if err := proto.Unmarshal(payload[4:4+n], req); err != nil {
		return nil, nil, fmt.Errorf("decode chunk op: %w", err)
	}
	return req, payload[4+n:], nil
}
