package cli

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
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

// Fence is the file id and epoch a mutating chunk request carries. A server
// that has been told a newer epoch for the file (UpdateEpoch) refuses the
// request with CHUNK_OP_STATUS_EPOCH_TOO_OLD and changes nothing.
type Fence struct {
	FileID uint64 `json:"fileId"`
	Epoch  uint64 `json:"epoch"`
}

func (f *Fence) apply(req *chunkserverpb.ChunkRequest) {
	if f != nil {
		req.FileId = proto.Uint64(f.FileID)
		req.Epoch = proto.Uint64(f.Epoch)
	}
}

// WriteChunk writes data at offset of a chunk through the copyset's leader.
// sn is the file sequence number the write is made under. Like every chunk
// I/O call it checks the request first (checkIO: offset and size multiples
// of BlockSize, size not 0, inside the ChunkSize chunk; sn not 0) and sends
// nothing when it breaks a rule, naming the rule.
func (c *Client) WriteChunk(ctx context.Context, id ChunkID, offset uint32, data []byte, sn uint64) error {
	return c.writeChunk(ctx, id, offset, data, sn, nil)
}

// WriteChunkFenced is WriteChunk with the file id and epoch of fence. A
// CHUNK_OP_STATUS_EPOCH_TOO_OLD answer is final (see IsChunkStatus).
func (c *Client) WriteChunkFenced(ctx context.Context, id ChunkID, offset uint32, data []byte, sn uint64, fence Fence) error {
	return c.writeChunk(ctx, id, offset, data, sn, &fence)
}

func (c *Client) writeChunk(ctx context.Context, id ChunkID, offset uint32, data []byte, sn uint64, fence *Fence) error {
	op := chunkOp{"write", id}
	if err := checkIO(uint64(offset), uint64(len(data)), "size"); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if sn == 0 {
		return fmt.Errorf("%s: %w", op, errSnZero)
	}
	req := chunkRequest(chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, id)
	req.Offset = proto.Uint32(offset)
	req.Size = proto.Uint32(uint32(len(data)))
	req.Sn = proto.Uint64(sn)
	req.Data = data
	fence.apply(req)
	return c.onLeader(ctx, op, id.CopysetID, func(ctx context.Context, svc chunkserverpb.ChunkServiceClient) (chunkserverpb.CHUNK_OP_STATUS, string, error) {
		resp, err := svc.WriteChunk(ctx, req)
		return resp.GetStatus(), resp.GetRedirect(), err
	})
}

// ReadChunk reads size bytes at offset of a chunk from the copyset's leader
// (a linearizable read). Reading a chunk that does not exist fails with
// CHUNK_OP_STATUS_CHUNK_NOTEXIST.
func (c *Client) ReadChunk(ctx context.Context, id ChunkID, offset, size uint32) ([]byte, error) {
	req := chunkRequest(chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_READ, id)
	return c.readData(ctx, chunkOp{"read", id}, id, req, offset, size, chunkserverpb.ChunkServiceClient.ReadChunk)
}

