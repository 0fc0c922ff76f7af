package disagg

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/copyset/statemachine"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
)

func openTest(t *testing.T, dir string) *Machine {
	t.Helper()
	m, err := openMachine(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func applyAt(t *testing.T, m *Machine, index uint64, op *pb.Op) Result {
	t.Helper()
	b, err := proto.Marshal(op)
	if err != nil {
		t.Fatal(err)
	}
	v := m.Apply(index, b)
	res, ok := v.(Result)
	if !ok {
		t.Fatalf("apply at %d: %v", index, v)
	}
	return res
}

// The journal: a base line, then one line per op that changed the state;
// every prefix of the file loads as the state after some op (the cut
// line, torn, is skipped); compaction replaces it with one base line and
// the state is the same.
func TestJournal(t *testing.T) {
	old := compactMinBytes
	compactMinBytes = 4096
	t.Cleanup(func() { compactMinBytes = old })
	dir := t.TempDir()
	m := openTest(t, dir)
	var states []*pb.State // states[i]: after index i+1
	for i := 1; i <= 120; i++ {
		key := fmt.Sprintf("s1/data/dat_%d_0", i%7)
		op := pendLock(key, 1, uint64(i))
		if i%3 == 0 {
			op = settle(key, i-1)
		}
		if i%10 == 0 {
			op = lockClone(fmt.Sprintf("o/%d", i), 1, int64(i))
		}
		applyAt(t, m, uint64(i), op)
		states = append(states, stateOf(m))
	}
	path := filepath.Join(dir, FileName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Count(string(b), "\n")
	if lines >= 120 || !strings.HasPrefix(string(b), `{"base":`) {
		t.Fatalf("journal of %d lines, starting %.40q: not compacted", lines, b)
	}
	for cut := 0; cut <= len(b); cut += 97 {
		st, _, err := loadJournal(b[:cut])
		if err != nil {
			t.Fatalf("prefix %d: %v", cut, err)
		}
		if st.GetApplied() == 0 {
			continue
		}
		if want := states[st.GetApplied()-1]; !proto.Equal(st, want) {
			t.Fatalf("prefix %d loads as index %d, not the state after it:\n%v\n%v", cut, st.GetApplied(), st, want)
		}
	}
	m.Close()
	again := openTest(t, dir)
	if got := stateOf(again); !proto.Equal(got, states[len(states)-1]) {
		t.Fatalf("reopened: %v, want %v", got, states[len(states)-1])
	}
	// An op at or below the loaded index changes nothing (replay).
	if res := applyAt(t, again, 100, pendMark("s1/data/dat_99_0")); res.Index != 0 || len(again.pendings("s1/data/dat_99_0")) != 0 {
		t.Fatalf("replayed op applied: %+v", res)
	}
}

// A table written by an older build (format 0, disagg/state.jsonl) is
// converted on open: upstream's locks and data file marks go (they are
// objects in S3), clone locks and gc marks of other objects stay, and
// state.jsonl becomes a directory an older build cannot read as its
// table. Opening again loads the journal.
func TestConvertsFormat0(t *testing.T) {
	dir := t.TempDir()
	legacy := &pb.State{Applied: 41, Files: []*pb.DataFile{
		{Key: "images/base.raw", CloneLocks: []*pb.CloneLock{{Pool: 1, Copyset: 2, Chunk: 7, Index: 9, TimeMs: 100}}},
		{Key: "o/gone", Deleted: true, MarkedIndex: 30, MarkedMs: 300},
		{Key: "s1/data/dat_1_0", Locks: []*pb.Lock{{StoreId: 2, Seq: 7, Index: 3}}},
		{Key: "s1/data/dat_2_0", Deleted: true, MarkedIndex: 5},
		{Key: "s1/data/dat_3_0", CloneLocks: []*pb.CloneLock{{Pool: 1, Copyset: 2, Chunk: 8, Index: 11, TimeMs: 110}}},
	}, CloneCopysets: []*pb.CloneCopyset{{Pool: 1, Copyset: 2, Members: []string{"a", "b"}}}}
	older := proto.CloneOf(legacy)
	older.Applied, older.Files = 40, older.Files[:1]
	var text []byte
	for _, st := range []*pb.State{older, legacy} {
		b, err := protojson.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		text = append(append(text, b...), '\n')
	}
	if err := os.WriteFile(filepath.Join(dir, legacyName), text, 0o644); err != nil {
		t.Fatal(err)
	}
	m := openTest(t, dir)
	want := &pb.State{Applied: 41, Format: Format, Files: []*pb.DataFile{legacy.Files[0], legacy.Files[1], legacy.Files[4]},
		CloneCopysets: legacy.CloneCopysets}
	if got := stateOf(m); !proto.Equal(got, want) {
		t.Fatalf("converted: %v\nwant %v", got, want)
	}
	if fi, err := os.Stat(filepath.Join(dir, legacyName)); err != nil || !fi.IsDir() {
		t.Fatalf("%s after the conversion: %v %v", legacyName, fi, err)
	}
	if _, err := os.ReadFile(filepath.Join(dir, legacyName)); err == nil {
		t.Fatalf("an older build reads %s without an error", legacyName)
	}
	m.Close()
	if again := openTest(t, dir); !proto.Equal(stateOf(again), want) {
		t.Fatalf("reopened: %v", stateOf(again))
	}
}

// A state file of a newer format, or holding an op this build does not
// know, is refused on open with an error naming it.
func TestRefusesNewerFormats(t *testing.T) {
	for name, line := range map[string]string{
		"newer format": `{"base":{"applied":"3","format":3}}`,
		"unknown op":   `{"base":{"applied":"3","format":2}}` + "\n" + `{"index":"4","op":{"someNewOp":{}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, FileName), []byte(line+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := openMachine(dir, slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), "newer build") {
				t.Fatalf("open: %v", err)
			}
		})
	}
}

// stateOf returns a copy of m's state.
func stateOf(m *Machine) *pb.State {
	var out *pb.State
	m.View(func(st *pb.State) { out = proto.CloneOf(st) })
	return out
}

// loadJournal loads a journal's content as the machine does.
func loadJournal(b []byte) (*pb.State, int, error) {
	return statemachine.Load((&Machine{}).config(), b)
}
