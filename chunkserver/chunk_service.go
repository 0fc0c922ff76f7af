package chunkserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/chunkraft/chunkraft/chunkserver/datastore"
	"github.com/chunkraft/chunkraft/copyset"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	"google.golang.org/protobuf/proto"
)

// chunkService implements curve.chunkserver.ChunkService. Mutations go
// through raft; reads are served on the leader after a read barrier.
// Operations of later issues answer Unimplemented through the embedded type.
type chunkService struct {
	pb.UnimplementedChunkServiceServer
	copysets *copyset.Manager
	layout   datastore.Options // chunk geometry for request validation
	epochs   *epochMap
	admit    *admission
	metrics  *metrics
	log      *slog.Logger
}

func status(s pb.CHUNK_OP_STATUS) *pb.CHUNK_OP_STATUS { return &s }

// chunkResponse builds a response with status s.
func chunkResponse(s pb.CHUNK_OP_STATUS) *pb.ChunkResponse {
	return &pb.ChunkResponse{Status: status(s)}
}

// validateIO checks offset and size of a read or write against the chunk
// geometry: block aligned, non-empty, inside the chunk.
func (s *chunkService) validateIO(req *pb.ChunkRequest) error {
	if req.Offset == nil || req.Size == nil {
		return errors.New("offset and size are required")
	}
	off, size := uint64(req.GetOffset()), uint64(req.GetSize())
	bs, cs := uint64(s.layout.BlockSize), uint64(s.layout.ChunkSize)
	switch {
	case size == 0:
		return errors.New("size is 0")
	case off%bs != 0 || size%bs != 0:
		return fmt.Errorf("offset %d or size %d not a multiple of %d", off, size, bs)
	case off+size > cs:
		return fmt.Errorf("offset %d + size %d exceeds chunk size %d", off, size, cs)
	}
	return nil
}

// node returns the replica of the request's copyset or nil.
func (s *chunkService) node(pool, cs uint32) *copyset.Node {
	return s.copysets.Get(copyset.NewGroupID(pool, cs))
}

// redirectOr maps a not-leader error to REDIRECTED (with the leader hint)
// and any other error to fallback.
func redirectOr(err error, fallback pb.CHUNK_OP_STATUS) (pb.CHUNK_OP_STATUS, string) {
	var nl *copyset.NotLeaderError
	if errors.As(err, &nl) {
		return pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_REDIRECTED, string(nl.Leader)
	}
	return fallback, ""
}

func (s *chunkService) finish(op string, start time.Time, resp *pb.ChunkResponse, n int) *pb.ChunkResponse {
	if resp.GetStatus() != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
		n = 0
	}
	s.metrics.observe(op, resp.GetStatus().String(), start, n)
	return resp
}

// propose replicates a chunk op and turns the outcome into a response.
func (s *chunkService) propose(ctx context.Context, n *copyset.Node, req *pb.ChunkRequest, data []byte) *pb.ChunkResponse {
	op, err := encodeChunkOp(req, data)
	if err != nil {
		s.log.Error("encode chunk op", "err", err)
		return chunkResponse(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_FAILURE_UNKNOWN)
	}
	index, res, err := n.Propose(ctx, op)
	if err != nil {
		return s.failed(req, "chunk op not committed", err)
	}
	resp := chunkResponse(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_FAILURE_UNKNOWN)
	if r, ok := res.(chunkResult); ok {
		resp.Status = status(r.status)
	}
	resp.AppliedIndex = proto.Uint64(index)
	return resp
}

// mutate runs the checks every mutating request passes, in order, and
// proposes it: validation (INVALID_REQUEST), the epoch fence
// (EPOCH_TOO_OLD), the copyset (COPYSET_NOTEXIST), a broken replica
// (DISK_FAIL), free space (NOSPACE). Nothing is proposed when one fails.
func (s *chunkService) mutate(ctx context.Context, op string, req *pb.ChunkRequest, data []byte, valid func() error) *pb.ChunkResponse {
	start := time.Now()
	if !s.admit.enter() {
		return s.finish(op, start, chunkResponse(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_OVERLOAD), 0)
	}
	defer s.admit.leave()
	if valid != nil {
		if err := valid(); err != nil {
			return s.finish(op, start, s.invalid(op, req, err), 0)
		}
	}
	if req.FileId != nil && req.Epoch != nil && !s.epochs.allowed(req.GetFileId(), req.GetEpoch()) {
		return s.finish(op, start, chunkResponse(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_EPOCH_TOO_OLD), 0)
	}
	n := s.node(req.GetLogicPoolId(), req.GetCopysetId())
	if n == nil {
		return s.finish(op, start, chunkResponse(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_COPYSET_NOTEXIST), 0)
	}
	if n.Broken() != nil {
		return s.finish(op, start, chunkResponse(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_DISK_FAIL), 0)
	}
	if s.admit.readOnly() {
		return s.finish(op, start, chunkResponse(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_NOSPACE), 0)
	}
	return s.finish(op, start, s.propose(ctx, n, req, data), len(data))
}

// WriteChunk writes req.data at req.offset of the chunk, creating it.
func (s *chunkService) WriteChunk(ctx context.Context, req *pb.ChunkRequest) (*pb.ChunkResponse, error) {
	return s.mutate(ctx, "write", req, req.GetData(), func() error {
		if err := s.validateIO(req); err != nil {
			return err
		}
		if uint64(len(req.GetData())) != uint64(req.GetSize()) {
			return fmt.Errorf("data length %d != size %d", len(req.GetData()), req.GetSize())
		}
		if req.GetSn() == 0 {
			return errors.New("sn is 0")
		}
		return nil
	}), nil
}

