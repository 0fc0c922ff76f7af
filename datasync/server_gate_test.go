package datasync_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/chunkserver"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/internal/testwait"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
)

// TestSyncGateWaitHeartbeats: a RUNNING sub-task whose snapshot phase
// waits for the server's one slot (sync.snapshot_exports: 1) is not
// reassigned, however long it waits: it heartbeats meanwhile. Its export
// is first stopped at its second packet (a non-empty directory where the
// packet goes), so that it is RUNNING in the snapshot phase, then the test
// takes the slot, lets the packet through and holds the slot for 2.5
// times the 2 x check period after which a silent sub-task is reassigned;
// once it lets go, the export finishes under the same token.
func TestSyncGateWaitHeartbeats(t *testing.T) {
	c := startTestCluster(t, 1, func(cfg *chunkserver.Config) {
		cfg.Sync.CheckPeriod, cfg.Sync.SendInterval, cfg.Sync.SnapshotExports = time.Second, 20*time.Millisecond, 1
	})
	ok := pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS
	for off := uint32(0); off <= 4<<20; off += 1 << 20 { // chunk 1 is more than a packet (4 MiB)
		c.Write(t, 1, 1, off, bytes.Repeat([]byte{byte(off >> 20)}, 1<<20), ok)
	}
	c.Write(t, 2, 1, 0, bytes.Repeat([]byte{9}, 4096), ok)

	dir := filepath.Join(t.TempDir(), "export")
	block := filepath.Join(dir, exportfmt.PacketName(1, 1, exportfmt.SnapshotPoint(2, 0)))
	if err := os.MkdirAll(block, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(block, "block"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if r, err := c.syncTool(0).CreateSyncTask(ctx, createReq("1", "backup", dspb.SyncMode_kFull.Enum(), "file://"+dir)); err != nil || r.GetCode() != 0 {
		t.Fatalf("create: %v %v", r, err)
	}
	atChunk2 := func(task *dspb.Task) bool {
		p := task.GetProgress().GetSyncPoint()
		return task.GetStatus() == "RUNNING" && p.GetType() == dspb.SyncType_kSNAPSHOT && p.GetPk() == "2"
	}
	c.waitTask(t, "RUNNING at snapshot chunk 2", atChunk2)

	release, err := c.Servers[0].Syncs().HoldSnapshotSlot(ctx) // when the failing export lets it go
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if err := os.RemoveAll(block); err != nil {
		t.Fatal(err)
	}
	// The stalled sub-task may have been reassigned before its collector
	// reached the gate: take the token once its last update time moves
	// under it, the collector heartbeating at the gate.
	state := func() (string, int64) {
		st := c.taskStatus(t, 0)
		var ms int64
		if _, err := fmt.Sscanf(st.GetReadableInfo()[0], "lastUpdateTime=%d;", &ms); err != nil {
			t.Fatalf("readable info %q: %v", st.GetReadableInfo()[0], err)
		}
		if !atChunk2(st.GetTask()[0]) {
			t.Fatalf("sub-task left its snapshot point while the gate was held: %v", st.GetTask()[0])
		}
		return st.GetTask()[0].GetProgress().GetToken(), ms
	}
	token, last := state()
	testwait.Until(t, 10*time.Second, func() error {
		tok, ms := state()
		if tok == token && ms > last {
			last = ms
			return nil
		}
		token, last = tok, ms
		return errors.New("no heartbeat from the sub-task at the gate")
	})
	// Now it waits: while its heartbeats span 5 s (2.5 x (2 x check
	// period)) it stays, and no 500 ms pass without one.
	first, moved := last, time.Now()
	testwait.Until(t, 30*time.Second, func() error {
		tok, ms := state()
		if tok != token {
			t.Fatalf("while waiting at the gate the sub-task was reassigned (token %s, then %s)", token, tok)
		}
		switch {
		case ms > last:
			last, moved = ms, time.Now()
		case time.Since(moved) > 500*time.Millisecond:
			t.Fatalf("no heartbeat moved the sub-task's last update time in 500 ms (%d)", ms)
		}
		if span := last - first; span < 5000 {
			return fmt.Errorf("the heartbeats at the gate span %d ms, want 5000", span)
		}
		return nil
	})
	release()
	done := c.waitTask(t, "SUCCESS", func(task *dspb.Task) bool { return task.GetStatus() == "SUCCESS" })
	if done.GetProgress().GetToken() != token {
		t.Fatalf("the export finished under token %s, want %s", done.GetProgress().GetToken(), token)
	}
}

// waitTask waits up to 20 s until the only sub-task (listed by server 0)
// satisfies ok, and returns it.
func (c *testCluster) waitTask(t *testing.T, what string, ok func(*dspb.Task) bool) *dspb.Task {
	t.Helper()
	var task *dspb.Task
	testwait.Until(t, 20*time.Second, func() error {
		tasks := c.subTasks(t, 0)
		if len(tasks) != 1 || !ok(tasks[0]) {
			return fmt.Errorf("sub-task not %s: %v", what, tasks)
		}
		task = tasks[0]
		return nil
	})
	return task
}
