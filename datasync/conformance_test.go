package datasync

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/copyset/copysettest"
	"github.com/chunkraft/chunkraft/internal/kinds"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/syncstatepb"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
	"google.golang.org/protobuf/proto"
)

// syncWorkload proposes what collectors, SendData and the lease checker
// would: sub-tasks of four tasks (pool 1's "a" on copysets 1-3 and "b"
// beside it on copyset 1; pool 2's "b" and "c" on copyset 1) created,
// advanced packet by packet from their stored point through the snapshot
// into the binlog, heartbeats, reassignments with new tokens, binlog ends,
// finishes, failures and deletes (of a task, of one export of it, of all);
// and, now and then, what a deposed or stale proposer sends: an old token,
// a stale start point, the same token again, a create of a name taken by
// another export, and ops without a task name (as written before a
// copyset held several tasks: they apply to the (tid, pid)'s only task
// and are refused while it has two). A shadow state, applied with the
// machine's own rules, tells the workload where each sub-task is and
// counts what was accepted and refused.
type syncWorkload struct {
	t       *testing.T
	shadow  *pb.State
	tokens  int
	refused map[error]int
	reached map[string]int // accepted ops by kind, and statuses reached
}

var workloadKeys = []subKey{{1, 1, "a"}, {1, 1, "b"}, {1, 2, "a"}, {1, 3, "a"}, {2, 1, "b"}, {2, 1, "c"}}

// workloadExport is the export id of the workload's n-th create.
func workloadExport(n int) string { return fmt.Sprintf("%032x", n) }

