package datasync

import (
	"testing"

	pb "github.com/chunkraft/chunkraft/proto/chunkraft/syncstatepb"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
)

// TestMachineHoldsLog: the machine holds its replica's log from the
// lowest cursor of its live sub-tasks: after its creation before the
// first packet, the binlog start in the snapshot phase, the binlog point
// after; nothing for an incremental sub-task before its first packet, a
// FAILED or SUCCESS one, or once deleted; a reopened machine holds again
// from its loaded state.
func TestMachineHoldsLog(t *testing.T) {
	dir := t.TempDir()
	m, ms := openSpec(t, dir)
	want := func(what string, index uint64) {
		t.Helper()
		if got := m.hold.Index(); got != index {
			t.Fatalf("%s: the log is held from %d, want %d", what, got, index)
		}
	}
	want("no sub-task", 0)
	steps := []struct {
		what string
		op   []byte
		want uint64
	}{
		{"created at 3", must(t)(EncodePutSubTask(putReq("a", 1, 1, tok1, dspb.SyncMode_kFullAndContinuous, snapStart(), 1000))), 4},
		{"first packet, binlog start 9", must(t)(EncodeAdvance(&pb.Advance{Ref: ref(1, 1, tok1), Start: snapStart(), Next: snapAt(2, 0), Count: 1, UpdateMs: 2000, BinlogStart: 9})), 9},
		{"an incremental sub-task before its first packet", must(t)(EncodePutSubTask(putReq("a", 1, 2, tok1, dspb.SyncMode_kIncrementalByTimestamp, snapStart(), 1000))), 9},
		{"its first packet leads to 7", must(t)(EncodeAdvance(advance(1, 2, tok1, snapStart(), binlogAt(7), 0, 2000, false))), 7},
		{"it moves to 12", must(t)(EncodeAdvance(advance(1, 2, tok1, binlogAt(7), binlogAt(12), 3, 3000, false))), 9},
		{"the first one reaches the binlog at 9", must(t)(EncodeAdvance(advance(1, 1, tok1, snapAt(2, 0), binlogAt(9), 1, 3000, false))), 9},
		{"and 20", must(t)(EncodeAdvance(advance(1, 1, tok1, binlogAt(9), binlogAt(20), 1, 3000, false))), 12},
		{"reassigning holds", must(t)(EncodeSetStatus(&pb.SetStatus{Ref: ref(1, 2, tok1), Status: pb.Status_REASSIGNING, Message: "stale"})), 12},
		{"failed lets go", must(t)(EncodeSetStatus(&pb.SetStatus{Ref: ref(1, 2, tok1), Status: pb.Status_FAILED, Message: "bound"})), 20},
	}
	index := uint64(3)
	for _, s := range steps {
		if res := apply(t, m, index, s.op); res.Err != nil {
			t.Fatalf("%s: %v", s.what, res.Err)
		}
		want(s.what, s.want)
		index++
	}
	closeSpec(t, ms)
	if m.hold.Index() != 0 {
		t.Fatal("a closed machine holds the log")
	}
	m, ms = openSpec(t, dir)
	want("reopened", 20)
	if res := apply(t, m, index, must(t)(EncodeDeleteTask(&pb.DeleteTask{Db: "1", Name: "a"}))); res.Err != nil || res.Removed != 2 {
		t.Fatalf("delete: %v", res)
	}
	want("deleted", 0)
	closeSpec(t, ms)
}
