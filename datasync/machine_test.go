package datasync

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	pb "github.com/chunkraft/chunkraft/proto/chunkraft/syncstatepb"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
	"google.golang.org/protobuf/proto"
)

// restartLog is a log that touches every op.
func restartLog(t *testing.T) [][]byte {
	return [][]byte{
		must(t)(EncodePutSubTask(putReq("a", 1, 1, tok1, dspb.SyncMode_kFull, snapStart(), 1000))),
		must(t)(EncodePutSubTask(putReq("a", 1, 2, tok1, dspb.SyncMode_kFull, snapStart(), 1000))),
		must(t)(EncodePutSubTask(putReq("b", 2, 1, tok1, dspb.SyncMode_kFullAndContinuous, snapStart(), 1000))),
		must(t)(EncodeAdvance(advance(1, 1, tok1, snapStart(), snapAt(2, 8192), 3, 2000, false))),
		must(t)(EncodeSetBinlogEnd(&pb.SetBinlogEnd{Ref: ref(1, 2, tok1), Index: 4})),
		must(t)(EncodeAdvance(advance(1, 2, tok1, snapStart(), binlogAt(5), 6, 2000, true))),
		must(t)(EncodeTouch(&pb.Touch{Ref: ref(2, 1, tok1), UpdateMs: 4000})),
		must(t)(EncodeSetStatus(&pb.SetStatus{Ref: ref(2, 1, tok1), Status: pb.Status_REASSIGNING, Message: "lease"})),
		must(t)(EncodePutSubTask(putReq("b", 2, 1, tok2, dspb.SyncMode_kFullAndContinuous, snapStart(), 9000))),
		must(t)(EncodeDeleteTask(&pb.DeleteTask{Db: "3", Name: "none"})),
	}
}

func sameRecords(t *testing.T, what string, got, want []*pb.SubTask) {
	t.Helper()
	if !slices.EqualFunc(got, want, func(a, b *pb.SubTask) bool { return proto.Equal(a, b) }) {
		t.Fatalf("%s: records\n%v\nwant\n%v", what, got, want)
	}
}

// Apply, Sync, close, reopen: the same state, and nothing to re-apply.
func TestRestartKeepsState(t *testing.T) {
	dir := t.TempDir()
	m, ms := openSpec(t, dir)
	for i, op := range restartLog(t) {
		if res := apply(t, m, uint64(i+1), op); res.Err != nil {
			t.Fatalf("op %d: %v", i+1, res.Err)
		}
	}
	want, applied := m.List(), m.Applied()
	if len(want) != 3 || applied != 9 {
		t.Fatalf("before restart: %d records, applied %d", len(want), applied)
	}
	if err := m.Sync(); err != nil {
		t.Fatal(err)
	}
	closeSpec(t, ms)

	m, ms = openSpec(t, dir)
	defer closeSpec(t, ms)
	sameRecords(t, "reopened", m.List(), want)
	if m.Applied() != applied {
		t.Fatalf("reopened at %d, want %d", m.Applied(), applied)
	}
	files, err := m.Files()
	if err != nil || len(files) != 1 || files[0] != "sync/state.jsonl" {
		t.Fatalf("files %v %v", files, err)
	}
	if _, err := os.Stat(filepath.Join(dir, files[0])); err != nil {
		t.Fatal(err)
	}
}

// A torn last record (a crash mid-append) is skipped on load, and the
// next record is not glued to it: after one more op and a restart, that
// op's state is there.
func TestTornTailDoesNotSwallowTheNextRecord(t *testing.T) {
	dir := t.TempDir()
	m, ms := openSpec(t, dir)
	log := restartLog(t)
	for i, op := range log[:4] {
		apply(t, m, uint64(i+1), op)
	}
	closeSpec(t, ms)
	path := filepath.Join(dir, Dir, FileName)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"applied":"5","subTa`); err != nil {
		t.Fatal(err)
	}
	f.Close()

	m, ms = openSpec(t, dir)
	if m.Applied() != 4 {
		t.Fatalf("loaded at %d, want 4", m.Applied())
	}
	apply(t, m, 5, log[4])
	want := m.List()
	closeSpec(t, ms)

	m, ms = openSpec(t, dir)
	defer closeSpec(t, ms)
	if m.Applied() != 5 {
		t.Fatalf("reloaded at %d, want 5: the record after the torn one was lost", m.Applied())
	}
	sameRecords(t, "reloaded", m.List(), want)
}
