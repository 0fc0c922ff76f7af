package disagg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chunkraft/chunkraft/copyset"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
	dpb "github.com/chunkraft/chunkraft/proto/kvproto/disaggregated"
)

// A decision of tryAddLock or tryMarkDelete on a data file key, on the
// owner:
//
//  1. Pend, through raft: it waits (busy) while a decision of the other
//     kind is pending on the key, so from its commit to its Settle no
//     decision of the other kind can run; a mark on a clone-locked key is
//     a conflict.
//  2. The objects in S3 decide, as upstream: a lock needs the data file
//     and no .del; a mark needs no lock object of the file.
//  3. The object (the lock or the .del) is written, then the answer
//     given, then the decision is settled (a Settle op, batched by the
//     settler).
//
// A decision of the other kind that committed before this one's Pend
// wrote its object before its Settle, so step 2 sees it; one after waits
// for this one's Settle, when this object is written. A decision left
// pending by a leader that lost its leadership, or by a request that gave
// up, is completed by the settler of the next leader: steps 2 and 3 again,
// with the same outcome while the key is held (so a deposed leader that
// still writes writes the same object).

// decideOnKey runs the decision of a lock (mark false: store, seq) or a
// mark on data file k.
func (s *Service) decideOnKey(ctx context.Context, n *copyset.Node, m *Machine, k Key, mark bool, store, seq uint64) (*dpb.S3LockResult, error) {
	key := k.String()
	d := decisionID{key: key, mark: true}
	if !mark {
		d = decisionID{key: key, store: store, seq: seq}
	}
	s.settler.enter(d)
	defer s.settler.leave(d)
	op := &pb.Op{Op: &pb.Op_Pend{Pend: &pb.Pend{Key: key, Mark: mark, LockStoreId: store, LockSeq: seq}}}
	var index uint64
	for {
		if err := m.admitPend(); err != nil {
			return nil, status.Error(codes.ResourceExhausted, err.Error())
		}
		op.GetPend().TimeMs = time.Now().UnixMilli()
		res, ok, err := s.propose(ctx, n, op)
		switch {
		case err != nil:
			return nil, err
		case !ok:
			return notOwner(), nil
		case res.Err != nil:
			return nil, status.Error(codes.ResourceExhausted, res.Err.Error())
		case res.Conflict != "":
			return conflict(res.Conflict), nil
		case res.Busy != "":
			if err := m.waitSettled(ctx, key, !mark); err != nil {
				return nil, status.Errorf(codes.DeadlineExceeded, "%s: %v", res.Busy, err)
			}
			continue
		}
		index = res.Index
		break
	}
	reason, err := s.complete(ctx, n, k, mark, store, seq)
	switch {
	case errors.Is(err, errNotOwner):
		return notOwner(), nil // left pending: the next owner's settler completes it
	case err != nil:
		return nil, err // left pending: the settler completes it
	}
	s.settler.done(key, index)
	if reason != "" {
		return conflict(reason), nil
	}
	return success(), nil
}

// errNotOwner is complete's error when this server no longer leads
// (nothing was written).
var errNotOwner = errors.New("not the lock owner any more")

// complete decides a pending decision by the objects in S3 and writes its
// object: the conflict reason, or "" when the object was written; the
// error errNotOwner when this server no longer leads, else one of the
// object store.
func (s *Service) complete(ctx context.Context, n *copyset.Node, k Key, mark bool, store, seq uint64) (string, error) {
	var object, what string
	if mark {
		locks, err := s.deps.Objects.List(ctx, k.LockObjectPrefix())
		if err != nil {
			return "", status.Errorf(codes.Unavailable, "object store: %v", err)
		}
		if len(locks) > 0 {
			return lockedReason(k.String(), locks[0].Name), nil
		}
		object, what = k.DelMarkKey(), "the delete mark"
	} else {
		exists, err := s.exists(ctx, k.ExistsObject())
		if err != nil {
			return "", err
		}
		if !exists {
			return fmt.Sprintf("data file not exist, key=%s", k), nil
		}
		marked, err := s.exists(ctx, k.DelMarkKey())
		if err != nil {
			return "", err
		}
		if marked {
			return markedReason(k.String(), k.DelMarkKey()), nil
		}
		object, what = k.LockKey(store, seq), "the lock"
	}
	if !n.IsLeader() {
		return "", errNotOwner
	}
	if err := s.putEmpty(ctx, object, what); err != nil {
		return "", err
	}
	return "", nil
}
