package dm

import (
	"cmp"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/datasync"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"

	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	dmpb "github.com/chunkraft/chunkraft/proto/dm/pb"
)

// applyOp applies op at index to st and returns its result and whether st
// changed. Every check comes before the first change, so a refused op
// changes nothing. Nothing here reads a clock or anything outside st and
// op: every replica computes the same. The caller stamps st.Applied.
func applyOp(st *pb.State, index uint64, op *pb.Op) (Result, bool) {
	if err := ValidateOp(op); err != nil {
		return Result{Err: fmt.Errorf("%w: %v", ErrInvalidOp, err)}, false
	}
	switch o := op.GetOp().(type) {
	case *pb.Op_Start:
		return applyStart(st, index, o.Start)
	case *pb.Op_SetStage:
		return withShare(st, o.SetStage.GetName(), func(s *pb.SubTask) (Result, bool) {
			return applySetStage(s, index, o.SetStage)
		})
	case *pb.Op_Advance:
		return withShare(st, o.Advance.GetName(), func(s *pb.SubTask) (Result, bool) {
			return applyAdvance(s, index, o.Advance)
		})
	case *pb.Op_Fail:
		return withShare(st, o.Fail.GetName(), func(s *pb.SubTask) (Result, bool) {
			return applyFail(s, index, o.Fail)
		})
	case *pb.Op_Update:
		return withShare(st, o.Update.GetName(), func(s *pb.SubTask) (Result, bool) {
			return applyUpdate(s, index, o.Update)
		})
	case *pb.Op_SetCutover:
		return withShare(st, o.SetCutover.GetName(), func(s *pb.SubTask) (Result, bool) {
			return applySetCutover(s, index, o.SetCutover)
		})
	case *pb.Op_HandleError:
		return withShare(st, o.HandleError.GetName(), func(s *pb.SubTask) (Result, bool) {
			return applyHandleError(s, index, o.HandleError)
		})
	case *pb.Op_SetSchema:
		return withShare(st, o.SetSchema.GetName(), func(s *pb.SubTask) (Result, bool) {
			return applySetSchema(s, index, o.SetSchema)
		})
	case *pb.Op_Validator:
		return withShare(st, o.Validator.GetName(), func(s *pb.SubTask) (Result, bool) {
			return applyValidator(s, index, o.Validator)
		})
	default: // *pb.Op_Delete: ValidateOp knows no other
		name := o.(*pb.Op_Delete).Delete.GetName()
		i, ok := find(st, name)
		if !ok {
			return Result{Err: fmt.Errorf("%w: %s", ErrNotFound, name)}, false
		}
		st.Subtasks = slices.Delete(st.Subtasks, i, i+1)
		return Result{}, true
	}
}

// find returns the position of task name's share in st and whether it is
// there.
func find(st *pb.State, name string) (int, bool) {
	return slices.BinarySearchFunc(st.Subtasks, name, func(s *pb.SubTask, n string) int {
		return cmp.Compare(s.GetConfig().GetName(), n)
	})
}

// get returns task name's share in st, or nil.
func get(st *pb.State, name string) *pb.SubTask {
	if i, ok := find(st, name); ok {
		return st.Subtasks[i]
	}
	return nil
}

// withShare applies f to task name's share, or refuses the op when there
// is none.
func withShare(st *pb.State, name string, f func(s *pb.SubTask) (Result, bool)) (Result, bool) {
	s := get(st, name)
	if s == nil {
		return Result{Err: fmt.Errorf("%w: %s", ErrNotFound, name)}, false
	}
	return f(s)
}

// refuse is the result of a refused op on share s.
func refuse(s *pb.SubTask, err error) (Result, bool) {
	return Result{SubTask: proto.CloneOf(s), Err: err}, false
}

