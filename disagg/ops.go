package disagg

import (
	"errors"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/kinds"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
)

// The table's bounds: admission (the service, before proposing) and Apply
// refuse an op that would pass them.
const (
	// MaxFiles bounds the data files the table holds (locked or marked).
	MaxFiles = 4096
	// MaxLocksPerFile bounds the locks on one data file.
	MaxLocksPerFile = 64
	// MaxLocks bounds the locks of the whole table.
	MaxLocks = 16384
)

var (
	// ErrFull: the op would pass one of the table's bounds.
	ErrFull = errors.New("disagg lock table full")
	// ErrInvalidOp: an op in the log that admission would have refused.
	ErrInvalidOp = errors.New("invalid disagg op")
)

// Result is the apply result of every disagg op.
type Result struct {
	// Conflict, when not empty, is why an AddLock or MarkDelete was
	// refused (upstream's conflict reason); nothing changed.
	Conflict string
	// Released are the lock keys a Release removed, ascending.
	Released []string
	// Err says why the op was refused for another reason (a bound, an
	// invalid op); nothing changed.
	Err error
}

// encodeOp validates op and returns the op header (kinds.Disagg) and op.
func encodeOp(op *pb.Op) ([]byte, error) {
	if err := validateOp(op); err != nil {
		return nil, err
	}
	return copyset.EncodeOp(kinds.Disagg, op)
}

// validateOp is the admission check of every op: keys are data file keys
// (ParseKey). Lock store ids and sequences are any uint64, as upstream.
func validateOp(op *pb.Op) error {
	switch o := op.GetOp().(type) {
	case *pb.Op_AddLock:
		_, err := ParseKey(o.AddLock.GetKey())
		return err
	case *pb.Op_MarkDelete:
		_, err := ParseKey(o.MarkDelete.GetKey())
		return err
	case *pb.Op_Release:
		return nil
	}
	return errors.New("disagg op: none of the known ops")
}
