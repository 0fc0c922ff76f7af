package datasync

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "github.com/chunkraft/chunkraft/proto/chunkraft/syncstatepb"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
	"google.golang.org/protobuf/proto"
)

const (
	tok1 = "token-1"
	tok2 = "token-2"
)

// created puts sub-task 1/1 of task "t" (mode) at index 1 and returns the
// machine.
func created(t *testing.T, mode dspb.SyncMode, at *dspb.SyncPoint) *Machine {
	t.Helper()
	m := newMachine(t)
	res := apply(t, m, 1, must(t)(EncodePutSubTask(putReq("t", 1, 1, tok1, mode, at, 1000))))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	return m
}

// wantRefused checks that res was refused with target and that the
// machine's state is still at applied.
func wantRefused(t *testing.T, m *Machine, res Result, target error, applied uint64) {
	t.Helper()
	if !errors.Is(res.Err, target) {
		t.Fatalf("result %v, want refused with %q", res.Err, target)
	}
	if got := m.Applied(); got != applied {
		t.Fatalf("a refused op moved the state's index to %d (was %d)", got, applied)
	}
}

func TestPutCreatesSubTask(t *testing.T) {
	m := created(t, dspb.SyncMode_kFullAndContinuous, snapStart())
	r := m.Get(1, 1, "")
	if r == nil || r.GetStatus() != pb.Status_INIT || r.GetCount() != 0 || r.GetLastUpdateMs() != 1000 ||
		r.GetCreatedIndex() != 1 || r.GetUpdatedIndex() != 1 || r.GetDb() != "1" || r.GetName() != "t" ||
		r.GetProgress().GetToken() != tok1 || !proto.Equal(r.GetProgress().GetSyncPoint(), snapStart()) {
		t.Fatalf("created record %v", r)
	}
	r.Progress.Token = proto.String("changed")
	if m.Get(1, 1, "").GetProgress().GetToken() != tok1 {
		t.Fatal("Get returned the machine's record, not a copy")
	}
	if m.Get(1, 2, "") != nil || len(m.List()) != 1 {
		t.Fatalf("Get(1,2) %v, List %v", m.Get(1, 2, ""), m.List())
	}
}

func TestPutSameTokenRefused(t *testing.T) {
	m := created(t, dspb.SyncMode_kFull, snapStart())
	res := apply(t, m, 2, must(t)(EncodePutSubTask(putReq("t", 1, 1, tok1, dspb.SyncMode_kFull, snapStart(), 2000))))
	wantRefused(t, m, res, ErrSameTask, 1)
	if res.Err.Error() != "why send a same task?" {
		t.Fatalf("message %q", res.Err)
	}
	if res.Record.GetLastUpdateMs() != 1000 {
		t.Fatalf("refused put changed the record: %v", res.Record)
	}
}

// A new token takes over the sub-task from where it is: the stored point
// and count stay whatever the request says, the old token is fenced out.
func TestPutNewTokenReassigns(t *testing.T) {
	m := created(t, dspb.SyncMode_kFullAndContinuous, snapStart())
	if res := apply(t, m, 2, must(t)(EncodeAdvance(advance(1, 1, tok1, snapStart(), snapAt(3, 0), 7, 2000, false)))); res.Err != nil {
		t.Fatal(res.Err)
	}
	re := putReq("t", 1, 1, tok2, dspb.SyncMode_kFull, binlogAt(99), 1500)
	re.Request.TabletEndpoint = proto.String("127.0.0.1:8201")
	res := apply(t, m, 3, must(t)(EncodePutSubTask(re)))
	r := res.Record
	if res.Err != nil || r.GetProgress().GetToken() != tok2 || r.GetProgress().GetTabletEndpoint() != "127.0.0.1:8201" ||
		!proto.Equal(r.GetProgress().GetSyncPoint(), snapAt(3, 0)) || r.GetCount() != 7 ||
		r.GetProgress().GetMode() != dspb.SyncMode_kFullAndContinuous || r.GetStatus() != pb.Status_RUNNING ||
		r.GetLastUpdateMs() != 2000 || r.GetCreatedIndex() != 1 || r.GetUpdatedIndex() != 3 {
		t.Fatalf("reassigned: %v, %v", r, res.Err)
	}
	res = apply(t, m, 4, must(t)(EncodeAdvance(advance(1, 1, tok1, snapAt(3, 0), snapAt(4, 0), 1, 3000, false))))
	wantRefused(t, m, res, ErrTokenMismatch, 3)
	if res = apply(t, m, 5, must(t)(EncodeAdvance(advance(1, 1, tok2, snapAt(3, 0), snapAt(4, 0), 1, 3000, false)))); res.Err != nil || res.Record.GetCount() != 8 {
		t.Fatalf("new token's packet: %v %v", res.Record, res.Err)
	}
}

