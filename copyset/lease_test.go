package copyset

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chunkraft/chunkraft/internal/testwait"
)

func TestLeaseHeld(t *testing.T) {
	t0 := time.Unix(1000, 0)
	conf := func(ids ...string) raft.Configuration {
		var c raft.Configuration
		for _, id := range ids {
			c.Servers = append(c.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id)})
		}
		return c
	}
	const d = 100 * time.Millisecond
	cases := []struct {
		name  string
		setup func(l *lease)
		now   time.Time
		term  uint64
		epoch uint64
		want  bool
	}{
		{"one follower acked recently", func(l *lease) {
			l.setConfig(5, 1, conf("a", "b", "c"))
			l.ack(5, "b", t0)
		}, t0.Add(50 * time.Millisecond), 5, 1, true},
		{"ack older than the lease", func(l *lease) {
			l.setConfig(5, 1, conf("a", "b", "c"))
			l.ack(5, "b", t0)
		}, t0.Add(d), 5, 1, false},
		{"no follower acked", func(l *lease) {
			l.setConfig(5, 1, conf("a", "b", "c"))
		}, t0, 5, 1, false},
		{"five voters need two acks", func(l *lease) {
			l.setConfig(5, 1, conf("a", "b", "c", "d", "e"))
			l.ack(5, "b", t0)
		}, t0, 5, 1, false},
		{"five voters with two acks", func(l *lease) {
			l.setConfig(5, 1, conf("a", "b", "c", "d", "e"))
			l.ack(5, "b", t0)
			l.ack(5, "e", t0)
		}, t0, 5, 1, true},
		{"ack of an older term", func(l *lease) {
			l.setConfig(6, 1, conf("a", "b", "c"))
			l.ack(5, "b", t0)
		}, t0, 6, 1, false},
		{"newer term resets the acks", func(l *lease) {
			l.setConfig(6, 1, conf("a", "b", "c"))
			l.ack(5, "b", t0)
			l.ack(6, "c", t0.Add(-time.Hour))
		}, t0, 6, 1, false},
		{"revoked by a transfer", func(l *lease) {
			l.setConfig(5, 1, conf("a", "b", "c"))
			l.ack(5, "b", t0)
			l.revoke(5)
		}, t0, 5, 1, false},
		{"revocation of an older term", func(l *lease) {
			l.setConfig(5, 1, conf("a", "b", "c"))
			l.ack(5, "b", t0)
			l.revoke(4)
		}, t0, 5, 1, true},
		{"configuration applied since it was read", func(l *lease) {
			l.setConfig(5, 1, conf("a", "b", "c"))
			l.ack(5, "b", t0)
		}, t0, 5, 2, false},
		{"configuration change running", func(l *lease) {
			l.setConfig(5, 1, conf("a", "b", "c"))
			l.ack(5, "b", t0)
			l.changing.Add(1)
		}, t0, 5, 1, false},
		{"self not a voter", func(l *lease) {
			l.setConfig(5, 1, conf("b", "c", "d"))
			l.ack(5, "b", t0)
			l.ack(5, "c", t0)
		}, t0, 5, 1, false},
		{"non-voters do not count", func(l *lease) {
			c := conf("a", "b", "c")
			c.Servers = append(c.Servers, raft.Server{Suffrage: raft.Nonvoter, ID: "n"})
			l.setConfig(5, 1, c)
			l.ack(5, "n", t0)
		}, t0, 5, 1, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var l lease
			tc.setup(&l)
			if got := l.held(tc.now, tc.term, tc.epoch, "a", d); got != tc.want {
				t.Fatalf("held = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestLeaseRead checks the lease on a live group: a leader in contact with
// its followers reads without a quorum round; once it is cut off from them
// the lease ends within its length and reads fail instead of being served
// from a possibly deposed leader; a transfer revokes it; a restarted
// replica refuses votes for a heartbeat timeout.
func TestLeaseRead(t *testing.T) {
	root := t.TempDir()
	g := NewGroupID(1, 9)
	servers := startGroup(t, root, g)
	defer func() { stopAll(servers) }()
	peers := []PeerID{servers[0].peer(), servers[1].peer(), servers[2].peer()}
	propose(t, g, servers, fileOp("k", "v"))
	leader := waitLeader(t, g, servers...)
	ctx := context.Background()
	if _, err := leader.ReadBarrier(ctx); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, func() error {
		if !leader.leaseRead() {
			return errors.New("leader holds no read lease")
		}
		return nil
	})

	leader.opts.NoReadLease = true
	if leader.leaseRead() {
		t.Fatal("lease used with NoReadLease")
	}
	if _, err := leader.ReadBarrier(ctx); err != nil {
		t.Fatal(err)
	}
	leader.opts.NoReadLease = false

	// A transfer revokes the old leader's lease for its term.
	term := leader.raft.CurrentTerm()
	var to PeerID
	for _, p := range peers {
		if p != leader.local {
			to = p
			break
		}
	}
	if err := leader.TransferLeader(ctx, to); err != nil {
		t.Fatal(err)
	}
	if leader.lease.held(time.Now(), term, leader.fsm.epoch.Load(), raft.ServerID(leader.local), time.Hour) {
		t.Fatal("lease survived a leadership transfer")
	}

	// Cut the new leader off from both followers: within the lease length
	// it stops holding the lease and reads fail.
	propose(t, g, servers, fileOp("k2", "v2"))
	leader = waitLeader(t, g, servers...)
	testwait.Until(t, 10*time.Second, func() error {
		if !leader.leaseRead() {
			return errors.New("new leader holds no read lease")
		}
		return nil
	})
	var keep int
	for i, s := range servers {
		if s.mgr.Get(g) == leader {
			keep = i
			continue
		}
		s.stop()
		servers[i] = nil
	}
	time.Sleep(time.Duration(float64(fastRaft().HeartbeatTimeout) * leaseFraction))
	if leader.leaseRead() {
		t.Fatal("leader cut off from its followers still holds the lease")
	}
	rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err := leader.ReadBarrier(rctx)
	cancel()
	if err == nil {
		t.Fatal("read served by a leader without a quorum")
	}

	// A replica opened from disk (a restart) refuses votes for a heartbeat
	// timeout.
	i := (keep + 1) % 3
	servers[i] = startTestServer(t, "127.0.0.1:0", filepath.Join(root, fmt.Sprint(i)), fastRaft())
	gt := servers[i].mgr.Get(g).trans
	if err := gt.votesHeld(); status.Code(err) != codes.Unavailable {
		t.Fatalf("restarted replica answers votes at once: %v", err)
	}
	testwait.Until(t, 10*time.Second, func() error { return gt.votesHeld() })
}
