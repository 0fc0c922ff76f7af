package disagg

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chunkraft/chunkraft/copyset"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
)

// Clone locks. A server creating an @s3 clone chunk first locks the
// source object in the lock table for that clone (LockClone, through the
// owner, which may be another server), and only then proposes the
// creation: a delete-marked source refuses the lock and the creation
// fails. The lock goes through the reconciler (reconcile.go) once the
// clone chunk is no longer a clone of that object (recovered, deleted,
// never created) and the lock is older than the grace.

// CloneConfig configures clone locks (disagg.clone_locks).
type CloneConfig struct {
	// Disabled creates @s3 clone chunks without locking their sources:
	// disagg gc may then collect a source in use. For clusters without
	// a lock copyset.
	Disabled bool `yaml:"disabled"`
	// Grace is how old a clone lock must be before the reconciler may
	// release it: longer than any clone creation takes from its lock to
	// its commit, plus the servers' clock skew. Default 10m.
	Grace time.Duration `yaml:"grace"`
	// Interval is how often the leader of each copyset looks at the clone
	// locks its chunks hold. Default 1m.
	Interval time.Duration `yaml:"interval"`
	// Timeout bounds taking a lock for a creation. Default 10s.
	Timeout time.Duration `yaml:"timeout"`
}

// DefaultCloneConfig locks clone sources; grace 10m, interval 1m, timeout 10s.
func DefaultCloneConfig() CloneConfig {
	return CloneConfig{Grace: 10 * time.Minute, Interval: time.Minute, Timeout: 10 * time.Second}
}

// Validate checks the configuration.
func (c CloneConfig) Validate() error {
	if c.Grace <= 0 || c.Interval <= 0 || c.Timeout <= 0 {
		return fmt.Errorf("disagg.clone_locks: grace %v, interval %v and timeout %v must be positive", c.Grace, c.Interval, c.Timeout)
	}
	return nil
}

var (
	// ErrSourceMarked is wrapped by LockClone's error when the source
	// object is delete-marked (disagg gc): the clone must not be created.
	ErrSourceMarked = errors.New("clone source is marked deleted")
	// ErrInvalidSource is wrapped by LockClone's error for a source name
	// the lock table cannot hold.
	ErrInvalidSource = errors.New("invalid clone source")
)

