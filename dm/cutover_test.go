package dm_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/chunkserver/chunkservertest"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/testwait"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	cspb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	dmpb "github.com/chunkraft/chunkraft/proto/dm/pb"
)

// writer writes to chunks 1-4 of copyset g until stopped, a block at a
// time through the leader, and counts the writes acknowledged and those
// the write fence refused.
type writer struct {
	mu      sync.Mutex
	acked   int
	fenced  int
	stop    context.CancelFunc
	stopped chan struct{}
}

func startWriter(t *testing.T, c *chunkservertest.Cluster, g copyset.GroupID) *writer {
	ctx, cancel := context.WithCancel(context.Background())
	w := &writer{stop: cancel, stopped: make(chan struct{})}
	go func() {
		defer close(w.stopped)
		data := make([]byte, 4096)
		for i := 0; ctx.Err() == nil; i++ {
			for j := range data {
				data[j] = byte(i)
			}
			req := &cspb.ChunkRequest{OpType: cspb.CHUNK_OP_TYPE_CHUNK_OP_WRITE.Enum(), LogicPoolId: proto.Uint32(g.Pool()),
				CopysetId: proto.Uint32(g.Copyset()), ChunkId: proto.Uint64(uint64(1 + i%4)), Offset: proto.Uint32(uint32(i%8) * 4096),
				Size: proto.Uint32(4096), Sn: proto.Uint64(1), Data: data}
			var leader int
			for _, k := range c.Up() {
				if n := c.Servers[k].Copysets().Get(g); n != nil && n.IsLeader() {
					leader = k
				}
			}
			cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
			resp, err := cspb.NewChunkServiceClient(c.Conns[leader]).WriteChunk(cctx, req)
			ccancel()
			w.mu.Lock()
			switch {
			case err != nil:
			case resp.GetStatus() == cspb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS:
				w.acked++
			case resp.GetStatus() == cspb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_EPOCH_TOO_OLD:
				w.fenced++
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(w.halt)
	return w
}

func (w *writer) halt() { w.stop(); <-w.stopped }

func (w *writer) counts() (acked, fenced int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked, w.fenced
}

// A cutover of a task with a source cluster while writes run on the
// source: one that cannot catch up in time leaves the source fenced (its
// writers get EPOCH_TOO_OLD) and query-status shows it fenced; --abort
// lets the source take writes again; run again, the cutover commits: the
// target equals the source with every acknowledged write, the source
// refuses writes, the target takes them, and the downtime is reported.
// A cutover of an unknown task or one already committed changes nothing.
func TestCutover(t *testing.T) {
	a := chunkservertest.Start(t, 3)
	b := chunkservertest.Start(t, 3)
	ctx := context.Background()
	dst := copyset.NewGroupID(2, 1)
	createCopyset(t, b, dst)
	for chunk := uint64(1); chunk <= 4; chunk++ {
		write(t, a, a.Group, chunk, 1, uint32(chunk), byte(chunk))
	}
	var seeds []string
	for _, srv := range a.Servers {
		seeds = append(seeds, "'"+srv.Local().Addr()+"'")
	}
	relay := "file://" + filepath.Join(t.TempDir(), "relay")
	task := fmt.Sprintf("name: mig\ntask-mode: all\nsource:\n  cluster: [%s]\n  pool: 1\n  relay: %s\ntarget-pool: 2\n", strings.Join(seeds, ", "), relay)
	ctl := pb.NewDMControlClient(b.Conns[0])
	if r, err := ctl.Cutover(ctx, &pb.CutoverRequest{Name: "mig"}); err != nil || r.GetResult() || !strings.Contains(r.GetMsg(), "no sub task with name mig") {
		t.Fatalf("cutover of no task: %v %v", r, err)
	}
	if r, err := ctl.StartTask(ctx, &pb.StartTaskRequest{Task: task}); err != nil || !r.GetResult() {
		t.Fatalf("start-task: %v %v", r, err)
	}
	testwait.Until(t, 90*time.Second, func() error {
		if sh := share(t, b, dst, "mig"); sh.GetUnit() != dmpb.UnitType_Sync {
			return fmt.Errorf("the share is in unit %v", sh.GetUnit())
		}
		return nil
	})
	w := startWriter(t, a, a.Group)
	testwait.Until(t, 30*time.Second, func() error {
		if acked, _ := w.counts(); acked < 50 {
			return fmt.Errorf("%d writes so far", acked)
		}
		return nil
	})
	status := func() *dmpb.CutoverStatus {
		t.Helper()
		qs, err := dmpb.NewWorkerClient(b.Conns[1]).QueryStatus(ctx, &dmpb.QueryStatusRequest{Name: "mig"})
		if err != nil || !qs.GetResult() {
			t.Fatalf("query-status: %v %v", qs, err)
		}
		return qs.GetSubTaskStatus()[0].GetCutover()
	}

	// A cutover that cannot catch up within 1 ms (the task throttled to a
	// byte per second, its applier asleep after a group): fenced, not
	// committed.
	operate := func(op dmpb.TaskOp) {
		t.Helper()
		if r, err := ctl.OperateTask(ctx, &pb.OperateTaskRequest{Name: "mig", Op: op}); err != nil || !r.GetResult() {
			t.Fatalf("%v: %v %v", op, r, err)
		}
	}
	throttle := func(rate int) {
		t.Helper()
		operate(dmpb.TaskOp_Pause)
		if r, err := ctl.UpdateTask(ctx, &pb.StartTaskRequest{Task: fmt.Sprintf("%ssync:\n  throttle-bytes-per-sec: %d\n", task, rate)}); err != nil || !r.GetResult() {
			t.Fatalf("update-task: %v %v", r, err)
		}
		operate(dmpb.TaskOp_Resume)
	}
	throttle(1)
	applied := share(t, b, dst, "mig").GetCounters().GetOps()
	testwait.Until(t, 30*time.Second, func() error {
		if ops := share(t, b, dst, "mig").GetCounters().GetOps(); ops == applied {
			return fmt.Errorf("no group applied since the throttle")
		}
		return nil
	})
	r, err := ctl.Cutover(ctx, &pb.CutoverRequest{Name: "mig", TimeoutMs: 1})
	if err != nil || r.GetResult() || !strings.Contains(r.GetMsg(), "not synced after") || !strings.Contains(r.GetMsg(), "the source stays fenced") {
		t.Fatalf("cutover with 1 ms to catch up: %v %v", r, err)
	}
	if st := status(); st.GetStep() != "fenced" || st.GetFencedMs() == 0 {
		t.Fatalf("query-status after the cutover stopped: %v", st)
	}
	testwait.Until(t, 10*time.Second, func() error {
		if _, fenced := w.counts(); fenced == 0 {
			return fmt.Errorf("no write refused by the source's fence yet")
		}
		return nil
	})
	if st := clientWrite(t, a, a.Group, 9); st != cspb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_EPOCH_TOO_OLD {
		t.Fatalf("a write to the fenced source answered %v", st)
	}

	// Abort: the source takes writes again.
	if r, err = ctl.Cutover(ctx, &pb.CutoverRequest{Name: "mig", Abort: true}); err != nil || !r.GetResult() || r.GetStep() != pb.CutoverStep_CUTOVER_ABORTED {
		t.Fatalf("cutover --abort: %v %v", r, err)
	}
	if st := status(); st.GetStep() != "aborted" {
		t.Fatalf("query-status after the abort: %v", st)
	}
	if st := clientWrite(t, a, a.Group, 9); st != cspb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
		t.Fatalf("a write to the source after the abort answered %v", st)
	}
	throttle(0)
	acked0, _ := w.counts()
	testwait.Until(t, 30*time.Second, func() error {
		if acked, _ := w.counts(); acked < acked0+20 {
			return fmt.Errorf("%d writes since the abort", acked-acked0)
		}
		return nil
	})

	// The cutover, while the writer runs.
	r, err = ctl.Cutover(ctx, &pb.CutoverRequest{Name: "mig", TimeoutMs: 60_000})
	if err != nil || !r.GetResult() || r.GetStep() != pb.CutoverStep_CUTOVER_COMMITTED || r.GetDowntimeMs() <= 0 {
		t.Fatalf("cutover: %v %v", r, err)
	}
	t.Logf("cutover: %s; %s", strings.Join(r.GetSteps(), "; "), r.GetMsg())
	w.halt()
	sa, err := poolState(a, a.Group)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := poolState(b, dst)
	if err != nil {
		t.Fatal(err)
	}
	if sa != sb {
		t.Fatalf("after the cutover, source:\n%s\ntarget:\n%s", sa, sb)
	}
	if st := clientWrite(t, a, a.Group, 9); st != cspb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_EPOCH_TOO_OLD {
		t.Fatalf("a write to the source after the cutover answered %v", st)
	}
	if st := clientWrite(t, b, dst, 9); st != cspb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
		t.Fatalf("a write to the target after the cutover answered %v", st)
	}
	st := status()
	if st.GetStep() != "committed" || st.GetDowntimeMs() != r.GetDowntimeMs() {
		t.Fatalf("query-status after the cutover: %v (the cutover reported %d ms)", st, r.GetDowntimeMs())
	}
	if sh := share(t, b, dst, "mig"); sh.GetStage() != dmpb.Stage_Finished {
		t.Fatalf("the share after the cutover is %v", sh.GetStage())
	}
	// Again: committed already, it answers so; an abort is refused.
	if r, err := ctl.Cutover(ctx, &pb.CutoverRequest{Name: "mig"}); err != nil || !r.GetResult() || r.GetDowntimeMs() != st.GetDowntimeMs() {
		t.Fatalf("cutover again: %v %v", r, err)
	}
	if r, err := ctl.Cutover(ctx, &pb.CutoverRequest{Name: "mig", Abort: true}); err != nil || r.GetResult() || !strings.Contains(r.GetMsg(), "cannot be aborted") {
		t.Fatalf("abort of a committed cutover: %v %v", r, err)
	}
	// stop-task leaves the source fenced.
	if r, err := ctl.OperateTask(ctx, &pb.OperateTaskRequest{Name: "mig", Op: dmpb.TaskOp_Stop}); err != nil || !r.GetResult() {
		t.Fatalf("stop-task: %v %v", r, err)
	}
	if st := clientWrite(t, a, a.Group, 9); st != cspb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_EPOCH_TOO_OLD {
		t.Fatalf("a write to the source after stop-task answered %v", st)
	}
}
