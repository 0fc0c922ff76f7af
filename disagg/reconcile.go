package disagg

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/chunkread"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
)

// The clone lock reconciler: a leader-only worker (copyset.LeaderWorker)
// on every copyset this server leads. Every Interval it asks the owner
// for the clone locks its copyset's chunks hold, and releases each one
// older than the grace whose chunk, read after a read barrier, is no
// longer an @s3 clone of that object: recovered into a normal chunk,
// deleted, never created (a creation that failed after its lock) or
// recreated from another source. It is state-based: a crash, a lost
// release or a leader change leaves a lock the next round releases.
//
// The grace keeps the lock of a creation in flight: the cutoff (now -
// grace) is taken before the chunk is read, and the release removes the
// lock only if its time is still before the cutoff, so a lock taken or
// refreshed by a retried creation since stays. A creation whose commit
// comes more than the grace after its lock could lose it: the grace
// (default 10m) is far longer than a proposal takes.

// Start starts the settler of the owner's decisions (settle.go), the read
// views' lease worker (view_tasks.go), and the reconciler (not with clone
// locks disabled).
func (s *Service) Start() error {
	sw, err := s.copysets.StartLeaderWorker(s.settleWork, copyset.LeaderWorkerOptions{Name: "disagg-settler", RetryDelay: time.Second})
	if err != nil {
		return fmt.Errorf("disagg: %w", err)
	}
	if err := s.startViews(); err != nil {
		sw.Stop()
		return err
	}
	s.mu.Lock()
	s.settling = sw
	s.mu.Unlock()
	c := s.deps.Config.Clones
	if c.Disabled {
		return nil
	}
	w, err := s.copysets.StartLeaderWorker(s.reconcile, copyset.LeaderWorkerOptions{Name: "disagg-clone-locks", RetryDelay: c.Interval})
	if err != nil {
		return fmt.Errorf("disagg: %w", err)
	}
	s.mu.Lock()
	s.reconciler = w
	s.mu.Unlock()
	return nil
}

// Stop stops the reconciler, the lease worker and the settler and waits
// for their runs. Idempotent.
func (s *Service) Stop() {
	s.mu.Lock()
	w, sw := s.reconciler, s.settling
	s.reconciler, s.settling = nil, nil
	s.mu.Unlock()
	if w != nil {
		w.Stop()
	}
	if sw != nil {
		sw.Stop()
	}
	s.stopViews()
}

// reconcile is the worker's run on copyset n while it leads: a round
// every Interval until ctx ends; on the lock copyset each round also
// looks at the copysets gone from the cluster (vanished.go). A failed
// round is logged and the next one tries again.
func (s *Service) reconcile(ctx context.Context, n *copyset.Node) error {
	c := s.deps.Config.Clones
	t := time.NewTicker(c.Interval)
	defer t.Stop()
	var watch *vanishWatch
	if n.Group() == s.group {
		watch = newVanishWatch()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, c.Interval+c.Timeout)
		released, err := s.reconcileOnce(rctx, n, time.Now())
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Warn("clone lock reconciler: round failed; next round retries", "pool", n.Group().Pool(), "copyset", n.Group().Copyset(), "err", err)
		case released > 0:
			s.log.Info("clone lock reconciler: released locks of clones no longer reading their source", "pool", n.Group().Pool(), "copyset", n.Group().Copyset(), "released", released)
		}
		if m, ok := MachineOf(n); ok && watch != nil {
			rctx, cancel := context.WithTimeout(ctx, c.Interval+c.Timeout)
			_, err := s.releaseVanished(rctx, n, m, watch, time.Now())
			cancel()
			if err != nil && ctx.Err() == nil {
				s.log.Warn("clone lock reconciler: the look at vanished copysets failed; next round retries", "err", err)
			}
			s.vanishedLooks.Add(1)
		}
	}
}

// VanishedLooks returns how many looks at the copysets gone from the
// cluster (vanished.go) this server made as the lock owner, done or
// failed. Tests wait on it: a look begun after a moment ends by the time
// it has grown by two since then.
func (s *Service) VanishedLooks() int64 { return s.vanishedLooks.Load() }

// reconcileOnce releases the clone locks of n's chunks older than now -
// grace that no clone chunk needs; it returns how many went. When the
// members the table recorded for n's copyset are not its configuration
// any more, it records the new ones with the lock of a live clone (a
// LockClone of a lock held, which only refreshes it).
func (s *Service) reconcileOnce(ctx context.Context, n *copyset.Node, now time.Time) (int, error) {
	g := n.Group()
	var files []*pb.DataFile
	var recorded []*pb.CloneCopyset
	err := s.onOwner(ctx, func(ctx context.Context, c pb.DisaggInternalClient) (bool, string, error) {
		resp, err := c.List(ctx, &pb.ListRequest{HolderPool: g.Pool(), HolderCopyset: g.Copyset()})
		files, recorded = resp.GetFiles(), resp.GetCopysets()
		return resp.GetNotOwner(), resp.GetLeader(), err
	})
	if err != nil {
		return 0, fmt.Errorf("list clone locks: %w", err)
	}
	cutoff := now.Add(-s.deps.Config.Clones.Grace).UnixMilli()
	if _, err := n.ReadBarrier(ctx); err != nil {
		return 0, fmt.Errorf("read barrier: %w", err)
	}
	members := Members(n)
	stale := len(members) > 0 && (len(recorded) != 1 || !slices.Equal(recorded[0].GetMembers(), members))
	released := 0
	for _, f := range files {
		for _, l := range f.GetCloneLocks() {
			if l.GetPool() != g.Pool() || l.GetCopyset() != g.Copyset() || (l.GetTimeMs() >= cutoff && !stale) {
				continue
			}
			obj, err := s.cloneOf(n, l.GetChunk())
			if err != nil {
				return released, fmt.Errorf("chunk %d: %w", l.GetChunk(), err)
			}
			if obj == f.GetKey() && stale {
				if err := s.LockClone(ctx, f.GetKey(), g.Pool(), g.Copyset(), l.GetChunk(), members); err != nil {
					return released, fmt.Errorf("record the members of copyset %d/%d: %w", g.Pool(), g.Copyset(), err)
				}
				stale = false
			}
			if obj == f.GetKey() || l.GetTimeMs() >= cutoff {
				continue // still reads from it, or within the grace
			}
			req := &pb.ReleaseCloneRequest{Name: f.GetKey(), Pool: g.Pool(), Copyset: g.Copyset(), Chunk: l.GetChunk(), BeforeMs: cutoff}
			var done bool
			err = s.onOwner(ctx, func(ctx context.Context, c pb.DisaggInternalClient) (bool, string, error) {
				resp, err := c.ReleaseClone(ctx, req)
				done = resp.GetReleased()
				return resp.GetNotOwner(), resp.GetLeader(), err
			})
			if err != nil {
				return released, fmt.Errorf("release %s on %s: %w", CloneHolder(g.Pool(), g.Copyset(), l.GetChunk()), f.GetKey(), err)
			}
			if done {
				released++
			}
		}
	}
	return released, nil
}

// cloneOf is Deps.CloneOf, or the copyset's chunk store's answer.
func (s *Service) cloneOf(n *copyset.Node, chunk uint64) (string, error) {
	if s.deps.CloneOf != nil {
		return s.deps.CloneOf(n, chunk)
	}
	st, err := chunkread.Of(n)
	if err != nil {
		return "", err
	}
	return st.CloneObject(chunk)
}
