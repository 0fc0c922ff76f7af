package statemachine

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/chunkraft/chunkraft/copyset"
)

// toy is the state of the test machine: the sum of the ops applied and
// how many changed it.
type toy struct {
	Applied uint64 `json:"applied"`
	Sum     int    `json:"sum"`
	Changes int    `json:"changes"`
}

// toyLine is a journal line of the test machine.
type toyLine struct {
	Base  *toy   `json:"base,omitempty"`
	Index uint64 `json:"index,omitempty"`
	Op    *int   `json:"op,omitempty"`
}

// toyConfig is a machine on path whose ops are decimal numbers added to
// the sum (0 changes nothing); journal selects a journal compacted past
// compactMin.
func toyConfig(path string, journal bool, compactMin int64) Config[*toy, int, string] {
	cfg := JSONState(Config[*toy, int, string]{
		Name: "toy", Path: path, File: filepath.Base(path), Log: slog.New(slog.DiscardHandler),
		New:    func() *toy { return &toy{} },
		Decode: func(payload []byte) (int, error) { return strconv.Atoi(string(payload)) },
		Apply: func(st *toy, _ uint64, op int) (string, bool) {
			if op == 0 {
				return "unchanged", false
			}
			st.Sum += op
			st.Changes++
			return "sum " + strconv.Itoa(st.Sum), true
		},
		Replayed: func(st *toy, _ uint64, _ int) string { return "replayed at " + strconv.Itoa(st.Sum) },
	}, func(st *toy) *uint64 { return &st.Applied })
	if journal {
		cfg.EncodeState = func(st *toy) ([]byte, error) { return json.Marshal(toyLine{Base: st}) }
		cfg.Journal = &Journal[*toy, int]{
			EncodeEntry: func(index uint64, op int) ([]byte, error) { return json.Marshal(toyLine{Index: index, Op: &op}) },
			DecodeLine: func(line []byte) (Line[*toy, int], bool, error) {
				var l toyLine
				switch {
				case json.Unmarshal(line, &l) != nil:
					return Line[*toy, int]{}, false, nil
				case l.Base != nil:
					return Line[*toy, int]{Base: l.Base, IsBase: true}, true, nil
				case l.Op != nil:
					return Line[*toy, int]{Index: l.Index, Op: *l.Op}, true, nil
				}
				return Line[*toy, int]{}, true, errors.New("no base, no op")
			},
			Replay: func(st *toy, index uint64, op int) error {
				st.Sum += op
				st.Changes++
				return nil
			},
			CompactMin: compactMin, CompactFactor: 8,
		}
	}
	return cfg
}

