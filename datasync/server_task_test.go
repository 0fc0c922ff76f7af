package datasync_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/chunkserver"
	"github.com/chunkraft/chunkraft/chunkserver/chunkservertest"
	"github.com/chunkraft/chunkraft/chunkserver/servertest"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/internal/objstore"
	"github.com/chunkraft/chunkraft/internal/objstore/fakes3"
	"github.com/chunkraft/chunkraft/internal/testwait"
	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
)

// testCluster is a chunkservertest cluster serving the sync services, with this
// package's helpers.
type testCluster struct{ *chunkservertest.Cluster }

func startTestCluster(t *testing.T, n int, opts ...func(*chunkserver.Config)) *testCluster {
	t.Helper()
	return &testCluster{chunkservertest.Start(t, n, opts...)}
}

// syncTool is the upstream-generated SyncTool client of server i.
func (c *testCluster) syncTool(i int) dspb.SyncToolClient { return dspb.NewSyncToolClient(c.Conns[i]) }

func createReq(db, name string, mode *dspb.SyncMode, dest string) *dspb.CreateSyncTaskRequest {
	return &dspb.CreateSyncTaskRequest{Db: proto.String(db), Name: proto.String(name), Mode: mode, Dest: proto.String(dest)}
}

// subTasks returns server i's TaskStatus tasks.
func (c *testCluster) subTasks(t *testing.T, i int) []*dspb.Task {
	t.Helper()
	return c.taskStatus(t, i).GetTask()
}

// taskStatus is server i's TaskStatus, asked again for up to 30 s while it
// is partial (a copyset without a leader that answers, as in an election).
func (c *testCluster) taskStatus(t *testing.T, i int) *dspb.TaskStatusResponse {
	t.Helper()
	var resp *dspb.TaskStatusResponse
	testwait.Until(t, 30*time.Second, func() error {
		var err error
		resp, err = c.syncTool(i).TaskStatus(context.Background(), &dspb.TaskStatusRequest{})
		switch {
		case err == nil && resp.GetResponse().GetCode() == 0:
			return nil
		case err != nil || !strings.Contains(resp.GetResponse().GetMsg(), "(partial)"):
			t.Fatalf("task status: %v %v", resp.GetResponse(), err)
		}
		return fmt.Errorf("task status: %v", resp.GetResponse())
	})
	return resp
}

// lastUpdate returns the one sub-task server 0 lists and its last update
// time (readableInfo's lastUpdateTime, Unix ms): every packet and every
// heartbeat of its collector moves it.
func (c *testCluster) lastUpdate(t *testing.T) (*dspb.Task, int64) {
	t.Helper()
	st := c.taskStatus(t, 0)
	if len(st.GetTask()) != 1 || len(st.GetReadableInfo()) != 1 {
		t.Fatalf("task status lists %v, want one sub-task", st)
	}
	var ms int64
	if _, err := fmt.Sscanf(st.GetReadableInfo()[0], "lastUpdateTime=%d;", &ms); err != nil {
		t.Fatalf("readable info %q: %v", st.GetReadableInfo()[0], err)
	}
	return st.GetTask()[0], ms
}

// waitCollectorsGone waits until no server runs a collector.
func (c *testCluster) waitCollectorsGone(t *testing.T) {
	t.Helper()
	testwait.Until(t, 10*time.Second, func() error {
		for _, i := range c.Up() {
			if n := c.Servers[i].Syncs().Collecting(); n != 0 {
				return fmt.Errorf("server %d runs %d collectors", i, n)
			}
		}
		return nil
	})
}

