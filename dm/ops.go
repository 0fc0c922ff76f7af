package dm

import (
	"errors"
	"fmt"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/internal/kinds"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	dmpb "github.com/chunkraft/chunkraft/proto/dm/pb"
)

// MaxTasks bounds the tasks with a share on one copyset.
const MaxTasks = 16

// Why an op was refused when it applied (Result.Err wraps one of them),
// the same on every replica.
var (
	// ErrNotFound: no share of the op's task on this copyset.
	ErrNotFound = errors.New("no sub task with that name")
	// ErrTaskExists: a Start under a name whose share has another config.
	ErrTaskExists = errors.New("a sub task with that name exists with another config")
	// ErrTooManyTasks: the copyset holds shares of MaxTasks tasks.
	ErrTooManyTasks = errors.New("too many dm tasks on this copyset")
	// ErrStage: the share's stage does not allow the op.
	ErrStage = errors.New("the sub task's stage does not allow this")
	// ErrCheckpoint: an Advance that does not start at the share's
	// checkpoint.
	ErrCheckpoint = errors.New("the advance does not start at the sub task's checkpoint")
	// ErrUpdate: an Update changing what may not change.
	ErrUpdate = errors.New("the config change is not allowed")
	// ErrCutover: a cutover step the share's cutover does not allow.
	ErrCutover = errors.New("the cutover step is not allowed")
	// ErrInvalidOp: an op in the log that admission would have refused.
	ErrInvalidOp = errors.New("invalid dm op")
	// ErrOperator: a HandleError the share cannot take (not in Sync, a
	// position already applied, no operator to revert).
	ErrOperator = errors.New("the error operator is not allowed")
	// ErrSchema: a SetSchema the share cannot take (not Paused in Sync,
	// no override to remove, one applied past).
	ErrSchema = errors.New("the schema operation is not allowed")
	// ErrValidator: a validator op naming a row the share does not have,
	// or a second open row of a chunk.
	ErrValidator = errors.New("the validation operation is not allowed")
)

// Result is the apply result of every dm op.
type Result struct {
	// SubTask is a copy of the op's share after the op; nil when there is
	// none (and after Delete).
	SubTask *pb.SubTask
	// Err says why the op was refused (nothing changed); nil when applied.
	Err error
}

// EncodeOp checks op (its admission check) and returns the replicated op:
// the op header (kinds.DM) and op.
func EncodeOp(op *pb.Op) ([]byte, error) {
	if err := ValidateOp(op); err != nil {
		return nil, err
	}
	return copyset.EncodeOp(kinds.DM, op)
}

// ValidateOp is the admission check of op: what does not depend on the
// state.
func ValidateOp(op *pb.Op) error {
	named := func(what, name string) error {
		if name == "" {
			return fmt.Errorf("dm %s: no task name", what)
		}
		return nil
	}
	switch o := op.GetOp().(type) {
	case *pb.Op_Start:
		s := o.Start
		if _, err := FileOf(s.GetConfig()).Config(); err != nil {
			return fmt.Errorf("dm start: %w", err)
		}
		switch {
		case s.GetCopyset() == 0 || s.GetSourceCopyset() == 0:
			return errors.New("dm start: copyset and source copyset are required")
		case s.GetStage() != dmpb.Stage_Running && s.GetStage() != dmpb.Stage_Paused:
			return fmt.Errorf("dm start: stage %v: want Running or Paused", s.GetStage())
		case !unitOK(s.GetUnit()):
			return fmt.Errorf("dm start: unit %v: want Dump, Load or Sync", s.GetUnit())
		case s.GetConfig().GetMode() == pb.Mode_INCREMENTAL:
			if s.GetUnit() != dmpb.UnitType_Sync || s.GetCheckpoint().GetPoint() == nil {
				return errors.New("dm start: task-mode incremental starts in Sync, at a checkpoint")
			}
			if _, err := exportfmt.ParsePoint(s.GetCheckpoint().GetPoint()); err != nil {
				return fmt.Errorf("dm start: checkpoint: %w", err)
			}
		case s.GetCheckpoint() != nil || len(s.GetClones()) > 0:
			return fmt.Errorf("dm start: task-mode %s starts at the start of the export", ModeName(s.GetConfig().GetMode()))
		}
		return nil
	case *pb.Op_SetStage:
		switch o.SetStage.GetStage() {
		case dmpb.Stage_Running, dmpb.Stage_Paused, dmpb.Stage_Stopped:
		default:
			return fmt.Errorf("dm set stage: %v: want Running, Paused or Stopped", o.SetStage.GetStage())
		}
		return named("set stage", o.SetStage.GetName())
	case *pb.Op_Advance:
		a := o.Advance
		if !unitOK(a.GetUnit()) {
			return fmt.Errorf("dm advance: unit %v: want Dump, Load or Sync", a.GetUnit())
		}
		if a.GetTo() == nil {
			return errors.New("dm advance: no checkpoint to advance to")
		}
		return named("advance", a.GetName())
	case *pb.Op_Fail:
		if o.Fail.GetError() == nil {
			return errors.New("dm fail: no error")
		}
		return named("fail", o.Fail.GetName())
	case *pb.Op_Delete:
		return named("delete", o.Delete.GetName())
	case *pb.Op_SetCutover:
		c := o.SetCutover.GetCutover()
		if c.GetStep() <= pb.CutoverStep_CUTOVER_NONE || c.GetStep() > pb.CutoverStep_CUTOVER_ABORTED {
			return fmt.Errorf("dm set cutover: step %v", c.GetStep())
		}
		return named("set cutover", o.SetCutover.GetName())
	case *pb.Op_Update:
		if _, err := FileOf(o.Update.GetConfig()).Config(); err != nil {
			return fmt.Errorf("dm update: %w", err)
		}
		if o.Update.GetConfig().GetName() != o.Update.GetName() {
			return fmt.Errorf("dm update: config of task %q for task %q", o.Update.GetConfig().GetName(), o.Update.GetName())
		}
		return nil
	case *pb.Op_HandleError:
		if err := validHandleError(o.HandleError); err != nil {
			return fmt.Errorf("dm handle error: %w", err)
		}
		return named("handle error", o.HandleError.GetName())
	case *pb.Op_SetSchema:
		if err := validSetSchema(o.SetSchema); err != nil {
			return fmt.Errorf("dm set schema: %w", err)
		}
		return named("set schema", o.SetSchema.GetName())
	case *pb.Op_Validator:
		if err := validValidatorOp(o.Validator); err != nil {
			return fmt.Errorf("dm validator: %w", err)
		}
		return named("validator", o.Validator.GetName())
	}
	return errors.New("dm op: none of the known ops")
}

