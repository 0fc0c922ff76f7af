package copyset

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/chunkraft/chunkraft/internal/testwait"
)

// runTracker records which (server, copyset) pairs a leader worker runs on.
type runTracker struct {
	mu      sync.Mutex
	running map[string]int // "server/group" -> runs now
	overlap string         // a pair that had two runs at once
}

func (tr *runTracker) work(server int) LeaderWork {
	return func(ctx context.Context, n *Node) error {
		key := fmt.Sprintf("%d/%s", server, n.Group())
		tr.mu.Lock()
		tr.running[key]++
		if tr.running[key] > 1 {
			tr.overlap = key
		}
		tr.mu.Unlock()
		<-ctx.Done()
		tr.mu.Lock()
		tr.running[key]--
		tr.mu.Unlock()
		return ctx.Err()
	}
}

// runsOn lists the servers running g now.
func (tr *runTracker) runsOn(g GroupID, servers int) []int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []int
	for i := range servers {
		if tr.running[fmt.Sprintf("%d/%s", i, g)] > 0 {
			out = append(out, i)
		}
	}
	return out
}

func serverOf(servers []*testServer, n *Node) int {
	for i, s := range servers {
		if s.mgr.Get(n.Group()) == n {
			return i
		}
	}
	return -1
}

// TestLeaderWorker: a worker started on every server runs on exactly the
// leader of each copyset, follows a leadership transfer (cancelled on the
// old leader, started on the new), stops with Stop and with the Manager's
// Close, and leaves no goroutine behind.
func TestLeaderWorker(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	g1, g2 := NewGroupID(1, 1), NewGroupID(1, 2)
	servers := startGroup(t, t.TempDir(), g1)
	defer stopAll(servers)
	peers := []PeerID{servers[0].peer(), servers[1].peer(), servers[2].peer()}
	for _, s := range servers {
		if _, err := s.mgr.Create(context.Background(), g2, peers); err != nil {
			t.Fatal(err)
		}
	}
	tr := &runTracker{running: map[string]int{}}
	workers := make([]*LeaderWorker, len(servers))
	for i, s := range servers {
		w, err := s.mgr.StartLeaderWorker(tr.work(i), LeaderWorkerOptions{Name: "test"})
		if err != nil {
			t.Fatal(err)
		}
		workers[i] = w
	}
	onLeader := func(g GroupID) error {
		want := serverOf(servers, waitLeader(t, g, servers...))
		if got := tr.runsOn(g, len(servers)); len(got) != 1 || got[0] != want {
			return fmt.Errorf("%s runs on servers %v, leader is server %d", g, got, want)
		}
		return nil
	}
	for _, g := range []GroupID{g1, g2} {
		testwait.Until(t, 10*time.Second, func() error { return onLeader(g) })
	}

	from := serverOf(servers, waitLeader(t, g1, servers...))
	to := (from + 1) % len(servers)
	// A transfer can time out on a loaded machine: try again until server
	// to leads.
	testwait.Until(t, 10*time.Second, func() error {
		l := waitLeader(t, g1, servers...)
		if serverOf(servers, l) == to {
			return nil
		}
		return l.TransferLeader(context.Background(), servers[to].peer())
	})
	testwait.Until(t, 10*time.Second, func() error {
		if got := tr.runsOn(g1, len(servers)); len(got) != 1 || got[0] != to {
			return fmt.Errorf("after transfer to server %d, %s runs on %v", to, g1, got)
		}
		return nil
	})
	testwait.Until(t, 10*time.Second, func() error { return onLeader(g2) })

	// Stop ends the runs of that server's worker before it returns.
	workers[to].Stop()
	workers[to].Stop() // idempotent
	for _, g := range []GroupID{g1, g2} {
		for _, i := range tr.runsOn(g, len(servers)) {
			if i == to {
				t.Fatalf("server %d still runs %s after Stop", to, g)
			}
		}
	}
	// The other workers end with their managers.
	stopAll(servers)
	servers = nil
	for _, w := range workers {
		select {
		case <-w.done:
		default:
			t.Fatal("a leader worker outlived its manager")
		}
	}
	for _, g := range []GroupID{g1, g2} {
		if got := tr.runsOn(g, 3); len(got) != 0 {
			t.Fatalf("%s still runs on %v after shutdown", g, got)
		}
	}
	if tr.overlap != "" {
		t.Fatalf("two runs at once on %s", tr.overlap)
	}
}

// TestLeaderWorkerRetryAndDone: a run that fails is started again after
// RetryDelay; a run that returns nil is not started again in the term; a
// closed manager refuses new workers.
func TestLeaderWorkerRetryAndDone(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	g := NewGroupID(1, 1)
	s, n := startSingle(t, t.TempDir(), g, 0)
	var calls atomic.Int32
	done := make(chan struct{})
	w, err := s.mgr.StartLeaderWorker(func(ctx context.Context, got *Node) error {
		if got != n {
			t.Errorf("run on %s, want %s", got.Group(), n.Group())
		}
		if calls.Add(1) == 1 {
			return errors.New("injected failure")
		}
		close(done)
		return nil
	}, LeaderWorkerOptions{Name: "retry", RetryDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("failed run not retried")
	}
	// Past a resync: still done for this term. The pass that saw the run
	// end and a resync after it, and one more (a run a pass starts calls
	// its function at once), look at the copyset without a third run.
	since := w.passes.Load()
	testwait.Until(t, 10*time.Second, func() error {
		if n := w.passes.Load() - since; n < 3 {
			return fmt.Errorf("the worker made %d passes since the run was done, want 3", n)
		}
		return nil
	})
	if c := calls.Load(); c != 2 {
		t.Fatalf("%d runs, want 2 (one failed, one done)", c)
	}
	w.Stop()
	s.stop()
	if _, err := s.mgr.StartLeaderWorker(func(context.Context, *Node) error { return nil }, LeaderWorkerOptions{}); err == nil {
		t.Fatal("a closed manager started a worker")
	}
}