// changed is the result of an op that changed share s at index.
func changed(s *pb.SubTask, index uint64, nowMs int64) (Result, bool) {
	s.UpdatedIndex, s.UpdatedMs = index, nowMs
	return Result{SubTask: proto.CloneOf(s)}, true
}

// same is the result of an op that found share s as it asked.
func same(s *pb.SubTask) (Result, bool) { return Result{SubTask: proto.CloneOf(s)}, false }

// applyStart creates the share; the same start again finds it as it is.
func applyStart(st *pb.State, index uint64, op *pb.Start) (Result, bool) {
	name := op.GetConfig().GetName()
	i, ok := find(st, name)
	if ok {
		s := st.Subtasks[i]
		if proto.Equal(s.GetConfig(), op.GetConfig()) && s.GetCopyset() == op.GetCopyset() && s.GetSourceCopyset() == op.GetSourceCopyset() {
			return same(s)
		}
		return refuse(s, fmt.Errorf("%w: %s", ErrTaskExists, name))
	}
	if len(st.Subtasks) >= MaxTasks {
		return refuse(nil, fmt.Errorf("%w: %d", ErrTooManyTasks, len(st.Subtasks)))
	}
	s := &pb.SubTask{
		Config: proto.CloneOf(op.GetConfig()), Copyset: op.GetCopyset(), SourceCopyset: op.GetSourceCopyset(),
		Stage: op.GetStage(), Unit: op.GetUnit(), Result: &dmpb.ProcessResult{IsCanceled: op.GetStage() == dmpb.Stage_Paused},
		Checkpoint: &pb.Checkpoint{}, Counters: &pb.Counters{}, CreatedIndex: index, CreatedMs: op.GetNowMs(),
	}
	if cp := op.GetCheckpoint(); cp != nil {
		s.Checkpoint = proto.CloneOf(cp)
	}
	for id, c := range op.GetClones() {
		if s.Clones == nil {
			s.Clones = map[uint64]*pb.Clone{}
		}
		s.Clones[id] = proto.CloneOf(c)
	}
	st.Subtasks = slices.Insert(st.Subtasks, i, s)
	return changed(s, index, op.GetNowMs())
}

// applySetStage is upstream's stage machine for an operator's request:
// Resume (Running) from Paused or Stopped clears the errors; Pause from
// Running, or of a share an error paused (then it only marks it
// canceled, which stops auto-resume); Stop from Running or Paused.
// Finished is final; asking for the stage a share is in changes nothing.
func applySetStage(s *pb.SubTask, index uint64, op *pb.SetStage) (Result, bool) {
	from, to := s.GetStage(), op.GetStage()
	if from == dmpb.Stage_Finished {
		return refuse(s, fmt.Errorf("%w: %s is Finished", ErrStage, s.GetConfig().GetName()))
	}
	switch to {
	case dmpb.Stage_Running:
		if from == dmpb.Stage_Running {
			return same(s)
		}
		s.Result, s.Resumable, s.ErrorAt = &dmpb.ProcessResult{}, false, nil
	case dmpb.Stage_Paused:
		switch {
		case from == dmpb.Stage_Stopped:
			return refuse(s, fmt.Errorf("%w: %s is Stopped", ErrStage, s.GetConfig().GetName()))
		case from == dmpb.Stage_Paused && (!op.GetByUser() || s.GetResult().GetIsCanceled()):
			return same(s)
		}
		if s.Result == nil {
			s.Result = &dmpb.ProcessResult{}
		}
		s.Result.IsCanceled = s.Result.IsCanceled || op.GetByUser()
	default: // Stopped
		if from == dmpb.Stage_Stopped {
			return same(s)
		}
		if s.Result == nil {
			s.Result = &dmpb.ProcessResult{}
		}
		s.Result.IsCanceled = s.Result.IsCanceled || op.GetByUser()
	}
	s.Stage = to
	return changed(s, index, op.GetNowMs())
}