func TestPutKeepsINITOnReassign(t *testing.T) {
	m := created(t, dspb.SyncMode_kFull, snapStart())
	res := apply(t, m, 2, must(t)(EncodePutSubTask(putReq("t", 1, 1, tok2, dspb.SyncMode_kFull, snapStart(), 2000))))
	if res.Err != nil || res.Record.GetStatus() != pb.Status_INIT {
		t.Fatalf("reassigned INIT sub-task: %v %v", res.Record, res.Err)
	}
}

func TestPutRefusals(t *testing.T) {
	t.Run("another export", func(t *testing.T) {
		// A create of task "t" again (its own export id, its own token)
		// while "t" exists: upstream's refusal, nothing changed.
		m := created(t, dspb.SyncMode_kFull, snapStart())
		p := putReq("t", 1, 1, tok2, dspb.SyncMode_kFull, snapStart(), 2000)
		p.Request.ExportId = proto.String(exportA)
		res := apply(t, m, 2, must(t)(EncodePutSubTask(p)))
		wantRefused(t, m, res, ErrTaskExists, 1)
		if !strings.Contains(res.Err.Error(), `sync task already exists(creating or created): 1/1 of task "t" is of export (none), not `+exportA) {
			t.Fatalf("message %q", res.Err)
		}
	})
	for _, st := range []pb.Status{pb.Status_FAILED, pb.Status_SUCCESS} {
		t.Run(st.String(), func(t *testing.T) {
			m := created(t, dspb.SyncMode_kFull, binlogAt(5))
			if st == pb.Status_FAILED {
				apply(t, m, 2, must(t)(EncodeSetStatus(&pb.SetStatus{Ref: ref(1, 1, tok1), Status: st, Message: "log pin over its bound"})))
			} else {
				apply(t, m, 2, must(t)(EncodeSetBinlogEnd(&pb.SetBinlogEnd{Ref: ref(1, 1, tok1), Index: 5})))
			}
			res := apply(t, m, 3, must(t)(EncodeAdvance(advance(1, 1, tok1, binlogAt(5), binlogAt(6), 1, 2000, true))))
			if st == pb.Status_SUCCESS && res.Err != nil {
				t.Fatal(res.Err)
			}
			applied := m.Applied()
			res = apply(t, m, 4, must(t)(EncodePutSubTask(putReq("t", 1, 1, tok2, dspb.SyncMode_kFull, snapStart(), 3000))))
			wantRefused(t, m, res, ErrStatus, applied)
			if m.Get(1, 1, "").GetStatus() != st {
				t.Fatalf("status %v, want %v", m.Get(1, 1, "").GetStatus(), st)
			}
		})
	}
	t.Run("bound", func(t *testing.T) {
		m := newMachine(t)
		for i := range MaxSubTasks {
			if res := apply(t, m, uint64(i+1), must(t)(EncodePutSubTask(putReq("t", 1, uint32(i+1), tok1, dspb.SyncMode_kFull, snapStart(), 1000)))); res.Err != nil {
				t.Fatal(res.Err)
			}
		}
		res := apply(t, m, MaxSubTasks+1, must(t)(EncodePutSubTask(putReq("t", 1, MaxSubTasks+1, tok1, dspb.SyncMode_kFull, snapStart(), 1000))))
		wantRefused(t, m, res, ErrTooManySubTasks, MaxSubTasks)
		if n := len(m.List()); n != MaxSubTasks {
			t.Fatalf("%d sub-tasks", n)
		}
	})
}