func (w *syncWorkload) op(rng *rand.Rand, i int) []byte {
	key := workloadKeys[rng.IntN(len(workloadKeys))]
	tid, pid, name := key.tid, key.pid, key.name
	now := int64(1_000_000 + 10*i - rng.IntN(30)) // proposers' clocks disagree a little
	r := get(w.shadow, tid, pid, name)
	token := "none"
	if r != nil {
		token = r.GetProgress().GetToken()
		if rng.IntN(10) == 0 {
			token = fmt.Sprintf("tok%d", rng.IntN(w.tokens+1)) // a stale proposer
		}
	}
	// A ref without the task's name, now and then: an op written before a
	// copyset held several tasks.
	named := func() *pb.Ref {
		r := ref(tid, pid, token)
		if rng.IntN(6) > 0 {
			r.Name = name
		}
		return r
	}
	// What comes next is mostly what the service would do next: a
	// REASSIGNING sub-task gets its new token, a final one is deleted, a
	// kFull one in the binlog learns its binlog end.
	x := rng.IntN(100)
	switch {
	case r == nil:
	case r.GetStatus() == pb.Status_REASSIGNING && rng.IntN(3) > 0:
		x = 0
	case final(r.GetStatus()) && rng.IntN(2) == 0:
		x = 95
	case r.GetProgress().GetMode() == dspb.SyncMode_kFull && r.GetProgress().GetSyncPoint().GetType() == dspb.SyncType_kBINLOG &&
		r.GetBinlogEnd() == 0 && rng.IntN(2) == 0:
		x = 85
	}
	var op *pb.Op
	switch {
	case r == nil || x < 12:
		w.tokens++
		mode := []dspb.SyncMode{dspb.SyncMode_kFull, dspb.SyncMode_kFull, dspb.SyncMode_kFullAndContinuous, dspb.SyncMode_kIncrementalByTimestamp}[rng.IntN(4)]
		at := snapStart()
		if mode == dspb.SyncMode_kIncrementalByTimestamp {
			at = binlogAt(uint64(1 + rng.IntN(5)))
		}
		p := putReq(name, tid, pid, fmt.Sprintf("tok%d", w.tokens), mode, at, now)
		p.Request.ExportId = proto.String(workloadExport(w.tokens))
		switch {
		case r != nil && rng.IntN(8) == 0:
			p.Request.Token = proto.String(r.GetProgress().GetToken()) // the same task again
		case r != nil && rng.IntN(4) > 0:
			// A reassignment: the stored export id, or none (upstream's
			// AddSyncTask); else a create of a name that is taken.
			p.Request.ExportId = []*string{r.GetProgress().ExportId, nil}[rng.IntN(2)]
		}
		if mode == dspb.SyncMode_kIncrementalByTimestamp {
			p.Request.StartTs = proto.Uint64(uint64(now - 5000))
		}
		op = &pb.Op{Op: &pb.Op_Put{Put: p}}
	case x < 62:
		a := w.packet(rng, r, token, now)
		a.Ref = named()
		op = &pb.Op{Op: &pb.Op_Advance{Advance: a}}
	case x < 74:
		op = &pb.Op{Op: &pb.Op_Touch{Touch: &pb.Touch{Ref: named(), UpdateMs: now, WrittenAtMs: now - int64(rng.IntN(20))}}}
	case x < 82:
		s := &pb.SetStatus{Ref: named(), Status: pb.Status_REASSIGNING, Message: "no packet for 20s"}
		if rng.IntN(6) == 0 {
			s.Status, s.Message = pb.Status_FAILED, "log pin over sync.max_retained_bytes"
		}
		op = &pb.Op{Op: &pb.Op_SetStatus{SetStatus: s}}
	case x < 94:
		end := uint64(3 + rng.IntN(10))
		if p := r.GetProgress().GetSyncPoint(); p.GetType() == dspb.SyncType_kBINLOG {
			end = p.GetOffset() + uint64(rng.IntN(3))
		}
		op = &pb.Op{Op: &pb.Op_SetBinlogEnd{SetBinlogEnd: &pb.SetBinlogEnd{Ref: named(), Index: end}}}
	case x < 99:
		d := &pb.DeleteTask{Db: r.GetDb(), Name: r.GetName()}
		if rng.IntN(3) == 0 { // a failed create's undo: its own export, perhaps not this one
			d.ExportId = workloadExport(rng.IntN(w.tokens + 1))
		}
		op = &pb.Op{Op: &pb.Op_DeleteTask{DeleteTask: d}}
	default:
		op = &pb.Op{Op: &pb.Op_DeleteAll{DeleteAll: &pb.DeleteAll{}}}
	}
	b, err := encodeOp(op)
	if err != nil {
		w.t.Fatalf("workload op %d: %v", i, err)
	}
	w.track(uint64(i), op)
	return b
}

// packet is the next packet of sub-task r: from its stored point (now and
// then a stale one), one chunk further in the snapshot, into the binlog
// or a few indices on, finished when a kFull sub-task passes its binlog
// end.
func (w *syncWorkload) packet(rng *rand.Rand, r *pb.SubTask, token string, now int64) *pb.Advance {
	from := proto.CloneOf(r.GetProgress().GetSyncPoint())
	if rng.IntN(8) == 0 && from.GetType() == dspb.SyncType_kBINLOG && from.GetOffset() > 1 {
		from = binlogAt(from.GetOffset() - 1) // a resent packet
	}
	var to *dspb.SyncPoint
	switch {
	case from.GetType() == dspb.SyncType_kBINLOG:
		to = binlogAt(from.GetOffset() + uint64(rng.IntN(4)))
	case from.Pk == nil || rng.IntN(3) > 0:
		chunk := uint64(0)
		if from.Pk != nil {
			prev, _ := strconv.ParseUint(from.GetPk(), 10, 64)
			chunk = prev + 1
		}
		to = snapAt(chunk, uint64(rng.IntN(4))*4096)
	default:
		to = binlogAt(uint64(1 + rng.IntN(4)))
	}
	count := uint64(0)
	if comparePoints(to, from) > 0 {
		count = uint64(1 + rng.IntN(50))
	}
	end := r.GetBinlogEnd()
	finished := to.GetType() == dspb.SyncType_kBINLOG && r.GetProgress().GetMode() == dspb.SyncMode_kFull && end > 0 && to.GetOffset() > end
	a := advance(r.GetProgress().GetTid(), r.GetProgress().GetPid(), token, from, to, count, now, finished)
	a.WrittenAtMs = now - int64(rng.IntN(20))
	return a
}

