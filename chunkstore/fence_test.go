package chunkstore

import (
	"bytes"
	"errors"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/kinds"
)

// openTestFences opens a fence machine on dir and the epochMap of a fresh
// server dir it raises; the machine is closed at cleanup.
func openTestFences(t *testing.T, dir string) (*epochMap, *fenceMachine) {
	t.Helper()
	epochs, err := openEpochMap(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, err := openFenceMachine(dir, epochs, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return epochs, m
}

// applyFences encodes t as a fence op and applies it to m at index.
func applyFences(t *testing.T, m *fenceMachine, index uint64, u fenceTable) any {
	t.Helper()
	op, err := encodeFenceOp(u)
	if err != nil {
		t.Fatal(err)
	}
	kind, payload, err := copyset.DecodeOp(op)
	if err != nil || kind != kinds.Fence {
		t.Fatalf("fence op decodes to kind %d, %v", kind, err)
	}
	return m.Apply(index, payload)
}

// TestFenceMachineApply: applying fence ops raises the copyset's table and
// the server's epochMap, never lowers either, and a replay of the same ops
// changes nothing (one line per raise in the table file); reopening the
// machine, as after a restart or a snapshot install, raises a server's
// epochMap with the copyset's table.
func TestFenceMachineApply(t *testing.T) {
	dir := t.TempDir()
	epochs, m := openTestFences(t, dir)
	ops := []fenceTable{{5: 2, 6: 3}, {5: 2, 6: 3}, {5: 1}, {5: 4}, {}}
	want := fenceTable{5: 4, 6: 3}
	for round := range 2 { // the second round is a replay after a crash
		for i, u := range ops {
			if res := applyFences(t, m, uint64(i+1), u); res != nil {
				t.Fatalf("round %d op %d %v: result %v", round, i, u, res)
			}
		}
		if !maps.Equal(m.table, want) || !maps.Equal(epochs.table(), want) {
			t.Fatalf("round %d: copyset table %v, server table %v, want %v", round, m.table, epochs.table(), want)
		}
	}
	if err := m.Sync(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, FenceFileName))
	if err != nil {
		t.Fatal(err)
	}
	if lines := bytes.Count(b, []byte("\n")); lines != 2 {
		t.Fatalf("table file has %d lines, want 2 (one per raise):\n%s", lines, b)
	}
	if files, _ := m.Files(); len(files) != 1 || files[0] != FenceFileName {
		t.Fatalf("Files() = %v: the table must travel with raft snapshots", files)
	}
	if res := m.Apply(9, []byte{0xff, 0xff}); !isFatal(res) {
		t.Fatalf("undecodable fence op: result %v, want a FatalError", res)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}

	// Another server opening this data (a restarted replica, or one that
	// installed it from a snapshot) raises its own epochMap.
	other, err := openEpochMap(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := other.update(6, 7); err != nil {
		t.Fatal(err)
	}
	m2, err := openFenceMachine(dir, other, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if got := other.table(); !maps.Equal(got, fenceTable{5: 4, 6: 7}) {
		t.Fatalf("reopened machine raised the server table to %v, want file 5 at 4 and 6 kept at 7", got)
	}
}

func isFatal(res any) bool {
	var fe *copyset.FatalError
	err, ok := res.(error)
	return ok && errors.As(err, &fe)
}

// TestFenceTablePrefix: a raft snapshot streams fences.jsonl at the size it
// had when the stream started, possibly zero-padded; every prefix loads as
// one of the tables the file held, never as an error or a table that was
// never there.
func TestFenceTablePrefix(t *testing.T) {
	dir := t.TempDir()
	_, m := openTestFences(t, dir)
	states := []fenceTable{{}}
	for i, u := range []fenceTable{{5: 2}, {7: 1}, {5: 3, 8: 9}} {
		if res := applyFences(t, m, uint64(i+1), u); res != nil {
			t.Fatal(res)
		}
		states = append(states, maps.Clone(m.table))
	}
	m.Close()
	full, err := os.ReadFile(filepath.Join(dir, FenceFileName))
	if err != nil {
		t.Fatal(err)
	}
	for cut := 0; cut <= len(full); cut++ {
		for _, pad := range []int{0, 100} {
			d := t.TempDir()
			data := append(bytes.Clone(full[:cut]), make([]byte, pad)...)
			if err := os.WriteFile(filepath.Join(d, FenceFileName), data, 0o644); err != nil {
				t.Fatal(err)
			}
			e, _ := openTestFences(t, d)
			ok := false
			for _, s := range states {
				ok = ok || maps.Equal(e.table(), s)
			}
			if !ok {
				t.Fatalf("cut %d pad %d loads %v, not one of %v", cut, pad, e.table(), states)
			}
		}
	}
}

// TestFenceApplyPersistFails: a fence the server cannot persist stops the
// replica (FatalError), it is never skipped.
func TestFenceApplyPersistFails(t *testing.T) {
	epochs, m := openTestFences(t, t.TempDir())
	if err := os.RemoveAll(filepath.Dir(epochs.path)); err != nil { // epochs.json can no longer be written
		t.Fatal(err)
	}
	if res := applyFences(t, m, 1, fenceTable{5: 2}); !isFatal(res) {
		t.Fatalf("apply with an unwritable epochs.json: result %v, want a FatalError", res)
	}
	if !epochs.allowed(5, 1) {
		t.Fatal("a fence that was not persisted is in effect")
	}
}
