package dm

import (
	"errors"
	"testing"

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
