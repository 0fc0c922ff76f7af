package disagg

import (
	"cmp"
	"fmt"
	"slices"

	pb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
)

// applyOp applies op at index to st and returns its result and whether st
// changed. The conflict checks are here, in the log's order, so of two
// concurrent proposals on one key only the first can win: an AddLock on
// a marked file and a MarkDelete on a locked one are refused. Every check
// comes before the first change, and nothing here reads a clock or
// anything outside st and op: every replica computes the same. The caller
// stamps st.Applied.
func applyOp(st *pb.State, index uint64, op *pb.Op) (Result, bool) {
	if err := validateOp(op); err != nil {
		return Result{Err: fmt.Errorf("%w: %v", ErrInvalidOp, err)}, false
	}
	switch o := op.GetOp().(type) {
	case *pb.Op_AddLock:
		return applyAddLock(st, index, o.AddLock)
	case *pb.Op_MarkDelete:
		return applyMark(st, index, o.MarkDelete.GetKey(), o.MarkDelete.GetTimeMs())
	case *pb.Op_Release:
		return applyRelease(st, o.Release)
	case *pb.Op_LockClone:
		return applyLockClone(st, index, o.LockClone)
	case *pb.Op_ReleaseClone:
		return applyReleaseClone(st, o.ReleaseClone)
	case *pb.Op_MarkObject:
		return applyMark(st, index, o.MarkObject.GetName(), o.MarkObject.GetTimeMs())
	case *pb.Op_MarkObjects:
		return applyMarkBatch(st, index, o.MarkObjects)
	default: // *pb.Op_Forget: validateOp knows no other
		return applyForget(st, o.(*pb.Op_Forget).Forget)
	}
}

// findFile returns the position of key in st.Files (where it would go).
func findFile(st *pb.State, key string) (int, bool) {
	return slices.BinarySearchFunc(st.Files, key, func(f *pb.DataFile, k string) int { return cmp.Compare(f.GetKey(), k) })
}

// lockCount counts the locks of the table, upstream's and clone locks.
func lockCount(st *pb.State) int {
	n := 0
	for _, f := range st.Files {
		n += len(f.Locks) + len(f.CloneLocks)
	}
	return n
}

// admit is the bound check of an op that adds a file (newFile) or a lock
// (newLock) to st: the service runs it before proposing, Apply again.
func admit(st *pb.State, newFile, newLock bool) error {
	switch {
	case newFile && len(st.Files) >= MaxFiles:
		return fmt.Errorf("%w: %d data files (at most %d)", ErrFull, len(st.Files), MaxFiles)
	case newLock && lockCount(st) >= MaxLocks:
		return fmt.Errorf("%w: %d locks (at most %d)", ErrFull, lockCount(st), MaxLocks)
	}
	return nil
}

// markedReason and lockedReason are upstream's conflict reasons, the
// owner's precheck's and Apply's alike.
func markedReason(key, delMark string) string {
	return fmt.Sprintf("data file is mark deleted, key=%s delmark=%s", key, delMark)
}

func lockedReason(key, lockBy string) string {
	return fmt.Sprintf("data file is locked, key=%s lock_by=%s", key, lockBy)
}

// findLock finds lock (store, seq) in locks (ascending): its place, and
// whether it is there.
func findLock(locks []*pb.Lock, store, seq uint64) (int, bool) {
	return slices.BinarySearchFunc(locks, [2]uint64{store, seq}, func(l *pb.Lock, k [2]uint64) int {
		return cmp.Or(cmp.Compare(l.GetStoreId(), k[0]), cmp.Compare(l.GetSeq(), k[1]))
	})
}

// admitLock is the bound check of lock (store, seq) on key: none for a
// lock already held (a retry changes nothing), else the table's bounds
// and the file's. The service's admission and Apply both run it.
func admitLock(st *pb.State, key string, store, seq uint64) error {
	i, found := findFile(st, key)
	var locks []*pb.Lock
	if found {
		locks = st.Files[i].Locks
	}
	if _, held := findLock(locks, store, seq); held {
		return nil
	}
	if err := admit(st, !found, true); err != nil {
		return err
	}
	if len(locks) >= MaxLocksPerFile {
		return fmt.Errorf("%w: %s has %d locks (at most %d)", ErrFull, key, len(locks), MaxLocksPerFile)
	}
	return nil
}

// applyAddLock is upstream tryAddLock's decision: a delete-marked file
// is a conflict; the same lock again is a success that changes nothing
// (a client's retry after a lost answer); else the lock is added.
func applyAddLock(st *pb.State, index uint64, op *pb.AddLock) (Result, bool) {
	i, found := findFile(st, op.GetKey())
	var f *pb.DataFile
	if found {
		f = st.Files[i]
		if f.GetDeleted() {
			return Result{Conflict: markedConflict(op.GetKey())}, false
		}
	}
	j, held := findLock(f.GetLocks(), op.GetLockStoreId(), op.GetLockSeq())
	if held {
		return Result{}, false
	}
	if err := admitLock(st, op.GetKey(), op.GetLockStoreId(), op.GetLockSeq()); err != nil {
		return Result{Err: err}, false
	}
	if !found {
		f = &pb.DataFile{Key: op.GetKey()}
		st.Files = slices.Insert(st.Files, i, f)
	}
	f.Locks = slices.Insert(f.Locks, j, &pb.Lock{StoreId: op.GetLockStoreId(), Seq: op.GetLockSeq(), Index: index})
	return Result{}, true
}

// applyMark is upstream tryMarkDelete's decision (MarkDelete), and
// disagg gc's on any other object (MarkObject): any lock is a conflict
// naming the first; an object already marked is a success that changes
// nothing; else the mark is set at the op's time.
func applyMark(st *pb.State, index uint64, name string, timeMs int64) (Result, bool) {
	i, found := findFile(st, name)
	if found {
		f := st.Files[i]
		if by := lockBy(f); by != "" {
			return Result{Conflict: lockedConflict(name, by)}, false
		}
		if f.GetDeleted() {
			return Result{}, false
		}
	}
	if err := admit(st, !found, false); err != nil {
		return Result{Err: err}, false
	}
	if !found {
		st.Files = slices.Insert(st.Files, i, &pb.DataFile{Key: name})
	}
	f := st.Files[i]
	f.Deleted, f.MarkedIndex, f.MarkedMs = true, index, timeMs
	return Result{}, true
}

// applyRelease removes every lock of the store with seq <= up_to_seq
// (upstream's GC of a store's superseded locks); a file left with neither
// locks nor a mark leaves the table.
func applyRelease(st *pb.State, op *pb.Release) (Result, bool) {
	var released []string
	for _, f := range st.Files {
		if len(f.Locks) == 0 {
			continue // not a data file key, or no upstream locks
		}
		k, _ := ParseKey(f.GetKey())
		f.Locks = slices.DeleteFunc(f.Locks, func(l *pb.Lock) bool {
			if l.GetStoreId() == op.GetLockStoreId() && l.GetSeq() <= op.GetUpToSeq() {
				released = append(released, k.LockKey(l.GetStoreId(), l.GetSeq()))
				return true
			}
			return false
		})
	}
	dropEmpty(st)
	slices.Sort(released)
	return Result{Released: released}, len(released) > 0
}
