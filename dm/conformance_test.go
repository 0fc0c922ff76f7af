package dm

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/copyset/copysettest"
	"github.com/chunkraft/chunkraft/internal/kinds"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	dmpb "github.com/chunkraft/chunkraft/proto/dm/pb"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
	"google.golang.org/protobuf/proto"
)

// testConfig is a valid task config named name.
func testConfig(name string) *pb.TaskConfig {
	c, err := TaskFile{Name: name, TaskMode: "all", TargetPool: 2,
		Source: SourceFile{Pool: 1, Export: "file:///exports/" + name}}.Config()
	if err != nil {
		panic(err)
	}
	return c
}

// dmWorkload proposes what operators and appliers would: shares of three
// tasks started, advanced checkpoint by checkpoint (Load, then Sync),
// failed, paused, resumed, stopped, updated and deleted; and, now and
// then, what a stale proposer sends: an advance from an old checkpoint, a
// start of another config under a taken name, a stage change the machine
// forbids. A shadow state, applied with the machine's own rules, tells
// the workload where each share is and counts what was accepted and
// refused.
type dmWorkload struct {
	shadow  *pb.State
	refused map[error]int
	reached map[string]int
}

var workloadNames = []string{"a", "b", "c"}

func (w *dmWorkload) op(rng *rand.Rand, i int) []byte {
	name := workloadNames[rng.IntN(len(workloadNames))]
	now := int64(1_000_000 + 10*i)
	s := get(w.shadow, name)
	x := rng.IntN(100)
	// What comes next is mostly what an operator or applier would do next:
	// a finished share is deleted, a paused one updated, a paused or stopped
	// one resumed.
	switch {
	case s == nil:
	case s.GetStage() == dmpb.Stage_Finished && rng.IntN(2) == 0:
		x = 99
	case s.GetStage() == dmpb.Stage_Paused && rng.IntN(3) == 0:
		x = 90
	case s.GetStage() != dmpb.Stage_Running && rng.IntN(2) == 0:
		x = 70
	}
	var op *pb.Op
	switch {
	case s == nil || x < 5:
		c := testConfig(name)
		if s != nil && rng.IntN(2) == 0 {
			c.TargetPool = 3 // another config under a taken name
		}
		stage := dmpb.Stage_Running
		if rng.IntN(5) == 0 {
			stage = dmpb.Stage_Paused
		}
		op = &pb.Op{Op: &pb.Op_Start{Start: &pb.Start{Config: c, Copyset: 1, SourceCopyset: 1, Stage: stage,
			Unit: dmpb.UnitType_Load, NowMs: now}}}
	case x < 55:
		from := proto.CloneOf(s.GetCheckpoint())
		if rng.IntN(8) == 0 {
			from.Record++ // a stale proposer
		}
		to := proto.CloneOf(s.GetCheckpoint())
		unit := dmpb.UnitType_Load
		if to.GetPoint().GetType() == dspb.SyncType_kBINLOG || rng.IntN(6) == 0 {
			unit = dmpb.UnitType_Sync
			to.Point = &dspb.SyncPoint{Type: dspb.SyncType_kBINLOG.Enum(), Offset: proto.Uint64(to.GetPoint().GetOffset() + 1)}
			to.Record, to.SourceIndex = 0, to.GetPoint().GetOffset()
		} else {
			to.Record++
		}
		a := &pb.Advance{Name: name, From: from, To: to, Unit: unit,
			Add: &pb.Counters{Records: 1, Ops: 2, Bytes: 4096}, Finished: rng.IntN(12) == 0, NowMs: now}
		switch rng.IntN(4) {
		case 0:
			a.AsOf = map[uint64]*pb.Place{uint64(rng.IntN(8)): {Index: uint64(i), Op: uint32(rng.IntN(3))}}
		case 1:
			a.Clones = map[uint64]*pb.Clone{uint64(rng.IntN(8)): {Sn: 2, CorrectedSn: 1, Written: []byte{byte(rng.IntN(256))}}}
		case 2:
			a.ClonesDone, a.ClearAsOf = []uint64{uint64(rng.IntN(8))}, rng.IntN(3) == 0
		}
		op = &pb.Op{Op: &pb.Op_Advance{Advance: a}}
	case x < 60:
		// A cutover: mostly the next step, sometimes an abort, a step
		// again or one out of order.
		step := s.GetCutover().GetStep() + 1
		switch rng.IntN(6) {
		case 0:
			step = pb.CutoverStep_CUTOVER_ABORTED
		case 1:
			step = pb.CutoverStep(1 + rng.IntN(6))
		}
		if step > pb.CutoverStep_CUTOVER_ABORTED {
			step = pb.CutoverStep_CUTOVER_FENCING
		}
		op = &pb.Op{Op: &pb.Op_SetCutover{SetCutover: &pb.SetCutover{Name: name, Cutover: &pb.Cutover{Step: step,
			FenceIndex: uint64(1 + rng.IntN(2)), StartedMs: now, FencedMs: now, SyncedMs: now, VerifiedMs: now,
			CommittedMs: now, LiftedMs: now * int64(rng.IntN(2)), AbortedMs: now, Digest: "d"}}}}
	case x < 65:
		op = &pb.Op{Op: &pb.Op_Fail{Fail: &pb.Fail{Name: name, Resumable: rng.IntN(2) == 0, NowMs: now,
			Error: &dmpb.ProcessError{ErrCode: 1, ErrClass: "dm", Message: "boom"}}}}
	case x < 88:
		stage := []dmpb.Stage{dmpb.Stage_Running, dmpb.Stage_Paused, dmpb.Stage_Stopped}[rng.IntN(3)]
		if x == 70 {
			stage = dmpb.Stage_Running
		}
		op = &pb.Op{Op: &pb.Op_SetStage{SetStage: &pb.SetStage{Name: name, Stage: stage, ByUser: rng.IntN(2) == 0, NowMs: now}}}
	case x < 95:
		c := proto.CloneOf(s.GetConfig())
		if rng.IntN(2) == 0 {
			c.Sync.ThrottleBytesPerSec = uint64(rng.IntN(8)) << 20
		} else {
			c.TargetPool++ // not allowed
		}
		op = &pb.Op{Op: &pb.Op_Update{Update: &pb.Update{Name: name, Config: c, NowMs: now}}}
	default:
		op = &pb.Op{Op: &pb.Op_Delete{Delete: &pb.Delete{Name: name}}}
	}
	b, err := EncodeOp(op)
	if err != nil {
		panic(fmt.Sprintf("workload op %v: %v", op, err))
	}
	w.track(uint64(i), op)
	return b
}

