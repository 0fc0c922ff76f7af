package datasync_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/chunkserver/servertest"
	"github.com/chunkraft/chunkraft/cli"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/datasync"
	"github.com/chunkraft/chunkraft/internal/chunkread"
	"github.com/chunkraft/chunkraft/internal/testwait"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
)

// Several named tasks on one pool, each with its own dest and export id.

// taskState is a sub-task as TaskStatus lists it, with its readable
// info's values.
type taskState struct {
	task          *dspb.Task
	info          string
	coveredIndex  uint64
	lastPacketMs  int64
	exportID, msg string
}

// tasksOf returns the sub-tasks of task name that server 0 lists.
func (c *testCluster) tasksOf(t *testing.T, name string) []taskState {
	t.Helper()
	st := c.taskStatus(t, 0)
	var out []taskState
	for i, task := range st.GetTask() {
		if task.GetProgress().GetTaskName() != name {
			continue
		}
		s := taskState{task: task, info: st.GetReadableInfo()[i]}
		for kv := range strings.SplitSeq(s.info, ";") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "coveredIndex":
				fmt.Sscan(v, &s.coveredIndex)
			case "lastPacketTime":
				fmt.Sscan(v, &s.lastPacketMs)
			case "exportId":
				s.exportID = v
			}
		}
		_, s.msg, _ = strings.Cut(s.info, ";message=")
		out = append(out, s)
	}
	return out
}

// waitTaskOf waits up to 30 s until task name has one sub-task and it
// satisfies ok, and returns it.
func (c *testCluster) waitTaskOf(t *testing.T, name, what string, ok func(taskState) bool) taskState {
	t.Helper()
	var got taskState
	testwait.Until(t, 120*time.Second, func() error {
		sts := c.tasksOf(t, name)
		if len(sts) != 1 || !ok(sts[0]) {
			return fmt.Errorf("task %q: sub-task not %s: %v", name, what, sts)
		}
		got = sts[0]
		return nil
	})
	return got
}

// inBinlog reports whether s is RUNNING at a binlog point.
func inBinlog(s taskState) bool {
	return s.task.GetStatus() == "RUNNING" && s.task.GetProgress().GetSyncPoint().GetType() == dspb.SyncType_kBINLOG
}

// writer writes blocks to chunks 1-4 of copyset 1/1 until stopped, chunk
// 4 at sn 2 from its 20th write on (a COW snapshot of its sn 1 data, taken
// while the exports run). A write another server must take (a leader
// change) is sent there.
type writer struct {
	stop   atomic.Bool
	writes atomic.Int64
	failed atomic.Pointer[error] // why it stopped on its own
	done   sync.WaitGroup
}

func startWriter(c *testCluster, leader int) *writer {
	w := &writer{}
	w.done.Go(func() {
		for i := 0; !w.stop.Load(); i++ {
			chunk := uint64(1 + i%4)
			req := servertest.WriteReq(chunk, uint32(i*7%64)*4096, servertest.Block(byte(i)))
			if chunk == 4 && i >= 80 {
				req.Sn = proto.Uint64(2)
			}
			var err error
			if leader, err = c.write(leader, req); err != nil {
				w.failed.Store(&err)
				return
			}
			w.writes.Add(1)
		}
	})
	return w
}

// write sends req to server at, and on to the others while the answer is
// that another server leads (for up to 10 s), and returns the server that
// took it.
func (c *testCluster) write(at int, req *pb.ChunkRequest) (int, error) {
	var status pb.CHUNK_OP_STATUS
	err := testwait.For(10*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := c.Chunk(at).WriteChunk(ctx, req)
		cancel()
		status = resp.GetStatus()
		if err == nil && status == pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_REDIRECTED {
			at = (at + 1) % len(c.Servers)
			return fmt.Errorf("server %d does not lead", at)
		}
		return err
	})
	if err == nil && status != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
		err = fmt.Errorf("write chunk %d: %v", req.GetChunkId(), status)
	}
	return at, err
}

// collecting is how many collectors the running servers run.
func (c *testCluster) collecting() int {
	n := 0
	for _, i := range c.Up() {
		n += c.Servers[i].Syncs().Collecting()
	}
	return n
}

