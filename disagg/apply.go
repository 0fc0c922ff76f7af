package disagg

import (
	"cmp"
	"fmt"
	"slices"

	pb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
)

// applyOp applies op at index to st and returns its result and whether st
// changed. The decisions are here, in the log's order, so of two
// concurrent proposals on one key only the first can win: a Pend of one
// kind while one of the other kind is pending on the key is busy, a mark
// on a clone-locked object a conflict. Every check comes before the first
// change, and nothing here reads a clock or anything outside st and op:
// every replica computes the same. The caller stamps st.Applied.
func applyOp(st *pb.State, index uint64, op *pb.Op) (Result, bool) {
	if err := validateOp(op); err != nil {
		return Result{Err: fmt.Errorf("%w: %v", ErrInvalidOp, err)}, false
	}
	switch o := op.GetOp().(type) {
	case *pb.Op_Pend:
		return applyPend(st, index, o.Pend)
	case *pb.Op_Settle:
		return applySettle(st, o.Settle)
	case *pb.Op_AddLock, *pb.Op_MarkDelete, *pb.Op_Release:
		return Result{}, false // format 0's upstream ops: their objects are in S3
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

// pendingOn returns the positions [i, j) of key's pending decisions in
// st.Pending (ascending key, index).
func pendingOn(st *pb.State, key string) (int, int) {
	i, _ := slices.BinarySearchFunc(st.Pending, key, func(p *pb.Pending, k string) int { return cmp.Compare(p.GetKey(), k) })
	j := i
	for j < len(st.Pending) && st.Pending[j].GetKey() == key {
		j++
	}
	return i, j
}

// pendingKind reports whether a decision of kind mark is pending on key.
func pendingKind(st *pb.State, key string, mark bool) *pb.Pending {
	i, j := pendingOn(st, key)
	for _, p := range st.Pending[i:j] {
		if p.GetMark() == mark {
			return p
		}
	}
	return nil
}

// lockCount counts the clone locks of the table.
func lockCount(st *pb.State) int {
	n := 0
	for _, f := range st.Files {
		n += len(f.CloneLocks)
	}
	return n
}

// admit is the bound check of an op that adds an entry (newFile) or a
// clone lock (newLock) to st: the service runs it before proposing, Apply
// again.
func admit(st *pb.State, newFile, newLock bool) error {
	switch {
	case newFile && len(st.Files) >= MaxFiles:
		return fmt.Errorf("%w: %d entries (at most %d)", ErrFull, len(st.Files), MaxFiles)
	case newLock && lockCount(st) >= MaxLocks:
		return fmt.Errorf("%w: %d clone locks (at most %d)", ErrFull, lockCount(st), MaxLocks)
	}
	return nil
}

// admitPend is the bound check of a new pending decision.
func admitPend(st *pb.State) error {
	if len(st.Pending) >= MaxPending {
		return fmt.Errorf("%w: %d decisions in flight (at most %d)", ErrFull, len(st.Pending), MaxPending)
	}
	return nil
}

// markedReason and lockedReason are upstream's conflict reasons.
func markedReason(key, delMark string) string {
	return fmt.Sprintf("data file is mark deleted, key=%s delmark=%s", key, delMark)
}

func lockedReason(key, lockBy string) string {
	return fmt.Sprintf("data file is locked, key=%s lock_by=%s", key, lockBy)
}

// busyReason says why a Pend must wait: a decision of the other kind.
func busyReason(p *pb.Pending) string {
	what := "a lock"
	if p.GetMark() {
		what = "a delete mark"
	}
	return fmt.Sprintf("%s of %s is being decided (index %d)", what, p.GetKey(), p.GetIndex())
}

// applyPend starts a decision on a data file key: busy while a decision
// of the other kind on the key is pending (the proposer waits for its
// Settle and proposes again); a mark on a key a clone lock holds is a
// conflict; the same decision pending already is joined (Index is its
// Pend's); else it is added. The decision itself (the objects in S3) is
// the leader's, while the entry keeps the other kind out.
func applyPend(st *pb.State, index uint64, op *pb.Pend) (Result, bool) {
	key := op.GetKey()
	if p := pendingKind(st, key, !op.GetMark()); p != nil {
		return Result{Busy: busyReason(p)}, false
	}
	if op.GetMark() {
		if i, found := findFile(st, key); found {
			if by := lockBy(st.Files[i]); by != "" {
				return Result{Conflict: lockedReason(key, by)}, false
			}
		}
	}
	i, j := pendingOn(st, key)
	for _, p := range st.Pending[i:j] {
		if p.GetMark() == op.GetMark() && (op.GetMark() || (p.GetStoreId() == op.GetLockStoreId() && p.GetSeq() == op.GetLockSeq())) {
			return Result{Index: p.GetIndex()}, false
		}
	}
	if err := admitPend(st); err != nil {
		return Result{Err: err}, false
	}
	st.Pending = slices.Insert(st.Pending, j, &pb.Pending{Key: key, Mark: op.GetMark(), StoreId: op.GetLockStoreId(),
		Seq: op.GetLockSeq(), Index: index, TimeMs: op.GetTimeMs()})
	return Result{Index: index}, true
}

// applySettle removes the pending decisions op names; one not pending
// (settled already) changes nothing.
func applySettle(st *pb.State, op *pb.Settle) (Result, bool) {
	changed := false
	for _, ref := range op.GetDone() {
		i, j := pendingOn(st, ref.GetKey())
		if k := slices.IndexFunc(st.Pending[i:j], func(p *pb.Pending) bool { return p.GetIndex() == ref.GetIndex() }); k >= 0 {
			st.Pending = slices.Delete(st.Pending, i+k, i+k+1)
			changed = true
		}
	}
	return Result{}, changed
}

// applyMark is disagg gc's mark of an object that is not a data file
// (MarkObject): a clone lock is a conflict naming it; an object already
// marked is a success that changes nothing; else the mark is set at the
// op's time. A data file key changes nothing: its mark is its .del object.
func applyMark(st *pb.State, index uint64, name string, timeMs int64) (Result, bool) {
	if _, err := ParseKey(name); err == nil {
		return Result{}, false
	}
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
