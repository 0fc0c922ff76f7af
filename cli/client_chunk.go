package cli

import (
	"context"
	"fmt"
	"math"

	"google.golang.org/protobuf/proto"

	chunkserverpb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

func chunkRequest(op chunkserverpb.CHUNK_OP_TYPE, id ChunkID) *chunkserverpb.ChunkRequest {
	return &chunkserverpb.ChunkRequest{
		OpType:      op.Enum(),
		LogicPoolId: proto.Uint32(id.Pool),
		CopysetId:   proto.Uint32(id.Copyset),
		ChunkId:     proto.Uint64(id.Chunk),
	}
}

// WriteChunk writes data at offset of a chunk through the copyset's leader.
// sn is the file sequence number the write is made under.
func (c *Client) WriteChunk(ctx context.Context, id ChunkID, offset uint32, data []byte, sn uint64) error {
	op := "write " + id.String()
	if uint64(len(data)) > math.MaxUint32 {
		return fmt.Errorf("%s: %d bytes is too large for one request", op, len(data))
	}
	req := chunkRequest(chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, id)
	req.Offset = proto.Uint32(offset)
	req.Size = proto.Uint32(uint32(len(data)))
	req.Sn = proto.Uint64(sn)
	req.Data = data
	return c.onLeader(ctx, op, id.CopysetID, func(ctx context.Context, svc chunkserverpb.ChunkServiceClient) (chunkserverpb.CHUNK_OP_STATUS, string, error) {
		resp, err := svc.WriteChunk(ctx, req)
		return resp.GetStatus(), resp.GetRedirect(), err
	})
}

// ReadChunk reads size bytes at offset of a chunk from the copyset's leader
// (a linearizable read). Reading a chunk that does not exist fails with
// CHUNK_OP_STATUS_CHUNK_NOTEXIST.
func (c *Client) ReadChunk(ctx context.Context, id ChunkID, offset, size uint32) ([]byte, error) {
	op := "read " + id.String()
	req := chunkRequest(chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_READ, id)
	req.Offset = proto.Uint32(offset)
	req.Size = proto.Uint32(size)
	var data []byte
	err := c.onLeader(ctx, op, id.CopysetID, func(ctx context.Context, svc chunkserverpb.ChunkServiceClient) (chunkserverpb.CHUNK_OP_STATUS, string, error) {
		resp, err := svc.ReadChunk(ctx, req)
		data = resp.GetData()
		return resp.GetStatus(), resp.GetRedirect(), err
	})
	if err != nil {
		return nil, err
	}
	if uint64(len(data)) != uint64(size) {
		return nil, fmt.Errorf("%s: server returned %d bytes, asked for %d", op, len(data), size)
	}
	return data, nil
}

// DeleteChunk deletes a chunk through the copyset's leader. sn, when not 0,
// is sent as the request's sequence number.
func (c *Client) DeleteChunk(ctx context.Context, id ChunkID, sn uint64) error {
	req := chunkRequest(chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_DELETE, id)
	if sn != 0 {
		req.Sn = proto.Uint64(sn)
	}
	return c.onLeader(ctx, "delete "+id.String(), id.CopysetID, func(ctx context.Context, svc chunkserverpb.ChunkServiceClient) (chunkserverpb.CHUNK_OP_STATUS, string, error) {
		resp, err := svc.DeleteChunk(ctx, req)
		return resp.GetStatus(), resp.GetRedirect(), err
	})
}

// GetChunkInfo returns a chunk's sequence numbers as the leader reports them
// (the chunk's sn, then its snapshot's sn if it has one; empty if the chunk
// does not exist and the server reports that as success).
func (c *Client) GetChunkInfo(ctx context.Context, id ChunkID) ([]uint64, error) {
	req := &chunkserverpb.GetChunkInfoRequest{
		LogicPoolId: proto.Uint32(id.Pool),
		CopysetId:   proto.Uint32(id.Copyset),
		ChunkId:     proto.Uint64(id.Chunk),
	}
	var sns []uint64
	err := c.onLeader(ctx, "chunk info "+id.String(), id.CopysetID, func(ctx context.Context, svc chunkserverpb.ChunkServiceClient) (chunkserverpb.CHUNK_OP_STATUS, string, error) {
		resp, err := svc.GetChunkInfo(ctx, req)
		sns = resp.GetChunkSn()
		return resp.GetStatus(), resp.GetRedirect(), err
	})
	if err != nil {
		return nil, err
	}
	return sns, nil
}