// TestSyncTaskLifecycle: a task created on one server is listed by every
// server (its sub-task replicated on the pool's copyset), a second task of
// the same name and every bad input are refused with code -1 and change
// nothing, and both spellings of delete remove it everywhere.
func TestSyncTaskLifecycle(t *testing.T) {
	c := startTestCluster(t, 3)
	ctx := context.Background()
	dir := "file://" + filepath.Join(t.TempDir(), "export")
	full := dspb.SyncMode_kFullAndContinuous.Enum()

	bad := []struct {
		req  *dspb.CreateSyncTaskRequest
		want string
	}{
		{createReq("one", "t", full, dir), "not a pool id"},
		{createReq("7", "t", full, dir), "pool 7: no copysets"},
		{createReq("1", "", full, dir), "name is empty"},
		{createReq("1", strings.Repeat("n", 200), full, dir), "at most"},
		{createReq("1", "t", nil, dir), "mode is missing"},
		{createReq("1", "t", dspb.SyncMode(42).Enum(), dir), "unknown mode 42"},
		{createReq("1", "t", full, "file://relative/path"), "file"},
		{createReq("1", "t", full, "hdfs://nn/x"), "hdfs"},
		{createReq("1", "t", full, "s3://bucket/prefix"), "s3"},
		{createReq("1", "t", dspb.SyncMode_kIncrementalByTimestamp.Enum(), dir), "start_ts"},
	}
	for _, b := range bad {
		resp, err := c.syncTool(0).CreateSyncTask(ctx, b.req)
		if err != nil || resp.GetCode() != -1 || !strings.Contains(resp.GetMsg(), b.want) {
			t.Errorf("create %v: %v %v, want code -1 with %q", b.req, resp, err, b.want)
		}
	}
	if got := c.subTasks(t, 1); len(got) != 0 {
		t.Fatalf("bad input created sub-tasks: %v", got)
	}

	resp, err := c.syncTool(1).CreateSyncTask(ctx, createReq("1", "backup", full, dir))
	if err != nil || resp.GetCode() != 0 {
		t.Fatalf("create: %v %v", resp, err)
	}
	for i := range 3 {
		tasks := c.subTasks(t, i)
		if len(tasks) != 1 || tasks[0].GetProgress().GetTid() != 1 || tasks[0].GetProgress().GetPid() != 1 {
			t.Fatalf("server %d lists %v", i, tasks)
		}
	}
	created := c.subTasks(t, 0)[0].GetProgress()
	if resp, _ := c.syncTool(2).CreateSyncTask(ctx, createReq("1", "backup", full, dir+"-2")); resp.GetCode() != -1 ||
		resp.GetMsg() != "create sync task 1/backup: sync task already exists(creating or created)" {
		t.Fatalf("the same task again: %v", resp)
	}
	if now := c.subTasks(t, 1); len(now) != 1 || now[0].GetProgress().GetToken() != created.GetToken() ||
		now[0].GetProgress().GetExportId() != created.GetExportId() || now[0].GetProgress().GetDest() != created.GetDest() {
		t.Fatalf("the refused create changed the task: %v, was %v", now, created)
	}
	if id := created.GetExportId(); len(id) != 32 || created.GetTaskName() != "backup" {
		t.Fatalf("the sub-task's export id %q, task name %q", id, created.GetTaskName())
	}

	// readableInfo: upstream's lastUpdateTime=<ms>;progressPath=<where>,
	// with what the export covers, its last packet's time and its id.
	st, err := c.syncTool(2).TaskStatus(ctx, &dspb.TaskStatusRequest{})
	if err != nil || len(st.GetReadableInfo()) != 1 {
		t.Fatalf("task status: %v %v", st, err)
	}
	var ms int64
	if _, err := fmt.Sscanf(st.GetReadableInfo()[0], "lastUpdateTime=%d;", &ms); err != nil ||
		time.Since(time.UnixMilli(ms)).Abs() > time.Minute || !strings.Contains(st.GetReadableInfo()[0], ";progressPath=copyset 1/1 sync machine") ||
		!strings.Contains(st.GetReadableInfo()[0], ";exportId="+created.GetExportId()+";") || !strings.Contains(st.GetReadableInfo()[0], ";lastPacketTime=") {
		t.Fatalf("readable info %q: %v", st.GetReadableInfo()[0], err)
	}

	// The leader collects it under the token it was created with: its
	// export runs, and three heartbeats later (a second apart, as the
	// leader's check loop, which would reassign it, ticks) it is still the
	// leader's under that token.
	tasks := c.subTasks(t, 0)
	p := tasks[0].GetProgress()
	c.waitPoint(t, "RUNNING", 0)
	_, at := c.lastUpdate(t)
	beats := 0
	testwait.Until(t, 20*time.Second, func() error {
		if _, ms := c.lastUpdate(t); ms > at {
			beats, at = beats+1, ms
		}
		if beats < 3 {
			return fmt.Errorf("%d heartbeats of the running export, want 3", beats)
		}
		return nil
	})
	if again := c.subTasks(t, 0); again[0].GetProgress().GetToken() != p.GetToken() ||
		again[0].GetDataCollector() != c.Servers[c.Leader(t)].Local().Addr() {
		t.Fatalf("sub-task moved without cause: %v, then %v", tasks[0], again[0])
	}

	// SendData refusals tell the collector to drop the task.
	for _, req := range []*dspb.SendDataRequest{
		{Tid: proto.Uint32(1), Pid: proto.Uint32(9), Token: p.Token, StartPoint: p.SyncPoint, NextPoint: p.SyncPoint, Count: proto.Uint64(0)},
		{Tid: proto.Uint32(1), Pid: proto.Uint32(1), Token: proto.String("not-the-token"), StartPoint: p.SyncPoint, NextPoint: p.SyncPoint, Count: proto.Uint64(0)},
		{Tid: proto.Uint32(1), Pid: proto.Uint32(1), Token: p.Token,
			StartPoint: &dspb.SyncPoint{Type: dspb.SyncType_kBINLOG.Enum(), Offset: proto.Uint64(99)},
			NextPoint:  &dspb.SyncPoint{Type: dspb.SyncType_kBINLOG.Enum(), Offset: proto.Uint64(99)}, Count: proto.Uint64(0)},
		{Tid: proto.Uint32(1), Pid: proto.Uint32(1), Token: p.Token, StartPoint: p.SyncPoint, NextPoint: p.SyncPoint, Count: proto.Uint64(0), Data: []byte("garbage")},
		{Tid: proto.Uint32(1), Pid: proto.Uint32(1)},
	} {
		r, err := c.syncTool(0).SendData(ctx, req)
		if err != nil || r.GetResponse().GetCode() != -1 || !r.GetDeleteTask() {
			t.Errorf("send data %v: %v %v, want code -1 and delete_task", req, r, err)
		}
	}
	// A header of a heartbeat that says what it covers is checked too:
	// covered_index only in a binlog-phase heartbeat, and not below its
	// point.
	cur := c.subTasks(t, 0)[0].GetProgress().GetSyncPoint()
	pt, err := exportfmt.ParsePoint(cur)
	if err != nil || pt.Phase != exportfmt.PhaseBinlog || pt.Index < 3 {
		t.Fatalf("the running export is at %v (%v), want a binlog point past 2", cur, err)
	}
	for _, b := range []struct {
		next    exportfmt.Point
		covered uint64
		want    string
	}{
		{exportfmt.BinlogPoint(pt.Index + 1), pt.Index, "covered_index " + fmt.Sprint(pt.Index) + " in a packet that is not a binlog-phase heartbeat"},
		{pt, 1, fmt.Sprintf("covered_index 1 is below binlog point %d", pt.Index)},
	} {
		data, err := exportfmt.Encode(&syncpb.PacketHeader{LogicPoolId: 1, CopysetId: 1, StartPoint: cur, NextPoint: b.next.Proto(), CoveredIndex: b.covered,
			ExportId: p.GetExportId()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.syncTool(0).SendData(ctx, &dspb.SendDataRequest{Tid: proto.Uint32(1), Pid: proto.Uint32(1), Token: p.Token,
			StartPoint: cur, NextPoint: b.next.Proto(), Count: proto.Uint64(0), Data: data})
		if err != nil || r.GetResponse().GetCode() != -1 || !r.GetDeleteTask() || !strings.Contains(r.GetResponse().GetMsg(), b.want) {
			t.Errorf("send data to %v covering %d: %v %v, want code -1, delete_task and %q", b.next, b.covered, r, err, b.want)
		}
	}
	// ... and change nothing: the sub-task is live under its token.
	if now := c.subTasks(t, 1); len(now) != 1 || now[0].GetProgress().GetToken() != p.GetToken() ||
		(now[0].GetStatus() != "INIT" && now[0].GetStatus() != "RUNNING") {
		t.Fatalf("after refused packets: %v", now)
	}

	if r, err := c.syncTool(2).DelelteSyncTask(ctx, &dspb.DeleteSyncTaskRequest{Db: proto.String("1"), Name: proto.String("backup")}); err != nil || r.GetCode() != 0 {
		t.Fatalf("delete (misspelled): %v %v", r, err)
	}
	for i := range 3 {
		if got := c.subTasks(t, i); len(got) != 0 {
			t.Fatalf("server %d still lists %v", i, got)
		}
	}
	if r, _ := c.syncTool(0).DeleteSyncTask(ctx, &dspb.DeleteSyncTaskRequest{Db: proto.String("1"), Name: proto.String("backup")}); r.GetCode() != -1 || !strings.Contains(r.GetMsg(), "no such task") {
		t.Fatalf("delete again: %v", r)
	}

	// Its collectors stopped: no server runs one (their last SendData
	// answered or cancelled: the caught-up export sent only empty
	// heartbeats, which write nothing), and a write after the delete,
	// applied on every replica, exports nothing, no collector having
	// started for it.
	c.waitCollectorsGone(t)
	exported := exportFiles(t, strings.TrimPrefix(dir, "file://"))
	c.Write(t, 1, 1, 0, bytes.Repeat([]byte{4}, 4096), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	c.waitApplied(t)
	for i := range c.Servers {
		if n := c.Servers[i].Syncs().Collecting(); n != 0 {
			t.Fatalf("server %d runs %d collectors after the delete", i, n)
		}
	}
	if now := exportFiles(t, strings.TrimPrefix(dir, "file://")); !maps.Equal(now, exported) {
		t.Fatalf("the export changed after the delete: %v, then %v", exported, now)
	}
}

// exportFiles lists the files under dir: name -> size and modification
// time.
func exportFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		out[p] = fmt.Sprint(info.Size(), " ", info.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// startContinuousTask starts a 3-server cluster and creates task "backup"
// of pool 1, kFullAndContinuous to a directory.
func startContinuousTask(t *testing.T) *testCluster {
	t.Helper()
	c := startTestCluster(t, 3)
	dir := "file://" + filepath.Join(t.TempDir(), "export")
	if r, err := c.syncTool(0).CreateSyncTask(context.Background(), createReq("1", "backup", dspb.SyncMode_kFullAndContinuous.Enum(), dir)); err != nil || r.GetCode() != 0 {
		t.Fatalf("create: %v %v", r, err)
	}
	return c
}

// covered returns the one sub-task server 0 lists, its covered index and
// covered time (readableInfo's coveredIndex and coveredTime, Unix ms).
func (c *testCluster) covered(t *testing.T) (*dspb.Task, uint64, int64) {
	t.Helper()
	st := c.taskStatus(t, 0)
	if len(st.GetTask()) != 1 || len(st.GetReadableInfo()) != 1 {
		t.Fatalf("task status lists %v, want one sub-task", st)
	}
	var index uint64
	var ms, last int64
	if _, err := fmt.Sscanf(st.GetReadableInfo()[0], "lastUpdateTime=%d;coveredIndex=%d;coveredTime=%d;", &last, &index, &ms); err != nil {
		t.Fatalf("readable info %q: %v", st.GetReadableInfo()[0], err)
	}
	return st.GetTask()[0], index, ms
}

// TestSyncStatusCovers: once a continuous export runs its binlog phase,
// its status says what it covers. After a write W is acknowledged, the
// covered index reaches W's index and the covered time passes the
// acknowledgement within a few send intervals (1 s here). Then, with no
// further write, the covered index reaches the commit index of a moment
// after, past the entries without a chunk op (the sync machine's own
// Advance and Touch entries) that the sub-task's point stays behind.
func TestSyncStatusCovers(t *testing.T) {
	c := startContinuousTask(t)
	c.waitPoint(t, "RUNNING", 0)
	interval := c.Cfgs[0].Sync.SendInterval
	n := c.Servers[c.Leader(t)].Copysets().Get(c.Group)
	c.Write(t, 1, 1, 0, servertest.Block(5), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	w, acked := n.AppliedIndex(), time.Now().UnixMilli() // the leader applied W before it acknowledged it
	testwait.Until(t, 5*interval, func() error {
		if _, index, ms := c.covered(t); index < w || ms <= acked {
			return fmt.Errorf("covered index %d at %d ms; want index %d at %d ms or later", index, ms, w, acked+1)
		}
		return nil
	})
	commit := n.CommitIndex()
	var task *dspb.Task
	testwait.Until(t, 5*interval, func() error {
		var index uint64
		if task, index, _ = c.covered(t); index < commit {
			return fmt.Errorf("covered index %d, want the commit index %d", index, commit)
		}
		return nil
	})
	if p := task.GetProgress().GetSyncPoint(); p.GetType() != dspb.SyncType_kBINLOG || p.GetOffset() > commit {
		t.Fatalf("the sub-task's point %v is past the commit index %d: no entry was left to cover without a packet", p, commit)
	}

	// The heartbeats that carry it are not packets: two more of them
	// (the covered index moves on with the entries they add) write
	// nothing and count no packet.
	l := c.Leader(t)
	packets := servertest.Scrape(t, c.Servers[l].Gatherer())["chunkraft_sync_packets_total"][""]
	_, from, _ := c.covered(t)
	beats := 0
	testwait.Until(t, 5*interval, func() error {
		if _, index, _ := c.covered(t); index > from {
			beats, from = beats+1, index
		}
		if beats < 2 {
			return fmt.Errorf("%d heartbeats moved the covered index, want 2", beats)
		}
		return nil
	})
	if now := servertest.Scrape(t, c.Servers[l].Gatherer())["chunkraft_sync_packets_total"][""]; now != packets {
		t.Fatalf("heartbeats counted as packets: chunkraft_sync_packets_total %v, then %v", packets, now)
	}
}

// TestSyncTakeover: when a copyset's leader stops, the new leader takes
// its sub-task over at once with a new token.
func TestSyncTakeover(t *testing.T) {
	c := startContinuousTask(t)
	old := c.Leader(t)
	before := c.subTasks(t, old)[0]
	c.Stop(old)
	other := (old + 1) % 3
	testwait.Until(t, 15*time.Second, func() error {
		now := c.Leader(t)
		tasks := c.subTasks(t, other)
		if len(tasks) != 1 || tasks[0].GetDataCollector() != c.Servers[now].Local().Addr() ||
			tasks[0].GetProgress().GetToken() == before.GetProgress().GetToken() {
			return fmt.Errorf("no takeover: before %v, now %v (leader %d)", before, tasks, now)
		}
		return nil
	})
}

// TestSyncAddSyncTask: upstream's DataCollector.AddSyncTask through its
// generated client: on the copyset's leader, the sub-task's own token
// again is refused ("why send a same task?"), a new token (in a request
// without chunkraft's task name and export id) replaces the entry
// everywhere, the export id kept, and the leader's collector goes on
// exporting under it,
// while the old token's packets are refused with delete_task. A follower
// and a request without tid and pid are refused with code -1.
func TestSyncAddSyncTask(t *testing.T) {
	c := startContinuousTask(t)
	ctx := context.Background()
	old := c.waitPoint(t, "RUNNING", 0).GetProgress()
	leader := c.Leader(t)
	collector := dspb.NewDataCollectorClient(c.Conns[leader])
	if r, err := collector.AddSyncTask(ctx, old); err != nil || r.GetCode() != -1 || !strings.Contains(r.GetMsg(), "why send a same task?") {
		t.Fatalf("add the same task: %v %v", r, err)
	}
	for _, bad := range []struct {
		conn int
		req  *dspb.AddSyncTaskRequest
		want string
	}{
		{(leader + 1) % 3, &dspb.AddSyncTaskRequest{Tid: old.Tid, Pid: old.Pid, Mode: old.Mode, SyncPoint: old.SyncPoint, Token: proto.String("follower-token"),
			TabletEndpoint: old.TabletEndpoint, DesEndpoint: old.DesEndpoint, Dest: old.Dest}, "copyset 1/1 is led by"},
		{leader, &dspb.AddSyncTaskRequest{Token: proto.String("no-ids")}, "tid and pid are required"},
	} {
		if r, err := dspb.NewDataCollectorClient(c.Conns[bad.conn]).AddSyncTask(ctx, bad.req); err != nil || r.GetCode() != -1 || !strings.Contains(r.GetMsg(), bad.want) {
			t.Errorf("add %v on server %d: %v %v, want code -1 with %q", bad.req, bad.conn, r, err, bad.want)
		}
	}
	if now := c.subTasks(t, 2)[0].GetProgress().GetToken(); now != old.GetToken() {
		t.Fatalf("refused AddSyncTasks changed the token to %q", now)
	}

	// As upstream's client sends it: no task name, no export id (the
	// pool's only task is meant, and keeps its export).
	req := proto.CloneOf(old)
	req.Token, req.TaskName, req.ExportId = proto.String("new-token"), nil, nil
	if r, err := collector.AddSyncTask(ctx, req); err != nil || r.GetCode() != 0 {
		t.Fatalf("add with a new token: %v %v", r, err)
	}
	for i := range 3 {
		if got := c.subTasks(t, i)[0].GetProgress(); got.GetToken() != "new-token" || got.GetExportId() != old.GetExportId() || got.GetTaskName() != "backup" {
			t.Fatalf("server %d lists %v", i, got)
		}
	}
	if r, err := c.syncTool(0).SendData(ctx, &dspb.SendDataRequest{Tid: old.Tid, Pid: old.Pid, Token: old.Token,
		StartPoint: old.SyncPoint, NextPoint: old.SyncPoint, Count: proto.Uint64(0)}); err != nil || r.GetResponse().GetCode() != -1 || !r.GetDeleteTask() {
		t.Fatalf("a packet under the replaced token: %v %v", r, err)
	}
	// A heartbeat as upstream's collector sends it (no task name, export
	// id or time) under the current token is taken.
	cur := c.subTasks(t, 0)[0].GetProgress()
	if r, err := c.syncTool(0).SendData(ctx, &dspb.SendDataRequest{Tid: cur.Tid, Pid: cur.Pid, Token: cur.Token,
		StartPoint: cur.SyncPoint, NextPoint: cur.SyncPoint, Count: proto.Uint64(0)}); err != nil || r.GetResponse().GetCode() != 0 {
		t.Fatalf("an upstream heartbeat: %v %v", r, err)
	}
	last := c.Servers[leader].Copysets().Get(c.Group).CommitIndex()
	c.Write(t, 1, 1, 0, bytes.Repeat([]byte{5}, 4096), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	task := c.waitPoint(t, "RUNNING", last+1)
	if task.GetProgress().GetToken() != "new-token" || task.GetDataCollector() != c.Servers[leader].Local().Addr() {
		t.Fatalf("the export went on as %v, want the leader's collector under the new token", task)
	}

	// TaskStatus with clear_all deletes every task everywhere.
	if r, err := c.syncTool(2).TaskStatus(ctx, &dspb.TaskStatusRequest{ClearAll: proto.Bool(true)}); err != nil ||
		r.GetResponse().GetCode() != 0 || !strings.Contains(r.GetResponse().GetMsg(), "1 sub-tasks removed") {
		t.Fatalf("clear all: %v %v", r, err)
	}
	for i := range 3 {
		if got := c.subTasks(t, i); len(got) != 0 {
			t.Fatalf("server %d lists %v after clear_all", i, got)
		}
	}
}

// TestSyncStaleReassigned: a RUNNING sub-task whose packets stop (its
// des_endpoint, set by an AddSyncTask, does not answer) for twice the
// check period is reassigned to the copyset's leader with a new token and
// the leader as des_endpoint, and the export goes on.
func TestSyncStaleReassigned(t *testing.T) {
	c := startTestCluster(t, 1, func(cfg *chunkserver.Config) { cfg.Sync.CheckPeriod = 300 * time.Millisecond })
	ctx := context.Background()
	dir := "file://" + filepath.Join(t.TempDir(), "export")
	if r, err := c.syncTool(0).CreateSyncTask(ctx, createReq("1", "backup", dspb.SyncMode_kFullAndContinuous.Enum(), dir)); err != nil || r.GetCode() != 0 {
		t.Fatalf("create: %v %v", r, err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := lis.Addr().String()
	lis.Close()
	req := proto.CloneOf(c.waitPoint(t, "RUNNING", 0).GetProgress())
	req.Token, req.DesEndpoint = proto.String("stuck-token"), proto.String(gone)
	if r, err := dspb.NewDataCollectorClient(c.Conns[0]).AddSyncTask(ctx, req); err != nil || r.GetCode() != 0 {
		t.Fatalf("add with a dead des_endpoint: %v %v", r, err)
	}
	if got := c.subTasks(t, 0)[0].GetProgress(); got.GetToken() != "stuck-token" || got.GetDesEndpoint() != gone {
		t.Fatalf("after AddSyncTask: %v", got)
	}
	last := c.Servers[0].Copysets().Get(c.Group).CommitIndex()
	c.Write(t, 1, 1, 0, bytes.Repeat([]byte{3}, 4096), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	task := c.waitPoint(t, "RUNNING", last+1)
	local := c.Servers[0].Local().Addr()
	if p := task.GetProgress(); p.GetToken() == "stuck-token" || p.GetToken() == "" || p.GetDesEndpoint() != local || task.GetDataCollector() != local {
		t.Fatalf("the stuck sub-task went on as %v, want a new token and %s as des_endpoint", task, local)
	}
}

// waitPoint waits until the sub-task of copyset 1/1 (listed by server 0)
// has status and a binlog point past index, and returns it.
func (c *testCluster) waitPoint(t *testing.T, status string, past uint64) *dspb.Task {
	t.Helper()
	var task *dspb.Task
	testwait.Until(t, 20*time.Second, func() error {
		tasks := c.subTasks(t, 0)
		if len(tasks) == 1 {
			p := tasks[0].GetProgress().GetSyncPoint()
			if tasks[0].GetStatus() == status && p.GetType() == dspb.SyncType_kBINLOG && p.GetOffset() > past {
				task = tasks[0]
				return nil
			}
		}
		return fmt.Errorf("sub-task not %s past index %d: %v", status, past, tasks)
	})
	return task
}

// TestSyncExportsToS3: a kFull task with an s3:// dest on the servers' S3
// endpoint (an in-process S3 server over real HTTP) writes its packets and
// manifest as objects and finishes; the packets form an unbroken chain.
func TestSyncExportsToS3(t *testing.T) {
	endpoint := fakes3.Start(t, nil)
	s3cfg := objstore.S3Config{Endpoint: endpoint, Bucket: "server-bucket", AccessKey: "a", SecretKey: "b",
		Region: "us-east-1", BucketLookup: "path", CreateBucket: true}
	for _, b := range []string{"server-bucket", "exports"} {
		mk := s3cfg
		mk.Bucket = b
		st, err := objstore.NewS3(t.Context(), mk)
		if err != nil {
			t.Fatal(err)
		}
		st.Close()
	}
	c := startTestCluster(t, 1, func(cfg *chunkserver.Config) { cfg.ObjectStore = objstore.Config{Kind: objstore.KindS3, S3: s3cfg} })
	c.Write(t, 1, 1, 0, bytes.Repeat([]byte{7}, 4096), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	ctx := context.Background()
	if r, err := c.syncTool(0).CreateSyncTask(ctx, createReq("1", "s3", dspb.SyncMode_kFull.Enum(), "s3://exports/cluster-a")); err != nil || r.GetCode() != 0 {
		t.Fatalf("create: %v %v", r, err)
	}
	if r, _ := c.syncTool(0).CreateSyncTask(ctx, createReq("1", "s3", dspb.SyncMode_kFull.Enum(), "s3://no-such-bucket/x")); r.GetCode() != -1 {
		t.Fatalf("a missing bucket: %v", r)
	}
	task := c.waitPoint(t, "SUCCESS", 0)
	// A finished sub-task takes no more packets: its collector is told to
	// drop it.
	p := task.GetProgress()
	if r, err := c.syncTool(0).SendData(ctx, &dspb.SendDataRequest{Tid: p.Tid, Pid: p.Pid, Token: p.Token, StartPoint: p.SyncPoint, NextPoint: p.SyncPoint, Count: proto.Uint64(0)}); err != nil ||
		r.GetResponse().GetCode() != -1 || !r.GetDeleteTask() || !strings.Contains(r.GetResponse().GetMsg(), "status SUCCESS takes no data") {
		t.Fatalf("send data to a finished sub-task: %v %v", r, err)
	}
	mk := s3cfg
	mk.Bucket, mk.Prefix = "exports", "cluster-a/"
	st, err := objstore.NewS3(ctx, mk)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	objs, err := st.List(ctx, exportfmt.CopysetPrefix(1, 1))
	if err != nil {
		t.Fatal(err)
	}
	chain := exportfmt.NewChain(1, 1)
	var manifest bool
	for _, o := range objs {
		if o.Name == exportfmt.ManifestName(1, 1) {
			manifest = true
			continue
		}
		b := make([]byte, o.Size)
		if _, err := st.ReadAt(ctx, o.Name, b, 0); err != nil {
			t.Fatal(err)
		}
		p, err := exportfmt.Decode(b)
		if err != nil {
			t.Fatalf("packet %s: %v", o.Name, err)
		}
		if err := chain.AddPacket(o.Name, p); err != nil {
			t.Fatal(err)
		}
	}
	next, _ := chain.Next()
	if !manifest || chain.Len() < 2 || next.Proto().GetOffset() != task.GetProgress().GetSyncPoint().GetOffset() {
		t.Fatalf("objects %v: manifest %v, %d packets to %v, the sub-task at %v", objs, manifest, chain.Len(), next, task.GetProgress().GetSyncPoint())
	}
}

// TestSyncIncremental: a kIncrementalByTimestamp task exports the log
// from the first entry appended at or after start_ts (its first packet
// leads from the start there, with no records), and a start older than
// the retained log is refused, naming the oldest time it can start from.
func TestSyncIncremental(t *testing.T) {
	c := startTestCluster(t, 1, func(cfg *chunkserver.Config) {
		cfg.Raft.SnapshotThreshold, cfg.Raft.TrailingLogs, cfg.Raft.SnapshotInterval = 16, 8, 200*time.Millisecond
	})
	ctx := context.Background()
	for i := range 40 {
		c.Write(t, 1, 1, uint32(i%16)*4096, bytes.Repeat([]byte{byte(i)}, 4096), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	}
	// The early log is truncated away by now (snapshots every 16 entries).
	testwait.Until(t, 10*time.Second, func() error {
		if first, _, err := c.Servers[0].Copysets().Get(c.Group).LogBounds(); err != nil || first <= 1 {
			return fmt.Errorf("the log was not truncated: it starts at %d (%v)", first, err)
		}
		return nil
	})
	dir := "file://" + filepath.Join(t.TempDir(), "export")
	old := createReq("1", "inc", dspb.SyncMode_kIncrementalByTimestamp.Enum(), dir)
	old.StartTs = proto.Uint64(1)
	if r, _ := c.syncTool(0).CreateSyncTask(ctx, old); r.GetCode() != -1 || !strings.Contains(r.GetMsg(), "oldest time it can start from") {
		t.Fatalf("a start older than the log: %v", r)
	}
	if got := c.subTasks(t, 0); len(got) != 0 {
		t.Fatalf("the refused create left %v", got)
	}
	req := createReq("1", "inc", dspb.SyncMode_kIncrementalByTimestamp.Enum(), dir)
	req.StartTs = proto.Uint64(uint64(time.Now().UnixMilli()))
	if r, err := c.syncTool(0).CreateSyncTask(ctx, req); err != nil || r.GetCode() != 0 {
		t.Fatalf("create: %v %v", r, err)
	}
	last := c.Servers[0].Copysets().Get(c.Group).CommitIndex()
	c.Write(t, 1, 1, 0, bytes.Repeat([]byte{99}, 4096), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	task := c.waitPoint(t, "RUNNING", last+1)
	if task.GetCount() != 1 {
		t.Fatalf("exported %d records, want the one write after start_ts: %v", task.GetCount(), task)
	}
}

// syncAnswer is the answer of a SyncTool call made in a goroutine.
type syncAnswer struct {
	resp *dspb.GeneralResponse
	err  error
}

// TestSyncCreateWaitsForALeader: a create while a copyset has no leader
// (here two of its three servers are down, so nobody can be elected) waits
// for one instead of failing: once it has found no leader and waits, the
// servers come back and the create succeeds, with the sub-task on the new
// leader. A delete likewise rides over an election.
func TestSyncCreateWaitsForALeader(t *testing.T) {
	c := startTestCluster(t, 3)
	c.Stop(1)
	c.Stop(2)
	dir := "file://" + filepath.Join(t.TempDir(), "export")
	waits := c.Servers[0].Syncs().LeaderWaits()
	created := make(chan syncAnswer, 1)
	go func() {
		r, err := c.syncTool(0).CreateSyncTask(context.Background(), createReq("1", "backup", dspb.SyncMode_kFullAndContinuous.Enum(), dir))
		created <- syncAnswer{r, err}
	}()
	testwait.Until(t, 10*time.Second, func() error {
		select {
		case a := <-created:
			t.Fatalf("the create returned before the servers came back: %v %v", a.resp, a.err)
		default:
		}
		if c.Servers[0].Syncs().LeaderWaits() == waits {
			return errors.New("the create has not found the copyset without a leader")
		}
		return nil
	})
	c.Start(1, nil)
	c.Start(2, nil)
	if a := <-created; a.err != nil || a.resp.GetCode() != 0 {
		t.Fatalf("create while the copyset has no leader: %v %v", a.resp, a.err)
	}
	if tasks := c.subTasks(t, 0); len(tasks) != 1 || tasks[0].GetProgress().GetToken() == "" {
		t.Fatalf("sub-tasks after the create: %v", tasks)
	}
	old := c.Leader(t)
	c.Stop(old)
	other := (old + 1) % 3
	waits = c.Servers[other].Syncs().LeaderWaits()
	deleted := make(chan syncAnswer, 1)
	go func() {
		r, err := c.syncTool(other).DeleteSyncTask(context.Background(), &dspb.DeleteSyncTaskRequest{Db: proto.String("1"), Name: proto.String("backup")})
		deleted <- syncAnswer{r, err}
	}()
	// The stopped leader comes back while the delete waits for the
	// election (or once it is done, if the election was quicker).
	var a *syncAnswer
	testwait.Until(t, 10*time.Second, func() error {
		select {
		case got := <-deleted:
			a = &got
			return nil
		default:
		}
		if c.Servers[other].Syncs().LeaderWaits() == waits {
			return errors.New("the delete neither returned nor waits for a leader")
		}
		return nil
	})
	c.Start(old, nil)
	if a == nil {
		got := <-deleted
		a = &got
	}
	if a.err != nil || a.resp.GetCode() != 0 {
		t.Fatalf("delete across the leader's loss: %v %v", a.resp, a.err)
	}
	if tasks := c.subTasks(t, other); len(tasks) != 0 {
		t.Fatalf("sub-tasks after the delete: %v", tasks)
	}
}

// TestSyncSendDataInProcess: a collector whose SyncTool is its own server
// (the des_endpoint a leader gives itself) calls it in process, making no
// gRPC SendData call; one whose SyncTool is another server reaches it over
// gRPC, and the export goes on there.
func TestSyncSendDataInProcess(t *testing.T) {
	c := startContinuousTask(t)
	ctx := context.Background()
	old := c.waitPoint(t, "RUNNING", 0).GetProgress()
	leader := c.Leader(t)
	sends := func(via string) float64 {
		return servertest.Scrape(t, c.Servers[leader].Gatherer())["chunkraft_sync_senddata_calls_total"]["via="+via]
	}
	if local, remote := sends("in_process"), sends("grpc"); local == 0 || remote != 0 {
		t.Fatalf("SendData calls in process %v, over gRPC %v: want only in-process calls to the leader's own SyncTool", local, remote)
	}

	other := (leader + 1) % 3
	req := proto.CloneOf(old)
	req.Token = proto.String("remote-token")
	req.DesEndpoint = proto.String(c.Servers[other].Local().Addr())
	if r, err := dspb.NewDataCollectorClient(c.Conns[leader]).AddSyncTask(ctx, req); err != nil || r.GetCode() != 0 {
		t.Fatalf("add with another server's SyncTool: %v %v", r, err)
	}
	last := c.Servers[leader].Copysets().Get(c.Group).CommitIndex()
	c.Write(t, 1, 1, 0, bytes.Repeat([]byte{6}, 4096), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	task := c.waitPoint(t, "RUNNING", last+1)
	if task.GetProgress().GetToken() != "remote-token" {
		t.Fatalf("the export went on as %v, want the new token", task)
	}
	if remote := sends("grpc"); remote == 0 {
		t.Fatal("no SendData call reached the other server's SyncTool over gRPC")
	}
}
