package cli

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestMembershipClient(t *testing.T) {
	fc := newFakeCluster(t, 4)
	fc.with(func() { fc.members[cs3] = []int{0, 1, 2}; fc.csLeaders[cs3] = 1 })
	c := newTestClient(t, fc.addrs(), 2*time.Second, 500*time.Millisecond)
	ctx := context.Background()

	nr, err := c.CreateEmptyReplica(ctx, cs3, fc.addrs()[3])
	if err != nil || nr.Existed || nr.Peer != fc.servers[3].id || !slices.Equal(nr.Peers, fc.ids(0, 1, 2)) {
		t.Fatalf("CreateEmptyReplica: %+v, %v", nr, err)
	}
	ch, err := c.AddPeer(ctx, cs3, fc.addrs()[3])
	if err != nil || ch.Leader != fc.servers[1].id || !slices.Equal(ch.OldPeers, fc.ids(0, 1, 2)) || !slices.Equal(ch.NewPeers, fc.ids(0, 1, 2, 3)) {
		t.Fatalf("AddPeer: %+v, %v", ch, err)
	}
	if l, _ := c.CachedLeader(cs3); l != fc.servers[1].id {
		t.Errorf("cached leader %q after AddPeer", l)
	}
	// Removing the leader drops it from the cache.
	ch, err = c.RemovePeer(ctx, cs3, fc.servers[1].id)
	if err != nil || !slices.Equal(ch.NewPeers, fc.ids(0, 2, 3)) {
		t.Fatalf("RemovePeer: %+v, %v", ch, err)
	}
	if l, ok := c.CachedLeader(cs3); ok {
		t.Errorf("removed leader %q still cached", l)
	}
	ch, err = c.ChangePeers(ctx, cs3, []string{fc.addrs()[0], fc.addrs()[1], fc.addrs()[2]})
	if err != nil || !slices.Equal(ch.NewPeers, fc.ids(0, 1, 2)) || !slices.Equal(ch.OldPeers, fc.ids(0, 2, 3)) {
		t.Fatalf("ChangePeers: %+v, %v", ch, err)
	}

	// No leader anywhere: retried until the timeout, then a GaveUpError.
	fc.setLeader(-1)
	fc.with(func() { delete(fc.csLeaders, cs3) })
	c2 := newTestClient(t, fc.addrs(), 400*time.Millisecond, 200*time.Millisecond)
	start := time.Now()
	_, err = c2.AddPeer(ctx, cs3, fc.addrs()[3])
	var g *GaveUpError
	if !errors.As(err, &g) || time.Since(start) > 2*time.Second {
		t.Errorf("AddPeer without a leader: %v after %s", err, time.Since(start))
	}
}

func TestAdminClientServerCalls(t *testing.T) {
	fc := newFakeCluster(t, 2)
	dead := deadAddr(t)
	c := newTestClient(t, append(fc.addrs(), dead), 600*time.Millisecond, 200*time.Millisecond)
	ctx := context.Background()

	// Reads make one attempt; a dead server fails fast.
	start := time.Now()
	if _, err := c.Config(ctx, ConfigGet, dead, "log_level", ""); err == nil || time.Since(start) > 500*time.Millisecond {
		t.Errorf("get on a dead server: %v after %s", err, time.Since(start))
	}
	// Changes are retried until the timeout.
	_, err := c.Config(ctx, ConfigSet, dead, "log_level", "debug")
	var g *GaveUpError
	if !errors.As(err, &g) {
		t.Errorf("set on a dead server: %v", err)
	}
	if v, err := c.Config(ctx, ConfigSet, fc.addrs()[0], "log_level", "debug"); err != nil || v != "debug" {
		t.Errorf("set: %q %v", v, err)
	}
	var cse *ConfigStatusError
	if _, err := c.Config(ctx, ConfigGet, fc.addrs()[0], "nope", ""); !errors.As(err, &cse) || cse.Message != `unknown key "nope"` {
		t.Errorf("get of an unknown key: %v", err)
	}

	fin, err := c.LoadFinished(ctx, fc.addrs()[1])
	if err != nil || !fin {
		t.Errorf("LoadFinished: %v %v", fin, err)
	}
	states := c.ServerStates(ctx, []CopysetID{{1, 1}, {1, 2}})
	if len(states) != 3 || !states[0].Reachable || len(states[0].Copysets.Replicas) != 2 || states[2].Reachable || states[2].Err == nil {
		t.Errorf("ServerStates: %+v", states)
	}

	rows, err := c.SnapshotAll(ctx)
	if err == nil || len(rows) != 3 || rows[0].Err != nil || rows[2].Err == nil {
		t.Errorf("SnapshotAll with a dead server: %+v %v", rows, err)
	}
}
