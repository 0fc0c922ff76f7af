package disagg

import (
	"cmp"
	"fmt"
	"slices"

	pb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
)

// The ops chunkraft itself proposes on any object name: clone locks
// (LockClone, ReleaseClone) and disagg gc's marks and removals
// (MarkObject, MarkObjects, Forget). Like upstream's, their decisions are
// here, in log order, reading only the state and the op: the times they
// carry were chosen by the proposer.

// CloneHolder names the clone chunk a clone lock is held for, as lock
// list and conflicts show it: clone:{pool}/{copyset}/{chunk}.
func CloneHolder(pool, copyset uint32, chunk uint64) string {
	return fmt.Sprintf("clone:%d/%d/%d", pool, copyset, chunk)
}

// findCloneLock finds the clone lock of pool/copyset/chunk in locks
// (ascending): its place, and whether it is there.
func findCloneLock(locks []*pb.CloneLock, pool, copyset uint32, chunk uint64) (int, bool) {
	return slices.BinarySearchFunc(locks, &pb.CloneLock{Pool: pool, Copyset: copyset, Chunk: chunk}, func(a, b *pb.CloneLock) int {
		return cmp.Or(cmp.Compare(a.GetPool(), b.GetPool()), cmp.Compare(a.GetCopyset(), b.GetCopyset()), cmp.Compare(a.GetChunk(), b.GetChunk()))
	})
}

// lockBy names the first clone lock holding f ("" when none does).
func lockBy(f *pb.DataFile) string {
	if len(f.CloneLocks) > 0 {
		l := f.CloneLocks[0]
		return CloneHolder(l.GetPool(), l.GetCopyset(), l.GetChunk())
	}
	return ""
}

// markedConflict is the conflict of a lock on a marked object: upstream's
// reason for a data file key.
func markedConflict(name string) string {
	if k, err := ParseKey(name); err == nil {
		return markedReason(name, k.DelMarkKey())
	}
	return fmt.Sprintf("object is mark deleted, name=%s", name)
}

// lockedConflict is the conflict of a mark on a locked object: upstream's
// reason for a data file key.
func lockedConflict(name, by string) string {
	if _, err := ParseKey(name); err == nil {
		return lockedReason(name, by)
	}
	return fmt.Sprintf("object is locked, name=%s lock_by=%s", name, by)
}

// dropEmpty removes the entries with neither locks nor a mark.
func dropEmpty(st *pb.State) {
	st.Files = slices.DeleteFunc(st.Files, func(f *pb.DataFile) bool {
		return len(f.CloneLocks) == 0 && !f.GetDeleted()
	})
}

// applyLockClone locks op.name for the clone chunk: a marked object is a
// conflict; the same holder again refreshes the lock's time and index (a
// retried creation restarts the reconciler's grace); else the lock is
// added, bounded by MaxFiles and MaxLocks. A lock taken or held records
// op.members as the clone copyset's configuration (recordMembers).
func applyLockClone(st *pb.State, index uint64, op *pb.LockClone) (Result, bool) {
	if p := pendingKind(st, op.GetName(), true); p != nil {
		return Result{Busy: busyReason(p)}, false
	}
	i, found := findFile(st, op.GetName())
	var f *pb.DataFile
	if found {
		f = st.Files[i]
		if f.GetDeleted() {
			return Result{Conflict: markedConflict(op.GetName())}, false
		}
	}
	j, held := findCloneLock(f.GetCloneLocks(), op.GetPool(), op.GetCopyset(), op.GetChunk())
	if held {
		recorded := recordMembers(st, op.GetPool(), op.GetCopyset(), op.GetMembers())
		l := f.CloneLocks[j]
		if op.GetTimeMs() <= l.GetTimeMs() {
			return Result{}, recorded
		}
		l.Index, l.TimeMs = index, op.GetTimeMs()
		return Result{}, true
	}
	if err := admit(st, !found, true); err != nil {
		return Result{Err: err}, false
	}
	if !found {
		f = &pb.DataFile{Key: op.GetName()}
		st.Files = slices.Insert(st.Files, i, f)
	}
	f.CloneLocks = slices.Insert(f.CloneLocks, j, &pb.CloneLock{
		Pool: op.GetPool(), Copyset: op.GetCopyset(), Chunk: op.GetChunk(), Index: index, TimeMs: op.GetTimeMs()})
	recordMembers(st, op.GetPool(), op.GetCopyset(), op.GetMembers())
	return Result{}, true
}