func TestAdvance(t *testing.T) {
	m := created(t, dspb.SyncMode_kFullAndContinuous, snapStart())
	res := apply(t, m, 2, must(t)(EncodeAdvance(advance(1, 1, tok1, snapStart(), snapAt(2, 4096), 10, 2000, false))))
	r := res.Record
	if res.Err != nil || r.GetStatus() != pb.Status_RUNNING || r.GetCount() != 10 || r.GetLastUpdateMs() != 2000 ||
		!proto.Equal(r.GetProgress().GetSyncPoint(), snapAt(2, 4096)) || r.GetUpdatedIndex() != 2 {
		t.Fatalf("advanced: %v %v", r, res.Err)
	}
	// The snapshot phase ends; the binlog phase goes on.
	if res = apply(t, m, 3, must(t)(EncodeAdvance(advance(1, 1, tok1, snapAt(2, 4096), binlogAt(8), 3, 3000, false)))); res.Err != nil || res.Record.GetCount() != 13 {
		t.Fatalf("to the binlog: %v %v", res.Record, res.Err)
	}
	// An older clock does not move the last update back.
	if res = apply(t, m, 4, must(t)(EncodeAdvance(advance(1, 1, tok1, binlogAt(8), binlogAt(9), 1, 2500, false)))); res.Err != nil || res.Record.GetLastUpdateMs() != 3000 {
		t.Fatalf("older clock: %v %v", res.Record, res.Err)
	}
}

// TestAdvanceBinlogStart: the first packet's binlog start is kept, later
// ones do not move it.
func TestAdvanceBinlogStart(t *testing.T) {
	m := created(t, dspb.SyncMode_kFullAndContinuous, snapStart())
	a := advance(1, 1, tok1, snapStart(), snapAt(2, 4096), 10, 2000, false)
	a.BinlogStart = 17
	if res := apply(t, m, 2, must(t)(EncodeAdvance(a))); res.Err != nil || res.Record.GetBinlogStart() != 17 {
		t.Fatalf("first packet: %v %v", res.Record, res.Err)
	}
	b := advance(1, 1, tok1, snapAt(2, 4096), binlogAt(17), 1, 2100, false)
	b.BinlogStart = 40
	if res := apply(t, m, 3, must(t)(EncodeAdvance(b))); res.Err != nil || res.Record.GetBinlogStart() != 17 {
		t.Fatalf("later packet: %v %v", res.Record, res.Err)
	}
}

func TestAdvanceRefusals(t *testing.T) {
	tests := []struct {
		name   string
		prep   []byte // applied at index 2 first, if any
		op     *pb.Advance
		target error
		msg    string
	}{
		{name: "unknown sub-task", op: advance(1, 2, tok1, snapStart(), snapAt(1, 0), 1, 2000, false), target: ErrNotFound},
		{name: "wrong token", op: advance(1, 1, tok2, snapStart(), snapAt(1, 0), 1, 2000, false), target: ErrTokenMismatch, msg: "token not match"},
		{name: "wrong start point", op: advance(1, 1, tok1, snapAt(1, 0), snapAt(2, 0), 1, 2000, false), target: ErrPointMismatch,
			msg: "the packet starts at snapshot chunk 1 offset 0, the sub-task is at snapshot start"},
		{name: "start point equal but for an unset field", op: advance(1, 1, tok1, &dspb.SyncPoint{Type: dspb.SyncType_kSNAPSHOT.Enum(), Pk: proto.String("0"), Offset: proto.Uint64(0)}, snapAt(2, 0), 1, 2000, false),
			target: ErrPointMismatch},
		{name: "reassigning", prep: must(t)(EncodeSetStatus(&pb.SetStatus{Ref: ref(1, 1, tok1), Status: pb.Status_REASSIGNING})),
			op: advance(1, 1, tok1, snapStart(), snapAt(1, 0), 1, 2000, false), target: ErrStatus, msg: "is REASSIGNING, not INIT or RUNNING"},
		{name: "failed", prep: must(t)(EncodeSetStatus(&pb.SetStatus{Ref: ref(1, 1, tok1), Status: pb.Status_FAILED, Message: "x"})),
			op: advance(1, 1, tok1, snapStart(), snapAt(1, 0), 1, 2000, false), target: ErrStatus},
		{name: "finished, not kFull", op: advance(1, 1, tok1, snapStart(), binlogAt(3), 1, 2000, true), target: ErrNotFull},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := created(t, dspb.SyncMode_kFullAndContinuous, snapStart())
			applied := uint64(1)
			if tt.prep != nil {
				if res := apply(t, m, 2, tt.prep); res.Err != nil {
					t.Fatal(res.Err)
				}
				applied = 2
			}
			before := m.Get(1, 1, "")
			res := apply(t, m, 3, must(t)(EncodeAdvance(tt.op)))
			wantRefused(t, m, res, tt.target, applied)
			if tt.msg != "" && !strings.Contains(res.Err.Error(), tt.msg) {
				t.Fatalf("message %q, want it to say %q", res.Err, tt.msg)
			}
			if !proto.Equal(m.Get(1, 1, ""), before) {
				t.Fatalf("refused op changed the record: %v, was %v", m.Get(1, 1, ""), before)
			}
		})
	}
}

