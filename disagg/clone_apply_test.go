package disagg

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	pb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
	"google.golang.org/protobuf/proto"
)

// sameFromEmpty checks that ops applied to an empty table, op i at index
// i+1, give st (Apply is deterministic).
func sameFromEmpty(t *testing.T, st *pb.State, ops []*pb.Op) {
	t.Helper()
	again := &pb.State{}
	for i, op := range ops {
		applyOp(again, uint64(i+1), op)
	}
	if !proto.Equal(again, st) {
		t.Errorf("not deterministic:\n%v\n%v", again, st)
	}
}

func lockClone(name string, chunk uint64, ms int64) *pb.Op {
	return &pb.Op{Op: &pb.Op_LockClone{LockClone: &pb.LockClone{Name: name, Pool: 1, Copyset: 2, Chunk: chunk, TimeMs: ms}}}
}

func releaseClone(name string, chunk uint64, before int64) *pb.Op {
	return &pb.Op{Op: &pb.Op_ReleaseClone{ReleaseClone: &pb.ReleaseClone{Name: name, Pool: 1, Copyset: 2, Chunk: chunk, BeforeMs: before}}}
}

func markObject(name string, ms int64) *pb.Op {
	return &pb.Op{Op: &pb.Op_MarkObject{MarkObject: &pb.MarkObject{Name: name, TimeMs: ms}}}
}

func markObjects(ms int64, names ...string) *pb.Op {
	return &pb.Op{Op: &pb.Op_MarkObjects{MarkObjects: &pb.MarkObjects{Names: names, TimeMs: ms}}}
}

func forget(names ...string) *pb.Op {
	return &pb.Op{Op: &pb.Op_Forget{Forget: &pb.Forget{Names: names}}}
}

// The clone lock and gc ops, applied in order to one table: each step's
// answer and whether the table changed; each op applied a second time
// changes nothing (idempotent), and the whole sequence applied again from
// empty gives the same table (deterministic).
func TestCloneAndGcOps(t *testing.T) {
	const img, dat = "images/base.raw", "s1/data/dat_1_0"
	steps := []struct {
		op      *pb.Op
		want    string // "" success; else a substring of the conflict, error or released list
		changed bool
	}{
		{lockClone(img, 7, 100), "", true},
		{lockClone(img, 7, 100), "", false}, // a replayed or concurrent retry: same time
		{lockClone(img, 7, 150), "", true},  // a retried creation refreshes the time
		{lockClone(img, 8, 100), "", true},  // a second clone of the same source
		{markObject(img, 200), "object is locked, name=images/base.raw lock_by=clone:1/2/7", false},
		{releaseClone(img, 7, 150), "released []", false}, // refreshed at 150: not before 150
		{releaseClone(img, 7, 151), "released [clone:1/2/7]", true},
		{releaseClone(img, 7, 151), "released []", false},
		{markObject(img, 300), "lock_by=clone:1/2/8", false},
		{releaseClone(img, 8, 1000), "released [clone:1/2/8]", true},
		{markObject(img, 300), "", true},
		{markObject(img, 400), "", false}, // a second mark keeps the first time
		{lockClone(img, 9, 500), "object is mark deleted, name=images/base.raw", false},
		// A clone of a data file key: a mark is refused while it holds, and
		// its mark is its .del object, not an entry.
		{lockClone(dat, 1, 10), "", true},
		{pendMark(dat), "data file is locked, key=s1/data/dat_1_0 lock_by=clone:1/2/1", false},
		{pendLock(dat, 3, 3), "", true},
		{settle(dat, 16), "", true},
		{releaseClone(dat, 1, 11), "released [clone:1/2/1]", true},
		{pendMark(dat), "", true},
		{lockClone(dat, 1, 20), "", false}, // busy: the pending mark
		{forget(img, "never/there"), "released [images/base.raw]", true},
		{forget(img), "released []", false},
		{lockClone(img, 9, 600), "", true},  // forgotten: a new object of that name may be cloned
		{forget(img), "released []", false}, // locked, not marked: stays
		// Bad ops are refused in Apply, the table unchanged.
		{markObject("lock/s1/dat_1_0.lock_s3_3", 1), "lock or delete-mark object", false},
		{markObject("a/b.del", 1), "lock or delete-mark object", false},
		{markObject(dat, 1), "is a data file key", false},
		{lockClone("bad//name", 1, 1), "invalid object name", false},
		{&pb.Op{Op: &pb.Op_LockClone{LockClone: &pb.LockClone{Name: img, Pool: 0, Copyset: 2, Chunk: 1}}}, "must not be 0", false},
	}
	st := &pb.State{}
	for i, s := range steps {
		res, changed := applyOp(st, uint64(i+1), s.op)
		got := res.Conflict
		switch {
		case res.Err != nil:
			got = res.Err.Error()
		case s.op.GetLockClone() != nil && res.Busy != "":
			got = ""
		case s.op.GetRelease() != nil || s.op.GetReleaseClone() != nil || s.op.GetForget() != nil:
			got = fmt.Sprintf("released %v", res.Released)
		}
		if (s.want == "") != (got == "") || !strings.Contains(got, s.want) || changed != s.changed {
			t.Errorf("step %d %v: %q changed=%v, want %q changed=%v", i+1, s.op, got, changed, s.want, s.changed)
		}
		// The same op again (a retry, a re-proposal) changes nothing more.
		before := proto.CloneOf(st)
		if _, changed := applyOp(st, uint64(i+1), s.op); changed || !proto.Equal(before, st) {
			t.Errorf("step %d applied twice changed the table", i+1)
		}
	}
	// At the end: img locked by clone 9 (index 23), dat's mark pending
	// (index 19).
	if len(st.Files) != 1 || st.Files[0].GetKey() != img || len(st.Files[0].CloneLocks) != 1 || st.Files[0].CloneLocks[0].GetIndex() != 23 ||
		len(st.Pending) != 1 || !st.Pending[0].GetMark() || st.Pending[0].GetIndex() != 19 {
		t.Fatalf("state at the end: %v %v", st.Files, st.Pending)
	}
	var ops []*pb.Op
	for _, s := range steps {
		ops = append(ops, s.op)
	}
	sameFromEmpty(t, st, ops)
}

