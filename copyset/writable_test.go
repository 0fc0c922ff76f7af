package copyset

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/internal/testwait"
)

// TestWaitWritable: a leader runs its LeaderPrepare once per term before
// it is writable (concurrent callers share the run, a failure is retried by
// the next caller), followers are refused with a NotLeaderError, and a
// leader that loses and regains leadership prepares again.
func TestWaitWritable(t *testing.T) {
	g := NewGroupID(1, 1)
	servers := startGroup(t, t.TempDir(), g)
	defer stopAll(servers)
	var calls atomic.Int32
	var fail atomic.Bool
	fail.Store(true)
	prepare := func(ctx context.Context, n *Node) error {
		calls.Add(1)
		if fail.Load() {
			return errors.New("members unreachable")
		}
		return nil
	}
	for _, s := range servers {
		s.mgr.Get(g).prepare = prepare
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	leader := waitLeader(t, g, servers...)

	if err := leader.WaitWritable(ctx); err == nil {
		t.Fatal("WaitWritable succeeded although prepare failed")
	}
	fail.Store(false)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- leader.WaitWritable(ctx) }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("WaitWritable after a good prepare: %v", err)
		}
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("prepare ran %d times, want 2 (one failure, one success shared by 8 callers)", n)
	}
	for _, s := range servers {
		n := s.mgr.Get(g)
		if n == leader {
			continue
		}
		var nl *NotLeaderError
		if err := n.WaitWritable(ctx); !errors.As(err, &nl) {
			t.Fatalf("follower WaitWritable: %v, want a NotLeaderError", err)
		}
	}

	// A new term on another server prepares there, and back here again.
	var other *Node
	for _, s := range servers {
		if n := s.mgr.Get(g); n != leader {
			other = n
			break
		}
	}
	before := calls.Load()
	for _, to := range []*Node{other, leader} {
		testwait.Until(t, 10*time.Second, func() error {
			cur := waitLeader(t, g, servers...)
			if cur != to {
				if err := cur.TransferLeader(ctx, to.local); err != nil {
					return err
				}
			}
			return to.WaitWritable(ctx)
		})
	}
	if n := calls.Load() - before; n < 2 {
		t.Fatalf("prepare ran %d times over two leader changes, want at least 2", n)
	}
}