// A replay of an Advance the state already reflects (the same index,
// in the same process or after a restart) is not counted again.
func TestAdvanceReplayNotDoubleCounted(t *testing.T) {
	dir := t.TempDir()
	m, ms := openSpec(t, dir)
	log := [][]byte{
		must(t)(EncodePutSubTask(putReq("t", 1, 1, tok1, dspb.SyncMode_kFullAndContinuous, binlogAt(1), 1000))),
		must(t)(EncodeAdvance(advance(1, 1, tok1, binlogAt(1), binlogAt(4), 5, 2000, false))),
		must(t)(EncodeAdvance(advance(1, 1, tok1, binlogAt(4), binlogAt(6), 2, 3000, false))),
	}
	for i, op := range log {
		apply(t, m, uint64(i+1), op)
	}
	res := apply(t, m, 2, log[1]) // the same index again
	if res.Err != nil || res.Record.GetCount() != 7 || m.Get(1, 1, "").GetCount() != 7 {
		t.Fatalf("replayed index 2: result %v %v, count %d, want 7", res.Record, res.Err, m.Get(1, 1, "").GetCount())
	}
	if err := m.Sync(); err != nil {
		t.Fatal(err)
	}
	closeSpec(t, ms)
	m, ms = openSpec(t, dir)
	defer closeSpec(t, ms)
	for i, op := range log {
		apply(t, m, uint64(i+1), op)
	}
	if r := m.Get(1, 1, ""); r.GetCount() != 7 || !proto.Equal(r.GetProgress().GetSyncPoint(), binlogAt(6)) {
		t.Fatalf("after restart and replay: %v", r)
	}
}

func TestFinish(t *testing.T) {
	m := created(t, dspb.SyncMode_kFull, snapStart())
	res := apply(t, m, 2, must(t)(EncodeAdvance(advance(1, 1, tok1, snapStart(), binlogAt(5), 4, 2000, true))))
	wantRefused(t, m, res, ErrBinlogEnd, 1)
	if res = apply(t, m, 3, must(t)(EncodeSetBinlogEnd(&pb.SetBinlogEnd{Ref: ref(1, 1, tok1), Index: 9}))); res.Err != nil || res.Record.GetBinlogEnd() != 9 {
		t.Fatalf("binlog end: %v %v", res.Record, res.Err)
	}
	res = apply(t, m, 4, must(t)(EncodeSetBinlogEnd(&pb.SetBinlogEnd{Ref: ref(1, 1, tok1), Index: 9})))
	if res.Err != nil || m.Applied() != 3 {
		t.Fatalf("the same binlog end again: %v, state at %d", res.Err, m.Applied())
	}
	res = apply(t, m, 5, must(t)(EncodeSetBinlogEnd(&pb.SetBinlogEnd{Ref: ref(1, 1, tok1), Index: 12})))
	wantRefused(t, m, res, ErrBinlogEnd, 3)
	// Finishing before index 9 is exported is refused.
	res = apply(t, m, 6, must(t)(EncodeAdvance(advance(1, 1, tok1, snapStart(), binlogAt(9), 4, 2000, true))))
	wantRefused(t, m, res, ErrBinlogEnd, 3)
	res = apply(t, m, 7, must(t)(EncodeAdvance(advance(1, 1, tok1, snapStart(), binlogAt(10), 4, 2000, true))))
	if res.Err != nil || res.Record.GetStatus() != pb.Status_SUCCESS || res.Record.GetCount() != 4 {
		t.Fatalf("finish: %v %v", res.Record, res.Err)
	}
	res = apply(t, m, 8, must(t)(EncodeAdvance(advance(1, 1, tok1, binlogAt(10), binlogAt(11), 1, 3000, false))))
	wantRefused(t, m, res, ErrStatus, 7)
	res = apply(t, m, 9, must(t)(EncodeTouch(&pb.Touch{Ref: ref(1, 1, tok1), UpdateMs: 9000})))
	wantRefused(t, m, res, ErrStatus, 7)

	c := created(t, dspb.SyncMode_kFullAndContinuous, snapStart())
	res = apply(t, c, 2, must(t)(EncodeSetBinlogEnd(&pb.SetBinlogEnd{Ref: ref(1, 1, tok1), Index: 9})))
	wantRefused(t, c, res, ErrNotFull, 1)
}