// track applies op to the shadow state with the machine's rules (the
// index is the workload's, not the log's: only the outcome is tracked).
func (w *dmWorkload) track(index uint64, op *pb.Op) {
	res, _ := applyOp(w.shadow, index, op)
	if res.Err != nil {
		for _, e := range []error{ErrNotFound, ErrTaskExists, ErrTooManyTasks, ErrStage, ErrCheckpoint, ErrUpdate, ErrInvalidOp} {
			if errors.Is(res.Err, e) {
				w.refused[e]++
			}
		}
		return
	}
	w.reached[fmt.Sprintf("%T", op.GetOp())]++
	if res.SubTask != nil {
		w.reached[res.SubTask.GetStage().String()]++
	}
}

func dmState(ms copyset.Machines) (string, error) {
	m, ok := copyset.MachineAs[*Machine](ms, kinds.DM)
	if !ok {
		return "", errors.New("no dm machine")
	}
	var out string
	var err error
	m.View(func(st *pb.State) { out, err = copysettest.IndentedJSON(st) })
	return out, err
}

// The dm machine keeps the StateMachine contract under a log of every op,
// accepted and refused.
func TestDMMachineConforms(t *testing.T) {
	old := compactMinBytes
	compactMinBytes = 4096 // bases and compactions happen within the run
	t.Cleanup(func() { compactMinBytes = old })
	w := &dmWorkload{shadow: &pb.State{}, refused: map[error]int{}, reached: map[string]int{}}
	copysettest.RunStateMachineConformance(t, []copyset.MachineSpec{Spec()},
		copysettest.Workload{Op: w.op, State: dmState, Ops: 300})
	t.Logf("accepted %v; refused %v", w.reached, w.refused)
	for _, k := range []string{"*dmpb.Op_Start", "*dmpb.Op_Advance", "*dmpb.Op_Fail", "*dmpb.Op_SetStage", "*dmpb.Op_Update",
		"*dmpb.Op_Delete", "Running", "Paused", "Stopped", "Finished"} {
		if w.reached[k] == 0 {
			t.Errorf("the workload never reached %s: too little to check", k)
		}
	}
	for _, e := range []error{ErrTaskExists, ErrStage, ErrCheckpoint, ErrUpdate} {
		if w.refused[e] == 0 {
			t.Errorf("the workload never had an op refused with %q", e)
		}
	}
	if w.refused[ErrInvalidOp] > 0 {
		t.Errorf("%d workload ops were invalid", w.refused[ErrInvalidOp])
	}
}