// applyAdvance moves a running share's checkpoint, adds to its counters,
// sets its unit and, when finished, makes it Finished.
func applyAdvance(s *pb.SubTask, index uint64, op *pb.Advance) (Result, bool) {
	switch {
	case s.GetStage() != dmpb.Stage_Running:
		return refuse(s, fmt.Errorf("%w: %s is %v, not Running", ErrStage, s.GetConfig().GetName(), s.GetStage()))
	case !proto.Equal(s.GetCheckpoint(), op.GetFrom()):
		return refuse(s, fmt.Errorf("%w: %s stands at %s, the advance starts at %s", ErrCheckpoint,
			s.GetConfig().GetName(), CheckpointString(s.GetCheckpoint()), CheckpointString(op.GetFrom())))
	}
	s.Checkpoint = proto.CloneOf(op.GetTo())
	addCounters(s, op.GetAdd())
	if op.GetClearAsOf() {
		s.AsOf = nil
	}
	for id, p := range op.GetAsOf() {
		if s.AsOf == nil {
			s.AsOf = map[uint64]*pb.Place{}
		}
		s.AsOf[id] = proto.CloneOf(p)
	}
	for id, c := range op.GetClones() {
		if s.Clones == nil {
			s.Clones = map[uint64]*pb.Clone{}
		}
		s.Clones[id] = proto.CloneOf(c)
	}
	for _, id := range op.GetClonesDone() {
		delete(s.Clones, id)
	}
	for _, at := range op.GetOperatorsDone() {
		s.Operators = slices.DeleteFunc(s.Operators, func(o *pb.Operator) bool { return proto.Equal(o.GetAt(), at) })
	}
	s.Unit = op.GetUnit()
	if op.GetFinished() {
		s.Stage = dmpb.Stage_Finished
	}
	return changed(s, index, op.GetNowMs())
}

func addCounters(s *pb.SubTask, a *pb.Counters) {
	if s.Counters == nil {
		s.Counters = &pb.Counters{}
	}
	sumCounters(s.Counters, a)
}

// sumCounters adds a to c.
func sumCounters(c, a *pb.Counters) {
	c.Packets += a.GetPackets()
	c.Records += a.GetRecords()
	c.Chunks += a.GetChunks()
	c.Ops += a.GetOps()
	c.Bytes += a.GetBytes()
	c.Refused += a.GetRefused()
}

// applyFail pauses a running share with the error.
func applyFail(s *pb.SubTask, index uint64, op *pb.Fail) (Result, bool) {
	if s.GetStage() != dmpb.Stage_Running {
		return refuse(s, fmt.Errorf("%w: %s is %v, not Running", ErrStage, s.GetConfig().GetName(), s.GetStage()))
	}
	s.Stage = dmpb.Stage_Paused
	s.Result = &dmpb.ProcessResult{Errors: []*dmpb.ProcessError{proto.CloneOf(op.GetError())}}
	s.Resumable = op.GetResumable()
	s.ErrorAt = proto.CloneOf(op.GetAt())
	return changed(s, index, op.GetNowMs())
}

