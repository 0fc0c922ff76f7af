package disagg

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	pb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
)

func addLock(key string, store, seq uint64) *pb.Op {
	return &pb.Op{Op: &pb.Op_AddLock{AddLock: &pb.AddLock{Key: key, LockStoreId: store, LockSeq: seq}}}
}

func markDelete(key string) *pb.Op {
	return &pb.Op{Op: &pb.Op_MarkDelete{MarkDelete: &pb.MarkDelete{Key: key}}}
}

func release(store, upTo uint64) *pb.Op {
	return &pb.Op{Op: &pb.Op_Release{Release: &pb.Release{LockStoreId: store, UpToSeq: upTo}}}
}

// The conflict table of the lock service, applied in order to one table:
// each step's answer (ok, or the conflict / refusal it names) and whether
// the table changed.
func TestConflictTable(t *testing.T) {
	const a, b = "s1/data/dat_1_0", "s1/data/t_5/dmf_9"
	steps := []struct {
		op      *pb.Op
		want    string // "" success; else a substring of the conflict or error
		changed bool
	}{
		{addLock(a, 2, 10), "", true},
		{addLock(a, 2, 10), "", false}, // a retry of the same lock
		{addLock(a, 3, 4), "", true},
		{markDelete(a), "data file is locked, key=s1/data/dat_1_0 lock_by=lock/s1/dat_1_0.lock_s2_10", false},
		{markDelete(b), "", true},
		{markDelete(b), "", false}, // a second mark
		{addLock(b, 2, 11), "data file is mark deleted, key=s1/data/t_5/dmf_9 delmark=s1/data/t_5/dmf_9.del", false},
		{release(2, 9), "released []", false},
		{release(2, 10), "released [lock/s1/dat_1_0.lock_s2_10]", true},
		{markDelete(a), "data file is locked, key=s1/data/dat_1_0 lock_by=lock/s1/dat_1_0.lock_s3_4", false},
		{release(3, 100), "released [lock/s1/dat_1_0.lock_s3_4]", true},
		{markDelete(a), "", true},
		{addLock(a, 3, 5), "data file is mark deleted", false},
		{release(3, 100), "released []", false},
		{addLock("s1/data/bad", 1, 1), "invalid disagg op", false},
	}
	st := &pb.State{}
	for i, s := range steps {
		res, changed := applyOp(st, uint64(i+1), s.op)
		got := res.Conflict
		switch {
		case res.Err != nil:
			got = res.Err.Error()
		case s.op.GetRelease() != nil:
			got = fmt.Sprintf("released %v", res.Released)
		}
		if (s.want == "") != (got == "") || !strings.Contains(got, s.want) || changed != s.changed {
			t.Errorf("step %d %v: %q changed=%v, want %q changed=%v", i+1, s.op, got, changed, s.want, s.changed)
		}
	}
	// Released locks leave, a marked file stays: the table is a and b, both marked.
	if len(st.Files) != 2 || !st.Files[0].GetDeleted() || !st.Files[1].GetDeleted() || len(st.Files[0].Locks)+len(st.Files[1].Locks) != 0 {
		t.Errorf("table at the end: %v", st.Files)
	}
}

// The bounds are refused in Apply too, with the table unchanged.
func TestBounds(t *testing.T) {
	st := &pb.State{}
	for i := range MaxLocksPerFile {
		if res, _ := applyOp(st, uint64(i+1), addLock("s1/data/dat_1_0", 1, uint64(i))); res.Err != nil || res.Conflict != "" {
			t.Fatalf("lock %d: %+v", i, res)
		}
	}
	res, changed := applyOp(st, 1000, addLock("s1/data/dat_1_0", 1, 1000))
	if !errors.Is(res.Err, ErrFull) || changed {
		t.Fatalf("lock past MaxLocksPerFile: %+v %v", res, changed)
	}
	for i := 1; len(st.Files) < MaxFiles; i++ {
		applyOp(st, uint64(2000+i), markDelete(fmt.Sprintf("s1/data/dat_%d_0", i)))
	}
	for _, op := range []*pb.Op{markDelete("s2/data/dat_1_0"), addLock("s2/data/dat_1_0", 1, 1)} {
		if res, changed := applyOp(st, 99999, op); !errors.Is(res.Err, ErrFull) || changed {
			t.Errorf("%v past MaxFiles: %+v %v", op, res, changed)
		}
	}
}

// A lock already held is admitted on a full file, by the service's
// admission as by Apply: its retry is the idempotent success the client
// relies on after a lost answer.
func TestHeldLockAdmittedWhenFull(t *testing.T) {
	st := &pb.State{}
	for i := range MaxLocksPerFile {
		applyOp(st, uint64(i+1), addLock("s1/data/dat_1_0", 1, uint64(i)))
	}
	if err := admitLock(st, "s1/data/dat_1_0", 1, 3); err != nil {
		t.Fatalf("admission of a held lock on a full file: %v", err)
	}
	if err := admitLock(st, "s1/data/dat_1_0", 1, 1000); !errors.Is(err, ErrFull) {
		t.Fatalf("admission of a new lock on a full file: %v", err)
	}
	if res, changed := applyOp(st, 1000, addLock("s1/data/dat_1_0", 1, 3)); res.Err != nil || res.Conflict != "" || changed {
		t.Fatalf("apply of a held lock on a full file: %+v %v", res, changed)
	}
}