// DeleteChunk removes the chunk (a missing chunk is success).
func (s *chunkService) DeleteChunk(ctx context.Context, req *pb.ChunkRequest) (*pb.ChunkResponse, error) {
	return s.mutate(ctx, "delete", req, nil, nil), nil
}

// UpdateEpoch raises the server's fence for a file; a lower epoch than the
// stored one is EPOCH_TOO_OLD. Not replicated: clients send it to every
// chunkserver of the file.
func (s *chunkService) UpdateEpoch(ctx context.Context, req *pb.UpdateEpochRequest) (*pb.UpdateEpochResponse, error) {
	if req.FileId == nil || req.Epoch == nil {
		return &pb.UpdateEpochResponse{Status: status(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST)}, nil
	}
	err := s.epochs.update(req.GetFileId(), req.GetEpoch())
	switch {
	case err == nil:
		return &pb.UpdateEpochResponse{Status: status(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)}, nil
	case errors.Is(err, errEpochTooOld):
		return &pb.UpdateEpochResponse{Status: status(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_EPOCH_TOO_OLD)}, nil
	default:
		s.log.Error("update epoch", "file", req.GetFileId(), "err", err)
		return &pb.UpdateEpochResponse{Status: status(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_DISK_FAIL)}, nil
	}
}

// chunkStore returns the chunk state machine's store of a node.
func chunkStore(n *copyset.Node) *datastore.Store {
	return n.StateMachine(copyset.KindChunk).(*chunkMachine).store
}

// ReadChunk reads req.size bytes at req.offset, linearizably.
func (s *chunkService) ReadChunk(ctx context.Context, req *pb.ChunkRequest) (*pb.ChunkResponse, error) {
	start := time.Now()
	if !s.admit.enter() {
		return s.finish("read", start, chunkResponse(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_OVERLOAD), 0), nil
	}
	defer s.admit.leave()
	if err := s.validateIO(req); err != nil {
		return s.finish("read", start, s.invalid("read", req, err), 0), nil
	}
	n := s.node(req.GetLogicPoolId(), req.GetCopysetId())
	if n == nil {
		return s.finish("read", start, chunkResponse(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_COPYSET_NOTEXIST), 0), nil
	}
	applied, err := n.ReadBarrier(ctx)
	if err != nil {
		return s.finish("read", start, s.failed(req, "read barrier failed", err), 0), nil
	}
	buf := make([]byte, req.GetSize())
	err = chunkStore(n).ReadChunk(req.GetChunkId(), buf, req.GetOffset())
	resp := chunkResponse(storeStatus(err))
	resp.AppliedIndex = proto.Uint64(applied)
	if err == nil {
		resp.Data = buf
	} else if !errors.Is(err, datastore.ErrChunkNotExist) {
		s.log.Error("read chunk", "pool", req.GetLogicPoolId(), "copyset", req.GetCopysetId(),
			"chunk", req.GetChunkId(), "err", err)
	}
	return s.finish("read", start, resp, len(buf)), nil
}

// GetChunkInfo returns the chunk's [sn] (empty when it does not exist).
func (s *chunkService) GetChunkInfo(ctx context.Context, req *pb.GetChunkInfoRequest) (*pb.GetChunkInfoResponse, error) {
	n := s.node(req.GetLogicPoolId(), req.GetCopysetId())
	if n == nil {
		return &pb.GetChunkInfoResponse{Status: status(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_COPYSET_NOTEXIST)}, nil
	}
	if _, err := n.ReadBarrier(ctx); err != nil {
		st, leader := redirectOr(err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_FAILURE_UNKNOWN)
		resp := &pb.GetChunkInfoResponse{Status: status(st)}
		if leader != "" {
			resp.Redirect = proto.String(leader)
		}
		return resp, nil
	}
	info, err := chunkStore(n).GetChunkInfo(req.GetChunkId())
	switch {
	case errors.Is(err, datastore.ErrChunkNotExist):
		return &pb.GetChunkInfoResponse{Status: status(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)}, nil
	case err != nil:
		s.log.Error("get chunk info", "chunk", req.GetChunkId(), "err", err)
		return &pb.GetChunkInfoResponse{Status: status(storeStatus(err))}, nil
	}
	return &pb.GetChunkInfoResponse{
		Status:  status(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS),
		ChunkSn: []uint64{info.Sn},
	}, nil
}

func (s *chunkService) invalid(op string, req *pb.ChunkRequest, err error) *pb.ChunkResponse {
	s.log.Debug("invalid chunk request", "op", op, "pool", req.GetLogicPoolId(),
		"copyset", req.GetCopysetId(), "chunk", req.GetChunkId(), "err", err)
	return chunkResponse(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST)
}

// failed maps a propose or read-barrier error: REDIRECTED with the leader
// hint when this replica is not the leader, FAILURE_UNKNOWN (logged)
// otherwise.
func (s *chunkService) failed(req *pb.ChunkRequest, what string, err error) *pb.ChunkResponse {
	st, leader := redirectOr(err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_FAILURE_UNKNOWN)
	if st != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_REDIRECTED {
		s.log.Warn(what, "op", req.GetOpType(), "pool", req.GetLogicPoolId(),
			"copyset", req.GetCopysetId(), "chunk", req.GetChunkId(), "err", err)
	}
	resp := chunkResponse(st)
	if leader != "" {
		resp.Redirect = proto.String(leader)
	}
	return resp
}