// applyHandleError sets (Skip, Replace, Inject) or removes (Revert) the
// operator at a source position of a share in the Sync unit; setting one
// needs a position the share has not applied, and replaces an operator
// already there. A Paused share resumes, as upstream's worker resumes a
// subtask after a handled error.
func applyHandleError(s *pb.SubTask, index uint64, op *pb.HandleError) (Result, bool) {
	name, at := s.GetConfig().GetName(), op.GetAt()
	switch {
	case s.GetStage() != dmpb.Stage_Running && s.GetStage() != dmpb.Stage_Paused:
		return refuse(s, fmt.Errorf("%w: %s is %v", ErrStage, name, s.GetStage()))
	case s.GetUnit() != dmpb.UnitType_Sync:
		return refuse(s, fmt.Errorf("%w: %s is in the %v unit; operators work in the Sync unit only", ErrOperator, name, s.GetUnit()))
	}
	i := slices.IndexFunc(s.GetOperators(), func(o *pb.Operator) bool { return proto.Equal(o.GetAt(), at) })
	if op.GetOp() == dmpb.ErrorOp_Revert {
		if i < 0 {
			return refuse(s, fmt.Errorf("%w: %s has no operator at %s", ErrOperator, name, PlaceString(at)))
		}
		s.Operators = slices.Delete(s.Operators, i, i+1)
	} else {
		cp := s.GetCheckpoint()
		// Applied: at or before the last op applied, or before the
		// binlog packet the share is in (the ops before it are in the
		// chunk images or applied).
		applied := comparePlace(at, &pb.Place{Index: cp.GetSourceIndex(), Op: cp.GetSourceOp()}) <= 0
		if p, err := exportfmt.ParsePoint(cp.GetPoint()); err == nil && p.Phase == exportfmt.PhaseBinlog && at.GetIndex() < p.Index {
			applied = true
		}
		if applied {
			return refuse(s, fmt.Errorf("%w: %s has applied %d.%d already (it stands at %s)", ErrOperator, name,
				at.GetIndex(), at.GetOp(), CheckpointString(cp)))
		}
		o := &pb.Operator{Op: op.GetOp(), At: proto.CloneOf(at), Ops: op.GetOps(), Text: op.GetText(), AddedMs: op.GetNowMs()}
		if i >= 0 {
			s.Operators[i] = o
		} else {
			j, _ := slices.BinarySearchFunc(s.Operators, at, func(o *pb.Operator, p *pb.Place) int { return comparePlace(o.GetAt(), p) })
			s.Operators = slices.Insert(s.Operators, j, o)
		}
	}
	if s.GetStage() == dmpb.Stage_Paused {
		s.Stage, s.Result, s.Resumable, s.ErrorAt = dmpb.Stage_Running, &dmpb.ProcessResult{}, false, nil
	}
	return changed(s, index, op.GetNowMs())
}

// applySetSchema sets or removes the operator's override of the state a
// Paused share in the Sync unit tracks for a chunk (OperateSchema). The
// first override keeps what the share tracked before; a removal restores
// it, while the share stands where it stood when the override was set.
func applySetSchema(s *pb.SubTask, index uint64, op *pb.SetSchema) (Result, bool) {
	name, id := s.GetConfig().GetName(), op.GetChunk()
	switch {
	case s.GetStage() != dmpb.Stage_Paused:
		return refuse(s, fmt.Errorf("%w: current stage is %v but not paused, invalid", ErrSchema, s.GetStage()))
	case s.GetUnit() != dmpb.UnitType_Sync:
		return refuse(s, fmt.Errorf("%w: operation SetSchema only supported for sync unit, but now is %v", ErrSchema, s.GetUnit()))
	}
	ov := s.GetSchemas()[id]
	if op.GetRemove() {
		switch {
		case ov == nil:
			return refuse(s, fmt.Errorf("%w: %s has no schema set for chunk %d", ErrSchema, name, id))
		case !proto.Equal(ov.GetAt(), s.GetCheckpoint()):
			return refuse(s, fmt.Errorf("%w: %s has applied past the schema set for chunk %d (set at %s, now at %s); set the schema again instead",
				ErrSchema, name, id, CheckpointString(ov.GetAt()), CheckpointString(s.GetCheckpoint())))
		}
		setClone(s, id, ov.GetHadClone(), ov.GetPrior())
		delete(s.Schemas, id)
		return changed(s, index, op.GetNowMs())
	}
	n := &pb.SchemaOverride{Clone: op.GetClone(), Text: op.GetText(), SetMs: op.GetNowMs(), At: proto.CloneOf(s.GetCheckpoint())}
	if ov != nil {
		n.HadClone, n.Prior = ov.GetHadClone(), ov.GetPrior()
	} else if c, ok := s.GetClones()[id]; ok {
		n.HadClone, n.Prior = true, proto.CloneOf(c)
	}
	setClone(s, id, op.GetClone() != nil, op.GetClone())
	if s.Schemas == nil {
		s.Schemas = map[uint64]*pb.SchemaOverride{}
	}
	s.Schemas[id] = n
	return changed(s, index, op.GetNowMs())
}

