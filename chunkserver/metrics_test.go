package chunkserver

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/chunkserver/servertest"
	"github.com/chunkraft/chunkraft/chunkstore/datastore"
	"github.com/chunkraft/chunkraft/integrity"
	"github.com/chunkraft/chunkraft/internal/testwait"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// scrape gathers server i's registry (servertest.Scrape).
func (c *testCluster) scrape(t *testing.T, i int) map[string]map[string]float64 {
	t.Helper()
	return servertest.Scrape(t, c.Servers[i].Gatherer())
}

// TestMetricsFromStartup: the series the alerts in deploy/prometheus use
// exist at 0 before any event, and every hosted copyset has its raft
// figures; a broken replica shows as broken and its series go away when
// it is deleted.
func TestMetricsFromStartup(t *testing.T) {
	c := startTestCluster(t, 3)
	l := c.Leader(t)
	f := (l + 1) % 3
	got := c.scrape(t, f)
	want := func(name, labels string, ok func(float64) bool) {
		t.Helper()
		v, found := got[name][labels]
		if !found {
			t.Fatalf("no series %s{%s}; have %v", name, labels, got[name])
		}
		if !ok(v) {
			t.Fatalf("%s{%s} = %v", name, labels, v)
		}
	}
	zero := func(v float64) bool { return v == 0 }
	for _, op := range []string{"write", "delete", "delete_snapshot", "create_clone", "create_s3_clone", "recover", "read", "read_snapshot", "info", "group"} {
		for _, st := range []string{"CHUNK_OP_STATUS_SUCCESS", "CHUNK_OP_STATUS_OVERLOAD", "CHUNK_OP_STATUS_NOSPACE"} {
			want("chunkraft_chunk_requests_total", "op="+op+",status="+st, zero)
		}
		want("chunkraft_chunk_request_seconds", "op="+op, zero)
	}
	for _, r := range []string{integrity.ReasonDiffers, integrity.ReasonUnreadable, integrity.ReasonMissing, integrity.ReasonNoMajority} {
		want("chunkraft_scan_mismatches_total", "reason="+r, zero)
	}
	want("chunkraft_scan_ranges_total", "", zero)
	want("chunkraft_chunk_crc_failures_total", "", zero)
	want("chunkraft_read_only", "", zero)
	want("chunkraft_min_free_bytes", "", func(v float64) bool { return v == float64(c.Cfgs[f].MinFreeBytes) })
	want("chunkraft_data_dir_free_bytes", "", func(v float64) bool { return v > 0 })
	want("chunkraft_max_inflight", "", func(v float64) bool { return v == float64(c.Cfgs[f].MaxInflight) })
	want("chunkraft_chunk_inflight_requests", "", zero)

	cs := "copyset=1,pool=1"
	c.Write(t, 1, 1, 0, block(1), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	testwait.Until(t, 10*time.Second, func() error {
		if applied, committed := c.Node(f).Status().AppliedIndex, c.Node(l).Status().CommittedIndex; applied < committed {
			return fmt.Errorf("the follower applied %d, the leader committed %d", applied, committed)
		}
		return nil
	})
	leader, follower := c.scrape(t, l), c.scrape(t, f)
	if r := leader["chunkraft_copyset_role"][cs]; r != 2 {
		t.Fatalf("leader's role %v, want 2", r)
	}
	if r := follower["chunkraft_copyset_role"][cs]; r != 0 {
		t.Fatalf("follower's role %v, want 0", r)
	}
	for _, name := range []string{"chunkraft_copyset_term", "chunkraft_copyset_commit_index", "chunkraft_copyset_applied_index",
		"chunkraft_copyset_leader_changes_total"} {
		if v := follower[name][cs]; v < 1 {
			t.Fatalf("follower's %s = %v, want >= 1", name, v)
		}
	}
	if v, ok := follower["chunkraft_copyset_snapshot_installs_total"][cs]; !ok || v != 0 {
		t.Fatalf("follower's snapshot installs %v (present %v), want 0", v, ok)
	}
	if v, ok := follower["chunkraft_copyset_broken"][cs]; !ok || v != 0 {
		t.Fatalf("follower's broken %v (present %v), want 0", v, ok)
	}

	// Free space below the floor: read-only, seen at the next scrape.
	admit := c.Servers[f].Chunks().Admission()
	admit.SetDiskFree(func(string) (uint64, error) { return 1, nil })
	got = c.scrape(t, f)
	want("chunkraft_read_only", "", func(v float64) bool { return v == 1 })
	want("chunkraft_data_dir_free_bytes", "", func(v float64) bool { return v == 1 })
	admit.SetDiskFree(nil)

	// A replica stopped by a disk error is broken; deleted, its series go.
	c.FS[f].Inject(datastore.FaultRule{Ops: datastore.FaultWrite, Path: datastore.PathContains("chunk_1"), Err: syscall.EIO})
	c.Write(t, 1, 1, 4096, block(2), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	testwait.Until(t, 10*time.Second, func() error {
		if c.Node(f).Broken() == nil {
			return errors.New("the follower is not broken")
		}
		return nil
	})
	got = c.scrape(t, f)
	want("chunkraft_copyset_broken", cs, func(v float64) bool { return v == 1 })
	if err := c.Servers[f].Copysets().DeleteBroken(c.Group); err != nil {
		t.Fatal(err)
	}
	got = c.scrape(t, f)
	for name, series := range got {
		if _, ok := series[cs]; ok && strings.HasPrefix(name, "chunkraft_copyset_") {
			t.Fatalf("%s{%s} still exported after the replica was deleted", name, cs)
		}
	}
}
