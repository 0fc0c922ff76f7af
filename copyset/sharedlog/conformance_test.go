package sharedlog

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestConformance checks the LogStore/StableStore behaviours hashicorp/raft
// relies on (mirroring raft-boltdb's tests and raft's InmemStore), each
// checked before and after a reopen.
func TestConformance(t *testing.T) {
	const g1 = 7
	cases := []struct {
		name  string
		do    func(t *testing.T, l *Log)
		check func(t *testing.T, l *Log)
	}{
		{
			name: "empty",
			check: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				checkBounds(t, g, 0, 0)
				checkMissing(t, g, 0, 1, 2)
				if _, err := g.Get([]byte("CurrentTerm")); err == nil || err.Error() != "not found" {
					t.Fatalf("Get missing: %v, want exactly \"not found\"", err)
				}
				if v, err := g.GetUint64([]byte("CurrentTerm")); err == nil || err.Error() != "not found" || v != 0 {
					t.Fatalf("GetUint64 missing: %d %v, want 0 \"not found\"", v, err)
				}
			},
		},
		{
			name: "store single log",
			do:   func(t *testing.T, l *Log) { mustStore(t, group(t, l, g1), entries(g1, 1, 1, 1)) },
			check: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				checkBounds(t, g, 1, 1)
				checkEntries(t, g, entries(g1, 1, 1, 1))
				checkMissing(t, g, 0, 2)
			},
		},
		{
			name: "store logs one by one and in batches",
			do: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				for _, e := range entries(g1, 1, 3, 1) {
					if err := g.StoreLog(e); err != nil {
						t.Fatal(err)
					}
				}
				mustStore(t, g, entries(g1, 4, 10, 1))
			},
			check: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				checkBounds(t, g, 1, 10)
				checkEntries(t, g, entries(g1, 1, 10, 1))
				checkMissing(t, g, 0, 11)
			},
		},
		{
			name: "first index not 1",
			do:   func(t *testing.T, l *Log) { mustStore(t, group(t, l, g1), entries(g1, 100, 104, 3)) },
			check: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				checkBounds(t, g, 100, 104)
				checkMissing(t, g, 1, 99, 105)
			},
		},
		{
			name: "delete range as raft-boltdb tests it",
			do: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				mustStore(t, g, entries(g1, 1, 3, 1))
				mustDelete(t, g, 1, 2)
			},
			check: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				checkMissing(t, g, 1, 2)
				checkBounds(t, g, 3, 3)
				checkEntries(t, g, entries(g1, 3, 3, 1))
			},
		},
		{
			name: "prefix removal after snapshot then append",
			do: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				mustStore(t, g, entries(g1, 1, 10, 1))
				mustDelete(t, g, 1, 6)
				mustStore(t, g, entries(g1, 11, 12, 1))
			},
			check: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				checkBounds(t, g, 7, 12)
				checkMissing(t, g, 1, 6)
				checkEntries(t, g, entries(g1, 7, 12, 1))
			},
		},
		{
			name: "suffix removal on conflict then append new term",
			do: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				mustStore(t, g, entries(g1, 1, 10, 1))
				mustDelete(t, g, 7, 10)
				mustStore(t, g, entries(g1, 7, 8, 2))
			},
			check: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				checkBounds(t, g, 1, 8)
				checkEntries(t, g, entries(g1, 1, 6, 1))
				checkEntries(t, g, entries(g1, 7, 8, 2))
				checkMissing(t, g, 9, 10)
			},
		},
		{
			name: "suffix removal leaves tail",
			do: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				mustStore(t, g, entries(g1, 1, 10, 1))
				mustDelete(t, g, 5, 10)
			},
			check: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				checkBounds(t, g, 1, 4)
				checkMissing(t, g, 5, 10)
			},
		},
		{
			name: "delete everything then append after a gap",
			do: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				mustStore(t, g, entries(g1, 1, 10, 1))
				mustDelete(t, g, 1, 10)
				checkBounds(t, g, 0, 0)
				mustStore(t, g, entries(g1, 50, 51, 4))
			},
			check: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				checkBounds(t, g, 50, 51)
				checkMissing(t, g, 1, 10, 49)
				checkEntries(t, g, entries(g1, 50, 51, 4))
			},
		},
		{
			name: "delete range wider than the log",
			do: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				mustStore(t, g, entries(g1, 5, 10, 1))
				mustDelete(t, g, 1, 1000)
			},
			check: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				checkBounds(t, g, 0, 0)
				checkMissing(t, g, 5, 10)
			},
		},
		{
			name: "delete on empty and inverted range are no-ops",
			do: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				mustDelete(t, g, 1, 10)
				mustStore(t, g, entries(g1, 1, 3, 1))
				mustDelete(t, g, 3, 2)
			},
			check: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				checkBounds(t, g, 1, 3)
				checkEntries(t, g, entries(g1, 1, 3, 1))
			},
		},
		{
			name: "gap kept after snapshot install (non-monotonic store)",
			do: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				mustStore(t, g, entries(g1, 1, 5, 1))
				mustStore(t, g, entries(g1, 100, 102, 2))
			},
			check: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				checkBounds(t, g, 1, 102)
				checkEntries(t, g, entries(g1, 1, 5, 1))
				checkEntries(t, g, entries(g1, 100, 102, 2))
				checkMissing(t, g, 6, 50, 99, 103)
				// raft's compaction then drops the old run.
				mustDelete(t, g, 1, 100)
				checkBounds(t, g, 101, 102)
				mustStore(t, g, entries(g1, 1, 5, 1))
				mustStore(t, g, entries(g1, 100, 102, 2))
			},
		},
		{
			name: "middle range delete",
			do: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				mustStore(t, g, entries(g1, 1, 10, 1))
				mustDelete(t, g, 4, 6)
			},
			check: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				checkBounds(t, g, 1, 10)
				checkMissing(t, g, 4, 5, 6)
				checkEntries(t, g, entries(g1, 1, 3, 1))
				checkEntries(t, g, entries(g1, 7, 10, 1))
			},
		},
		{
			name: "storing at or below last index replaces the tail",
			do: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				mustStore(t, g, entries(g1, 1, 10, 1))
				mustStore(t, g, entries(g1, 6, 7, 3))
			},
			check: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				checkBounds(t, g, 1, 7)
				checkEntries(t, g, entries(g1, 1, 5, 1))
				checkEntries(t, g, entries(g1, 6, 7, 3))
				checkMissing(t, g, 8)
			},
		},
		{
			name: "non-increasing batch is rejected and stores nothing",
			do: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				bad := []*raft.Log{testEntry(g1, 2, 1), testEntry(g1, 1, 1)}
				if err := g.StoreLogs(bad); err == nil {
					t.Fatal("StoreLogs accepted decreasing indexes")
				}
				if err := g.StoreLogs(nil); err != nil {
					t.Fatal(err)
				}
			},
			check: func(t *testing.T, l *Log) { checkBounds(t, group(t, l, g1), 0, 0) },
		},
		{
			name: "entry fields round trip",
			do: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				mustStore(t, g, []*raft.Log{
					{Index: 1, Term: 1, Type: raft.LogNoop},
					{Index: 2, Term: 1, Type: raft.LogConfiguration, Data: []byte("cfg"), Extensions: []byte("e")},
					{Index: 3, Term: 1<<63 + 5, Type: raft.LogBarrier, AppendedAt: time.Unix(-5, 7)},
					{Index: 4, Term: 2, Type: raft.LogCommand, Data: bytes.Repeat([]byte("x"), 1<<20), AppendedAt: time.Now()},
				})
			},
			check: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				var got raft.Log
				if err := g.GetLog(1, &got); err != nil || got.Type != raft.LogNoop || got.Data != nil || got.Extensions != nil || !got.AppendedAt.IsZero() {
					t.Fatalf("entry 1: %+v %v", got, err)
				}
				if err := g.GetLog(2, &got); err != nil || string(got.Data) != "cfg" || string(got.Extensions) != "e" || got.Type != raft.LogConfiguration {
					t.Fatalf("entry 2: %+v %v", got, err)
				}
				if err := g.GetLog(3, &got); err != nil || got.Term != 1<<63+5 || !got.AppendedAt.Equal(time.Unix(-5, 7)) || got.Type != raft.LogBarrier {
					t.Fatalf("entry 3: %+v %v", got, err)
				}
				if err := g.GetLog(4, &got); err != nil || len(got.Data) != 1<<20 || got.AppendedAt.IsZero() {
					t.Fatalf("entry 4: %d bytes %v", len(got.Data), err)
				}
			},
		},
		{
			name: "set get overwrite",
			do: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				for _, kv := range [][2]string{{"LastVoteCand", "a"}, {"LastVoteCand", "node-b"}, {"empty", ""}} {
					if err := g.Set([]byte(kv[0]), []byte(kv[1])); err != nil {
						t.Fatal(err)
					}
				}
			},
			check: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				if v, err := g.Get([]byte("LastVoteCand")); err != nil || string(v) != "node-b" {
					t.Fatalf("Get = %q %v", v, err)
				}
				if v, err := g.Get([]byte("empty")); err != nil || len(v) != 0 {
					t.Fatalf("Get(empty) = %q %v", v, err)
				}
				if _, err := g.Get([]byte("bad")); err == nil || err.Error() != "not found" {
					t.Fatalf("Get(bad) = %v", err)
				}
			},
		},
		{
			name: "set/get uint64",
			do: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				if err := g.SetUint64([]byte("CurrentTerm"), 1); err != nil {
					t.Fatal(err)
				}
				if err := g.SetUint64([]byte("CurrentTerm"), 1<<40+3); err != nil {
					t.Fatal(err)
				}
			},
			check: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				if v, err := g.GetUint64([]byte("CurrentTerm")); err != nil || v != 1<<40+3 {
					t.Fatalf("GetUint64 = %d %v", v, err)
				}
				if _, err := g.GetUint64([]byte("bad")); !errors.Is(err, ErrKeyNotFound) {
					t.Fatalf("GetUint64(bad) = %v", err)
				}
			},
		},
		{
			name: "groups are isolated (same and different shards)",
			do: func(t *testing.T, l *Log) {
				for _, id := range []uint64{g1, g1 + 4, g1 + 1} { // g1+4 shares g1's shard
					g := group(t, l, id)
					mustStore(t, g, entries(id, 1, 4+id%3, id))
					if err := g.SetUint64([]byte("CurrentTerm"), id); err != nil {
						t.Fatal(err)
					}
				}
				mustDelete(t, group(t, l, g1+4), 1, 2)
			},
			check: func(t *testing.T, l *Log) {
				for _, id := range []uint64{g1, g1 + 4, g1 + 1} {
					g := group(t, l, id)
					first := uint64(1)
					if id == g1+4 {
						first = 3
					}
					checkBounds(t, g, first, 4+id%3)
					checkEntries(t, g, entries(id, first, 4+id%3, id))
					if v, err := g.GetUint64([]byte("CurrentTerm")); err != nil || v != id {
						t.Fatalf("group %d term %d %v", id, v, err)
					}
				}
				checkBounds(t, group(t, l, g1+8), 0, 0)
			},
		},
		{
			name: "drop group",
			do: func(t *testing.T, l *Log) {
				old := group(t, l, g1)
				mustStore(t, old, entries(g1, 1, 5, 1))
				if err := old.SetUint64([]byte("CurrentTerm"), 9); err != nil {
					t.Fatal(err)
				}
				mustStore(t, group(t, l, g1+4), entries(g1+4, 1, 2, 1))
				if err := l.DropGroup(g1); err != nil {
					t.Fatal(err)
				}
				if err := old.StoreLogs(entries(g1, 6, 6, 1)); !errors.Is(err, ErrGroupDropped) {
					t.Fatalf("StoreLogs on dropped handle: %v", err)
				}
				if _, err := old.LastIndex(); !errors.Is(err, ErrGroupDropped) {
					t.Fatalf("LastIndex on dropped handle: %v", err)
				}
				// The group can be re-created.
				mustStore(t, group(t, l, g1), entries(g1, 20, 21, 2))
			},
			check: func(t *testing.T, l *Log) {
				g := group(t, l, g1)
				checkBounds(t, g, 20, 21)
				checkMissing(t, g, 1, 5)
				if _, err := g.GetUint64([]byte("CurrentTerm")); err == nil || err.Error() != "not found" {
					t.Fatalf("term survived drop: %v", err)
				}
				checkBounds(t, group(t, l, g1+4), 1, 2)
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{Dir: t.TempDir()}
			l := openLog(t, opts)
			if tc.do != nil {
				tc.do(t, l)
			}
			if tc.check != nil {
				tc.check(t, l)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			for range 2 { // reopen twice: recovery must be idempotent
				l = openLog(t, opts)
				if tc.check != nil {
					tc.check(t, l)
				}
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestClosed(t *testing.T) {
	l := openLog(t, Options{Dir: t.TempDir()})
	g := group(t, l, 1)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.StoreLogs(entries(1, 1, 1, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("StoreLogs after Close: %v", err)
	}
	if _, err := g.FirstIndex(); !errors.Is(err, ErrClosed) {
		t.Fatalf("FirstIndex after Close: %v", err)
	}
	if _, err := l.Group(2); !errors.Is(err, ErrClosed) {
		t.Fatalf("Group after Close: %v", err)
	}
}

func TestShardCountFixed(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, Options{Dir: dir, Shards: 3})
	l.Close()
	if _, err := Open(Options{Dir: dir, Shards: 4, Logger: quiet}); err == nil {
		t.Fatal("reopen with a different shard count succeeded")
	}
	l = openLog(t, Options{Dir: dir})
	if n := len(l.Stats().Shards); n != 3 {
		t.Fatalf("shards = %d, want 3 from META", n)
	}
	// A second Open of the same directory is refused while the first is open.
	if _, err := Open(Options{Dir: dir, Logger: quiet}); err == nil {
		t.Fatal("second Open of a locked directory succeeded")
	}
	l.Close()
}
