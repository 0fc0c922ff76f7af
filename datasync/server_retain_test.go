package datasync_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/chunkserver"
	"github.com/chunkraft/chunkraft/chunkserver/servertest"
	"github.com/chunkraft/chunkraft/datasync"
	"github.com/chunkraft/chunkraft/internal/testwait"
	statepb "github.com/chunkraft/chunkraft/proto/chunkraft/syncstatepb"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
)

// Log retention of the sync service: a live sub-task holds its copyset's
// raft log from its cursor on every replica (the sync machine's log
// hold), within sync.max_retained_bytes.

// smallSnapshots makes raft snapshot and truncate the log often: a
// snapshot every 16 entries (checked every 200 ms), 8 entries kept.
func smallSnapshots(cfg *chunkserver.Config) {
	cfg.Raft.SnapshotThreshold, cfg.Raft.TrailingLogs, cfg.Raft.SnapshotInterval = 16, 8, 200*time.Millisecond
}

// startStalledExport creates a kFullAndContinuous task for pool 1 on a
// file:// dest, waits until it exports the log, then breaks the dest
// (its directory replaced by a file) so that no packet is accepted any
// more, and returns the sub-task's binlog cursor, which stays put, and a
// function that repairs the dest.
func startStalledExport(t *testing.T, c *testCluster) (uint64, func()) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "export")
	c.Write(t, 1, 1, 0, servertest.Block(1), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	if r, err := c.syncTool(0).CreateSyncTask(context.Background(), createReq("1", "backup", dspb.SyncMode_kFullAndContinuous.Enum(), "file://"+root)); err != nil || r.GetCode() != 0 {
		t.Fatalf("create: %v %v", r, err)
	}
	c.waitPoint(t, "RUNNING", 0)
	if err := os.Rename(root, root+".away"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(root, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A packet in flight lands or fails: the collector sends one at a
	// time, so once a packet or heartbeat that reached the SyncTool after
	// the dest broke is in the record (its last update time is later),
	// every earlier one has landed or failed, and every later packet
	// fails at the dest.
	broken := time.Now().UnixMilli()
	testwait.Until(t, 10*time.Second, func() error {
		if _, ms := c.lastUpdate(t); ms <= broken {
			return fmt.Errorf("the sub-task's last update at %d ms, not after the dest broke at %d ms", ms, broken)
		}
		return nil
	})
	return c.cursor(t), func() {
		t.Helper()
		if err := os.Remove(root); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(root+".away", root); err != nil {
			t.Fatal(err)
		}
	}
}

// cursor returns the binlog point of the one sub-task (server 0's view).
func (c *testCluster) cursor(t *testing.T) uint64 {
	t.Helper()
	tasks := c.subTasks(t, 0)
	if len(tasks) != 1 || tasks[0].GetProgress().GetSyncPoint().GetType() != dspb.SyncType_kBINLOG {
		t.Fatalf("sub-tasks %v, want one at a binlog point", tasks)
	}
	return tasks[0].GetProgress().GetSyncPoint().GetOffset()
}

// writeBlocks writes n blocks of size bytes to chunk 1 and waits until
// every replica applied them.
func (c *testCluster) writeBlocks(t *testing.T, n, size int) {
	t.Helper()
	for i := range n {
		c.Write(t, 1, 1, uint32(i%64)*uint32(size), bytes.Repeat([]byte{byte(i + 1)}, size), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	}
	c.waitApplied(t)
}

// waitApplied waits until every running replica applied the leader's
// commit index.
func (c *testCluster) waitApplied(t *testing.T) {
	t.Helper()
	commit := c.Node(c.Leader(t)).CommitIndex()
	testwait.Until(t, 10*time.Second, func() error {
		for _, i := range c.Up() {
			if applied := c.Node(i).AppliedIndex(); applied < commit {
				return fmt.Errorf("server %d applied %d, not the commit index %d", i, applied, commit)
			}
		}
		return nil
	})
}

// snapshotAll snapshots every running replica (so raft truncates its
// log) and returns their first log indexes.
func (c *testCluster) snapshotAll(t *testing.T) map[int]uint64 {
	t.Helper()
	firsts := map[int]uint64{}
	for _, i := range c.Up() {
		n := c.Node(i)
		if err := n.Snapshot(context.Background()); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
			t.Fatalf("server %d: %v", i, err)
		}
		first, _, err := n.LogBounds()
		if err != nil {
			t.Fatal(err)
		}
		firsts[i] = first
	}
	return firsts
}

// waitTruncated writes and snapshots until every replica's log starts
// past index and holds no pin.
func (c *testCluster) waitTruncated(t *testing.T, index uint64) {
	t.Helper()
	testwait.Until(t, 10*time.Second, func() error {
		c.writeBlocks(t, 10, 4096)
		firsts := c.snapshotAll(t)
		for i, first := range firsts {
			if first <= index || c.Node(i).LogPins().Pins != 0 {
				return fmt.Errorf("the logs start at %v, not all past %d, or still hold pins", firsts, index)
			}
		}
		return nil
	})
}

// TestSyncLogHoldEveryReplica: a live sub-task whose export is stalled
// holds its copyset's log from its cursor on every replica, followers
// included, however many snapshots go by (raft keeping only 8 entries
// otherwise), so that when its leader stops the new leader's collector
// goes on from the cursor (not FAILED for a log it no longer has); once
// the task is deleted every replica truncates past it.
func TestSyncLogHoldEveryReplica(t *testing.T) {
	c := startTestCluster(t, 3, smallSnapshots)
	at, repair := startStalledExport(t, c)
	c.writeBlocks(t, 40, 4096)
	firsts := c.snapshotAll(t)
	for i, first := range firsts {
		_, last, _ := c.Node(i).LogBounds()
		if first > at || last < at+40 {
			t.Fatalf("server %d (leader %d) holds its log from %d to %d: the sub-task's cursor %d is not held", i, c.Leader(t), first, last, at)
		}
		if _, err := c.Node(i).LogEntry(at); err != nil {
			t.Fatalf("server %d: the entry at the cursor: %v", i, err)
		}
	}
	if now := c.cursor(t); now != at {
		t.Fatalf("the stalled export moved from %d to %d", at, now)
	}
	old := c.Leader(t)
	c.Stop(old)
	repair()
	c.writeBlocks(t, 2, 4096)
	other := (old + 1) % 3
	testwait.Until(t, 15*time.Second, func() error {
		tasks := c.subTasks(t, other)
		p := tasks[0].GetProgress()
		if tasks[0].GetStatus() == "RUNNING" && p.GetSyncPoint().GetOffset() > at+40 && p.GetTabletEndpoint() == c.Servers[c.Leader(t)].Local().Addr() {
			return nil
		}
		err := fmt.Errorf("the new leader did not go on from the held cursor %d: %v %v", at, tasks[0], c.readable(t, other))
		if tasks[0].GetStatus() == "FAILED" {
			t.Fatal(err)
		}
		return err
	})
	if r, err := c.syncTool(other).DeleteSyncTask(context.Background(), &dspb.DeleteSyncTaskRequest{Db: proto.String("1"), Name: proto.String("backup")}); err != nil || r.GetCode() != 0 {
		t.Fatalf("delete: %v %v", r, err)
	}
	c.waitTruncated(t, at)
}

// TestSyncRetentionBoundFails: a stalled export whose copyset's log grows
// past sync.max_retained_bytes turns FAILED with a message naming the
// bound; the copyset keeps taking writes and every replica lets the log
// go.
func TestSyncRetentionBoundFails(t *testing.T) {
	c := startTestCluster(t, 3, smallSnapshots, func(cfg *chunkserver.Config) { cfg.Sync.MaxRetainedBytes = 1 << 20 })
	at, _ := startStalledExport(t, c)
	c.writeBlocks(t, 40, 64<<10) // 2.5 MiB behind the cursor
	c.snapshotAll(t)
	var rec *statepb.SubTask
	testwait.Until(t, 15*time.Second, func() error {
		m, ok := datasync.MachineOf(c.Node(0))
		if !ok {
			t.Fatal("no sync machine")
		}
		list := m.List()
		if len(list) != 1 || list[0].GetStatus().String() != "FAILED" {
			return fmt.Errorf("the sub-task did not fail: %v", list)
		}
		rec = list[0]
		return nil
	})
	if msg := rec.GetMessage(); !strings.Contains(msg, "sync.max_retained_bytes = 1048576 bytes") {
		t.Fatalf("failure message %q does not name the bound", msg)
	}
	t.Log(rec.GetMessage())
	c.Write(t, 1, 1, 0, servertest.Block(9), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	if got := c.Read(t, 1, 0, 4096); !bytes.Equal(got, servertest.Block(9)) {
		t.Fatal("the copyset does not serve what it was written after the failure")
	}
	c.waitTruncated(t, at)
}

// readable returns server i's TaskStatus readable infos.
func (c *testCluster) readable(t *testing.T, i int) []string {
	t.Helper()
	return c.taskStatus(t, i).GetReadableInfo()
}
