package copyset

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/chunkraft/chunkraft/internal/testwait"
)

// TestJoinedReplicaMembershipRule: configurations at or before the join
// marker's index neither make a joined replica a member nor remove it;
// later ones do. A replica without a marker counts every configuration.
func TestJoinedReplicaMembershipRule(t *testing.T) {
	self, other := PeerID("127.0.0.1:1:0"), PeerID("127.0.0.1:2:0")
	with, without := configurationOf([]PeerID{self, other}), configurationOf([]PeerID{other})
	for _, tc := range []struct {
		name    string
		after   uint64
		removed bool // after applying with@3, without@5
	}{
		{"joined after both", 10, false},
		{"no marker", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			drops := 0
			n := &Node{local: self, joinAfter: tc.after, joined: tc.after > 0, log: slog.Default(),
				onRemoved: func(*Node) { drops++ }}
			n.configApplied(3, with)
			n.configApplied(5, without)
			if got := drops > 0; got != tc.removed {
				t.Fatalf("stale removal at index 5 dropped the replica: %v, want %v", got, tc.removed)
			}
			if peers, _ := n.CommittedPeers(); !slices.Equal(peers, []PeerID{other}) {
				t.Fatalf("committed peers %v, want the newest configuration", peers)
			}
			if tc.after == 0 {
				return
			}
			// The add (after the marker) makes it a member; a removal after
			// that drops it.
			n.configApplied(12, with)
			if !n.wasMember.Load() || drops != 0 {
				t.Fatalf("after the add: member %v drops %d", n.wasMember.Load(), drops)
			}
			n.configApplied(15, without)
			if drops != 1 {
				t.Fatalf("removal after the add: drops %d, want 1", drops)
			}
		})
	}
}

// TestJoinMarkerKeepsEmptyReplica: an empty replica created to be added
// is still there after a restart before it received anything (the remains
// of a plain create that never finished are not), with its marker.
func TestJoinMarkerKeepsEmptyReplica(t *testing.T) {
	dir := t.TempDir()
	g, unfinished := NewGroupID(1, 1), NewGroupID(1, 2)
	s := startTestServer(t, "127.0.0.1:0", dir, fastRaft())
	peers := []PeerID{"127.0.0.1:1:0", "127.0.0.1:2:0"}
	if _, err := s.mgr.Join(context.Background(), g, 42, peers); err != nil {
		s.stop()
		t.Fatal(err)
	}
	if _, err := s.mgr.Join(context.Background(), g, 42, []PeerID{peers[0], peers[0]}); err == nil {
		t.Fatal("join with a duplicated peer succeeded")
	}
	s.stop()
	// A create that never finished: a directory without raft state or marker.
	if err := mkdirAll(filepath.Join(dir, "copysets", unfinished.String(), "data")); err != nil {
		t.Fatal(err)
	}
	s = startTestServer(t, "127.0.0.1:0", dir, fastRaft())
	defer s.stop()
	n := s.mgr.Get(g)
	if n == nil {
		t.Fatal("the joined empty replica was removed at restart")
	}
	if got, ok := n.JoinPeers(); !ok || !slices.Equal(got, peers) || n.joinAfter != 42 {
		t.Fatalf("join marker after restart: peers %v %v after %d", got, ok, n.joinAfter)
	}
	if s.mgr.Get(unfinished) != nil || dirExists(s.mgr.groupDir(unfinished)) {
		t.Fatal("the unfinished create was kept")
	}
}

// TestReAddRemovedServer: a server removed from a copyset and added again
// gets a new, empty replica that catches up through the log holding its
// earlier removal; with the join marker's index (the leader's last index
// when it is created) it keeps its replica, and the copyset ends with its
// four members each hosting one.
func TestReAddRemovedServer(t *testing.T) {
	g := NewGroupID(1, 1)
	servers := startGroup(t, t.TempDir(), g)
	defer func() { stopAll(servers) }()
	fourth := startTestServer(t, "127.0.0.1:0", t.TempDir(), fastRaft())
	servers = append(servers, fourth)
	ctx := context.Background()
	leader := waitLeader(t, g, servers...)
	addEmpty := func(s *testServer, after uint64) {
		t.Helper()
		peers, err := leader.Peers()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.mgr.Join(ctx, g, after, peers); err != nil {
			t.Fatal(err)
		}
		if _, _, err := leader.AddPeer(ctx, s.peer()); err != nil {
			t.Fatal(err)
		}
	}
	addEmpty(fourth, leader.Status().LastIndex)
	// Remove a follower, then write.
	var gone *testServer
	for _, s := range servers[:3] {
		if s.mgr.Get(g) != leader {
			gone = s
			break
		}
	}
	if _, _, err := leader.RemovePeer(ctx, gone.peer()); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, func() error {
		if gone.mgr.Get(g) != nil || dirExists(gone.mgr.groupDir(g)) {
			return fmt.Errorf("removed replica still on %s", gone.addr)
		}
		return nil
	})
	for i := range 100 {
		propose(t, g, servers, fileOp(fmt.Sprint("k", i), "v"))
	}
	addEmpty(gone, leader.Status().LastIndex)
	waitCaughtUp(t, g, leader, gone)
	// Every drop the catch-up queued (the lifecycle goroutine runs them)
	// is done: the checks below see its outcome.
	testwait.Until(t, 10*time.Second, func() error {
		gone.mgr.dropMu.Lock()
		defer gone.mgr.dropMu.Unlock()
		if n := gone.mgr.dropsPending; n != 0 {
			return fmt.Errorf("%d drops of removed replicas pending on %s", n, gone.addr)
		}
		return nil
	})
	peers, err := leader.Peers()
	if err != nil {
		t.Fatal(err)
	}
	if len(peers) != 4 {
		t.Fatalf("configuration %v, want 4 peers", peers)
	}
	for _, s := range servers {
		n := s.mgr.Get(g)
		if n == nil || !slices.Contains(peers, s.peer()) {
			t.Fatalf("server %s: replica %v, member %v", s.addr, n != nil, slices.Contains(peers, s.peer()))
		}
		if n.Removed() {
			t.Fatalf("server %s: replica reports itself removed", s.addr)
		}
	}
	if st := gone.mgr.Get(g).raft.State(); st == raft.Shutdown {
		t.Fatalf("re-added replica state %v", st)
	}
}

func mkdirAll(dir string) error { return os.MkdirAll(dir, 0o755) }