func openToy(t *testing.T, cfg Config[*toy, int, string]) *Machine[*toy, int, string] {
	t.Helper()
	m, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func state(m *Machine[*toy, int, string]) toy {
	var out toy
	m.View(func(st *toy) { out = *st })
	return out
}

// reopens closes m and checks that cfg's file loads as want.
func reopens(t *testing.T, m *Machine[*toy, int, string], cfg Config[*toy, int, string], want toy) {
	t.Helper()
	m.Close()
	if got := state(openToy(t, cfg)); got != want {
		t.Fatalf("reopened as %+v, want %+v", got, want)
	}
}

// modes runs f for the whole-state machine and the journal.
func modes(t *testing.T, f func(t *testing.T, journal bool)) {
	for _, journal := range []bool{false, true} {
		t.Run(fmt.Sprintf("journal=%v", journal), func(t *testing.T) { f(t, journal) })
	}
}

// TestReplayChangesNothing: an op at or below the stamp is answered by
// Replayed and neither changes the state nor writes; an op that changes
// nothing is answered and not written; the stamp is the last change, and
// Changed follows each change only.
func TestReplayChangesNothing(t *testing.T) {
	modes(t, func(t *testing.T, journal bool) {
		path := filepath.Join(t.TempDir(), "toy.jsonl")
		cfg := toyConfig(path, journal, 1<<20)
		var changed []uint64
		cfg.Changed = func(index uint64, _ int, _ string) { changed = append(changed, index) }
		m := openToy(t, cfg)
		for i := uint64(1); i <= 5; i++ {
			if res := m.Apply(i, []byte("2")); res != "sum "+strconv.Itoa(2*int(i)) {
				t.Fatalf("apply %d: %v", i, res)
			}
		}
		fi, _ := os.Stat(path)
		if res := m.Apply(3, []byte("100")); res != "replayed at 10" {
			t.Fatalf("replayed op answered %v", res)
		}
		if res := m.Apply(6, []byte("0")); res != "unchanged" {
			t.Fatalf("op that changes nothing answered %v", res)
		}
		after, _ := os.Stat(path)
		if fmt.Sprint(changed) != "[1 2 3 4 5]" {
			t.Fatalf("Changed called for %v", changed)
		}
		if got := state(m); got != (toy{Applied: 5, Sum: 10, Changes: 5}) || after.Size() != fi.Size() || m.Applied() != 5 {
			t.Fatalf("state %+v, applied %d, file %d bytes then %d", got, m.Applied(), fi.Size(), after.Size())
		}
		reopens(t, m, toyConfig(path, journal, 1<<20), toy{Applied: 5, Sum: 10, Changes: 5})
	})
}

// TestTornLastLine: a torn last line is skipped on load, and the next
// change starts a line of its own, so the file loads again afterwards.
func TestTornLastLine(t *testing.T) {
	modes(t, func(t *testing.T, journal bool) {
		path := filepath.Join(t.TempDir(), "toy.jsonl")
		m := openToy(t, toyConfig(path, journal, 1<<20))
		m.Apply(1, []byte("1"))
		m.Apply(2, []byte("2"))
		m.Close()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		last := strings.LastIndexByte(string(b[:len(b)-1]), '\n')
		if err := os.WriteFile(path, b[:last+1+(len(b)-last-1)/2], 0o644); err != nil { // index 2's line cut halfway
			t.Fatal(err)
		}
		m = openToy(t, toyConfig(path, journal, 1<<20))
		if got := state(m); got != (toy{Applied: 1, Sum: 1, Changes: 1}) {
			t.Fatalf("torn file loads as %+v", got)
		}
		m.Apply(2, []byte("5")) // appended after the torn line
		reopens(t, m, toyConfig(path, journal, 1<<20), toy{Applied: 2, Sum: 6, Changes: 2})
	})
}

// TestEveryPrefixLoads: a snapshot streams the file cut at any size and
// maybe zero-padded; every such copy loads as the state after some
// earlier op, journal compactions included.
func TestEveryPrefixLoads(t *testing.T) {
	modes(t, func(t *testing.T, journal bool) {
		path := filepath.Join(t.TempDir(), "toy.jsonl")
		cfg := toyConfig(path, journal, 200)
		m := openToy(t, cfg)
		states := []toy{{}}
		for i := uint64(1); i <= 60; i++ {
			op := int(i % 7) // every 7th op changes nothing
			m.Apply(i, []byte(strconv.Itoa(op)))
			states = append(states, state(m))
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for cut := 0; cut <= len(b); cut++ {
			for _, pad := range []int{0, 5} {
				st, _, err := Load(cfg, append(b[:cut:cut], make([]byte, pad)...))
				if err != nil {
					t.Fatalf("prefix %d: %v", cut, err)
				}
				if want := states[st.Applied]; *st != want {
					t.Fatalf("prefix %d (+%d zeros) loads as %+v, the state at its index was %+v", cut, pad, *st, want)
				}
			}
		}
		if st, _, _ := Load(cfg, b); *st != states[60] {
			t.Fatalf("whole file loads as %+v, want %+v", *st, states[60])
		}
	})
}

// TestUndecodableOpIsFatal: an op that does not decode stops the replica
// and changes nothing.
func TestUndecodableOpIsFatal(t *testing.T) {
	m := openToy(t, toyConfig(filepath.Join(t.TempDir(), "toy.jsonl"), false, 1<<20))
	res := m.Apply(1, []byte("not a number"))
	if fe, ok := res.(*copyset.FatalError); !ok || !strings.Contains(fe.Error(), "toy op at index 1") {
		t.Fatalf("undecodable op answered %#v", res)
	}
	if got := state(m); got != (toy{}) {
		t.Fatalf("state %+v after an undecodable op", got)
	}
}

// TestWriteFailureIsFatal: a change that cannot be written stops the
// replica, in both modes.
func TestWriteFailureIsFatal(t *testing.T) {
	modes(t, func(t *testing.T, journal bool) {
		path := filepath.Join(t.TempDir(), "toy.jsonl")
		m := openToy(t, toyConfig(path, journal, 1<<20))
		if err := os.Mkdir(path, 0o755); err != nil { // the file cannot be created
			t.Fatal(err)
		}
		res := m.Apply(1, []byte("1"))
		if fe, ok := res.(*copyset.FatalError); !ok || !strings.Contains(fe.Error(), "toy op at index 1") {
			t.Fatalf("unwritable change answered %#v", res)
		}
	})
}

// TestJournalCompacts: the journal's first line is a base, an entry is
// one line per change, and the file is replaced by a base once it outgrows
// CompactMin and CompactFactor bases, so it stays bounded however many ops
// apply; BeforeBase runs before every base.
func TestJournalCompacts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toy.jsonl")
	cfg := toyConfig(path, true, 512)
	bases := 0
	cfg.Journal.BeforeBase = func() error { bases++; return nil }
	m := openToy(t, cfg)
	m.Apply(1, []byte("1"))
	if b, _ := os.ReadFile(path); !strings.HasPrefix(string(b), `{"base":`) || bases != 1 {
		t.Fatalf("first change wrote %q, %d bases", b, bases)
	}
	m.Apply(2, []byte("1"))
	if b, _ := os.ReadFile(path); strings.Count(string(b), "\n") != 2 || !strings.Contains(string(b), `{"index":2,"op":1}`) {
		t.Fatalf("second change wrote %q", b)
	}
	var largest int64
	for i := uint64(3); i <= 1000; i++ {
		m.Apply(i, []byte("1"))
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		largest = max(largest, fi.Size())
	}
	if largest > 1024 || bases < 10 {
		t.Fatalf("journal grew to %d bytes with %d bases", largest, bases)
	}
	reopens(t, m, cfg, toy{Applied: 1000, Sum: 1000, Changes: 1000})
}

// TestJournalRefusesWhatItCannotRead: a line the tenant refuses (a newer
// build's) fails the open rather than load a partial state.
func TestJournalRefusesWhatItCannotRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toy.jsonl")
	if err := os.WriteFile(path, []byte(`{"base":{"applied":1,"sum":1}}`+"\n{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(toyConfig(path, true, 1<<20)); err == nil || !strings.Contains(err.Error(), "no base, no op") {
		t.Fatalf("open: %v", err)
	}
}

// TestReset: Reset replaces state and file with the given state, which a
// reopen loads.
func TestReset(t *testing.T) {
	modes(t, func(t *testing.T, journal bool) {
		path := filepath.Join(t.TempDir(), "toy.jsonl")
		cfg := toyConfig(path, journal, 1<<20)
		m := openToy(t, cfg)
		m.Apply(1, []byte("1"))
		if err := m.Reset(&toy{Applied: 7, Sum: 70, Changes: 3}); err != nil {
			t.Fatal(err)
		}
		if res := m.Apply(7, []byte("1")); res != "replayed at 70" {
			t.Fatalf("op at the reset stamp answered %v", res)
		}
		reopens(t, m, cfg, toy{Applied: 7, Sum: 70, Changes: 3})
	})
}