// LockClone locks object name for the clone chunk pool/copyset/chunk in
// the replicated lock table, on the owner (this server or another), and
// returns once the lock is committed; members, the clone copyset's
// configuration (peer ids), are recorded with it for the owner's check of
// vanished copysets (vanished.go). A delete-marked object gives an error
// wrapping ErrSourceMarked; an owner that cannot be reached within the
// configured timeout, another error. With clone locks disabled it does
// nothing.
func (s *Service) LockClone(ctx context.Context, name string, pool, copyset uint32, chunk uint64, members []string) error {
	if s.deps.Config.Clones.Disabled {
		return nil
	}
	if err := validClone(name, pool, copyset); err != nil {
		return fmt.Errorf("clone source lock: %w: %w", ErrInvalidSource, err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.deps.Config.Clones.Timeout)
	defer cancel()
	req := &pb.LockCloneRequest{Name: name, Pool: pool, Copyset: copyset, Chunk: chunk, Members: members}
	var conflict string
	err := s.onOwner(ctx, func(ctx context.Context, c pb.DisaggInternalClient) (bool, string, error) {
		resp, err := c.LockClone(ctx, req)
		conflict = resp.GetConflict()
		return resp.GetNotOwner(), resp.GetLeader(), err
	})
	switch {
	case err != nil:
		return fmt.Errorf("clone source lock on %s for %s: %w", name, CloneHolder(pool, copyset, chunk), err) // a gRPC status or the owner not reached
	case conflict != "":
		return fmt.Errorf("%w: %s", ErrSourceMarked, conflict)
	}
	return nil
}

// LockClone is DisaggInternal.LockClone on the owner: the lock, at the
// owner's clock, committed through raft.
func (is *internalService) LockClone(ctx context.Context, req *pb.LockCloneRequest) (*pb.LockCloneResponse, error) {
	resp, err := is.lockClone(ctx, req)
	is.s.countInternal("lock_clone", resp.GetNotOwner(), resp.GetConflict() != "", err)
	return resp, err
}

func (is *internalService) lockClone(ctx context.Context, req *pb.LockCloneRequest) (*pb.LockCloneResponse, error) {
	n, m, leader, ok := is.s.owner()
	if !ok {
		return &pb.LockCloneResponse{NotOwner: true, Leader: string(leader)}, nil
	}
	members := slices.Compact(slices.Sorted(slices.Values(req.GetMembers())))
	if validMembers(members) != nil {
		members = nil // a configuration the table cannot record does not keep the clone from its lock
	}
	for {
		now := time.Now().UnixMilli()
		op := &pb.Op{Op: &pb.Op_LockClone{LockClone: &pb.LockClone{Name: req.GetName(), Pool: req.GetPool(), Copyset: req.GetCopyset(),
			Chunk: req.GetChunk(), TimeMs: now, Members: members}}}
		res, ok, err := is.s.propose(ctx, n, op)
		switch {
		case err != nil:
			return nil, err
		case !ok:
			return &pb.LockCloneResponse{NotOwner: true, Leader: string(n.Leader())}, nil
		case res.Err != nil:
			return nil, status.Error(codes.ResourceExhausted, res.Err.Error())
		case res.Busy != "":
			if err := m.waitSettled(ctx, req.GetName(), true); err != nil {
				return nil, status.Errorf(codes.DeadlineExceeded, "%s: %v", res.Busy, err)
			}
			continue
		case res.Conflict != "":
			return &pb.LockCloneResponse{Conflict: res.Conflict}, nil
		}
		return is.dataFileMarked(ctx, n, req, now)
	}
}

// dataFileMarked ends a clone lock taken at nowMs on a data file key: the
// file's mark is its .del object, which a mark committed before the lock
// wrote (one after waits for the lock: Pend refuses a mark on a
// clone-locked key). With the .del present the lock is released again
// and the answer is the conflict.
func (is *internalService) dataFileMarked(ctx context.Context, n *copyset.Node, req *pb.LockCloneRequest, nowMs int64) (*pb.LockCloneResponse, error) {
	k, err := ParseKey(req.GetName())
	if err != nil {
		return &pb.LockCloneResponse{}, nil
	}
	marked, err := is.s.exists(ctx, k.DelMarkKey())
	if err != nil || !marked {
		return &pb.LockCloneResponse{}, err
	}
	op := &pb.Op{Op: &pb.Op_ReleaseClone{ReleaseClone: &pb.ReleaseClone{Name: req.GetName(), Pool: req.GetPool(), Copyset: req.GetCopyset(),
		Chunk: req.GetChunk(), BeforeMs: nowMs + 1}}}
	if _, ok, err := is.s.propose(ctx, n, op); err != nil || !ok {
		return &pb.LockCloneResponse{NotOwner: err == nil, Leader: string(n.Leader())}, err
	}
	return &pb.LockCloneResponse{Conflict: markedReason(k.String(), k.DelMarkKey())}, nil
}

// ReleaseClone is DisaggInternal.ReleaseClone on the owner: the clone
// lock goes if it is older than before_ms (committed through raft).
func (is *internalService) ReleaseClone(ctx context.Context, req *pb.ReleaseCloneRequest) (*pb.ReleaseCloneResponse, error) {
	resp, err := is.releaseClone(ctx, req)
	is.s.countInternal("release_clone", resp.GetNotOwner(), false, err)
	return resp, err
}

func (is *internalService) releaseClone(ctx context.Context, req *pb.ReleaseCloneRequest) (*pb.ReleaseCloneResponse, error) {
	n, _, leader, ok := is.s.owner()
	if !ok {
		return &pb.ReleaseCloneResponse{NotOwner: true, Leader: string(leader)}, nil
	}
	op := &pb.Op{Op: &pb.Op_ReleaseClone{ReleaseClone: &pb.ReleaseClone{Name: req.GetName(), Pool: req.GetPool(), Copyset: req.GetCopyset(),
		Chunk: req.GetChunk(), BeforeMs: req.GetBeforeMs()}}}
	res, ok, err := is.s.propose(ctx, n, op)
	switch {
	case err != nil:
		return nil, err
	case !ok:
		return &pb.ReleaseCloneResponse{NotOwner: true, Leader: string(n.Leader())}, nil
	case res.Err != nil:
		return nil, status.Error(codes.FailedPrecondition, res.Err.Error())
	}
	return &pb.ReleaseCloneResponse{Released: len(res.Released) > 0}, nil
}