// Clone locks count against MaxLocks and new entries against MaxFiles; a
// held clone lock is still refreshed on a full table.
func TestCloneLockBounds(t *testing.T) {
	st := &pb.State{}
	for i := range MaxFiles {
		if res, _ := applyOp(st, uint64(i+1), lockClone(fmt.Sprintf("o/%d", i), 1, 1)); res.Err != nil || res.Conflict != "" {
			t.Fatalf("lock %d: %+v", i, res)
		}
	}
	for _, op := range []*pb.Op{lockClone("o/new", 1, 1), markObject("o/new", 1)} {
		if res, changed := applyOp(st, 99999, op); !errors.Is(res.Err, ErrFull) || changed {
			t.Errorf("%v past MaxFiles: %+v %v", op, res, changed)
		}
	}
	if res, changed := applyOp(st, 99999, lockClone("o/1", 1, 5)); res.Err != nil || !changed {
		t.Errorf("refresh on a full table: %+v %v", res, changed)
	}
	for i := 2; lockCount(st) < MaxLocks; i++ {
		applyOp(st, uint64(100000+i), lockClone("o/1", uint64(i), 1))
	}
	if res, changed := applyOp(st, 200000, lockClone("o/1", 1<<40, 1)); !errors.Is(res.Err, ErrFull) || changed {
		t.Errorf("clone lock past MaxLocks: %+v %v", res, changed)
	}
}

func lockCloneIn(copyset uint32, chunk uint64, ms int64, members ...string) *pb.Op {
	return &pb.Op{Op: &pb.Op_LockClone{LockClone: &pb.LockClone{Name: "o/a", Pool: 1, Copyset: copyset, Chunk: chunk, TimeMs: ms, Members: members}}}
}

func releaseCloneIn(copyset uint32, chunk uint64) *pb.Op {
	return &pb.Op{Op: &pb.Op_ReleaseClone{ReleaseClone: &pb.ReleaseClone{Name: "o/a", Pool: 1, Copyset: copyset, Chunk: chunk, BeforeMs: 1 << 40}}}
}

