package datasync

import (
	"errors"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/kinds"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/syncstatepb"
)

// Why an op was refused when it applied (Result.Err wraps one of them),
// the same on every replica.
var (
	// ErrNotFound: no sub-task with the op's (tid, pid, name).
	ErrNotFound = errors.New("sync sub-task not found")
	// ErrTaskNotNamed: an op without a task name (one written before a
	// copyset held several tasks, or an upstream client's request) for a
	// (tid, pid) that has sub-tasks of several tasks.
	ErrTaskNotNamed = errors.New("the sync task is not named, and the copyset has several")
	// ErrSameTask: a PutSubTask with the token the sub-task already has
	// (upstream DataCollector's words).
	ErrSameTask = errors.New("why send a same task?")
	// ErrTaskExists: a PutSubTask of another export (export_id) for a
	// sub-task that exists: a create of a task whose name is taken
	// (upstream SyncTool's words).
	ErrTaskExists = errors.New("sync task already exists(creating or created)")
	// ErrTooManySubTasks: the copyset holds MaxSubTasks sub-tasks.
	ErrTooManySubTasks = errors.New("too many sync sub-tasks on this copyset")
	// ErrTooManyTasks: the (tid, pid) has sub-tasks of MaxTasksPerPool
	// tasks.
	ErrTooManyTasks = errors.New("too many sync tasks on this pool")
	// ErrTokenMismatch: the op's token is not the sub-task's (upstream
	// SyncTool's words).
	ErrTokenMismatch = errors.New("token not match")
	// ErrStatus: the sub-task's status does not allow the op.
	ErrStatus = errors.New("sync sub-task status does not allow this")
	// ErrPointMismatch: an Advance that does not start at the stored point.
	ErrPointMismatch = errors.New("start point is not the sub-task's sync point")
	// ErrNotFull: a binlog end or a finished packet for a mode other than
	// kFull.
	ErrNotFull = errors.New("only a kFull sub-task has a binlog end and finishes")
	// ErrBinlogEnd: a finished packet before the binlog end, or a second,
	// different binlog end.
	ErrBinlogEnd = errors.New("binlog end")
	// ErrInvalidOp: an op in the log that admission would have refused.
	ErrInvalidOp = errors.New("invalid sync op")
)

// Result is the apply result of every sync op.
type Result struct {
	// Record is a copy of the op's sub-task after the op; nil when it does
	// not exist (and for DeleteTask and DeleteAll).
	Record *pb.SubTask
	// Removed counts the sub-tasks a DeleteTask or DeleteAll removed.
	Removed int
	// Err says why the op was refused (nothing changed); nil when applied.
	Err error
}

// EncodePutSubTask returns the replicated op of p, or ValidatePutSubTask's
// error.
func EncodePutSubTask(p *pb.PutSubTask) ([]byte, error) {
	return encodeOp(&pb.Op{Op: &pb.Op_Put{Put: p}})
}

// EncodeAdvance returns the replicated op of a, or ValidateAdvance's error.
func EncodeAdvance(a *pb.Advance) ([]byte, error) {
	return encodeOp(&pb.Op{Op: &pb.Op_Advance{Advance: a}})
}

// EncodeTouch returns the replicated op of t, or ValidateTouch's error.
func EncodeTouch(t *pb.Touch) ([]byte, error) {
	return encodeOp(&pb.Op{Op: &pb.Op_Touch{Touch: t}})
}

// EncodeSetStatus returns the replicated op of s, or ValidateSetStatus's
// error.
func EncodeSetStatus(s *pb.SetStatus) ([]byte, error) {
	return encodeOp(&pb.Op{Op: &pb.Op_SetStatus{SetStatus: s}})
}

// EncodeSetBinlogEnd returns the replicated op of s, or
// ValidateSetBinlogEnd's error.
func EncodeSetBinlogEnd(s *pb.SetBinlogEnd) ([]byte, error) {
	return encodeOp(&pb.Op{Op: &pb.Op_SetBinlogEnd{SetBinlogEnd: s}})
}

// EncodeDeleteTask returns the replicated op of d, or ValidateDeleteTask's
// error.
func EncodeDeleteTask(d *pb.DeleteTask) ([]byte, error) {
	return encodeOp(&pb.Op{Op: &pb.Op_DeleteTask{DeleteTask: d}})
}

// EncodeDeleteAll returns the replicated op removing every sub-task.
func EncodeDeleteAll() []byte {
	b, err := encodeOp(&pb.Op{Op: &pb.Op_DeleteAll{DeleteAll: &pb.DeleteAll{}}})
	if err != nil {
		panic(err) // an empty message always encodes
	}
	return b
}

// encodeOp validates op and returns the op header (kinds.Sync) and op.
func encodeOp(op *pb.Op) ([]byte, error) {
	if err := validateOp(op); err != nil {
		return nil, err
	}
	return copyset.EncodeOp(kinds.Sync, op)
}

// validateOp runs the admission check of op's kind.
func validateOp(op *pb.Op) error {
	switch o := op.GetOp().(type) {
	case *pb.Op_Put:
		return ValidatePutSubTask(o.Put)
	case *pb.Op_Advance:
		return ValidateAdvance(o.Advance)
	case *pb.Op_Touch:
		return ValidateTouch(o.Touch)
	case *pb.Op_SetStatus:
		return ValidateSetStatus(o.SetStatus)
	case *pb.Op_SetBinlogEnd:
		return ValidateSetBinlogEnd(o.SetBinlogEnd)
	case *pb.Op_DeleteTask:
		return ValidateDeleteTask(o.DeleteTask)
	case *pb.Op_DeleteAll:
		return nil
	}
	return errors.New("sync op: none of the known ops")
}

// EncodeOp returns the replicated op of any sync op (its kind's admission
// check first): for ops that reach a leader through SyncInternal.Propose.
func EncodeOp(op *pb.Op) ([]byte, error) { return encodeOp(op) }