// findCloneCopyset finds the record of copyset pool/copyset in
// st.CloneCopysets (ascending): its place, and whether it is there.
func findCloneCopyset(st *pb.State, pool, copyset uint32) (int, bool) {
	return slices.BinarySearchFunc(st.CloneCopysets, &pb.CloneCopyset{Pool: pool, Copyset: copyset}, func(a, b *pb.CloneCopyset) int {
		return cmp.Or(cmp.Compare(a.GetPool(), b.GetPool()), cmp.Compare(a.GetCopyset(), b.GetCopyset()))
	})
}

// recordMembers records members (sorted by the proposer, bounded by
// validateOp) as the configuration of copyset pool/copyset, which holds
// a clone lock; it reports whether the record changed. No members leave
// the record as it is.
func recordMembers(st *pb.State, pool, copyset uint32, members []string) bool {
	if len(members) == 0 {
		return false
	}
	i, found := findCloneCopyset(st, pool, copyset)
	switch {
	case found && slices.Equal(st.CloneCopysets[i].GetMembers(), members):
		return false
	case found:
		st.CloneCopysets[i].Members = slices.Clone(members)
	default:
		st.CloneCopysets = slices.Insert(st.CloneCopysets, i, &pb.CloneCopyset{Pool: pool, Copyset: copyset, Members: slices.Clone(members)})
	}
	return true
}

// holdsCloneLocks reports whether a clone chunk of copyset pool/copyset
// holds a lock in st.
func holdsCloneLocks(st *pb.State, pool, copyset uint32) bool {
	return slices.ContainsFunc(st.Files, func(f *pb.DataFile) bool { return heldBy(f, pool, copyset) })
}

// applyReleaseClone removes the clone lock when its time is before
// op.before_ms: one taken or refreshed since the releaser looked stays.
// Released names the holder when it went. The copyset's record goes with
// its last clone lock.
func applyReleaseClone(st *pb.State, op *pb.ReleaseClone) (Result, bool) {
	i, found := findFile(st, op.GetName())
	if !found {
		return Result{}, false
	}
	f := st.Files[i]
	j, held := findCloneLock(f.CloneLocks, op.GetPool(), op.GetCopyset(), op.GetChunk())
	if !held || f.CloneLocks[j].GetTimeMs() >= op.GetBeforeMs() {
		return Result{}, false
	}
	f.CloneLocks = slices.Delete(f.CloneLocks, j, j+1)
	dropEmpty(st)
	if k, found := findCloneCopyset(st, op.GetPool(), op.GetCopyset()); found && !holdsCloneLocks(st, op.GetPool(), op.GetCopyset()) {
		st.CloneCopysets = slices.Delete(st.CloneCopysets, k, k+1) // its last lock went
	}
	return Result{Released: []string{CloneHolder(op.GetPool(), op.GetCopyset(), op.GetChunk())}}, true
}

// applyMarkBatch marks each name of op as applyMark would, at op's time
// (a data file key changes nothing: format 0's gc put them in batches):
// a locked name is refused (Locked), one already marked stays as it is.
// The bound comes first: a batch whose new entries would pass MaxFiles is
// refused whole, the table unchanged.
func applyMarkBatch(st *pb.State, index uint64, op *pb.MarkObjects) (Result, bool) {
	fresh := 0
	for _, name := range op.GetNames() {
		if _, found := findFile(st, name); !found && !isDataFileKey(name) {
			fresh++
		}
	}
	if len(st.Files)+fresh > MaxFiles {
		return Result{Err: fmt.Errorf("%w: %d entries and %d new marks (at most %d)", ErrFull, len(st.Files), fresh, MaxFiles)}, false
	}
	var res Result
	changed := false
	for _, name := range op.GetNames() {
		r, c := applyMark(st, index, name, op.GetTimeMs())
		if r.Conflict != "" {
			res.Locked = append(res.Locked, name) // names are ascending
		}
		changed = changed || c
	}
	return res, changed
}

// applyForget removes the entries of op.names that are marked (gc deleted
// their objects); names unmarked or absent change nothing. Released are
// the names removed, ascending.
func applyForget(st *pb.State, op *pb.Forget) (Result, bool) {
	var gone []string
	for _, name := range op.GetNames() {
		i, found := findFile(st, name)
		if !found || !st.Files[i].GetDeleted() {
			continue
		}
		gone = append(gone, name)
		st.Files = slices.Delete(st.Files, i, i+1)
	}
	slices.Sort(gone)
	return Result{Released: gone}, len(gone) > 0
}
