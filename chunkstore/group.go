package chunkstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/chunkop"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// A tenant's chunk writes. A tenant that changes chunks (a migration
// applying another pool's ops) proposes them through the chunk store, as
// one grouped proposal (copyset/group.go) with its own ops after them (its
// checkpoint): the chunk ops pass the checks and admission of
// ChunkService's (the in-flight limit, validation, the copyset's leader
// with its fences, the epoch fences, the write fence, the free-space
// floor), carry their read-view pre-images, and land in the log in one
// entry with the tenant's ops, so that a crash, a leader change or a
// snapshot install keeps all of them or none. A tenant that holds a
// copyset's write fence writes through it as its owner (ProposeGroupAs).

// groupOp is the op label of a group's request metrics.
const groupOp = "group"

// StatusError is why the chunk store refused or failed a tenant's group:
// the ChunkService status a client would have got (OVERLOAD, NOSPACE,
// REDIRECTED with Leader, INVALID_REQUEST, EPOCH_TOO_OLD, ...).
type StatusError struct {
	Status pb.CHUNK_OP_STATUS
	// Leader is the leader a REDIRECTED status names ("" if none).
	Leader string
	Err    error
}

func (e *StatusError) Error() string {
	if e.Err == nil {
		return e.Status.String()
	}
	return fmt.Sprintf("%s: %v", e.Status, e.Err)
}

func (e *StatusError) Unwrap() error { return e.Err }

// GroupResult is what a committed group applied: its entry's index, each
// chunk op's status (an op the store refused, the same on every replica,
// is not an error: CHUNK_EXIST, BACKWARD, ...) and the apply results of
// the tenant's ops, in order.
type GroupResult struct {
	Index uint64
	Chunk []pb.CHUNK_OP_STATUS
	Tail  []any
}

// ProposeGroup proposes reqs, chunk ops of copyset g (WRITE with their
// data in Data, DELETE, DELETE_SNAP), followed by tail, the tenant's own
// encoded ops, as one raft entry on this server's replica of g, which
// must lead it. A group refused before it is proposed (nothing appended)
// or not committed is a *StatusError; so is one whose entry committed but
// failed to apply here (DISK_FAIL: the replica stopped), with the result.
// A write fence takes its chunk ops for a client's and refuses them
// (EPOCH_TOO_OLD).
func (s *Store) ProposeGroup(ctx context.Context, g copyset.GroupID, reqs []*pb.ChunkRequest, tail [][]byte) (GroupResult, error) {
	return s.service.proposeGroup(ctx, g, "", reqs, tail)
}

// ProposeGroupAs is ProposeGroup with the chunk ops written as owner: a
// write fence of owner (write_fence.go) lets them through, a fence of
// another owner refuses them, as it does a client's. The ops carry the
// owner into the log, so that every replica decides alike at its apply.
// A fence of another owner set after the group was admitted refuses its
// chunk ops at the apply (GroupResult.Chunk says EPOCH_TOO_OLD) while
// tail still applies: a tenant whose checkpoint must never pass a refused
// write sets its own fence on the copyset first (no other owner's can be
// set then). An owner that is not a valid fence owner (SetWriteFence) is
// INVALID_REQUEST; "" is ProposeGroup.
func (s *Store) ProposeGroupAs(ctx context.Context, g copyset.GroupID, owner string, reqs []*pb.ChunkRequest, tail [][]byte) (GroupResult, error) {
	return s.service.proposeGroup(ctx, g, owner, reqs, tail)
}

func (s *chunkService) proposeGroup(ctx context.Context, g copyset.GroupID, owner string, reqs []*pb.ChunkRequest, tail [][]byte) (GroupResult, error) {
	start := time.Now()
	res, bytes, err := s.group(ctx, g, owner, reqs, tail)
	st := pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS
	var se *StatusError
	if errors.As(err, &se) {
		st = se.Status
	}
	s.finish(groupOp, start, chunkResponse(st), bytes)
	return res, err
}

