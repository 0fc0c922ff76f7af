package integrity

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/copyset/statefile"
)

// testMachine is an integrity machine on a temp dir without a store.
func testMachine(t *testing.T, dir string) *Machine {
	t.Helper()
	m, err := openMachine(copyset.NewGroupID(1, 1), dir, nil, nil, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func testLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// applyOp applies op at index and returns the job result.
func applyOp(t *testing.T, m *Machine, index uint64, op *jobOp) jobResult {
	t.Helper()
	b, err := encodeJobOp(op)
	if err != nil {
		t.Fatal(err)
	}
	res, ok := m.Apply(index, b[copyset.OpHeaderLen:]).(jobResult)
	if !ok {
		t.Fatalf("apply %s: %v", op.Type, m.Apply(index, b[copyset.OpHeaderLen:]))
	}
	return res
}

// TestIntegrityJobTransitions: every (state, pause|resume|cancel) pair.
func TestIntegrityJobTransitions(t *testing.T) {
	// reach brings a fresh job 1 into a state, returning the next index.
	reach := func(t *testing.T, m *Machine, state string) uint64 {
		idx := uint64(1)
		do := func(op *jobOp) {
			t.Helper()
			if r := applyOp(t, m, idx, op); r.err != nil {
				t.Fatalf("setup %s: %v", op.Type, r.err)
			}
			idx++
		}
		do(&jobOp{Type: opSchedule, Pool: 1, Copyset: 1, SchedTime: 100})
		start := &jobOp{Type: opStart, ID: 1, Now: 200, Total: 1}
		switch state {
		case "WAITING":
		case "RUNNING":
			do(start)
		case "PAUSED(waiting)":
			do(&jobOp{Type: opPause, ID: 1})
		case "PAUSED(running)":
			do(start)
			do(&jobOp{Type: opPause, ID: 1})
		case "CANCELED":
			do(&jobOp{Type: opCancel, ID: 1, Now: 300})
		case "FINISHED":
			do(start)
			do(&jobOp{Type: opProgress, ID: 1, From: &ScanCursor{}, To: &ScanCursor{Chunk: 1}, Finished: true, Now: 300})
		case "FAILED":
			do(start)
			do(&jobOp{Type: opFail, ID: 1, Now: 300, Error: "boom"})
		}
		return idx
	}
	const refused = JobState(-1)
	table := []struct {
		from                string
		pause, resume, canc JobState // resulting state, refused = error
	}{
		{"WAITING", JobPaused, JobWaiting, JobCanceled},
		{"RUNNING", JobPaused, JobRunning, JobCanceled},
		{"PAUSED(waiting)", JobPaused, JobWaiting, JobCanceled},
		{"PAUSED(running)", JobPaused, JobRunning, JobCanceled},
		{"CANCELED", refused, refused, JobCanceled},
		{"FINISHED", refused, refused, refused},
		{"FAILED", refused, refused, refused},
	}
	for _, row := range table {
		for _, tc := range []struct {
			op   string
			want JobState
		}{{opPause, row.pause}, {opResume, row.resume}, {opCancel, row.canc}} {
			t.Run(row.from+"/"+tc.op, func(t *testing.T) {
				m := testMachine(t, t.TempDir())
				idx := reach(t, m, row.from)
				before := m.Job(1)
				res := applyOp(t, m, idx, &jobOp{Type: tc.op, ID: 1, Now: 400})
				if tc.want == refused {
					if res.err == nil || !reflect.DeepEqual(m.Job(1), before) {
						t.Fatalf("%s from %s: err %v, job %+v; want refused and unchanged", tc.op, row.from, res.err, m.Job(1))
					}
					return
				}
				if res.err != nil || res.job.State != tc.want || m.Job(1).State != tc.want {
					t.Fatalf("%s from %s: %v %+v, want %v", tc.op, row.from, res.err, res.job, tc.want)
				}
			})
		}
	}
	// Unknown ids are refused.
	m := testMachine(t, t.TempDir())
	if r := applyOp(t, m, 1, &jobOp{Type: opPause, ID: 3}); r.err != errJobNotFound || r.job != nil {
		t.Fatalf("pause of an unknown job: %+v", r)
	}
}

// TestIntegrityStateReplayAndReload: progress ops refuse a stale cursor;
// an op at or below the applied index changes nothing; the state file
// reloads to the same state, ignoring a torn last line and snapshot zero
// padding; it compacts when it grows.
func TestIntegrityStateReplayAndReload(t *testing.T) {
	dir := t.TempDir()
	m := testMachine(t, dir)
	applyOp(t, m, 10, &jobOp{Type: opSchedule, Pool: 1, Copyset: 1, SchedTime: 5})
	applyOp(t, m, 11, &jobOp{Type: opStart, ID: 1, Now: 6, Total: 2})
	mis := []ScanMismatch{{Chunk: 7, Offset: 0, Len: 4096, Index: 12, Peer: "p", Reason: ReasonDiffers, Value: "0x1", Majority: "0x2"}}
	if r := applyOp(t, m, 13, &jobOp{Type: opProgress, ID: 1, From: &ScanCursor{}, To: &ScanCursor{Chunk: 7, Offset: 4096},
		RangesScanned: 1, Results: mis}); r.err != nil {
		t.Fatal(r.err)
	}
	// The same progress again (a second leader computed it too): refused.
	if r := applyOp(t, m, 14, &jobOp{Type: opProgress, ID: 1, From: &ScanCursor{}, To: &ScanCursor{Chunk: 7, Offset: 4096},
		RangesScanned: 1, Results: mis}); r.err != errStaleCursor {
		t.Fatalf("stale progress: %v", r.err)
	}
	// A replayed schedule does not create a second job.
	if r := applyOp(t, m, 10, &jobOp{Type: opSchedule, Pool: 1, Copyset: 1, SchedTime: 5}); r.job == nil || r.job.ID != 1 {
		t.Fatalf("replayed schedule: %+v", r)
	}
	want := m.Jobs()
	if len(want) != 1 || want[0].MismatchCount != 1 || want[0].Cursor != (ScanCursor{Chunk: 7, Offset: 4096}) {
		t.Fatalf("state %+v", want[0])
	}
	if err := m.Sync(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte(`{"applied":99,"next_id":5,"jo`)) // torn write
	f.Write(make([]byte, 100))                       // snapshot padding
	f.Close()
	m2 := testMachine(t, dir)
	if got := m2.Jobs(); !reflect.DeepEqual(got, want) || m2.Applied() != 13 {
		t.Fatalf("reloaded %+v (applied %d), want %+v", got, m2.Applied(), want)
	}
	// Replay of the log after a snapshot at index 12: ops <= 13 skipped.
	applyOp(t, m2, 13, &jobOp{Type: opProgress, ID: 1, From: &ScanCursor{}, To: &ScanCursor{Chunk: 7, Offset: 4096}, Results: mis})
	if got := m2.Jobs(); !reflect.DeepEqual(got, want) {
		t.Fatalf("replay changed the state: %+v", got)
	}

	// Compaction: many changes keep the file near one line.
	m2.Close()
	m3 := testMachine(t, dir)
	idx := uint64(20)
	for range 3000 {
		applyOp(t, m3, idx, &jobOp{Type: opPause, ID: 1})
		applyOp(t, m3, idx+1, &jobOp{Type: opResume, ID: 1})
		idx += 2
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > 2*statefile.CompactMinBytes {
		t.Fatalf("state file not compacted: %d bytes", st.Size())
	}
	m3.Close()
	m4 := testMachine(t, dir)
	if m4.Applied() != idx-1 || m4.Job(1).State != JobRunning {
		t.Fatalf("after compaction: applied %d job %+v", m4.Applied(), m4.Job(1))
	}
}

// TestCompareReplicas: the majority of the members wins whatever their
// number; unreadable and missing replicas are always reported.
func TestCompareReplicas(t *testing.T) {
	members := []copyset.PeerID{"a:1:0", "b:1:0", "c:1:0", "d:1:0", "e:1:0"}
	type want struct{ peer, reason string }
	for _, tc := range []struct {
		name   string
		values map[copyset.PeerID]string
		want   []want
	}{
		{"all agree", map[copyset.PeerID]string{"a:1:0": "x", "b:1:0": "x", "c:1:0": "x", "d:1:0": "x", "e:1:0": "x"}, nil},
		{"two differ, majority of five", map[copyset.PeerID]string{"a:1:0": "x", "b:1:0": "y", "c:1:0": "x", "d:1:0": "z", "e:1:0": "x"},
			[]want{{"b:1:0", ReasonDiffers}, {"d:1:0", ReasonDiffers}}},
		{"unreadable and missing", map[copyset.PeerID]string{"a:1:0": "x", "b:1:0": replicaUnreadable, "c:1:0": "x", "e:1:0": "x"},
			[]want{{"b:1:0", ReasonUnreadable}, {"d:1:0", ReasonMissing}}},
		{"no majority", map[copyset.PeerID]string{"a:1:0": "x", "b:1:0": "x", "c:1:0": "y", "d:1:0": "y"},
			[]want{{"a:1:0", ReasonNoMajority}, {"b:1:0", ReasonNoMajority}, {"c:1:0", ReasonNoMajority}, {"d:1:0", ReasonNoMajority}, {"e:1:0", ReasonMissing}}},
		{"only one reports", map[copyset.PeerID]string{"c:1:0": "x"},
			[]want{{"a:1:0", ReasonMissing}, {"b:1:0", ReasonMissing}, {"d:1:0", ReasonMissing}, {"e:1:0", ReasonMissing}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []want
			for _, m := range compareReplicas(members, tc.values, 1, 0, 4096, 9) {
				got = append(got, want{m.Peer, m.Reason})
				if len(m.Replicas) != len(members) || m.Chunk != 1 || m.Index != 9 {
					t.Fatalf("mismatch %+v", m)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}
