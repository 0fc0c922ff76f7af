package chunkstore

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/disagg"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// Clone source locks (package disagg, clone.go): an @s3 clone chunk's
// source object is locked in the replicated lock table, for that clone,
// before its creation is proposed, so that disagg gc never collects it
// while the clone reads from it. The lock goes through the disagg
// reconciler once the chunk is no longer a clone of that object
// (cloneOf).

// lockSource is the prepare step of a clone creation (mutate, on the
// leader after every check): for an @s3 location it takes the lock (with
// the copyset's configuration, which the lock owner keeps to tell a
// vanished copyset from an unreachable one) and
// on failure sets *failed to the gRPC error the RPC answers (nothing
// proposed): FAILED_PRECONDITION for a delete-marked source,
// INVALID_ARGUMENT for a name the lock table cannot hold (longer than 512
// bytes, not a valid object name), RESOURCE_EXHAUSTED for a full table,
// UNAVAILABLE when the lock owner cannot be reached.
func (s *chunkService) lockSource(ctx context.Context, req *pb.ChunkRequest, failed *error) func(*copyset.Node) ([]byte, *pb.ChunkResponse) {
	return func(n *copyset.Node) ([]byte, *pb.ChunkResponse) {
		loc, err := parseLocation(req.GetLocation()) // validated
		if err != nil || !loc.s3 {
			return nil, nil
		}
		err = s.locks.LockClone(ctx, loc.object, req.GetLogicPoolId(), req.GetCopysetId(), req.GetChunkId(), disagg.Members(n))
		switch {
		case err == nil:
			return nil, nil
		case errors.Is(err, disagg.ErrSourceMarked):
			*failed = grpcstatus.Errorf(codes.FailedPrecondition, "clone chunk %d not created: %v", req.GetChunkId(), err)
			return nil, chunkResponse(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST)
		}
		s.log.Warn("clone source lock not taken: clone not created", "pool", req.GetLogicPoolId(), "copyset", req.GetCopysetId(),
			"chunk", req.GetChunkId(), "err", err)
		code := codes.Unavailable // the owner not reached: a retry may succeed
		switch {
		case errors.Is(err, disagg.ErrInvalidSource):
			code = codes.InvalidArgument
		case grpcstatus.Code(err) == codes.ResourceExhausted:
			code = codes.ResourceExhausted // the lock table is full
		}
		*failed = grpcstatus.Errorf(code, "clone chunk %d not created: %v", req.GetChunkId(), err)
		return nil, chunkResponse(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_FAILURE_UNKNOWN)
	}
}

// createClone proposes a clone creation after locking an @s3 source.
func (s *chunkService) createClone(ctx context.Context, op string, req *pb.ChunkRequest) (*pb.ChunkResponse, error) {
	var failed error
	resp := s.mutate(ctx, op, req, nil, func() error { return s.validClone(req) }, s.lockSource(ctx, req, &failed))
	if failed != nil {
		return nil, failed
	}
	return resp, nil
}