func TestTouch(t *testing.T) {
	m := created(t, dspb.SyncMode_kFullAndContinuous, binlogAt(3))
	res := apply(t, m, 2, must(t)(EncodeTouch(&pb.Touch{Ref: ref(1, 1, tok1), UpdateMs: 5000})))
	r := res.Record
	if res.Err != nil || r.GetLastUpdateMs() != 5000 || r.GetStatus() != pb.Status_INIT || r.GetCount() != 0 ||
		!proto.Equal(r.GetProgress().GetSyncPoint(), binlogAt(3)) || m.Applied() != 2 {
		t.Fatalf("touched: %v %v", r, res.Err)
	}
	res = apply(t, m, 3, must(t)(EncodeTouch(&pb.Touch{Ref: ref(1, 1, tok1), UpdateMs: 4000})))
	if res.Err != nil || m.Applied() != 2 || m.Get(1, 1, "").GetLastUpdateMs() != 5000 {
		t.Fatalf("older touch: %v, state at %d, %v", res.Err, m.Applied(), m.Get(1, 1, ""))
	}
	res = apply(t, m, 4, must(t)(EncodeTouch(&pb.Touch{Ref: ref(1, 1, tok2), UpdateMs: 6000})))
	wantRefused(t, m, res, ErrTokenMismatch, 2)
}

