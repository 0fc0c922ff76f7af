package disagg

import (
	"errors"
	"fmt"
	"strings"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/kinds"
	"github.com/chunkraft/chunkraft/internal/objstore"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
)

// The state's bounds: admission (the service, before proposing) and Apply
// refuse an op that would pass them. Upstream's locks and delete marks are
// objects in S3 and count against none of them.
const (
	// MaxFiles bounds the table's entries: objects clone locks hold or
	// disagg gc marked (not data files: their marks are .del objects).
	MaxFiles = 4096
	// MaxLocks bounds the clone locks of the table.
	MaxLocks = 16384
	// MaxPending bounds the lock and mark decisions in flight.
	MaxPending = 4096
	// MaxForget bounds the names of one Forget op, MaxMarkBatch those of
	// one MarkObjects op, MaxSettle the decisions of one Settle op.
	MaxForget    = 256
	MaxMarkBatch = 256
	MaxSettle    = 256
	// MaxCloneMembers bounds the members a LockClone records for its
	// copyset, and maxPeerLen the length of each.
	MaxCloneMembers = 16
	maxPeerLen      = 256
	// gcFill is the most entries disagg gc fills the table to with its
	// marks: the rest stays for clone locks.
	gcFill = MaxFiles * 3 / 4
)

var (
	// ErrFull: the op would pass one of the table's bounds.
	ErrFull = errors.New("disagg lock table full")
	// ErrInvalidOp: an op in the log that admission would have refused.
	ErrInvalidOp = errors.New("invalid disagg op")
)

// Result is the apply result of every disagg op.
type Result struct {
	// Conflict, when not empty, is why a Pend (a mark on a clone-locked
	// key), a LockClone or a MarkObject was refused; nothing changed.
	Conflict string
	// Busy, when not empty, says which decision of the other kind is
	// pending on the key of a Pend or LockClone; nothing changed: the
	// proposer waits for its Settle and proposes again.
	Busy string
	// Index is a Pend's: the index of the pending decision it added or
	// joined.
	Index uint64
	// Released are the lock keys a Release removed, the clone holder a
	// ReleaseClone removed, the names a Forget removed; ascending.
	Released []string
	// Locked are the names of a MarkObjects that a lock holds (refused,
	// ascending); the batch's other names are marked.
	Locked []string
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

// validateOp is the admission check of every op: upstream's keys are data
// file keys (ParseKey); lock store ids and sequences are any uint64, as
// upstream. Clone locks and gc ops name any object (validName), a clone
// chunk with non-zero pool and copyset.
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
	case *pb.Op_Pend:
		_, err := ParseKey(o.Pend.GetKey())
		return err
	case *pb.Op_Settle:
		if n := len(o.Settle.GetDone()); n == 0 || n > MaxSettle {
			return fmt.Errorf("settle of %d decisions (1 to %d)", n, MaxSettle)
		}
		for _, ref := range o.Settle.GetDone() {
			if _, err := ParseKey(ref.GetKey()); err != nil {
				return err
			}
		}
		return nil
	case *pb.Op_LockClone:
		if err := validMembers(o.LockClone.GetMembers()); err != nil {
			return err
		}
		return validClone(o.LockClone.GetName(), o.LockClone.GetPool(), o.LockClone.GetCopyset())
	case *pb.Op_ReleaseClone:
		return validClone(o.ReleaseClone.GetName(), o.ReleaseClone.GetPool(), o.ReleaseClone.GetCopyset())
	case *pb.Op_MarkObject:
		return validGcName(o.MarkObject.GetName())
	case *pb.Op_MarkObjects:
		return validMarkBatch(o.MarkObjects.GetNames())
	case *pb.Op_Forget:
		if len(o.Forget.GetNames()) > MaxForget {
			return fmt.Errorf("forget of %d names (at most %d)", len(o.Forget.GetNames()), MaxForget)
		}
		for _, n := range o.Forget.GetNames() {
			if err := validName(n); err != nil {
				return err
			}
		}
		return nil
	}
	return errors.New("disagg op: none of the known ops")
}

// validName checks an object name of the table: a valid object name
// (objstore.ValidateName) of at most maxKeyLen bytes.
func validName(name string) error {
	if len(name) > maxKeyLen {
		return fmt.Errorf("object name of %d bytes (at most %d)", len(name), maxKeyLen)
	}
	return objstore.ValidateName(name)
}

func validClone(name string, pool, copyset uint32) error {
	if pool == 0 || copyset == 0 {
		return fmt.Errorf("clone chunk %d/%d: pool and copyset must not be 0", pool, copyset)
	}
	return validName(name)
}

// validMembers checks a clone copyset's members: at most
// MaxCloneMembers, each non-empty and at most maxPeerLen bytes, sorted
// without repeats (one record per configuration: Apply compares them).
func validMembers(members []string) error {
	if len(members) > MaxCloneMembers {
		return fmt.Errorf("clone copyset of %d members (at most %d)", len(members), MaxCloneMembers)
	}
	for i, m := range members {
		switch {
		case m == "" || len(m) > maxPeerLen:
			return fmt.Errorf("clone copyset member %q: empty or longer than %d bytes", m, maxPeerLen)
		case i > 0 && m <= members[i-1]:
			return fmt.Errorf("clone copyset members not sorted without repeats: %q after %q", m, members[i-1])
		}
	}
	return nil
}

// validMarkBatch checks the names of a MarkObjects: 1 to MaxMarkBatch,
// strictly ascending, each a data file key or a name MarkObject takes.
func validMarkBatch(names []string) error {
	if len(names) == 0 || len(names) > MaxMarkBatch {
		return fmt.Errorf("mark of %d names (1 to %d)", len(names), MaxMarkBatch)
	}
	for i, name := range names {
		if i > 0 && name <= names[i-1] {
			return fmt.Errorf("mark names not strictly ascending: %q after %q", name, names[i-1])
		}
		if _, err := ParseKey(name); err == nil {
			continue
		}
		if err := validGcName(name); err != nil {
			return err
		}
	}
	return nil
}

// validGcName checks a name disagg gc marks with MarkObject: not a lock
// or .del object (never collected), not a data file key (MarkDelete marks
// those, with its .del object).
func validGcName(name string) error {
	if err := validName(name); err != nil {
		return err
	}
	if skippedByGc(name) {
		return fmt.Errorf("%q is a lock or delete-mark object", name)
	}
	if _, err := ParseKey(name); err == nil {
		return fmt.Errorf("%q is a data file key: marked by MarkDelete", name)
	}
	return nil
}

// skippedByGc reports whether gc leaves name alone: lock objects and
// delete marks.
func skippedByGc(name string) bool {
	return strings.HasPrefix(name, LockPrefix) || strings.HasSuffix(name, DelMarkSuffix)
}