// The members a LockClone records for its copyset: taken with the first
// lock, replaced by a lock (new or held) naming others, left by one
// naming none or the same, removed with the copyset's last lock; bad
// member lists are refused. Replays change nothing, and the sequence is
// deterministic.
func TestCloneCopysetMembers(t *testing.T) {
	records := func(st *pb.State) string {
		var out []string
		for _, c := range st.CloneCopysets {
			out = append(out, fmt.Sprintf("%d/%d=%s", c.GetPool(), c.GetCopyset(), strings.Join(c.GetMembers(), ",")))
		}
		return strings.Join(out, " ")
	}
	steps := []struct {
		op      *pb.Op
		changed bool
		want    string // the records after it, or the refusal
	}{
		{lockCloneIn(7, 1, 10, "a:1:0", "b:1:0"), true, "1/7=a:1:0,b:1:0"},
		{lockCloneIn(7, 1, 10, "a:1:0", "b:1:0"), false, "1/7=a:1:0,b:1:0"},
		{lockCloneIn(7, 1, 10, "a:1:0", "c:1:0"), true, "1/7=a:1:0,c:1:0"}, // held, same time: only the record
		{lockCloneIn(7, 2, 10), true, "1/7=a:1:0,c:1:0"},                   // no members: the record stays
		{lockCloneIn(3, 1, 10, "d:1:0"), true, "1/3=d:1:0 1/7=a:1:0,c:1:0"},
		{releaseCloneIn(7, 1), true, "1/3=d:1:0 1/7=a:1:0,c:1:0"}, // 1/7 still holds chunk 2
		{releaseCloneIn(7, 2), true, "1/3=d:1:0"},
		{lockCloneIn(3, 1, 10, "b:1:0", "a:1:0"), false, "not sorted"},
		{lockCloneIn(3, 1, 10, "a:1:0", "a:1:0"), false, "not sorted"},
		{lockCloneIn(3, 1, 10, ""), false, "empty"},
		{lockCloneIn(3, 1, 10, "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q"), false, "at most 16"},
		{releaseCloneIn(3, 1), true, ""},
	}
	st := &pb.State{}
	for i, s := range steps {
		res, changed := applyOp(st, uint64(i+1), s.op)
		got := records(st)
		if res.Err != nil {
			got = res.Err.Error()
		}
		if changed != s.changed || !strings.Contains(got, s.want) || (s.want == "" && got != "") {
			t.Errorf("step %d %v: %q changed=%v, want %q changed=%v", i+1, s.op, got, changed, s.want, s.changed)
		}
		before := proto.CloneOf(st)
		if _, changed := applyOp(st, uint64(i+1), s.op); changed || !proto.Equal(before, st) {
			t.Errorf("step %d applied twice changed the table", i+1)
		}
	}
	var ops []*pb.Op
	for _, s := range steps {
		ops = append(ops, s.op)
	}
	sameFromEmpty(t, st, ops)
}

// A MarkObjects batch marks each name as MarkObject would at its time: a
// clone-locked name is refused and reported, one already marked keeps its
// first mark, a data file key (in format 0's batches) changes nothing;
// applied again it changes nothing. Bad batches and one whose new entries
// would pass MaxFiles are refused whole.
func TestMarkObjects(t *testing.T) {
	const dat = "s1/data/dat_1_0"
	st := &pb.State{}
	for i, op := range []*pb.Op{lockClone("o/b", 1, 1), markObject("o/c", 50)} {
		if res, changed := applyOp(st, uint64(i+1), op); res.Err != nil || !changed {
			t.Fatalf("setup %v: %+v", op, res)
		}
	}
	batch := markObjects(100, "o/a", "o/b", "o/c", dat)
	res, changed := applyOp(st, 10, batch)
	if res.Err != nil || !changed || strings.Join(res.Locked, " ") != "o/b" {
		t.Fatalf("batch: %+v changed=%v", res, changed)
	}
	marks := func() string {
		var out []string
		for _, f := range st.Files {
			if f.GetDeleted() {
				out = append(out, fmt.Sprintf("%s@%d/%d", f.GetKey(), f.GetMarkedIndex(), f.GetMarkedMs()))
			}
		}
		return strings.Join(out, " ")
	}
	if got, want := marks(), "o/a@10/100 o/c@2/50"; got != want {
		t.Fatalf("marks %q, want %q", got, want)
	}
	before := proto.CloneOf(st)
	if res, changed := applyOp(st, 11, batch); changed || !proto.Equal(before, st) || len(res.Locked) != 1 {
		t.Fatalf("the batch again: %+v changed=%v", res, changed)
	}
	many := make([]string, MaxMarkBatch+1)
	for i := range many {
		many[i] = fmt.Sprintf("m/%04d", i)
	}
	for _, bad := range []struct {
		op   *pb.Op
		want string
	}{
		{markObjects(1), "1 to 256"},
		{markObjects(1, many...), "1 to 256"},
		{markObjects(1, "o/b", "o/a"), "not strictly ascending"},
		{markObjects(1, "o/a", "o/a"), "not strictly ascending"},
		{markObjects(1, "a/b.del"), "lock or delete-mark object"},
		{markObjects(1, "lock/s1/dat_1_0.lock_s3_3"), "lock or delete-mark object"},
	} {
		if res, changed := applyOp(st, 12, bad.op); changed || res.Err == nil || !strings.Contains(res.Err.Error(), bad.want) {
			t.Errorf("%v: %+v changed=%v, want %q", bad.op, res, changed, bad.want)
		}
	}
	// The bound: room for one new entry.
	for i := len(st.Files); i < MaxFiles-1; i++ {
		applyOp(st, uint64(100+i), markObject(fmt.Sprintf("f/%05d", i), 1))
	}
	if res, changed := applyOp(st, 20000, markObjects(1, "n/1", "n/2")); changed || !errors.Is(res.Err, ErrFull) {
		t.Fatalf("two new entries on a table with room for one: %+v changed=%v", res, changed)
	}
	if res, changed := applyOp(st, 20001, markObjects(1, "n/1", "o/a")); !changed || res.Err != nil || len(st.Files) != MaxFiles {
		t.Fatalf("one new entry and a marked one: %+v changed=%v", res, changed)
	}
}