// wrote waits until the writer has made n writes since it had made from,
// and fails t if it stops before.
func (w *writer) wrote(t *testing.T, from, n int64) {
	t.Helper()
	testwait.Until(t, 60*time.Second, func() error {
		if err := w.failed.Load(); err != nil {
			t.Fatalf("the writer stopped: %v", *err)
		}
		if got := w.writes.Load() - from; got < n {
			return fmt.Errorf("%d writes of %d", got, n)
		}
		return nil
	})
}

// halt stops the writer and fails t if a write failed.
func (w *writer) halt(t *testing.T) {
	t.Helper()
	w.stop.Store(true)
	w.done.Wait()
	if err := w.failed.Load(); err != nil {
		t.Fatal(*err)
	}
}

// restoreExport restores the export of pool 1 at dir into pool to, its
// copyset 1 created on every server, with chunkctl sync restore, and
// returns its leader's replica.
func (c *testCluster) restoreExport(t *testing.T, dir string, to uint32) *copyset.Node {
	t.Helper()
	g := copyset.NewGroupID(to, 1)
	var peers []copyset.PeerID
	var addrs []string
	for _, s := range c.Servers {
		peers, addrs = append(peers, s.Local()), append(addrs, s.Local().Addr())
	}
	for _, s := range c.Servers {
		if _, err := s.Copysets().Create(context.Background(), g, peers); err != nil {
			t.Fatal(err)
		}
	}
	root := cli.NewRootCommand()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"--servers", strings.Join(addrs, ","), "sync", "restore", "--from", "file://" + dir, "--pool", "1",
		"--to-pool", fmt.Sprint(to), "--progress", "never"})
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("restore %s into pool %d: %v\n%s%s", dir, to, err, out.String(), errOut.String())
	}
	var leader *copyset.Node
	testwait.Until(t, 10*time.Second, func() error {
		for _, s := range c.Servers {
			if n := s.Copysets().Get(g); n != nil && n.IsLeader() {
				leader = n
				return nil
			}
		}
		return fmt.Errorf("copyset %v has no leader", g)
	})
	return leader
}

// sameChunks fails t unless the chunk stores of want and got hold the
// same chunks, each with the same sn, corrected sn, snapshot sn, data and
// snapshot view (what ReadChunkSnapshot reads).
func sameChunks(t *testing.T, what string, want, got *copyset.Node) {
	t.Helper()
	ws, err := chunkread.Of(want)
	if err != nil {
		t.Fatal(err)
	}
	gs, err := chunkread.Of(got)
	if err != nil {
		t.Fatal(err)
	}
	ids := ws.ListChunks()
	if g := gs.ListChunks(); fmt.Sprint(g) != fmt.Sprint(ids) {
		t.Fatalf("%s: chunks %v, want %v", what, g, ids)
	}
	snapView := func(img chunkread.Image) []byte {
		if img.SnapSn == 0 {
			return nil
		}
		out := bytes.Clone(img.Data)
		bs := int(img.BlockSize)
		for b, copied := range img.SnapCopied {
			if copied {
				copy(out[b*bs:(b+1)*bs], img.SnapData[b*bs:(b+1)*bs])
			}
		}
		return out
	}
	for _, id := range ids {
		wi, err := ws.ChunkImage(id, &chunkread.ImageBuffers{})
		if err != nil {
			t.Fatal(err)
		}
		gi, err := gs.ChunkImage(id, &chunkread.ImageBuffers{})
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case wi.Sn != gi.Sn || wi.CorrectedSn != gi.CorrectedSn || wi.SnapSn != gi.SnapSn:
			t.Errorf("%s: chunk %d: sn/corrected sn/snapshot sn %d/%d/%d, want %d/%d/%d", what, id, gi.Sn, gi.CorrectedSn, gi.SnapSn, wi.Sn, wi.CorrectedSn, wi.SnapSn)
		case !bytes.Equal(wi.Data, gi.Data):
			t.Errorf("%s: chunk %d: data differs", what, id)
		case !bytes.Equal(snapView(wi), snapView(gi)):
			t.Errorf("%s: chunk %d: snapshot sn %d differs", what, id, wi.SnapSn)
		}
	}
}

