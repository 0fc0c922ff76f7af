package copyset

import (
	"fmt"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/internal/testwait"
)

// heartbeatTimeouts returns the heartbeat timeout each server's replica of
// g runs with now.
func heartbeatTimeouts(g GroupID, servers []*testServer) map[*Node]time.Duration {
	out := map[*Node]time.Duration{}
	for _, s := range servers {
		n := s.mgr.Get(g)
		out[n] = n.raft.ReloadableConfig().HeartbeatTimeout
	}
	return out
}

// paced waits until leader runs with the leader's heartbeat timeout and
// every other replica with opts.HeartbeatTimeout.
func paced(t *testing.T, g GroupID, servers []*testServer, leader *Node, opts RaftOptions) {
	t.Helper()
	testwait.Until(t, 10*time.Second, func() error {
		for n, hb := range heartbeatTimeouts(g, servers) {
			want := opts.HeartbeatTimeout
			if n == leader {
				want = opts.LeaderHeartbeatTimeout
			}
			if hb != want {
				return fmt.Errorf("%s (leader %v): heartbeat timeout %v, want %v", n.local, n == leader, hb, want)
			}
		}
		return nil
	})
}

// A leader runs raft with the longer heartbeat timeout and the transport
// beats for it: its followers keep it, and its read lease, while the group
// is idle; a transfer moves the longer timeout to the new leader.
func TestLeaderPace(t *testing.T) {
	g := NewGroupID(1, 1)
	opts := fastRaft()
	opts.LeaderLeaseTimeout = 300 * time.Millisecond // = HeartbeatTimeout
	opts.LeaderHeartbeatTimeout = 600 * time.Millisecond
	servers := startGroupWith(t, t.TempDir(), g, opts)
	defer stopAll(servers)
	leader := waitLeader(t, g, servers...)
	propose(t, g, servers, fileOp("k", "v")) // every replica has heard of the leader
	paced(t, g, servers, leader, opts)

	// Idle: raft heartbeats every 60-120 ms, beats go every 60 ms. Wait
	// for 40 heartbeats to each follower (about 10 follower heartbeat
	// timeouts); meanwhile no replica may have looked for another leader.
	var local *testServer
	changes := map[string]uint64{}
	for _, s := range servers {
		changes[s.addr] = s.mgr.Get(g).Status().LeaderChanges
		if s.mgr.Get(g) == leader {
			local = s
		}
	}
	sent := func() uint64 {
		least := ^uint64(0)
		for _, p := range local.tm.Stats().Peers {
			least = min(least, p.HeartbeatsSent)
		}
		return least
	}
	from := sent()
	testwait.Until(t, 20*time.Second, func() error {
		if n := sent() - from; n < 40 {
			return fmt.Errorf("%d heartbeats sent to the follower heard least", n)
		}
		return nil
	})
	if now := waitLeader(t, g, servers...); now != leader {
		t.Fatalf("leader changed while idle: %s -> %s", leader.local, now.local)
	}
	for _, s := range servers {
		if got := s.mgr.Get(g).Status().LeaderChanges; got != changes[s.addr] {
			t.Errorf("%s: %d leader changes while idle", s.addr, got-changes[s.addr])
		}
	}
	if !leader.leaseRead() {
		t.Error("the idle leader does not hold its read lease")
	}

	// A transfer: the new leader takes the longer timeout, the old one
	// goes back to the followers'.
	transferAway(t, g, servers, leader)
	propose(t, g, servers, fileOp("k", "v2"))
	paced(t, g, servers, waitLeader(t, g, servers...), opts)
}
