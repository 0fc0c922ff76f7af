package disagg

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/chunkraft/chunkraft/copyset"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
)

// settleInterval is how often the settler looks for pending decisions no
// request of this server handles (left by a previous leader, or by a
// request that gave up after its Pend committed).
const settleInterval = time.Second

// settler ends the owner's decisions: requests hand it their decided
// (key, index) and it proposes them in Settle ops, as many as have queued
// (at most MaxSettle an op); it completes the pending decisions no
// request of this server handles (decideOnKey's comment).
type settler struct {
	mu       sync.Mutex
	queue    []*pb.PendingRef
	inflight map[decisionID]int // requests of this server deciding it
	wake     chan struct{}      // buffered 1: the queue grew
}

// decisionID is what a pending decision decides: a lock of (store, seq)
// or a mark, on key.
type decisionID struct {
	key        string
	mark       bool
	store, seq uint64
}

func newSettler() *settler {
	return &settler{inflight: map[decisionID]int{}, wake: make(chan struct{}, 1)}
}

func (st *settler) enter(d decisionID) {
	st.mu.Lock()
	st.inflight[d]++
	st.mu.Unlock()
}

func (st *settler) leave(d decisionID) {
	st.mu.Lock()
	if st.inflight[d]--; st.inflight[d] <= 0 {
		delete(st.inflight, d)
	}
	st.mu.Unlock()
}

// done queues the decision (key, index) for settling.
func (st *settler) done(key string, index uint64) {
	st.mu.Lock()
	st.queue = append(st.queue, &pb.PendingRef{Key: key, Index: index})
	st.mu.Unlock()
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// take returns up to MaxSettle queued decisions.
func (st *settler) take() []*pb.PendingRef {
	st.mu.Lock()
	defer st.mu.Unlock()
	k := min(len(st.queue), MaxSettle)
	out := st.queue[:k:k]
	st.queue = st.queue[k:]
	return out
}

// orphaned reports whether no request of this server decides p and p is
// not queued.
func (st *settler) orphaned(p *pb.Pending) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.inflight[decisionOf(p)] > 0 {
		return false
	}
	for _, r := range st.queue {
		if r.GetKey() == p.GetKey() && r.GetIndex() == p.GetIndex() {
			return false
		}
	}
	return true
}

// decisionOf is what p decides.
func decisionOf(p *pb.Pending) decisionID {
	if p.GetMark() {
		return decisionID{key: p.GetKey(), mark: true}
	}
	return decisionID{key: p.GetKey(), store: p.GetStoreId(), seq: p.GetSeq()}
}

// settleWork is the settler's run on the lock copyset while this server
// leads it (a copyset.LeaderWork; other copysets return at once).
func (s *Service) settleWork(ctx context.Context, n *copyset.Node) error {
	if n.Group() != s.group {
		return nil
	}
	m, ok := MachineOf(n)
	if !ok {
		return nil
	}
	if _, err := n.ReadBarrier(ctx); err != nil {
		return fmt.Errorf("disagg settler: %w", err)
	}
	t := time.NewTicker(settleInterval)
	defer t.Stop()
	s.completeOrphans(ctx, n, m)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.settler.wake:
		case <-t.C:
			s.completeOrphans(ctx, n, m)
		}
		for refs := s.settler.take(); len(refs) > 0; refs = s.settler.take() {
			res, ok, err := s.propose(ctx, n, &pb.Op{Op: &pb.Op_Settle{Settle: &pb.Settle{Done: refs}}})
			switch {
			case err != nil:
				return fmt.Errorf("disagg settler: %w", err)
			case !ok:
				return fmt.Errorf("disagg settler: leadership lost with %d decisions to settle (the next leader completes them)", len(refs))
			case res.Err != nil:
				return fmt.Errorf("disagg settler: %w", res.Err)
			}
		}
	}
}

// completeOrphans completes every pending decision no request of this
// server handles: decided again by the objects in S3, its object written,
// then queued for settling. One that fails stays pending for the next
// pass.
func (s *Service) completeOrphans(ctx context.Context, n *copyset.Node, m *Machine) {
	for _, p := range m.pendings("") {
		if !s.settler.orphaned(p) {
			continue
		}
		k, err := ParseKey(p.GetKey())
		if err != nil {
			continue // Apply admits only data file keys
		}
		reason, err := s.complete(ctx, n, k, p.GetMark(), p.GetStoreId(), p.GetSeq())
		switch {
		case errors.Is(err, errNotOwner):
			return
		case err != nil:
			s.log.Warn("disagg settler: completing a pending decision failed (next pass retries)", "key", p.GetKey(), "index", p.GetIndex(), "err", err)
			continue
		}
		s.orphans.Inc()
		s.log.Info("disagg settler: completed a pending decision", "key", p.GetKey(), "index", p.GetIndex(), "mark", p.GetMark(), "conflict", reason)
		s.settler.done(p.GetKey(), p.GetIndex())
	}
}