// TestCovered: the first packet records the start time with the binlog
// start; the covered index and time move forward only, with packets that
// reach the binlog and heartbeats at the sub-task's point (one elsewhere
// moves its last update time only); a replay of the same ops after a
// restart leaves the same record.
func TestCovered(t *testing.T) {
	dir := t.TempDir()
	m, ms := openSpec(t, dir)
	first := advance(1, 1, tok1, snapStart(), snapAt(2, 0), 3, 2000, false)
	first.BinlogStart, first.StartStateMs = 9, 1500
	last := advance(1, 1, tok1, snapAt(2, 0), binlogAt(9), 1, 2100, false)
	last.BinlogStart, last.StartStateMs = 9, 7777 // only the first packet's count
	beat := func(at, covered uint64, coveredMs, ms int64) []byte {
		return must(t)(EncodeTouch(&pb.Touch{Ref: ref(1, 1, tok1), UpdateMs: ms, At: binlogAt(at), CoveredIndex: covered, CoveredMs: coveredMs}))
	}
	packet := func(from, to uint64, coveredMs, ms int64) []byte {
		a := advance(1, 1, tok1, binlogAt(from), binlogAt(to), 1, ms, false)
		a.CoveredMs = coveredMs
		return must(t)(EncodeAdvance(a))
	}
	type want struct {
		index   uint64
		ms      int64
		applied uint64 // the state's index after the op
	}
	log := []struct {
		op   []byte
		want want
	}{
		{must(t)(EncodePutSubTask(putReq("t", 1, 1, tok1, dspb.SyncMode_kFullAndContinuous, snapStart(), 1000))), want{0, 0, 1}},
		{must(t)(EncodeAdvance(first)), want{0, 0, 2}},
		{must(t)(EncodeTouch(&pb.Touch{Ref: ref(1, 1, tok1), UpdateMs: 2050, At: snapAt(2, 0)})), want{0, 0, 3}},
		{must(t)(EncodeAdvance(last)), want{8, 0, 4}},
		{beat(9, 20, 2500, 2600), want{20, 2500, 5}},
		{beat(7, 30, 2700, 2700), want{20, 2500, 6}}, // not the point: the last update time only
		{beat(9, 15, 2400, 2650), want{20, 2500, 6}}, // older: nothing changes
		{packet(9, 12, 3000, 3000), want{20, 3000, 8}},
		{packet(12, 25, 3500, 3500), want{24, 3500, 9}},
		{beat(25, 40, 0, 3600), want{40, 3500, 10}},
	}
	check := func(i int, w want) {
		t.Helper()
		r := m.Get(1, 1, "")
		index, coveredMs := Covered(r)
		if index != w.index || coveredMs != w.ms || m.Applied() != w.applied {
			t.Fatalf("after op %d: covered %d at %d ms, state at %d; want %d at %d ms, state at %d (%v)",
				i, index, coveredMs, m.Applied(), w.index, w.ms, w.applied, r)
		}
		if i >= 1 && (r.GetStartStateMs() != 1500 || r.GetBinlogStart() != 9) {
			t.Fatalf("after op %d: start time %d, binlog start %d; want 1500 and 9", i, r.GetStartStateMs(), r.GetBinlogStart())
		}
	}
	for i, e := range log {
		if res := apply(t, m, uint64(i+1), e.op); res.Err != nil {
			t.Fatalf("op %d: %v", i, res.Err)
		}
		check(i, e.want)
	}
	if r := m.Get(1, 1, ""); r.GetLastUpdateMs() != 3600 {
		t.Fatalf("last update %d, want 3600", r.GetLastUpdateMs())
	}
	if err := m.Sync(); err != nil {
		t.Fatal(err)
	}
	closeSpec(t, ms)
	m, ms = openSpec(t, dir)
	defer closeSpec(t, ms)
	for i, e := range log {
		apply(t, m, uint64(i+1), e.op)
	}
	check(len(log)-1, log[len(log)-1].want)
}

