package dm_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/chunkserver/chunkservertest"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/internal/testwait"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	cspb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	dmpb "github.com/chunkraft/chunkraft/proto/dm/pb"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
)

func taskYAML(name, export string, targetPool uint32, extra string) string {
	return fmt.Sprintf("name: %s\ntask-mode: all\nsource:\n  pool: 1\n  export: %s\ntarget-pool: %d\n%s", name, export, targetPool, extra)
}

// The control path, as chunkctl dm drives it: start-task refuses what is
// wrong and starts nothing; check-task says what start-task would do;
// start-task, query-status, pause-task, resume-task and stop-task on a
// task migrating an export of pool 1 into pool 2.
func TestControlPath(t *testing.T) {
	c := chunkservertest.Start(t, 3)
	ctx := context.Background()
	src, dst := c.Group, copyset.NewGroupID(2, 1)
	createCopyset(t, c, dst)
	busy := copyset.NewGroupID(3, 1)
	createCopyset(t, c, busy)
	write(t, c, busy, 1, 1, 0, 1) // a target that holds a chunk
	write(t, c, src, 1, 1, 0, 7)
	exportDir := filepath.Join(t.TempDir(), "export")
	cr, err := dspb.NewSyncToolClient(c.Conns[0]).CreateSyncTask(ctx, &dspb.CreateSyncTaskRequest{Db: proto.String("1"), Name: proto.String("relay"),
		Mode: dspb.SyncMode_kFullAndContinuous.Enum(), Dest: proto.String("file://" + exportDir)})
	if err != nil || cr.GetCode() != 0 {
		t.Fatalf("create the export: %v %v", cr, err)
	}
	testwait.Until(t, 30*time.Second, func() error {
		if len(packetFiles(t, exportDir)) == 0 {
			return fmt.Errorf("no packet in %s yet", exportDir)
		}
		return nil
	})
	export := "file://" + exportDir
	ctl := pb.NewDMControlClient(c.Conns[1])
	w := dmpb.NewWorkerClient(c.Conns[2])
	noTask := func() {
		t.Helper()
		qs, err := w.QueryStatus(ctx, &dmpb.QueryStatusRequest{})
		if err != nil || qs.GetResult() || !strings.Contains(qs.GetMsg(), "code=40070") {
			t.Fatalf("a task was started: %v %v", qs, err)
		}
	}
	for _, tc := range []struct{ name, task, want string }{
		{"bad yaml", taskYAML("t", export, 2, "meta-schema: x\n"), "line 7: unknown key meta-schema"},
		{"no target pool", taskYAML("t", export, 4, ""), "target pool 4 has no copysets"},
		{"no such copyset", taskYAML("t", export, 2, "copysets: [5]\n"), "copyset 2/5 does not exist"},
		{"no such source pool", strings.Replace(taskYAML("t", export, 2, ""), "pool: 1", "pool: 7", 1), "has no packets of pool 7"},
		{"target not empty", taskYAML("t", export, 3, ""), "copyset 3/1: holds 1 chunks"},
		{"unreachable source cluster", "name: t\ntask-mode: all\nsource: {pool: 1, cluster: ['127.0.0.1:1'], relay: file:///r}\ntarget-pool: 2\n", "source cluster: no seed answered"},
	} {
		r, err := ctl.StartTask(ctx, &pb.StartTaskRequest{Task: tc.task})
		if err != nil || r.GetResult() || !strings.Contains(r.GetMsg(), tc.want) {
			t.Fatalf("%s: %v %v, want a refusal saying %q", tc.name, r, err, tc.want)
		}
		noTask()
	}

	task := taskYAML("mig", export, 2, "")
	r, err := ctl.StartTask(ctx, &pb.StartTaskRequest{Task: task, CheckOnly: true})
	if err != nil || !r.GetResult() || len(r.GetCopysets()) != 1 || !strings.Contains(r.GetCopysets()[0].GetMsg(), "would apply copyset 1/1") {
		t.Fatalf("check-task: %v %v", r, err)
	}
	noTask()
	if r, err = ctl.StartTask(ctx, &pb.StartTaskRequest{Task: task}); err != nil || !r.GetResult() {
		t.Fatalf("start-task: %v %v", r, err)
	}
	if r, err = ctl.StartTask(ctx, &pb.StartTaskRequest{Task: task}); err != nil || !r.GetResult() || !strings.Contains(r.GetCopysets()[0].GetMsg(), "already started") {
		t.Fatalf("start-task again: %v %v", r, err)
	}
	waitSame(t, c, src, dst)
	if r, err := ctl.Cutover(ctx, &pb.CutoverRequest{Name: "mig"}); err != nil || r.GetResult() || !strings.Contains(r.GetMsg(), "its source is an export") {
		t.Fatalf("cutover of a task reading an export: %v %v", r, err)
	}
	// The target is the task's: client writes there are refused.
	if st := clientWrite(t, c, dst, 5); st != cspb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_EPOCH_TOO_OLD {
		t.Fatalf("a client write into the migrating pool answered %v, want EPOCH_TOO_OLD", st)
	}
	qs, err := w.QueryStatus(ctx, &dmpb.QueryStatusRequest{Name: "mig"})
	if err != nil || !qs.GetResult() || qs.GetSubTaskStatus()[0].GetStage() != dmpb.Stage_Running {
		t.Fatalf("query-status: %v %v", qs, err)
	}
	// Caught up: synced, not behind, the relay read to its end.
	testwait.Until(t, 30*time.Second, func() error {
		qs, err := w.QueryStatus(ctx, &dmpb.QueryStatusRequest{Name: "mig"})
		if err != nil {
			return err
		}
		sy, rs := qs.GetSubTaskStatus()[0].GetSync(), qs.GetSourceStatus().GetRelayStatus()
		if !sy.GetSynced() || sy.GetSecondsBehindMaster() != 0 || !rs.GetRelayCatchUpMaster() ||
			!strings.HasPrefix(rs.GetMasterBinlog(), "1/1:binlog index ") || !strings.HasPrefix(rs.GetRelayBinlog(), "1/1:binlog index ") ||
			rs.GetRelaySubDir() != export || qs.GetSourceStatus().GetSource() != "mig" {
			return fmt.Errorf("sync %v, relay %v", sy, rs)
		}
		return nil
	})

	if r, err = ctl.OperateTask(ctx, &pb.OperateTaskRequest{Name: "mig", Op: dmpb.TaskOp_Pause}); err != nil || !r.GetResult() {
		t.Fatalf("pause-task: %v %v", r, err)
	}
	qs, _ = w.QueryStatus(ctx, &dmpb.QueryStatusRequest{Name: "mig"})
	if st := qs.GetSubTaskStatus()[0]; st.GetStage() != dmpb.Stage_Paused || !st.GetResult().GetIsCanceled() {
		t.Fatalf("after pause-task: %v", st)
	}
	// update-task: only a paused task, only the sync settings.
	throttled := taskYAML("mig", export, 2, "sync:\n  throttle-bytes-per-sec: 1048576\n")
	if r, err = ctl.UpdateTask(ctx, &pb.StartTaskRequest{Task: taskYAML("mig", export, 3, "")}); err != nil || r.GetResult() || !strings.Contains(r.GetMsg(), "target-pool may not change") {
		t.Fatalf("update-task of the target pool: %v %v", r, err)
	}
	if r, err = ctl.UpdateTask(ctx, &pb.StartTaskRequest{Task: throttled}); err != nil || !r.GetResult() {
		t.Fatalf("update-task of the throttle: %v %v", r, err)
	}
	if sh := share(t, c, dst, "mig"); sh.GetConfig().GetSync().GetThrottleBytesPerSec() != 1<<20 || sh.GetStage() != dmpb.Stage_Paused {
		t.Fatalf("after update-task: %v", sh)
	}
	write(t, c, src, 2, 1, 3, 8)
	if r, err = ctl.OperateTask(ctx, &pb.OperateTaskRequest{Name: "mig", Op: dmpb.TaskOp_Resume}); err != nil || !r.GetResult() {
		t.Fatalf("resume-task: %v %v", r, err)
	}
	waitSame(t, c, src, dst)
	if r, err = ctl.UpdateTask(ctx, &pb.StartTaskRequest{Task: throttled}); err != nil || r.GetResult() || !strings.Contains(r.GetMsg(), "pause-task first") {
		t.Fatalf("update-task of a running task: %v %v", r, err)
	}
	if r, err = ctl.OperateTask(ctx, &pb.OperateTaskRequest{Name: "nope", Op: dmpb.TaskOp_Pause}); err != nil || r.GetResult() || !strings.Contains(r.GetMsg(), "no sub task with name nope has started") {
		t.Fatalf("pause-task of an unknown task: %v %v", r, err)
	}
	if r, err = ctl.OperateTask(ctx, &pb.OperateTaskRequest{Name: "mig", Op: dmpb.TaskOp_Stop}); err != nil || !r.GetResult() {
		t.Fatalf("stop-task: %v %v", r, err)
	}
	noTask()
	// Stopped, the task lets go of the target.
	if st := clientWrite(t, c, dst, 5); st != cspb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
		t.Fatalf("a client write after stop-task answered %v", st)
	}
}

