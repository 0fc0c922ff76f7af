package disagg

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	pb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
)

func pendLock(key string, store, seq uint64) *pb.Op {
	return &pb.Op{Op: &pb.Op_Pend{Pend: &pb.Pend{Key: key, LockStoreId: store, LockSeq: seq}}}
}

func pendMark(key string) *pb.Op {
	return &pb.Op{Op: &pb.Op_Pend{Pend: &pb.Pend{Key: key, Mark: true}}}
}

func settle(refs ...any) *pb.Op {
	s := &pb.Settle{}
	for i := 0; i < len(refs); i += 2 {
		s.Done = append(s.Done, &pb.PendingRef{Key: refs[i].(string), Index: uint64(refs[i+1].(int))})
	}
	return &pb.Op{Op: &pb.Op_Settle{Settle: s}}
}

func addLock(key string, store, seq uint64) *pb.Op {
	return &pb.Op{Op: &pb.Op_AddLock{AddLock: &pb.AddLock{Key: key, LockStoreId: store, LockSeq: seq}}}
}

func markDelete(key string) *pb.Op {
	return &pb.Op{Op: &pb.Op_MarkDelete{MarkDelete: &pb.MarkDelete{Key: key}}}
}

func release(store, upTo uint64) *pb.Op {
	return &pb.Op{Op: &pb.Op_Release{Release: &pb.Release{LockStoreId: store, UpToSeq: upTo}}}
}

// The decisions of the lock service, applied in order to one state: each
// step's answer (ok with the pending index, busy, or the conflict or
// refusal it names) and whether the state changed. A decision of one kind
// keeps the other kind out of its key until it is settled; decisions of
// one kind run side by side; the same decision again joins the pending
// one; format 0's upstream ops change nothing.
func TestDecisionTable(t *testing.T) {
	const a, b = "s1/data/dat_1_0", "s1/data/t_5/dmf_9"
	steps := []struct {
		op      *pb.Op
		want    string // "ok N": success, pending index N; "busy ..."; else a substring of the conflict or error
		changed bool
	}{
		{pendLock(a, 2, 10), "ok 1", true},
		{pendLock(a, 2, 10), "ok 1", false}, // the same lock: joined
		{pendLock(a, 3, 4), "ok 3", true},   // another lock on the key: side by side
		{pendMark(a), "busy a lock of s1/data/dat_1_0 is being decided (index 1)", false},
		{pendMark(b), "ok 5", true},
		{pendMark(b), "ok 5", false},
		{pendLock(b, 2, 11), "busy a delete mark of s1/data/t_5/dmf_9 is being decided (index 5)", false},
		{settle(a, 1), "ok 0", true},
		{pendMark(a), "busy a lock of s1/data/dat_1_0 is being decided (index 3)", false},
		{settle(a, 3, a, 1), "ok 0", true}, // a settled decision again changes nothing
		{settle(a, 3), "ok 0", false},
		{pendMark(a), "ok 12", true},
		{settle(b, 5, a, 12), "ok 0", true},
		{pendLock(b, 2, 11), "ok 14", true},
		{addLock(a, 3, 5), "ok 0", false},
		{markDelete(b), "ok 0", false},
		{release(3, 100), "ok 0", false},
		{pendLock("s1/data/bad", 1, 1), "invalid disagg op", false},
		{settle(), "invalid disagg op", false},
	}
	st := &pb.State{}
	for i, s := range steps {
		res, changed := applyOp(st, uint64(i+1), s.op)
		got := fmt.Sprintf("ok %d", res.Index)
		switch {
		case res.Err != nil:
			got = res.Err.Error()
		case res.Conflict != "":
			got = res.Conflict
		case res.Busy != "":
			got = "busy " + res.Busy
		}
		if !strings.Contains(got, s.want) || changed != s.changed {
			t.Errorf("step %d %v: %q changed=%v, want %q changed=%v", i+1, s.op, got, changed, s.want, s.changed)
		}
	}
	if len(st.Pending) != 1 || st.Pending[0].GetKey() != b || st.Pending[0].GetIndex() != 14 || len(st.Files) != 0 {
		t.Errorf("state at the end: pending %v, files %v", st.Pending, st.Files)
	}
}

// A clone lock keeps a delete mark off its object (a conflict naming the
// holder), and a pending mark keeps a clone lock waiting (busy).
func TestCloneLockAgainstMarks(t *testing.T) {
	const a = "s1/data/dat_1_0"
	st := &pb.State{}
	if res, changed := applyOp(st, 1, lockClone(a, 7, 1)); res.Conflict != "" || res.Busy != "" || !changed {
		t.Fatalf("clone lock: %+v %v", res, changed)
	}
	if res, changed := applyOp(st, 2, pendMark(a)); !strings.Contains(res.Conflict, "lock_by=clone:1/2/7") || changed {
		t.Fatalf("mark on a clone-locked key: %+v %v", res, changed)
	}
	if res, _ := applyOp(st, 3, pendLock(a, 1, 1)); res.Index != 3 {
		t.Fatalf("lock on a clone-locked key: %+v", res)
	}
	const b = "s1/data/dat_2_0"
	applyOp(st, 4, pendMark(b))
	if res, changed := applyOp(st, 5, lockClone(b, 8, 5)); !strings.Contains(res.Busy, "delete mark") || changed {
		t.Fatalf("clone lock on a key with a pending mark: %+v %v", res, changed)
	}
}

// The bound on decisions in flight is refused in Apply too, with the state
// unchanged; a decision already pending is joined however full.
func TestPendingBound(t *testing.T) {
	st := &pb.State{}
	for i := range MaxPending {
		if res, _ := applyOp(st, uint64(i+1), pendMark(fmt.Sprintf("s1/data/dat_%d_0", i))); res.Err != nil {
			t.Fatalf("mark %d: %+v", i, res)
		}
	}
	res, changed := applyOp(st, MaxPending+1, pendLock("s2/data/dat_1_0", 1, 1))
	if !errors.Is(res.Err, ErrFull) || changed {
		t.Fatalf("a decision past MaxPending: %+v %v", res, changed)
	}
	if err := admitPend(st); !errors.Is(err, ErrFull) {
		t.Fatalf("admission past MaxPending: %v", err)
	}
	if res, changed := applyOp(st, MaxPending+2, pendMark("s1/data/dat_3_0")); res.Err != nil || res.Index != 4 || changed {
		t.Fatalf("a pending decision joined when full: %+v %v", res, changed)
	}
}