// A state line written before the start time and the covered point
// existed loads: the covered index is the one the binlog point implies,
// the times unknown.
func TestStateWithoutCoverageLoads(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, Dir), 0o755); err != nil {
		t.Fatal(err)
	}
	line := `{"applied":"7","subTasks":[{"db":"1","name":"t","progress":{"tid":1,"pid":1,"mode":"kFullAndContinuous","syncPoint":{"type":"kBINLOG","offset":"12"},` +
		`"tabletEndpoint":"a:1","desEndpoint":"a:1","token":"token-1","dest":"file:///x"},"status":"RUNNING","count":"5","lastUpdateMs":"2000",` +
		`"createdIndex":"1","updatedIndex":"7","binlogStart":"9"}]}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, Dir, FileName), []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	m, ms := openSpec(t, dir)
	defer closeSpec(t, ms)
	r := m.Get(1, 1, "")
	if index, coveredMs := Covered(r); r == nil || m.Applied() != 7 || index != 11 || coveredMs != 0 || r.GetStartStateMs() != 0 {
		t.Fatalf("loaded %v at %d: covered %d at %d ms", r, m.Applied(), index, coveredMs)
	}
	if res := apply(t, m, 8, must(t)(EncodeTouch(&pb.Touch{Ref: ref(1, 1, tok1), UpdateMs: 3000, At: binlogAt(12), CoveredIndex: 30, CoveredMs: 2900}))); res.Err != nil {
		t.Fatal(res.Err)
	}
	if index, coveredMs := Covered(m.Get(1, 1, "")); index != 30 || coveredMs != 2900 {
		t.Fatalf("after a heartbeat: covered %d at %d ms", index, coveredMs)
	}
}

func TestSetStatus(t *testing.T) {
	m := created(t, dspb.SyncMode_kFullAndContinuous, snapStart())
	res := apply(t, m, 2, must(t)(EncodeSetStatus(&pb.SetStatus{Ref: ref(1, 1, tok2), Status: pb.Status_FAILED})))
	wantRefused(t, m, res, ErrTokenMismatch, 1)
	res = apply(t, m, 3, must(t)(EncodeSetStatus(&pb.SetStatus{Ref: ref(1, 1, tok1), Status: pb.Status_REASSIGNING, Message: "no packet for 20s"})))
	if res.Err != nil || res.Record.GetStatus() != pb.Status_REASSIGNING || res.Record.GetMessage() != "no packet for 20s" {
		t.Fatalf("reassigning: %v %v", res.Record, res.Err)
	}
	// The reassignment's put makes it RUNNING under the new token.
	if res = apply(t, m, 4, must(t)(EncodePutSubTask(putReq("t", 1, 1, tok2, dspb.SyncMode_kFullAndContinuous, snapStart(), 9000)))); res.Err != nil || res.Record.GetStatus() != pb.Status_RUNNING {
		t.Fatalf("reassigned: %v %v", res.Record, res.Err)
	}
	res = apply(t, m, 5, must(t)(EncodeSetStatus(&pb.SetStatus{Ref: ref(1, 1, tok2), Status: pb.Status_FAILED, Message: "log pin over sync.max_retained_bytes"})))
	if res.Err != nil || res.Record.GetStatus() != pb.Status_FAILED {
		t.Fatalf("failed: %v %v", res.Record, res.Err)
	}
	res = apply(t, m, 6, must(t)(EncodeSetStatus(&pb.SetStatus{Ref: ref(1, 1, tok2), Status: pb.Status_REASSIGNING})))
	wantRefused(t, m, res, ErrStatus, 5)
}

func TestDelete(t *testing.T) {
	m := newMachine(t)
	for i, p := range []*pb.PutSubTask{
		putReq("a", 1, 1, tok1, dspb.SyncMode_kFull, snapStart(), 1000),
		putReq("a", 1, 2, tok1, dspb.SyncMode_kFull, snapStart(), 1000),
		putReq("b", 2, 1, tok1, dspb.SyncMode_kFull, snapStart(), 1000),
	} {
		apply(t, m, uint64(i+1), must(t)(EncodePutSubTask(p)))
	}
	res := apply(t, m, 4, must(t)(EncodeDeleteTask(&pb.DeleteTask{Db: "1", Name: "a"})))
	if res.Err != nil || res.Removed != 2 || len(m.List()) != 1 || m.Get(2, 1, "") == nil {
		t.Fatalf("delete 1/a: removed %d (%v), left %v", res.Removed, res.Err, m.List())
	}
	if res = apply(t, m, 5, must(t)(EncodeDeleteTask(&pb.DeleteTask{Db: "1", Name: "a"}))); res.Err != nil || res.Removed != 0 || m.Applied() != 4 {
		t.Fatalf("delete 1/a again: removed %d (%v), state at %d", res.Removed, res.Err, m.Applied())
	}
	if res = apply(t, m, 6, EncodeDeleteAll()); res.Removed != 1 || len(m.List()) != 0 || m.Applied() != 6 {
		t.Fatalf("delete all: removed %d, left %v", res.Removed, m.List())
	}
}

// While a replay walks through ops the state already reflects, the state
// stays as it is: replaying the first token's put does not hand the
// sub-task back to that token, not even for a moment.
func TestReplayKeepsTheCurrentToken(t *testing.T) {
	m := newMachine(t)
	log := [][]byte{
		must(t)(EncodePutSubTask(putReq("t", 1, 1, tok1, dspb.SyncMode_kFull, snapStart(), 1000))),
		must(t)(EncodePutSubTask(putReq("t", 1, 1, tok2, dspb.SyncMode_kFull, snapStart(), 2000))),
	}
	for i, op := range log {
		apply(t, m, uint64(i+1), op)
	}
	res := apply(t, m, 1, log[0])
	if r := m.Get(1, 1, ""); res.Err != nil || r.GetProgress().GetToken() != tok2 || r.GetUpdatedIndex() != 2 {
		t.Fatalf("replayed index 1: %v, record %v", res.Err, r)
	}
}