// group checks, encodes and proposes a group of owner; bytes is its
// chunk data.
func (s *chunkService) group(ctx context.Context, g copyset.GroupID, owner string, reqs []*pb.ChunkRequest, tail [][]byte) (_ GroupResult, bytes int, _ error) {
	if !s.admit.enter() {
		return GroupResult{}, 0, &StatusError{Status: pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_OVERLOAD, Err: errors.New("too many requests in flight")}
	}
	defer s.admit.leave()
	invalid := func(err error) error {
		return &StatusError{Status: pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST, Err: err}
	}
	if len(reqs) == 0 {
		return GroupResult{}, 0, invalid(errors.New("a group without chunk ops"))
	}
	if owner != "" {
		if err := validFenceOwner(owner); err != nil {
			return GroupResult{}, 0, invalid(err)
		}
	}
	for i, req := range reqs {
		if err := s.validGrouped(g, req); err != nil {
			return GroupResult{}, 0, invalid(fmt.Errorf("chunk op %d: %w", i, err))
		}
		bytes += len(req.GetData())
	}
	n := s.copysets.Get(g)
	m, resp := s.writable(ctx, n, owner, reqs...)
	if resp != nil {
		why := fmt.Errorf("copyset %d/%d", g.Pool(), g.Copyset())
		if m != nil {
			if f := m.gate.Load(); f.blocks(owner) {
				why = fmt.Errorf("copyset %d/%d: the write fence is held by %q", g.Pool(), g.Copyset(), f.owner)
			}
		}
		return GroupResult{}, 0, &StatusError{Status: resp.GetStatus(), Leader: resp.GetRedirect(), Err: why}
	}
	ops := make([][][]byte, 0, len(reqs)+len(tail))
	for i, req := range reqs {
		op, err := chunkop.EncodeOwnedParts(req, req.GetData(), preImage(m, req, req.GetData()), owner)
		if err != nil {
			return GroupResult{}, 0, invalid(fmt.Errorf("chunk op %d: %w", i, err))
		}
		ops = append(ops, op)
	}
	for i := range tail {
		ops = append(ops, tail[i:i+1:i+1])
	}
	index, results, err := n.ProposeGroupParts(ctx, ops)
	switch {
	case errors.Is(err, copyset.ErrInvalidGroup):
		return GroupResult{}, 0, invalid(err)
	case err != nil:
		st, leader := redirectOr(err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_FAILURE_UNKNOWN)
		return GroupResult{}, 0, &StatusError{Status: st, Leader: leader, Err: fmt.Errorf("group not committed: %w", err)}
	}
	res := GroupResult{Index: index, Chunk: make([]pb.CHUNK_OP_STATUS, len(reqs)), Tail: results[len(reqs):]}
	var failed error
	for i, r := range results[:len(reqs)] {
		switch r := r.(type) {
		case chunkResult:
			res.Chunk[i] = r.status
		case error:
			res.Chunk[i] = applyErrStatus(r)
			if failed == nil {
				failed = &StatusError{Status: res.Chunk[i], Err: fmt.Errorf("chunk op %d of entry %d: %w", i, index, r)}
			}
		default:
			res.Chunk[i] = pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_FAILURE_UNKNOWN
			if failed == nil {
				failed = &StatusError{Status: res.Chunk[i], Err: fmt.Errorf("chunk op %d of entry %d: result %T", i, index, r)}
			}
		}
	}
	return res, bytes, failed
}

// validGrouped checks one chunk op of a group on copyset g: the ops a
// group carries and each one's own rules (WriteChunk's,
// DeleteChunkSnapshotOrCorrectSn's).
func (s *chunkService) validGrouped(g copyset.GroupID, req *pb.ChunkRequest) error {
	if req == nil {
		return errors.New("no request")
	}
	if copyset.NewGroupID(req.GetLogicPoolId(), req.GetCopysetId()) != g {
		return fmt.Errorf("copyset %d/%d, not the group's %d/%d", req.GetLogicPoolId(), req.GetCopysetId(), g.Pool(), g.Copyset())
	}
	switch req.GetOpType() {
	case pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE:
		return s.validWrite(req)
	case pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE:
		return nil
	case pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE_SNAP:
		if req.CorrectedSn == nil {
			return errors.New("correctedSn is required")
		}
		return nil
	}
	return fmt.Errorf("op %v cannot be grouped (WRITE, DELETE, DELETE_SNAP can)", req.GetOpType())
}