// TestSyncTwoTasks: two tasks of one pool (different names and dests),
// created while writes run, export at once, each under its own token and
// export id; both exports restore exactly what the pool holds. Requests
// without a task name (upstream's clients) are refused, naming the tasks,
// while there are two. Deleting one task leaves the other exporting, and
// the deleted one's dest is written no more. Creating a task of a name in
// use is refused with upstream's words and changes nothing (not even its
// dest's directory is made).
func TestSyncTwoTasks(t *testing.T) {
	c := startTestCluster(t, 3)
	ctx := context.Background()
	for chunk := uint64(1); chunk <= 3; chunk++ {
		c.Write(t, chunk, 1, 0, servertest.Block(byte(chunk)), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	}
	leader := c.Leader(t)
	w := startWriter(c, leader)
	root := t.TempDir()
	dirs := map[string]string{"backup": filepath.Join(root, "backup"), "migrate": filepath.Join(root, "migrate")}
	mode := dspb.SyncMode_kFullAndContinuous.Enum()
	tooOften := createReq("1", "migrate", mode, "file://"+dirs["migrate"])
	tooOften.SendIntervalMs = proto.Uint32(datasync.MinSendIntervalMs - 1)
	if r, err := c.syncTool(leader).CreateSyncTask(ctx, tooOften); err != nil || r.GetCode() != -1 || !strings.Contains(r.GetMsg(), "send_interval_ms 99") {
		t.Fatalf("create with a send interval of 99 ms: %v %v", r, err)
	}
	for _, name := range []string{"backup", "migrate"} {
		req := createReq("1", name, mode, "file://"+dirs[name])
		if name == "migrate" {
			req.SendIntervalMs = proto.Uint32(200) // its own, sooner than the server's
		}
		if r, err := c.syncTool(leader).CreateSyncTask(ctx, req); err != nil || r.GetCode() != 0 {
			t.Fatalf("create %s: %v %v", name, r, err)
		}
	}
	// Both export the log, each under its own token and export id, while
	// the writes go on.
	backup := c.waitTaskOf(t, "backup", "exporting the log", inBinlog)
	migrate := c.waitTaskOf(t, "migrate", "exporting the log", inBinlog)
	bp, mp := backup.task.GetProgress(), migrate.task.GetProgress()
	if bp.GetToken() == mp.GetToken() || bp.GetExportId() == mp.GetExportId() || len(bp.GetExportId()) != datasync.ExportIDLen ||
		backup.exportID != bp.GetExportId() || migrate.exportID != mp.GetExportId() || bp.GetDest() == mp.GetDest() ||
		bp.GetSendIntervalMs() != 0 || mp.GetSendIntervalMs() != 200 {
		t.Fatalf("two tasks: %v, %v", backup, migrate)
	}

	// Upstream's requests name no task: with two on the copyset, which one
	// is meant is not known.
	noName := proto.CloneOf(bp)
	noName.TaskName, noName.ExportId, noName.Token = nil, nil, proto.String("upstream-token")
	if r, err := dspb.NewDataCollectorClient(c.Conns[leader]).AddSyncTask(ctx, noName); err != nil || r.GetCode() != -1 ||
		!strings.Contains(r.GetMsg(), `1/1 has sub-tasks of tasks "backup", "migrate"`) {
		t.Fatalf("AddSyncTask without a task name: %v %v", r, err)
	}
	if r, err := c.syncTool(0).SendData(ctx, &dspb.SendDataRequest{Tid: bp.Tid, Pid: bp.Pid, Token: bp.Token,
		StartPoint: bp.SyncPoint, NextPoint: bp.SyncPoint, Count: proto.Uint64(0)}); err != nil || r.GetResponse().GetCode() != -1 || !r.GetDeleteTask() ||
		!strings.Contains(r.GetResponse().GetMsg(), `has sub-tasks of tasks "backup", "migrate"`) {
		t.Fatalf("SendData without a task name: %v %v", r, err)
	}
	for _, name := range []string{"backup", "migrate"} {
		if now := c.tasksOf(t, name)[0].task.GetProgress(); now.GetToken() == "upstream-token" {
			t.Fatalf("the refused AddSyncTask gave %s its token", name)
		}
	}

	// More writes while both export, then none: both exports reach the
	// last one, and each restores exactly what the pool holds.
	w.wrote(t, w.writes.Load(), 150)
	w.halt(t)
	if sns := c.Info(t, 4); len(sns) != 2 {
		t.Fatalf("chunk 4 has sns %v, want a COW snapshot taken while the exports ran", sns)
	}
	leader = c.Leader(t)
	last := c.Node(leader).AppliedIndex() // the leader applied every acknowledged write
	for _, name := range []string{"backup", "migrate"} {
		s := c.waitTaskOf(t, name, fmt.Sprintf("covering index %d", last), func(s taskState) bool { return s.coveredIndex >= last })
		if s.lastPacketMs <= 0 || time.Since(time.UnixMilli(s.lastPacketMs)).Abs() > time.Minute {
			t.Fatalf("task %s: last packet time %d", name, s.lastPacketMs)
		}
	}
	testwait.Until(t, 10*time.Second, func() error {
		if n := c.collecting(); n != 2 {
			return fmt.Errorf("the servers run %d collectors, want one per task", n)
		}
		return nil
	})
	sameChunks(t, "backup's export", c.Node(leader), c.restoreExport(t, dirs["backup"], 2))
	sameChunks(t, "migrate's export", c.Node(leader), c.restoreExport(t, dirs["migrate"], 3))

	// Deleting migrate leaves backup exporting, of its export (under its
	// token, unless a leader change moved it, with a new one).
	if r, err := c.syncTool(1).DeleteSyncTask(ctx, &dspb.DeleteSyncTaskRequest{Db: proto.String("1"), Name: proto.String("migrate")}); err != nil ||
		r.GetCode() != 0 || r.GetMsg() != "ok: 1 sub-tasks removed" {
		t.Fatalf("delete migrate: %v %v", r, err)
	}
	if st := c.tasksOf(t, "migrate"); len(st) != 0 {
		t.Fatalf("migrate after its delete: %v", st)
	}
	testwait.Until(t, 10*time.Second, func() error {
		if n := c.collecting(); n != 1 {
			return fmt.Errorf("the servers run %d collectors, want backup's", n)
		}
		return nil
	})
	migrated := exportFiles(t, dirs["migrate"])
	c.Write(t, 2, 1, 0, servertest.Block(0xee), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	last = c.Node(c.Leader(t)).AppliedIndex()
	after := c.waitTaskOf(t, "backup", fmt.Sprintf("covering index %d", last), func(s taskState) bool { return s.coveredIndex >= last })
	if p := after.task.GetProgress(); p.GetExportId() != bp.GetExportId() || !inBinlog(after) {
		t.Fatalf("backup after migrate's delete: %v", after)
	}
	if now := exportFiles(t, dirs["migrate"]); !maps.Equal(now, migrated) {
		t.Fatalf("the deleted task's dest changed: %v, then %v", migrated, now)
	}

	// A task of a name in use is refused and changes nothing.
	before := c.subTasks(t, 0)[0].GetProgress()
	third := filepath.Join(root, "third")
	if r, err := c.syncTool(2).CreateSyncTask(ctx, createReq("1", "backup", mode, "file://"+third)); err != nil || r.GetCode() != -1 ||
		r.GetMsg() != "create sync task 1/backup: sync task already exists(creating or created)" {
		t.Fatalf("a third task named backup: %v %v", r, err)
	}
	st := c.subTasks(t, 0)
	if len(st) != 1 || st[0].GetProgress().GetToken() != before.GetToken() || st[0].GetProgress().GetExportId() != bp.GetExportId() {
		t.Fatalf("after the refused create: %v", st)
	}
	if _, err := os.Stat(third); !os.IsNotExist(err) {
		t.Fatalf("the refused create made its dest's directory: %v", err)
	}
}

// TestSyncDestHoldsAnotherExport: a second task whose dest is where the
// first task's export is (its copyset directory holds that export's
// packets and manifest) is created, but its SendData is refused (the
// collector told to drop it) and its sub-task turns FAILED with a message
// naming both export ids; nothing is written to that directory, and the
// first export is as it was.
func TestSyncDestHoldsAnotherExport(t *testing.T) {
	c := startTestCluster(t, 1)
	ctx := context.Background()
	c.Write(t, 1, 1, 0, servertest.Block(7), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	dir := filepath.Join(t.TempDir(), "export")
	full := dspb.SyncMode_kFull.Enum()
	if r, err := c.syncTool(0).CreateSyncTask(ctx, createReq("1", "first", full, "file://"+dir)); err != nil || r.GetCode() != 0 {
		t.Fatalf("create first: %v %v", r, err)
	}
	first := c.waitTaskOf(t, "first", "SUCCESS", func(s taskState) bool { return s.task.GetStatus() == "SUCCESS" })
	files := exportFiles(t, dir)
	metrics := func() map[string]map[string]float64 { return servertest.Scrape(t, c.Servers[0].Gatherer()) }
	refused := metrics()["chunkraft_sync_senddata_refused_total"][""]

	r, err := c.syncTool(0).CreateSyncTask(ctx, createReq("1", "second", full, "file://"+dir))
	if err != nil || r.GetCode() != 0 {
		t.Fatalf("create second: %v %v", r, err)
	}
	second := c.waitTaskOf(t, "second", "FAILED", func(s taskState) bool { return s.task.GetStatus() == "FAILED" })
	ids := []string{first.exportID, second.task.GetProgress().GetExportId()}
	want := fmt.Sprintf("export %s refused: file://%s holds ", ids[1], dir)
	if ids[0] == "" || ids[1] == "" || ids[0] == ids[1] || !strings.HasPrefix(second.msg, want) || !strings.Contains(second.msg, "of export "+ids[0]) {
		t.Fatalf("second's message %q, want one naming its export %s and the dest's %s", second.msg, ids[1], ids[0])
	}
	if now := exportFiles(t, dir); !maps.Equal(now, files) {
		t.Fatalf("the refused export changed the first one's files: %v, then %v", files, now)
	}
	m := metrics()
	if m["chunkraft_sync_senddata_refused_total"][""] <= refused || m["chunkraft_sync_failed_total"][""] < 1 {
		t.Fatalf("refused SendData %v (was %v), failed sub-tasks %v", m["chunkraft_sync_senddata_refused_total"][""], refused, m["chunkraft_sync_failed_total"][""])
	}
	c.waitCollectorsGone(t) // FAILED: no collector is started for it again
	if st := c.tasksOf(t, "first"); len(st) != 1 || st[0].task.GetStatus() != "SUCCESS" {
		t.Fatalf("first after second failed: %v", st)
	}
}

// TestSyncTasksPerPoolBound: a pool takes datasync.MaxTasksPerPool tasks;
// one more is refused, naming the limit and the pool's tasks, and creates
// nothing; once one is deleted there is room again.
func TestSyncTasksPerPoolBound(t *testing.T) {
	c := startTestCluster(t, 1)
	ctx := context.Background()
	root := t.TempDir()
	create := func(name string) *dspb.GeneralResponse {
		t.Helper()
		r, err := c.syncTool(0).CreateSyncTask(ctx, createReq("1", name, dspb.SyncMode_kFull.Enum(), "file://"+filepath.Join(root, name)))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	var names []string
	for i := range datasync.MaxTasksPerPool {
		names = append(names, fmt.Sprint("t", i))
		if r := create(names[i]); r.GetCode() != 0 {
			t.Fatalf("create task %d: %v", i, r)
		}
	}
	want := fmt.Sprintf("create sync task 1/one-more: pool 1 has %d sync tasks (%s), the most a pool may have (MaxTasksPerPool %d): delete one first",
		datasync.MaxTasksPerPool, strings.Join(names, ", "), datasync.MaxTasksPerPool)
	if r := create("one-more"); r.GetCode() != -1 || r.GetMsg() != want {
		t.Fatalf("one task more: %v, want %q", r, want)
	}
	if st := c.subTasks(t, 0); len(st) != datasync.MaxTasksPerPool {
		t.Fatalf("%d sub-tasks after the refused create", len(st))
	}
	if r, err := c.syncTool(0).DeleteSyncTask(ctx, &dspb.DeleteSyncTaskRequest{Db: proto.String("1"), Name: proto.String("t0")}); err != nil || r.GetCode() != 0 {
		t.Fatalf("delete t0: %v %v", r, err)
	}
	if r := create("one-more"); r.GetCode() != 0 {
		t.Fatalf("a task after one was deleted: %v", r)
	}
}