// setClone makes chunk id of share s a clone chunk with state c (clone),
// or a normal chunk.
func setClone(s *pb.SubTask, id uint64, clone bool, c *pb.Clone) {
	if !clone {
		delete(s.Clones, id)
		return
	}
	if s.Clones == nil {
		s.Clones = map[uint64]*pb.Clone{}
	}
	s.Clones[id] = proto.CloneOf(c)
}

// comparePlace orders source positions: by log index, then op.
func comparePlace(a, b *pb.Place) int {
	if c := cmp.Compare(a.GetIndex(), b.GetIndex()); c != 0 {
		return c
	}
	return cmp.Compare(a.GetOp(), b.GetOp())
}

// PlaceString is a source position as index.op.
func PlaceString(p *pb.Place) string { return fmt.Sprintf("%d.%d", p.GetIndex(), p.GetOp()) }

// applyUpdate replaces a paused share's config by one that differs only
// where CanUpdate allows.
func applyUpdate(s *pb.SubTask, index uint64, op *pb.Update) (Result, bool) {
	if s.GetStage() != dmpb.Stage_Paused {
		return refuse(s, fmt.Errorf("%w: %s is %v; a config is updated only while Paused", ErrStage, s.GetConfig().GetName(), s.GetStage()))
	}
	if why := CanUpdate(s.GetConfig(), op.GetConfig()); len(why) > 0 {
		return refuse(s, fmt.Errorf("%w: %s", ErrUpdate, why[0]))
	}
	if proto.Equal(s.GetConfig(), op.GetConfig()) {
		return same(s)
	}
	s.Config = proto.CloneOf(op.GetConfig())
	return changed(s, index, op.GetNowMs())
}

