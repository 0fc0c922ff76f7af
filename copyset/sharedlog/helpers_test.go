package sharedlog

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/chunkraft/chunkraft/internal/testwait"
)

var quiet = slog.New(slog.DiscardHandler)

func openLog(t testing.TB, opts Options) *Log {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	l, err := Open(opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", opts.Dir, err)
	}
	return l
}

func group(t testing.TB, l *Log, id uint64) *GroupStore {
	t.Helper()
	g, err := l.Group(id)
	if err != nil {
		t.Fatalf("Group(%d): %v", id, err)
	}
	return g
}

// testEntry returns a deterministic entry for (group, index, term).
func testEntry(grp, idx, term uint64) *raft.Log {
	l := &raft.Log{
		Index:      idx,
		Term:       term,
		Type:       raft.LogCommand,
		Data:       fmt.Appendf(nil, "g%d-i%d-t%d-%s", grp, idx, term, bytes.Repeat([]byte{byte(idx)}, int(idx%7))),
		AppendedAt: time.Unix(1700000000, int64(idx*1000+grp)),
	}
	if idx%3 == 0 {
		l.Extensions = fmt.Appendf(nil, "ext%d", idx)
	}
	if idx%5 == 0 {
		l.Type = raft.LogConfiguration
	}
	return l
}

func entries(grp, from, to, term uint64) []*raft.Log {
	var out []*raft.Log
	for i := from; i <= to; i++ {
		out = append(out, testEntry(grp, i, term))
	}
	return out
}

func sameLog(a, b *raft.Log) bool {
	return a.Index == b.Index && a.Term == b.Term && a.Type == b.Type &&
		bytes.Equal(a.Data, b.Data) && bytes.Equal(a.Extensions, b.Extensions) &&
		a.AppendedAt.Equal(b.AppendedAt) && a.AppendedAt.IsZero() == b.AppendedAt.IsZero()
}

func mustStore(t testing.TB, g *GroupStore, logs []*raft.Log) {
	t.Helper()
	if err := g.StoreLogs(logs); err != nil {
		t.Fatalf("StoreLogs: %v", err)
	}
}

func mustDelete(t testing.TB, g *GroupStore, min, max uint64) {
	t.Helper()
	if err := g.DeleteRange(min, max); err != nil {
		t.Fatalf("DeleteRange(%d,%d): %v", min, max, err)
	}
}

func checkBounds(t testing.TB, g *GroupStore, first, last uint64) {
	t.Helper()
	f, err := g.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	l, err := g.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	if f != first || l != last {
		t.Fatalf("group %d: first,last = %d,%d want %d,%d", g.ID(), f, l, first, last)
	}
}

// checkEntries asserts that [from,to] hold exactly want's entries.
func checkEntries(t testing.TB, g *GroupStore, want []*raft.Log) {
	t.Helper()
	for _, w := range want {
		var got raft.Log
		if err := g.GetLog(w.Index, &got); err != nil {
			t.Fatalf("group %d GetLog(%d): %v", g.ID(), w.Index, err)
		}
		if !sameLog(&got, w) {
			t.Fatalf("group %d GetLog(%d) = %+v want %+v", g.ID(), w.Index, got, *w)
		}
	}
}

func checkMissing(t testing.TB, g *GroupStore, idxs ...uint64) {
	t.Helper()
	for _, i := range idxs {
		var got raft.Log
		if err := g.GetLog(i, &got); !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("group %d GetLog(%d): err %v, want raft.ErrLogNotFound", g.ID(), i, err)
		}
	}
}

func segFiles(t testing.TB, dir string, shard int) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, fmt.Sprintf("shard-%03d", shard), "*"+segSuffix))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// copyDir copies the regular files of a log directory tree (no LOCK). The
// log may be open: files that disappear meanwhile are skipped.
func copyDir(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if d.Name() == "LOCK" {
			return nil
		}
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			return nil // a spare renamed by an open log's preparer
		}
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// segCount waits briefly for the writer's garbage collection (which runs
// after waking the waiters) to settle, then returns the number of segment
// files of shard.
func segCount(t testing.TB, dir string, shard int, want func(int) bool) int {
	t.Helper()
	var n int
	// At the timeout the count is the caller's to judge.
	_ = testwait.For(5*time.Second, func() error {
		if n = len(segFiles(t, dir, shard)); !want(n) {
			return fmt.Errorf("shard %d has %d segments", shard, n)
		}
		return nil
	})
	return n
}

// steady reports whether every shard of l that was written to appends to a
// preallocated segment and none is preparing a spare (benchmarks start
// timing then).
func steady(l *Log) bool {
	written := false
	for _, s := range l.shards {
		if s.records.Load() == 0 {
			continue
		}
		written = true
		s.prepMu.Lock()
		busy := s.want && len(s.ready) == 0
		s.prepMu.Unlock()
		if busy || !s.segment(s.activeID()).prealloc {
			return false
		}
	}
	return written
}

// onSpare reports whether shard 0 of l appends to a preallocated segment and
// is not preparing a spare.
func onSpare(l *Log) bool {
	s := l.shards[0]
	s.prepMu.Lock()
	busy := s.want && len(s.ready) == 0
	s.prepMu.Unlock()
	return !busy && s.segment(s.activeID()).prealloc
}