// track applies op to the shadow state with the machine's rules.
func (w *syncWorkload) track(index uint64, op *pb.Op) {
	res, changed := applyOp(w.shadow, index, op)
	if changed {
		w.shadow.Applied = index
	}
	if res.Err != nil {
		for _, e := range []error{ErrNotFound, ErrTaskNotNamed, ErrSameTask, ErrTaskExists, ErrTokenMismatch, ErrStatus, ErrPointMismatch, ErrNotFull, ErrBinlogEnd, ErrInvalidOp} {
			if errors.Is(res.Err, e) {
				w.refused[e]++
			}
		}
		return
	}
	kind := fmt.Sprintf("%T", op.GetOp())
	if a := op.GetAdvance(); a != nil && a.GetFinished() {
		kind = "finished"
	}
	if p := op.GetPut(); p != nil && res.Record.GetCreatedIndex() != index {
		kind = "reassigned"
	}
	w.reached[kind]++
	if res.Record != nil {
		w.reached[res.Record.GetStatus().String()]++
		p := res.Record.GetProgress()
		if len(subTasksOf(w.shadow, p.GetTid(), p.GetPid())) > 1 {
			w.reached["several tasks"]++
		}
	}
}

// syncConformanceState is the machine's state (its applied stamp
// included), indented so that a difference shows on its line.
func syncConformanceState(ms copyset.Machines) (string, error) {
	m, ok := copyset.MachineAs[*Machine](ms, kinds.Sync)
	if !ok {
		return "", errors.New("no sync machine")
	}
	var out string
	var err error
	m.View(func(st *pb.State) { out, err = copysettest.IndentedJSON(st) })
	return out, err
}

// The sync machine keeps the StateMachine contract under a log of every
// op, accepted and refused.
func TestSyncMachineConforms(t *testing.T) {
	w := &syncWorkload{t: t, shadow: &pb.State{}, refused: map[error]int{}, reached: map[string]int{}}
	copysettest.RunStateMachineConformance(t, []copyset.MachineSpec{Spec()},
		copysettest.Workload{Op: w.op, State: syncConformanceState, Ops: 400,
			// The workload's sub-tasks name log indices of no export: their
			// holds, capped at the trailing logs, must not keep the log.
			Raft: func(o *copyset.RaftOptions) { o.MaxPinnedEntries = o.TrailingLogs }})

	t.Logf("accepted %v; refused %v; at the end %d sub-tasks", w.reached, w.refused, len(w.shadow.SubTasks))
	for _, k := range []string{"*syncstatepb.Op_Put", "reassigned", "*syncstatepb.Op_Advance", "finished", "*syncstatepb.Op_Touch",
		"*syncstatepb.Op_SetStatus", "*syncstatepb.Op_SetBinlogEnd", "*syncstatepb.Op_DeleteTask", "*syncstatepb.Op_DeleteAll", "FAILED", "SUCCESS", "REASSIGNING", "several tasks"} {
		if w.reached[k] == 0 {
			t.Errorf("the workload never reached %s: too little to check", k)
		}
	}
	for _, e := range []error{ErrTaskNotNamed, ErrSameTask, ErrTaskExists, ErrTokenMismatch, ErrStatus, ErrPointMismatch} {
		if w.refused[e] == 0 {
			t.Errorf("the workload never had an op refused with %q", e)
		}
	}
	if w.refused[ErrInvalidOp] > 0 {
		t.Errorf("%d workload ops were invalid", w.refused[ErrInvalidOp])
	}
}