// applySetCutover moves a share's cutover one step on (dm/cutover.go):
// FENCING from none or an abort (a cutover starts again), each later step
// from the one before it, ABORTED from any step before COMMITTED. The step
// a share is at again changes nothing, but COMMITTED takes lifted_ms once;
// a step it is past already changes nothing either (a driver resumed after
// a crash repeats its steps). Every step but ABORTED and a COMMITTED
// share's lift needs the share Running; COMMITTED makes it Finished.
func applySetCutover(s *pb.SubTask, index uint64, op *pb.SetCutover) (Result, bool) {
	c, to := s.GetCutover(), op.GetCutover()
	from, step := c.GetStep(), to.GetStep()
	name := s.GetConfig().GetName()
	switch {
	case step == pb.CutoverStep_CUTOVER_ABORTED:
		switch from {
		case pb.CutoverStep_CUTOVER_COMMITTED:
			return refuse(s, fmt.Errorf("%w: the cutover of %s is committed", ErrCutover, name))
		case pb.CutoverStep_CUTOVER_NONE:
			return refuse(s, fmt.Errorf("%w: %s has no cutover to abort", ErrCutover, name))
		case pb.CutoverStep_CUTOVER_ABORTED:
			return same(s)
		}
		s.Cutover = &pb.Cutover{Step: step, StartedMs: c.GetStartedMs(), FenceIndex: c.GetFenceIndex(), FencedMs: c.GetFencedMs(), AbortedMs: to.GetAbortedMs()}
		return changed(s, index, to.GetAbortedMs())
	case from == pb.CutoverStep_CUTOVER_COMMITTED:
		if step == from && c.GetLiftedMs() == 0 && to.GetLiftedMs() != 0 {
			s.Cutover.LiftedMs = to.GetLiftedMs()
			return changed(s, index, to.GetLiftedMs())
		}
		if step == pb.CutoverStep_CUTOVER_FENCING {
			return refuse(s, fmt.Errorf("%w: the cutover of %s is committed", ErrCutover, name))
		}
		return same(s)
	case s.GetStage() != dmpb.Stage_Running:
		return refuse(s, fmt.Errorf("%w: %s is %v; a cutover needs it Running", ErrStage, name, s.GetStage()))
	case step == pb.CutoverStep_CUTOVER_FENCING && (from == pb.CutoverStep_CUTOVER_NONE || from == pb.CutoverStep_CUTOVER_ABORTED):
		s.Cutover = &pb.Cutover{Step: step, StartedMs: to.GetStartedMs()}
		return changed(s, index, to.GetStartedMs())
	case from == pb.CutoverStep_CUTOVER_NONE || from == pb.CutoverStep_CUTOVER_ABORTED:
		return refuse(s, fmt.Errorf("%w: %s has no cutover under way (step %v asked)", ErrCutover, name, step))
	case step <= from:
		if step == pb.CutoverStep_CUTOVER_FENCED && to.GetFenceIndex() != c.GetFenceIndex() {
			return refuse(s, fmt.Errorf("%w: %s was fenced at source index %d, not %d", ErrCutover, name, c.GetFenceIndex(), to.GetFenceIndex()))
		}
		return same(s)
	case step != from+1:
		return refuse(s, fmt.Errorf("%w: %s is at cutover step %v, not the one before %v", ErrCutover, name, from, step))
	}
	n := proto.CloneOf(c)
	n.Step = step
	now := int64(0)
	switch step {
	case pb.CutoverStep_CUTOVER_FENCED:
		if to.GetFenceIndex() == 0 {
			return refuse(s, fmt.Errorf("%w: %s: a fence without its index", ErrCutover, name))
		}
		n.FenceIndex, n.FencedMs, now = to.GetFenceIndex(), to.GetFencedMs(), to.GetFencedMs()
	case pb.CutoverStep_CUTOVER_SYNCED:
		n.SyncedMs, now = to.GetSyncedMs(), to.GetSyncedMs()
	case pb.CutoverStep_CUTOVER_VERIFIED:
		n.VerifiedMs, n.Digest, now = to.GetVerifiedMs(), to.GetDigest(), to.GetVerifiedMs()
	default: // COMMITTED
		n.CommittedMs, n.LiftedMs, now = to.GetCommittedMs(), to.GetLiftedMs(), to.GetCommittedMs()
		s.Stage = dmpb.Stage_Finished
	}
	s.Cutover = n
	return changed(s, index, now)
}

// CanUpdate returns why cur may not become next (nothing when it may): a
// task's name, mode, source, target pool, copysets and incremental start
// are fixed; its sync settings (throttle, apply concurrency, the source's
// send interval) may change.
func CanUpdate(cur, next *pb.TaskConfig) []string {
	var why []string
	fixed := func(key string, equal bool) {
		if !equal {
			why = append(why, fmt.Sprintf("%s may not change", key))
		}
	}
	fixed("name", cur.GetName() == next.GetName())
	fixed("task-mode", cur.GetMode() == next.GetMode())
	fixed("source", proto.Equal(cur.GetSource(), next.GetSource()))
	fixed("target-pool", cur.GetTargetPool() == next.GetTargetPool())
	fixed("copysets", slices.Equal(cur.GetCopysets(), next.GetCopysets()))
	fixed("incremental-from", cur.GetIncrementalFrom() == next.GetIncrementalFrom())
	return why
}

// CheckpointString writes a checkpoint: the packet's start point, then
// the record and the step in it.
func CheckpointString(c *pb.Checkpoint) string {
	return fmt.Sprintf("%s, record %d step %d", datasync.PointString(c.GetPoint()), c.GetRecord(), c.GetStep())
}