// readData sends a read-type request for [offset, offset+size) with call on
// the leader and checks the reply carries exactly size bytes.
func (c *Client) readData(ctx context.Context, op fmt.Stringer, id ChunkID, req *chunkserverpb.ChunkRequest, offset, size uint32,
	call func(chunkserverpb.ChunkServiceClient, context.Context, *chunkserverpb.ChunkRequest, ...grpc.CallOption) (*chunkserverpb.ChunkResponse, error)) ([]byte, error) {
	if err := checkIO(uint64(offset), uint64(size), "size"); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	req.Offset = proto.Uint32(offset)
	req.Size = proto.Uint32(size)
	var data []byte
	err := c.onLeader(ctx, op, id.CopysetID, func(ctx context.Context, svc chunkserverpb.ChunkServiceClient) (chunkserverpb.CHUNK_OP_STATUS, string, error) {
		resp, err := call(svc, ctx, req)
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

// DeleteChunk deletes a chunk (and its snapshot) through the copyset's
// leader. sn, when not 0, is sent as the request's sequence number.
func (c *Client) DeleteChunk(ctx context.Context, id ChunkID, sn uint64) error {
	return c.deleteChunk(ctx, id, sn, nil)
}

// DeleteChunkFenced is DeleteChunk with the file id and epoch of fence.
func (c *Client) DeleteChunkFenced(ctx context.Context, id ChunkID, sn uint64, fence Fence) error {
	return c.deleteChunk(ctx, id, sn, &fence)
}

func (c *Client) deleteChunk(ctx context.Context, id ChunkID, sn uint64, fence *Fence) error {
	req := chunkRequest(chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_DELETE, id)
	if sn != 0 {
		req.Sn = proto.Uint64(sn)
	}
	fence.apply(req)
	return c.onLeader(ctx, chunkOp{"delete", id}, id.CopysetID, func(ctx context.Context, svc chunkserverpb.ChunkServiceClient) (chunkserverpb.CHUNK_OP_STATUS, string, error) {
		resp, err := svc.DeleteChunk(ctx, req)
		return resp.GetStatus(), resp.GetRedirect(), err
	})
}

// GetChunkInfo returns a chunk's sequence numbers as the leader reports them:
// [sn] or, when the chunk has a COW snapshot, [sn snapSn]. An empty list
// means the chunk does not exist.
func (c *Client) GetChunkInfo(ctx context.Context, id ChunkID) ([]uint64, error) {
	req := &chunkserverpb.GetChunkInfoRequest{
		LogicPoolId: proto.Uint32(id.Pool),
		CopysetId:   proto.Uint32(id.Copyset),
		ChunkId:     proto.Uint64(id.Chunk),
	}
	var sns []uint64
	err := c.onLeader(ctx, chunkOp{"chunk info", id}, id.CopysetID, func(ctx context.Context, svc chunkserverpb.ChunkServiceClient) (chunkserverpb.CHUNK_OP_STATUS, string, error) {
		resp, err := svc.GetChunkInfo(ctx, req)
		sns = resp.GetChunkSn()
		return resp.GetStatus(), resp.GetRedirect(), err
	})
	if err != nil {
		return nil, err
	}
	return sns, nil
}

// ReadChunkSnapshot reads size bytes at offset of a chunk's version sn (the
// COW snapshot kept when a write with a newer sn arrived) from the copyset's
// leader.
func (c *Client) ReadChunkSnapshot(ctx context.Context, id ChunkID, sn uint64, offset, size uint32) ([]byte, error) {
	req := chunkRequest(chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_READ_SNAP, id)
	req.Sn = proto.Uint64(sn)
	op := opText(fmt.Sprintf("read snapshot sn %d of %s", sn, id))
	if sn == 0 {
		return nil, fmt.Errorf("%s: %w", op, errSnZero)
	}
	return c.readData(ctx, op, id, req, offset, size, chunkserverpb.ChunkServiceClient.ReadChunkSnapshot)
}

// DeleteChunkSnapshotOrCorrectSn deletes a chunk's COW snapshot or, when it
// has none, records correctedSn as the chunk's corrected sequence number
// (Curve's DeleteChunkSnapshotOrCorrectSn), through the copyset's leader.
func (c *Client) DeleteChunkSnapshotOrCorrectSn(ctx context.Context, id ChunkID, correctedSn uint64) error {
	req := chunkRequest(chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_DELETE_SNAP, id)
	req.CorrectedSn = proto.Uint64(correctedSn)
	op := opText(fmt.Sprintf("delete snapshot (corrected sn %d) of %s", correctedSn, id))
	return c.onLeader(ctx, op, id.CopysetID, func(ctx context.Context, svc chunkserverpb.ChunkServiceClient) (chunkserverpb.CHUNK_OP_STATUS, string, error) {
		resp, err := svc.DeleteChunkSnapshotOrCorrectSn(ctx, req)
		return resp.GetStatus(), resp.GetRedirect(), err
	})
}

// CreateCloneChunk creates a clone chunk of CloneChunkSize bytes whose
// unwritten blocks read from location ("<pool>/<copyset>/<chunkId>:<offset>@cs"
// or "<object>@s3"; see ParseCloneLocation, which is checked first). It is
// idempotent: creating the same clone again succeeds, while an existing chunk
// with another location or sn fails with CHUNK_OP_STATUS_CHUNK_EXIST.
func (c *Client) CreateCloneChunk(ctx context.Context, id ChunkID, location string, sn, correctedSn uint64) error {
	op := chunkOp{"clone", id}
	if _, err := ParseCloneLocation(location); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if sn == 0 {
		return fmt.Errorf("%s: %w", op, errSnZero)
	}
	req := chunkRequest(chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_CREATE_CLONE, id)
	req.Sn = proto.Uint64(sn)
	req.CorrectedSn = proto.Uint64(correctedSn)
	req.Size = proto.Uint32(CloneChunkSize)
	req.Location = proto.String(location)
	return c.onLeader(ctx, op, id.CopysetID, func(ctx context.Context, svc chunkserverpb.ChunkServiceClient) (chunkserverpb.CHUNK_OP_STATUS, string, error) {
		resp, err := svc.CreateCloneChunk(ctx, req)
		return resp.GetStatus(), resp.GetRedirect(), err
	})
}

// RecoverChunk makes the copyset's leader copy the not yet written blocks of
// [offset, offset+size) of a clone chunk from its source and replicate them
// (blocks the client wrote are left alone). On a normal chunk it does nothing.
func (c *Client) RecoverChunk(ctx context.Context, id ChunkID, offset, size uint32) error {
	op := chunkOp{"recover", id}
	if err := checkIO(uint64(offset), uint64(size), "size"); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	req := chunkRequest(chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_RECOVER, id)
	req.Offset = proto.Uint32(offset)
	req.Size = proto.Uint32(size)
	return c.onLeader(ctx, op, id.CopysetID, func(ctx context.Context, svc chunkserverpb.ChunkServiceClient) (chunkserverpb.CHUNK_OP_STATUS, string, error) {
		resp, err := svc.RecoverChunk(ctx, req)
		return resp.GetStatus(), resp.GetRedirect(), err
	})
}