// clientWrite writes a block of chunk through copyset g's leader and
// returns the status.
func clientWrite(t *testing.T, c *chunkservertest.Cluster, g copyset.GroupID, chunk uint64) cspb.CHUNK_OP_STATUS {
	t.Helper()
	req := &cspb.ChunkRequest{OpType: cspb.CHUNK_OP_TYPE_CHUNK_OP_WRITE.Enum(), LogicPoolId: proto.Uint32(g.Pool()),
		CopysetId: proto.Uint32(g.Copyset()), ChunkId: proto.Uint64(chunk), Offset: proto.Uint32(0),
		Size: proto.Uint32(4096), Sn: proto.Uint64(1), Data: make([]byte, 4096)}
	resp, err := cspb.NewChunkServiceClient(c.Conns[leaderOf(t, c, g)]).WriteChunk(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetStatus()
}

// A task whose source is a pool of another cluster: start-task makes the
// source export it to the relay (sync task dm-<task>, beside the source
// pool's own backup task), the target follows the relay until it equals
// the source; PurgeRelay deletes what the task has applied of it (see
// purgeRelay); stop-task deletes the relay task and leaves the backup.
func TestClusterSource(t *testing.T) {
	a := chunkservertest.Start(t, 3)
	b := chunkservertest.Start(t, 3)
	ctx := context.Background()
	dst := copyset.NewGroupID(2, 1)
	createCopyset(t, b, dst)
	for chunk := uint64(1); chunk <= 3; chunk++ {
		write(t, a, a.Group, chunk, 1, uint32(chunk), byte(chunk))
	}
	tool := dspb.NewSyncToolClient(a.Conns[0])
	cr, err := tool.CreateSyncTask(ctx, &dspb.CreateSyncTaskRequest{Db: proto.String("1"), Name: proto.String("backup"),
		Mode: dspb.SyncMode_kFullAndContinuous.Enum(), Dest: proto.String("file://" + filepath.Join(t.TempDir(), "backup"))})
	if err != nil || cr.GetCode() != 0 {
		t.Fatalf("the source's backup task: %v %v", cr, err)
	}
	var seeds []string
	for _, srv := range a.Servers {
		seeds = append(seeds, "'"+srv.Local().Addr()+"'")
	}
	relayDir := filepath.Join(t.TempDir(), "relay")
	relay := "file://" + relayDir
	task := fmt.Sprintf("name: mig\ntask-mode: all\nsource:\n  cluster: [%s]\n  pool: 1\n  relay: %s\ntarget-pool: 2\n", strings.Join(seeds, ", "), relay)
	ctl := pb.NewDMControlClient(b.Conns[0])
	if r, err := ctl.StartTask(ctx, &pb.StartTaskRequest{Task: task}); err != nil || !r.GetResult() {
		t.Fatalf("start-task: %v %v", r, err)
	}
	tasks := func() []string {
		st, err := tool.TaskStatus(ctx, &dspb.TaskStatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, task := range st.GetTask() {
			names = append(names, task.GetProgress().GetTaskName())
		}
		return names
	}
	if got := strings.Join(tasks(), "\n"); !strings.Contains(got, "dm-mig") {
		t.Fatalf("the source has no relay task:\n%s", got)
	}
	write(t, a, a.Group, 4, 1, 0, 4) // during the migration
	testwait.Until(t, 90*time.Second, func() error {
		sa, err := poolState(a, a.Group)
		if err != nil {
			return err
		}
		sb, err := poolState(b, dst)
		if err != nil {
			return err
		}
		if sa != sb {
			return fmt.Errorf("source:\n%s\ntarget:\n%s", sa, sb)
		}
		return nil
	})
	purgeRelay(t, a, b, relayDir)
	if r, err := ctl.OperateTask(ctx, &pb.OperateTaskRequest{Name: "mig", Op: dmpb.TaskOp_Stop}); err != nil || !r.GetResult() {
		t.Fatalf("stop-task: %v %v", r, err)
	}
	got := strings.Join(tasks(), "\n")
	if strings.Contains(got, "dm-mig") || !strings.Contains(got, "backup") {
		t.Fatalf("the source's tasks after stop-task:\n%s", got)
	}
}

// purgeRelay checks PurgeRelay on task mig's relay (a file export in
// relayDir of pool 1 copyset 1 of cluster a, applied in b): bad requests
// and a paused task are refused and change nothing; the filename strategy
// deletes the packets before the one named, the time strategy those
// written before the time, the inactive one every packet before the
// share's, and none past it nor the newest; the target follows the source
// on after the purge.
func purgeRelay(t *testing.T, a, b *chunkservertest.Cluster, relayDir string) {
	t.Helper()
	ctx := context.Background()
	w := dmpb.NewWorkerClient(b.Conns[1])
	ctl := pb.NewDMControlClient(b.Conns[0])
	packets := func() []string {
		t.Helper()
		ents, err := os.ReadDir(filepath.Join(relayDir, "pool-1", "copyset-1"))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), exportfmt.PacketSuffix) {
				out = append(out, e.Name())
			}
		}
		return out
	}
	purge := func(req *dmpb.PurgeRelayRequest) *dmpb.CommonWorkerResponse {
		t.Helper()
		r, err := w.PurgeRelay(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// Packets enough, the share past the third.
	var all []string
	round := 0
	testwait.Until(t, 60*time.Second, func() error {
		all = packets()
		if len(all) >= 4 {
			sh := share(t, b, copyset.NewGroupID(2, 1), "mig")
			at, err := exportfmt.ParsePoint(sh.GetCheckpoint().GetPoint())
			if err != nil {
				return err
			}
			if strings.TrimPrefix(exportfmt.PacketName(1, 1, at), "pool-1/copyset-1/") > all[2] {
				return nil
			}
			return fmt.Errorf("the share is at %v", at)
		}
		round++
		write(t, a, a.Group, 6, 1, uint32(round%64), byte(round))
		return fmt.Errorf("the relay holds %d packets", len(all))
	})
	for _, tc := range []struct {
		req  *dmpb.PurgeRelayRequest
		want string
	}{
		{&dmpb.PurgeRelayRequest{}, "names no strategy"},
		{&dmpb.PurgeRelayRequest{Inactive: true, Time: 5}, "names several strategies"},
		{&dmpb.PurgeRelayRequest{Filename: all[1]}, "needs its sub-dir"},
		{&dmpb.PurgeRelayRequest{Filename: "relay.000001", SubDir: "pool-1/copyset-1"}, "not a packet name"},
		{&dmpb.PurgeRelayRequest{Filename: all[1], SubDir: "pool-1/copyset-9"}, "no relay of a dm task has the copyset pool-1/copyset-9"},
	} {
		if r := purge(tc.req); r.GetResult() || !strings.Contains(r.GetMsg(), tc.want) {
			t.Errorf("PurgeRelay %v: %v, want a refusal saying %q", tc.req, r, tc.want)
		}
	}
	if r, err := ctl.OperateTask(ctx, &pb.OperateTaskRequest{Name: "mig", Op: dmpb.TaskOp_Pause}); err != nil || !r.GetResult() {
		t.Fatalf("pause-task: %v %v", r, err)
	}
	if r := purge(&dmpb.PurgeRelayRequest{Inactive: true}); r.GetResult() || !strings.Contains(r.GetMsg(), "relay log purge is forbidden temporarily, because sub task mig current stage is Paused") {
		t.Errorf("PurgeRelay of a paused task: %v", r)
	}
	if got := packets(); !slices.Equal(got, all) {
		t.Fatalf("refused purges deleted packets: %v, had %v", got, all)
	}
	if r, err := ctl.OperateTask(ctx, &pb.OperateTaskRequest{Name: "mig", Op: dmpb.TaskOp_Resume}); err != nil || !r.GetResult() {
		t.Fatalf("resume-task: %v %v", r, err)
	}
	// time: nothing was written before 1970-01-01T00:00:01Z.
	if r := purge(&dmpb.PurgeRelayRequest{Time: 1}); !r.GetResult() || !strings.Contains(r.GetMsg(), "purged 0 packets") {
		t.Fatalf("PurgeRelay by time: %v", r)
	}
	// filename: the packets before all[1].
	if r := purge(&dmpb.PurgeRelayRequest{Filename: all[1], SubDir: "pool-1/copyset-1/"}); !r.GetResult() || !strings.Contains(r.GetMsg(), "purged 1 packets") {
		t.Fatalf("PurgeRelay to %s: %v", all[1], r)
	}
	if got := packets(); !slices.Equal(got, all[1:]) {
		t.Fatalf("after the purge to %s: %v", all[1], got)
	}
	// inactive: every packet before the share's, never past it.
	testwait.Until(t, 30*time.Second, func() error {
		if r := purge(&dmpb.PurgeRelayRequest{Inactive: true}); !r.GetResult() {
			return fmt.Errorf("PurgeRelay inactive: %v", r)
		}
		sh := share(t, b, copyset.NewGroupID(2, 1), "mig")
		at, err := exportfmt.ParsePoint(sh.GetCheckpoint().GetPoint())
		if err != nil {
			return err
		}
		active := strings.TrimPrefix(exportfmt.PacketName(1, 1, at), "pool-1/copyset-1/")
		// The share's packet, or the newest when the share has applied
		// every packet (the export goes on from it), comes first.
		got := packets()
		if len(got) == 0 || got[0] > active {
			return fmt.Errorf("the relay holds %v, the share is at %s: purged past it", got, active)
		}
		if got[0] != active && len(got) > 1 {
			return fmt.Errorf("the relay holds %v before the share's %s", got[:1], active)
		}
		return nil
	})
	rec, err := os.ReadFile(filepath.Join(relayDir, exportfmt.PurgeName(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := exportfmt.DecodePurge(rec); err != nil || r.GetPackets() < 1 || r.GetBy() != "dm task mig" {
		t.Fatalf("purge record: %v %v", r, err)
	}
	// The relay goes on: a write on the source reaches the target.
	write(t, a, a.Group, 5, 1, 0, 5)
	testwait.Until(t, 60*time.Second, func() error {
		sa, err := poolState(a, a.Group)
		if err != nil {
			return err
		}
		sb, err := poolState(b, copyset.NewGroupID(2, 1))
		if err != nil {
			return err
		}
		if sa != sb {
			return fmt.Errorf("source:\n%s\ntarget:\n%s", sa, sb)
		}
		return nil
	})
}
