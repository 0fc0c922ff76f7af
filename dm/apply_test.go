package dm

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	dmpb "github.com/chunkraft/chunkraft/proto/dm/pb"
)

// A cutover's steps on a share: forward one at a time, the same step
// again or one passed already changes nothing, an abort from any step
// before COMMITTED, a new cutover after an abort, COMMITTED makes the share
// Finished and takes lifted_ms once; every refusal changes nothing.
func TestSetCutoverSteps(t *testing.T) {
	st := &pb.State{}
	if r, _ := applyOp(st, 1, &pb.Op{Op: &pb.Op_Start{Start: &pb.Start{Config: testConfig("t"), Copyset: 1, SourceCopyset: 1,
		Stage: dmpb.Stage_Running, Unit: dmpb.UnitType_Sync, NowMs: 1}}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	index := uint64(1)
	step := func(c *pb.Cutover, wantErr error, wantChanged bool) {
		t.Helper()
		index++
		before := get(st, "t").GetCutover().String()
		r, changed := applyOp(st, index, &pb.Op{Op: &pb.Op_SetCutover{SetCutover: &pb.SetCutover{Name: "t", Cutover: c}}})
		if !errors.Is(r.Err, wantErr) || changed != wantChanged {
			t.Fatalf("step %v from %s: %v, changed %v; want %v, changed %v", c.GetStep(), before, r.Err, changed, wantErr, wantChanged)
		}
		if r.Err != nil && get(st, "t").GetCutover().String() != before {
			t.Fatalf("a refused step %v changed the cutover to %v", c.GetStep(), get(st, "t").GetCutover())
		}
	}
	cut := func(s pb.CutoverStep) *pb.Cutover {
		return &pb.Cutover{Step: s, FenceIndex: 7, StartedMs: 10, FencedMs: 11, SyncedMs: 12, VerifiedMs: 13, CommittedMs: 14, AbortedMs: 15, Digest: "d"}
	}
	step(cut(pb.CutoverStep_CUTOVER_ABORTED), ErrCutover, false) // nothing to abort
	step(cut(pb.CutoverStep_CUTOVER_FENCED), ErrCutover, false)  // not under way
	step(cut(pb.CutoverStep_CUTOVER_FENCING), nil, true)
	step(cut(pb.CutoverStep_CUTOVER_FENCING), nil, false)
	step(cut(pb.CutoverStep_CUTOVER_SYNCED), ErrCutover, false)               // skips FENCED
	step(&pb.Cutover{Step: pb.CutoverStep_CUTOVER_FENCED}, ErrCutover, false) // no index
	step(cut(pb.CutoverStep_CUTOVER_FENCED), nil, true)
	step(&pb.Cutover{Step: pb.CutoverStep_CUTOVER_FENCED, FenceIndex: 8}, ErrCutover, false) // another fence
	step(cut(pb.CutoverStep_CUTOVER_ABORTED), nil, true)
	if c := get(st, "t").GetCutover(); c.GetStep() != pb.CutoverStep_CUTOVER_ABORTED || c.GetFenceIndex() != 7 || c.GetAbortedMs() != 15 {
		t.Fatalf("aborted: %v", c)
	}
	step(cut(pb.CutoverStep_CUTOVER_ABORTED), nil, false)
	step(cut(pb.CutoverStep_CUTOVER_FENCING), nil, true)
	if c := get(st, "t").GetCutover(); c.GetFenceIndex() != 0 || c.GetAbortedMs() != 0 {
		t.Fatalf("a cutover started again keeps the old one's fields: %v", c)
	}
	for _, s := range []pb.CutoverStep{pb.CutoverStep_CUTOVER_FENCED, pb.CutoverStep_CUTOVER_SYNCED, pb.CutoverStep_CUTOVER_VERIFIED} {
		step(cut(s), nil, true)
	}
	step(cut(pb.CutoverStep_CUTOVER_FENCING), nil, false) // a driver run again
	step(cut(pb.CutoverStep_CUTOVER_COMMITTED), nil, true)
	if sh := get(st, "t"); sh.GetStage() != dmpb.Stage_Finished || sh.GetCutover().GetDigest() != "d" || sh.GetCutover().GetLiftedMs() != 0 {
		t.Fatalf("committed: %v", sh)
	}
	step(&pb.Cutover{Step: pb.CutoverStep_CUTOVER_COMMITTED, LiftedMs: 20}, nil, true)
	step(&pb.Cutover{Step: pb.CutoverStep_CUTOVER_COMMITTED, LiftedMs: 30}, nil, false)
	if c := get(st, "t").GetCutover(); c.GetLiftedMs() != 20 {
		t.Fatalf("lifted at %d, want the first lift's 20", c.GetLiftedMs())
	}
	step(cut(pb.CutoverStep_CUTOVER_ABORTED), ErrCutover, false)
	step(cut(pb.CutoverStep_CUTOVER_FENCING), ErrCutover, false)
	step(cut(pb.CutoverStep_CUTOVER_VERIFIED), nil, false)
}

// A cutover needs the share Running: a paused share refuses its steps.
func TestSetCutoverNeedsRunning(t *testing.T) {
	st := &pb.State{}
	applyOp(st, 1, &pb.Op{Op: &pb.Op_Start{Start: &pb.Start{Config: testConfig("t"), Copyset: 1, SourceCopyset: 1,
		Stage: dmpb.Stage_Paused, Unit: dmpb.UnitType_Sync, NowMs: 1}}})
	r, changed := applyOp(st, 2, &pb.Op{Op: &pb.Op_SetCutover{SetCutover: &pb.SetCutover{Name: "t", Cutover: &pb.Cutover{Step: pb.CutoverStep_CUTOVER_FENCING}}}})
	if !errors.Is(r.Err, ErrStage) || changed {
		t.Fatalf("a paused share's cutover: %v, changed %v", r.Err, changed)
	}
}

// HandleError ops on a share: refused outside Sync, at a position applied,
// a revert with no operator; set, replaced at the same position, kept in
// position order, resuming a Paused share; an Advance carrying an
// operator out removes it. Every refusal changes nothing.
func TestHandleErrorOps(t *testing.T) {
	st := &pb.State{}
	if r, _ := applyOp(st, 1, &pb.Op{Op: &pb.Op_Start{Start: &pb.Start{Config: testConfig("t"), Copyset: 1, SourceCopyset: 1,
		Stage: dmpb.Stage_Running, Unit: dmpb.UnitType_Load, NowMs: 1}}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	index := uint64(1)
	apply := func(op *pb.Op, wantErr error) {
		t.Helper()
		index++
		before := get(st, "t").String()
		r, _ := applyOp(st, index, op)
		if !errors.Is(r.Err, wantErr) {
			t.Fatalf("%v: %v, want %v", op, r.Err, wantErr)
		}
		if r.Err != nil && get(st, "t").String() != before {
			t.Fatalf("a refused %v changed the share", op)
		}
	}
	handle := func(e dmpb.ErrorOp, index uint64, ops ...*pb.ChunkOp) *pb.Op {
		return &pb.Op{Op: &pb.Op_HandleError{HandleError: &pb.HandleError{Name: "t", Op: e, At: &pb.Place{Index: index}, Ops: ops}}}
	}
	w := &pb.ChunkOp{Kind: pb.ChunkOp_WRITE, Chunk: 1, Length: 4096, Sn: 1}
	apply(handle(dmpb.ErrorOp_Skip, 10), ErrOperator) // in Load
	cp := &pb.Checkpoint{SourceIndex: 5}
	apply(&pb.Op{Op: &pb.Op_Advance{Advance: &pb.Advance{Name: "t", From: get(st, "t").GetCheckpoint(), To: cp, Unit: dmpb.UnitType_Sync}}}, nil)
	apply(handle(dmpb.ErrorOp_Skip, 5), ErrOperator)      // applied already
	apply(handle(dmpb.ErrorOp_Revert, 10), ErrOperator)   // none there
	apply(handle(dmpb.ErrorOp_Replace, 10), ErrInvalidOp) // no ops
	apply(handle(dmpb.ErrorOp_Skip, 10, w), ErrInvalidOp) // skip takes none
	apply(handle(dmpb.ErrorOp_List, 10), ErrInvalidOp)    // not replicated
	apply(handle(dmpb.ErrorOp_Inject, 10, &pb.ChunkOp{Kind: pb.ChunkOp_WRITE, Length: 100}), ErrInvalidOp)
	apply(&pb.Op{Op: &pb.Op_Fail{Fail: &pb.Fail{Name: "t", Error: &dmpb.ProcessError{Message: "NOSPACE"}, Resumable: true, At: &pb.Place{Index: 9}}}}, nil)
	if sh := get(st, "t"); sh.GetStage() != dmpb.Stage_Paused || sh.GetErrorAt().GetIndex() != 9 {
		t.Fatalf("failed: %v", sh)
	}
	apply(handle(dmpb.ErrorOp_Replace, 9, w), nil)
	if sh := get(st, "t"); sh.GetStage() != dmpb.Stage_Running || sh.GetErrorAt() != nil || len(sh.GetResult().GetErrors()) != 0 ||
		len(sh.GetOperators()) != 1 || sh.GetOperators()[0].GetOp() != dmpb.ErrorOp_Replace {
		t.Fatalf("replace resumes the share: %v", sh)
	}
	apply(handle(dmpb.ErrorOp_Inject, 20, w), nil)
	apply(handle(dmpb.ErrorOp_Skip, 9), nil) // replaces the operator at 9
	apply(handle(dmpb.ErrorOp_Skip, 12), nil)
	var at []uint64
	for _, o := range get(st, "t").GetOperators() {
		at = append(at, o.GetAt().GetIndex())
	}
	if len(at) != 3 || at[0] != 9 || at[1] != 12 || at[2] != 20 || get(st, "t").GetOperators()[0].GetOp() != dmpb.ErrorOp_Skip {
		t.Fatalf("operators at %v: %v", at, get(st, "t").GetOperators())
	}
	apply(handle(dmpb.ErrorOp_Revert, 20), nil)
	apply(&pb.Op{Op: &pb.Op_Advance{Advance: &pb.Advance{Name: "t", From: cp, To: &pb.Checkpoint{SourceIndex: 12}, Unit: dmpb.UnitType_Sync,
		OperatorsDone: []*pb.Place{{Index: 9}, {Index: 12}}}}}, nil)
	if ops := get(st, "t").GetOperators(); len(ops) != 0 {
		t.Fatalf("operators left after they were carried out: %v", ops)
	}
}

// SetSchema on a share: only Paused in the Sync unit; the first override
// keeps what the share tracked, a second keeps that too; a removal
// restores it while the share stands where it did, and is refused once
// it has applied past; every refusal changes nothing.
func TestSetSchemaOps(t *testing.T) {
	st := &pb.State{}
	if r, _ := applyOp(st, 1, &pb.Op{Op: &pb.Op_Start{Start: &pb.Start{Config: testConfig("t"), Copyset: 1, SourceCopyset: 1,
		Stage: dmpb.Stage_Running, Unit: dmpb.UnitType_Sync, NowMs: 1}}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	index := uint64(1)
	apply := func(op *pb.Op, wantErr error) {
		t.Helper()
		index++
		before := get(st, "t").String()
		r, changed := applyOp(st, index, op)
		if !errors.Is(r.Err, wantErr) || changed != (wantErr == nil) {
			t.Fatalf("%v: %v, changed %v; want %v", op, r.Err, changed, wantErr)
		}
		if r.Err != nil && get(st, "t").String() != before {
			t.Fatalf("a refused %v changed the share", op)
		}
	}
	clone := func(sn uint64) *pb.Clone {
		return &pb.Clone{Sn: sn, CorrectedSn: 1, Written: make([]byte, schemaBlocks/8)}
	}
	set := func(chunk uint64, c *pb.Clone) *pb.Op {
		return &pb.Op{Op: &pb.Op_SetSchema{SetSchema: &pb.SetSchema{Name: "t", Chunk: chunk, Clone: c, Text: SchemaString(c), NowMs: 5}}}
	}
	remove := func(chunk uint64) *pb.Op {
		return &pb.Op{Op: &pb.Op_SetSchema{SetSchema: &pb.SetSchema{Name: "t", Chunk: chunk, Remove: true}}}
	}
	apply(set(7, clone(3)), ErrSchema) // Running
	apply(&pb.Op{Op: &pb.Op_SetStage{SetStage: &pb.SetStage{Name: "t", Stage: dmpb.Stage_Paused, NowMs: 2}}}, nil)
	sh := get(st, "t")
	sh.Clones = map[uint64]*pb.Clone{7: clone(2)}

	apply(remove(7), ErrSchema) // nothing set
	apply(set(7, nil), nil)     // a normal chunk now
	if _, ok := sh.GetClones()[7]; ok || !proto.Equal(sh.GetSchemas()[7].GetPrior(), clone(2)) || !sh.GetSchemas()[7].GetHadClone() {
		t.Fatalf("after set normal: clones %v, schemas %v", sh.GetClones(), sh.GetSchemas())
	}
	apply(set(7, clone(4)), nil) // again: the prior stays the tracked one
	if !proto.Equal(sh.GetClones()[7], clone(4)) || !proto.Equal(sh.GetSchemas()[7].GetPrior(), clone(2)) {
		t.Fatalf("after set clone: clones %v, schemas %v", sh.GetClones(), sh.GetSchemas())
	}
	apply(remove(7), nil)
	if !proto.Equal(sh.GetClones()[7], clone(2)) || len(sh.GetSchemas()) != 0 {
		t.Fatalf("after remove: clones %v, schemas %v", sh.GetClones(), sh.GetSchemas())
	}
	apply(set(8, clone(5)), nil) // a chunk it did not track
	sh.Checkpoint = &pb.Checkpoint{Record: 9}
	apply(remove(8), ErrSchema) // applied past
	if !proto.Equal(sh.GetClones()[8], clone(5)) {
		t.Fatalf("a refused removal changed chunk 8: %v", sh.GetClones())
	}
	sh.Unit = dmpb.UnitType_Load
	apply(set(9, nil), ErrSchema) // not in Sync
	if err := ValidateOp(set(1, &pb.Clone{Sn: 1, Written: []byte{1}})); err == nil {
		t.Fatal("a bitmap of the wrong size was admitted")
	}
	if err := ValidateOp(&pb.Op{Op: &pb.Op_SetSchema{SetSchema: &pb.SetSchema{Name: "t", Chunk: 1, Remove: true, Clone: clone(1)}}}); err == nil {
		t.Fatal("a removal with a clone state was admitted")
	}
}

// Validator ops on a share: rows numbered at the apply, one open row per
// chunk, states and clears by id or all, the cutover point, the
// checkpoint only forward; every refusal changes nothing.
func TestValidatorOps(t *testing.T) {
	st := &pb.State{}
	if r, _ := applyOp(st, 1, &pb.Op{Op: &pb.Op_Start{Start: &pb.Start{Config: testConfig("t"), Copyset: 3, SourceCopyset: 3,
		Stage: dmpb.Stage_Running, Unit: dmpb.UnitType_Sync, NowMs: 1}}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	index := uint64(1)
	apply := func(o *pb.ValidatorOp, wantErr error) {
		t.Helper()
		index++
		o.Name = "t"
		before := get(st, "t").String()
		r, _ := applyOp(st, index, &pb.Op{Op: &pb.Op_Validator{Validator: o}})
		if !errors.Is(r.Err, wantErr) {
			t.Fatalf("%v: %v, want %v", o, r.Err, wantErr)
		}
		if r.Err != nil && get(st, "t").String() != before {
			t.Fatalf("a refused %v changed the share", o)
		}
	}
	add := func(chunk uint64) *pb.ValidatorOp {
		return &pb.ValidatorOp{NowMs: 9, Op: &pb.ValidatorOp_Add{Add: &pb.ValidationRow{Chunk: chunk, ErrorType: "different data"}}}
	}
	set := func(s dmpb.ValidateErrorState, all bool, ids ...uint64) *pb.ValidatorOp {
		return &pb.ValidatorOp{Op: &pb.ValidatorOp_Set{Set: &pb.RowState{Ids: ids, All: all, State: s}}}
	}
	rows := func() []*pb.ValidationRow { return get(st, "t").GetValidation().GetRows() }
	apply(add(7), nil)
	apply(add(8), nil)
	if r := rows(); len(r) != 2 || r[0].GetId() != 3<<32|1 || r[1].GetId() != 3<<32|2 || r[0].GetState() != dmpb.ValidateErrorState_NewErr || r[0].GetTimeMs() != 9 {
		t.Fatalf("rows %v", r)
	}
	apply(add(7), ErrValidator) // an open row of chunk 7
	apply(set(dmpb.ValidateErrorState_IgnoredErr, false, 3<<32|1), nil)
	apply(add(7), ErrValidator) // ignored is open
	apply(set(dmpb.ValidateErrorState_ResolvedErr, true), nil)
	apply(add(7), nil) // resolved: a new row
	if r := rows(); len(r) != 3 || r[2].GetId() != 3<<32|3 || r[0].GetState() != dmpb.ValidateErrorState_ResolvedErr {
		t.Fatalf("rows %v", r)
	}
	apply(set(dmpb.ValidateErrorState_IgnoredErr, false, 99), ErrValidator)
	apply(&pb.ValidatorOp{Op: &pb.ValidatorOp_Clear{Clear: &pb.RowState{Ids: []uint64{3<<32 | 2}}}}, nil)
	if r := rows(); len(r) != 2 || r[1].GetId() != 3<<32|3 {
		t.Fatalf("rows after a clear %v", r)
	}
	apply(&pb.ValidatorOp{Op: &pb.ValidatorOp_Clear{Clear: &pb.RowState{All: true}}}, nil)
	if r := rows(); len(r) != 0 {
		t.Fatalf("rows after clearing all %v", r)
	}
	apply(&pb.ValidatorOp{Op: &pb.ValidatorOp_Cutover{Cutover: "cutover"}}, nil)
	apply(&pb.ValidatorOp{Op: &pb.ValidatorOp_Cutover{Cutover: "2026-12-06T10:00:00Z"}}, nil)
	apply(&pb.ValidatorOp{Op: &pb.ValidatorOp_Cutover{Cutover: "1/3:50.0"}}, nil)
	apply(&pb.ValidatorOp{NowMs: 20, Op: &pb.ValidatorOp_Checkpoint{Checkpoint: &pb.ValidatedAt{Index: 60, CutoverReached: true}}}, nil)
	apply(&pb.ValidatorOp{NowMs: 30, Op: &pb.ValidatorOp_Checkpoint{Checkpoint: &pb.ValidatedAt{Index: 40}}}, nil) // backwards: kept
	if v := get(st, "t").GetValidation(); v.GetValidatedIndex() != 60 || v.GetValidatedMs() != 20 || !v.GetCutoverReached() || v.GetCutover() != "1/3:50.0" {
		t.Fatalf("validation %v", v)
	}
	for _, bad := range []*pb.ValidatorOp{
		{Name: "t", Op: &pb.ValidatorOp_Add{Add: &pb.ValidationRow{Chunk: 1}}},
		{Name: "t", Op: &pb.ValidatorOp_Set{Set: &pb.RowState{All: true}}},
		{Name: "t", Op: &pb.ValidatorOp_Clear{Clear: &pb.RowState{}}},
		{Name: "t", Op: &pb.ValidatorOp_Cutover{Cutover: "1/3"}},
		{Name: "t", Op: &pb.ValidatorOp_Cutover{Cutover: "soon"}},
		{Name: "t"},
	} {
		if err := ValidateOp(&pb.Op{Op: &pb.Op_Validator{Validator: bad}}); err == nil {
			t.Errorf("%v was admitted", bad)
		}
	}
}

// A cutover point is reached by a pass at or past its position, begun at
// or after its time, or at or past the task's cutover fence once there is
// one.
func TestCutoverReached(t *testing.T) {
	at := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	sh := &pb.SubTask{}
	fenced := &pb.SubTask{Cutover: &pb.Cutover{FenceIndex: 40}}
	for _, tc := range []struct {
		c     string
		sh    *pb.SubTask
		index uint64
		start time.Time
		want  bool
	}{
		{"", sh, 100, at, false},
		{"1/1:50.0", sh, 49, at, false},
		{"1/1:50.0", sh, 50, at, true},
		{"2026-12-06T10:00:00Z", sh, 1, at.Add(-time.Second), false},
		{"2026-12-06T10:00:00Z", sh, 1, at, true},
		{"cutover", sh, 100, at, false},
		{"cutover", fenced, 39, at, false},
		{"cutover", fenced, 40, at, true},
	} {
		if got := cutoverReached(tc.c, tc.sh, tc.index, tc.start); got != tc.want {
			t.Errorf("%q at index %d, pass from %v: %v, want %v", tc.c, tc.index, tc.start, got, tc.want)
		}
	}
}