// validValidatorOp checks a validator op on its own.
func validValidatorOp(op *pb.ValidatorOp) error {
	switch o := op.GetOp().(type) {
	case *pb.ValidatorOp_Add:
		if o.Add.GetErrorType() == "" {
			return errors.New("a row without its error type")
		}
	case *pb.ValidatorOp_Set:
		switch o.Set.GetState() {
		case dmpb.ValidateErrorState_NewErr, dmpb.ValidateErrorState_IgnoredErr, dmpb.ValidateErrorState_ResolvedErr:
		default:
			return fmt.Errorf("row state %v: want NewErr, IgnoredErr or ResolvedErr", o.Set.GetState())
		}
		if !o.Set.GetAll() && len(o.Set.GetIds()) == 0 {
			return errors.New("no rows named")
		}
	case *pb.ValidatorOp_Clear:
		if !o.Clear.GetAll() && len(o.Clear.GetIds()) == 0 {
			return errors.New("no rows named")
		}
	case *pb.ValidatorOp_Cutover:
		if _, _, _, err := parseCutover(o.Cutover); err != nil {
			return err
		}
	case *pb.ValidatorOp_Checkpoint:
	default:
		return errors.New("none of the known validator ops")
	}
	return nil
}

// validSetSchema checks a SetSchema op on its own.
func validSetSchema(op *pb.SetSchema) error {
	c := op.GetClone()
	switch {
	case op.GetRemove() && c != nil:
		return errors.New("a removal carries no clone state")
	case c == nil:
		return nil
	case c.GetSn() == 0:
		return errors.New("a clone's sn is at least 1")
	case len(c.GetWritten()) != schemaBlocks/8:
		return fmt.Errorf("a clone's written blocks are a bitmap of %d bytes, not %d", schemaBlocks/8, len(c.GetWritten()))
	}
	return nil
}

// validHandleError checks a HandleError op on its own.
func validHandleError(h *pb.HandleError) error {
	if h.GetAt().GetIndex() == 0 {
		return errors.New("no source position")
	}
	switch h.GetOp() {
	case dmpb.ErrorOp_Skip, dmpb.ErrorOp_Revert:
		if len(h.GetOps()) > 0 {
			return fmt.Errorf("%v takes no ops", h.GetOp())
		}
	case dmpb.ErrorOp_Replace, dmpb.ErrorOp_Inject:
		if len(h.GetOps()) == 0 {
			return fmt.Errorf("%v needs at least one op", h.GetOp())
		}
	default:
		return fmt.Errorf("operator %v: want Skip, Replace, Inject or Revert", h.GetOp())
	}
	for i, op := range h.GetOps() {
		if err := validChunkOp(op); err != nil {
			return fmt.Errorf("op %d: %w", i+1, err)
		}
	}
	return nil
}

// validChunkOp checks an operator's chunk op as ParseChunkOps would have
// made it.
func validChunkOp(op *pb.ChunkOp) error {
	switch op.GetKind() {
	case pb.ChunkOp_NOOP:
		return nil
	case pb.ChunkOp_WRITE:
		n, off := op.GetLength(), op.GetOffset()
		switch {
		case off%opBlock != 0 || n == 0 || n%opBlock != 0 || n > maxOpWrite || uint64(off)+uint64(n) > opChunkSize:
			return fmt.Errorf("write at %d of %d bytes: not whole blocks of one chunk, at most %d bytes", off, n, maxOpWrite)
		case len(op.GetData()) != 0 && len(op.GetData()) != int(n):
			return fmt.Errorf("write of %d bytes carries %d", n, len(op.GetData()))
		}
	case pb.ChunkOp_DELETE, pb.ChunkOp_DELETE_SNAP:
	default:
		return fmt.Errorf("kind %v", op.GetKind())
	}
	return nil
}

func unitOK(u dmpb.UnitType) bool {
	return u == dmpb.UnitType_Dump || u == dmpb.UnitType_Load || u == dmpb.UnitType_Sync
}
