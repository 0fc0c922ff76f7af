package datasync

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "github.com/chunkraft/chunkraft/proto/chunkraft/syncstatepb"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
	"google.golang.org/protobuf/proto"
)

// Export ids of the tests.
const (
	exportA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	exportB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// putExport is putReq of export id.
func putExport(name string, tid, pid uint32, token, id string, mode dspb.SyncMode, at *dspb.SyncPoint, ms int64) *pb.PutSubTask {
	p := putReq(name, tid, pid, token, mode, at, ms)
	p.Request.ExportId = proto.String(id)
	return p
}

// named is ref of task name.
func named(tid, pid uint32, token, name string) *pb.Ref {
	r := ref(tid, pid, token)
	r.Name = name
	return r
}

// twoTasks puts task "a" (export A, token tok1) and task "b" (export B,
// token tok2) on copyset 1/1 at indices 1 and 2.
func twoTasks(t *testing.T) *Machine {
	t.Helper()
	m := newMachine(t)
	for i, p := range []*pb.PutSubTask{
		putExport("a", 1, 1, tok1, exportA, dspb.SyncMode_kFullAndContinuous, snapStart(), 1000),
		putExport("b", 1, 1, tok2, exportB, dspb.SyncMode_kFullAndContinuous, snapStart(), 1000),
	} {
		if res := apply(t, m, uint64(i+1), must(t)(EncodePutSubTask(p))); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	return m
}

// Two tasks on one copyset are two sub-tasks, each with its own token,
// export id, point and status: an op naming one changes that one only,
// an op without a name (as written before a copyset held several tasks)
// is refused naming both, and deleting one leaves the other.
func TestSeveralTasksPerCopyset(t *testing.T) {
	m := twoTasks(t)
	list := m.List()
	if len(list) != 2 || list[0].GetName() != "a" || list[1].GetName() != "b" ||
		list[0].GetProgress().GetExportId() != exportA || list[1].GetProgress().GetExportId() != exportB ||
		list[0].GetProgress().GetTaskName() != "a" || list[1].GetProgress().GetTaskName() != "b" {
		t.Fatalf("two tasks: %v", list)
	}

	// b's packet moves b only; under b's name a's token is refused.
	a := advance(1, 1, tok2, snapStart(), snapAt(4, 0), 5, 2000, false)
	a.Ref.Name, a.WrittenAtMs = "b", 1990
	if res := apply(t, m, 3, must(t)(EncodeAdvance(a))); res.Err != nil || res.Record.GetName() != "b" || res.Record.GetLastPacketMs() != 1990 {
		t.Fatalf("b's packet: %v %v", res.Record, res.Err)
	}
	if r := m.Get(1, 1, "a"); r.GetCount() != 0 || !proto.Equal(r.GetProgress().GetSyncPoint(), snapStart()) || r.GetLastPacketMs() != 0 {
		t.Fatalf("b's packet moved a: %v", r)
	}
	wrong := advance(1, 1, tok1, snapAt(4, 0), snapAt(5, 0), 1, 2000, false)
	wrong.Ref.Name = "b"
	wantRefused(t, m, apply(t, m, 4, must(t)(EncodeAdvance(wrong))), ErrTokenMismatch, 3)

	// Without a name: which one is meant is not known.
	res := apply(t, m, 4, must(t)(EncodeTouch(&pb.Touch{Ref: ref(1, 1, tok1), UpdateMs: 3000})))
	wantRefused(t, m, res, ErrTaskNotNamed, 3)
	if !strings.Contains(res.Err.Error(), `1/1 has sub-tasks of tasks "a", "b"`) {
		t.Fatalf("message %q", res.Err)
	}
	if _, err := m.Lookup(1, 1, ""); !errors.Is(err, ErrTaskNotNamed) || m.Get(1, 1, "") != nil {
		t.Fatalf("lookup without a name: %v", err)
	}

	// a's heartbeat and failure are a's.
	if res := apply(t, m, 4, must(t)(EncodeTouch(&pb.Touch{Ref: named(1, 1, tok1, "a"), UpdateMs: 3000, WrittenAtMs: 2990}))); res.Err != nil ||
		res.Record.GetLastPacketMs() != 2990 || res.Record.GetLastUpdateMs() != 3000 {
		t.Fatalf("a's heartbeat: %v %v", res.Record, res.Err)
	}
	if res := apply(t, m, 5, must(t)(EncodeSetStatus(&pb.SetStatus{Ref: named(1, 1, tok1, "a"), Status: pb.Status_FAILED, Message: "x"}))); res.Err != nil {
		t.Fatal(res.Err)
	}
	if a, b := m.Get(1, 1, "a"), m.Get(1, 1, "b"); a.GetStatus() != pb.Status_FAILED || b.GetStatus() != pb.Status_RUNNING || b.GetLastPacketMs() != 1990 {
		t.Fatalf("after a failed: a %v, b %v", a, b)
	}

	// Creating "b" again (another export) is refused; reassigning it
	// (upstream's AddSyncTask: no export id) keeps its export.
	res = apply(t, m, 6, must(t)(EncodePutSubTask(putExport("b", 1, 1, "tok3", exportA, dspb.SyncMode_kFull, snapStart(), 4000))))
	wantRefused(t, m, res, ErrTaskExists, 5)
	if res := apply(t, m, 6, must(t)(EncodePutSubTask(putReq("b", 1, 1, "tok3", dspb.SyncMode_kFull, binlogAt(9), 4000)))); res.Err != nil ||
		res.Record.GetProgress().GetExportId() != exportB || res.Record.GetProgress().GetToken() != "tok3" ||
		!proto.Equal(res.Record.GetProgress().GetSyncPoint(), snapAt(4, 0)) {
		t.Fatalf("reassigned b: %v %v", res.Record, res.Err)
	}

	// A create's undo (its export id) removes its own sub-tasks only.
	if res := apply(t, m, 7, must(t)(EncodeDeleteTask(&pb.DeleteTask{Db: "1", Name: "b", ExportId: exportA}))); res.Err != nil || res.Removed != 0 {
		t.Fatalf("undo of another export of b: %v", res)
	}
	if res := apply(t, m, 8, must(t)(EncodeDeleteTask(&pb.DeleteTask{Db: "1", Name: "b"}))); res.Err != nil || res.Removed != 1 {
		t.Fatalf("delete b: %v", res)
	}
	if list := m.List(); len(list) != 1 || list[0].GetName() != "a" || list[0].GetStatus() != pb.Status_FAILED {
		t.Fatalf("after deleting b: %v", list)
	}
	// Alone again, "a" is what an op without a name means.
	if r, err := m.Lookup(1, 1, ""); err != nil || r.GetName() != "a" {
		t.Fatalf("lookup without a name: %v %v", r, err)
	}
}

// A pool has at most MaxTasksPerPool tasks: one more is refused on the
// copyset, naming the limit and the tasks; another copyset is not
// affected.
func TestTasksPerPoolBound(t *testing.T) {
	m := newMachine(t)
	i := uint64(0)
	put := func(name string, pid uint32) Result {
		i++
		return apply(t, m, i, must(t)(EncodePutSubTask(putReq(name, 1, pid, fmt.Sprint("tok-", name), dspb.SyncMode_kFull, snapStart(), 1000))))
	}
	for n := range MaxTasksPerPool {
		if res := put(fmt.Sprint("t", n), 1); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	res := put("one-more", 1)
	wantRefused(t, m, res, ErrTooManyTasks, MaxTasksPerPool)
	if want := fmt.Sprintf("the most a pool may have (MaxTasksPerPool %d)", MaxTasksPerPool); !strings.Contains(res.Err.Error(), want) ||
		!strings.Contains(res.Err.Error(), `"t0", "t1"`) {
		t.Fatalf("message %q", res.Err)
	}
	if res := put("one-more", 2); res.Err != nil {
		t.Fatalf("another copyset: %v", res.Err)
	}
}

// oldStateLine is a state line as written when a copyset held one task
// per (tid, pid): no export id, no task name in progress, no
// last_packet_ms.
const oldStateLine = `{"applied":"5","subTasks":[` +
	`{"db":"1","name":"backup","progress":{"tid":1,"pid":1,"mode":"kFullAndContinuous","syncPoint":{"type":"kBINLOG","offset":"7"},` +
	`"tabletEndpoint":"127.0.0.1:8200","desEndpoint":"127.0.0.1:8200","token":"token-1","dest":"file:///tmp/export"},` +
	`"status":"RUNNING","count":"12","lastUpdateMs":"1000","createdIndex":"1","updatedIndex":"5","binlogStart":"3"},` +
	`{"db":"1","name":"backup","progress":{"tid":1,"pid":2,"mode":"kFull","syncPoint":{"type":"kSNAPSHOT"},` +
	`"tabletEndpoint":"127.0.0.1:8200","desEndpoint":"127.0.0.1:8200","token":"token-2","dest":"file:///tmp/export"},` +
	`"status":"INIT","lastUpdateMs":"1000","createdIndex":"2","updatedIndex":"2"}]}`

// A state file written before a copyset could hold several tasks loads
// (one task per (tid, pid) is in the new key order), and the ops of that
// time (no task name) apply to its sub-tasks; a second task can then be
// added, after which such ops are refused. The file with the new state
// appended, cut back to its first line (a prefix streamed at snapshot
// time), loads as the old state again.
func TestOldStateLoads(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, Dir, FileName)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(oldStateLine+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, ms := openSpec(t, dir)
	if m.Applied() != 5 || len(m.List()) != 2 {
		t.Fatalf("loaded at %d: %v", m.Applied(), m.List())
	}
	r := m.Get(1, 1, "")
	if r.GetName() != "backup" || r.GetCount() != 12 || r.GetProgress().GetExportId() != "" || !proto.Equal(r, m.Get(1, 1, "backup")) {
		t.Fatalf("old sub-task: %v", r)
	}
	old := advance(1, 1, "token-1", binlogAt(7), binlogAt(9), 2, 2000, false) // no task name
	if res := apply(t, m, 6, must(t)(EncodeAdvance(old))); res.Err != nil || res.Record.GetCount() != 14 {
		t.Fatalf("an old op on the old state: %v %v", res.Record, res.Err)
	}
	if res := apply(t, m, 7, must(t)(EncodePutSubTask(putExport("migrate", 1, 1, "token-3", exportA, dspb.SyncMode_kFullAndContinuous, snapStart(), 3000)))); res.Err != nil {
		t.Fatal(res.Err)
	}
	wantRefused(t, m, apply(t, m, 8, must(t)(EncodeTouch(&pb.Touch{Ref: ref(1, 1, "token-1"), UpdateMs: 4000}))), ErrTaskNotNamed, 7)
	if err := m.Sync(); err != nil {
		t.Fatal(err)
	}
	closeSpec(t, ms)

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(b), "\n"); lines < 3 {
		t.Fatalf("state file of %d lines", lines)
	}
	if err := os.WriteFile(path, b[:len(oldStateLine)+1], 0o644); err != nil {
		t.Fatal(err)
	}
	m, ms = openSpec(t, dir)
	defer closeSpec(t, ms)
	if m.Applied() != 5 || len(m.List()) != 2 || m.Get(1, 1, "").GetCount() != 12 {
		t.Fatalf("the first line alone loaded at %d: %v", m.Applied(), m.List())
	}
}
