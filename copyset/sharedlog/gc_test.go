package sharedlog

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/internal/testwait"
)

// TestSegmentGC truncates the prefixes of all groups but one, checks that
// the one left is reported as pinning the oldest segment, then truncates it
// too and checks that old segments are deleted and state survives reopen,
// including stable-store keys written only into deleted segments.
func TestSegmentGC(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, Shards: 2, SegmentSize: 4 << 10, NoSync: true}
	l := openLog(t, opts)
	groups := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	m := newModel()
	for _, g := range groups {
		if err := group(t, l, g).SetUint64([]byte("CurrentTerm"), g); err != nil {
			t.Fatal(err)
		}
		m.terms[g] = g
	}
	const n = 200
	for i := uint64(1); i <= n; i += 4 {
		for _, g := range groups {
			logs := entries(g, i, i+3, 1)
			mustStore(t, group(t, l, g), logs)
			m.store(g, logs)
		}
	}
	st := l.Stats()
	segsBefore := []int{len(segFiles(t, dir, 0)), len(segFiles(t, dir, 1))}
	oldest1 := segFiles(t, dir, 1)[0]
	if segsBefore[0] < 5 || segsBefore[1] < 5 || st.Segments != segsBefore[0]+segsBefore[1] {
		t.Fatalf("segments per shard %v, stats %d", segsBefore, st.Segments)
	}
	// Keep a copy of the oldest segments to resurrect later.
	stale := t.TempDir()
	copyDir(t, dir, stale)

	// Snapshot-style prefix truncation of every group except 3 (shard 1).
	for _, g := range groups {
		if g == 3 {
			continue
		}
		mustDelete(t, group(t, l, g), 1, n-20)
		m.del(g, 1, n-20)
	}
	st = l.Stats()
	if got := segCount(t, dir, 0, func(n int) bool { return n < segsBefore[0]-2 }); got >= segsBefore[0]-2 {
		t.Fatalf("shard 0: %d segments after truncation, had %d", got, segsBefore[0])
	}
	// Nothing of shard 1 was collected (its delete records may have started
	// a segment, as the move from a growing segment to a ready spare does).
	if got := segFiles(t, dir, 1); len(got) < segsBefore[1] || got[0] != oldest1 {
		t.Fatalf("shard 1: %d segments from %s, want >= %d from %s (pinned by group 3)", len(got), got[0], segsBefore[1], oldest1)
	}
	if p := st.Shards[1].PinningGroups; !slices.Equal(p, []uint64{3}) {
		t.Fatalf("shard 1 pinning groups %v, want [3]", p)
	}
	if p := st.Shards[0].PinningGroups; len(p) != 0 && st.Shards[0].OldestSegment != st.Shards[0].ActiveSegment {
		// Shard 0's oldest segment holds the oldest live entries of the
		// groups that remain there: all of them started at n-19.
		for _, g := range p {
			if g%2 != 0 {
				t.Fatalf("shard 0 reports group %d", g)
			}
		}
	}
	mustDelete(t, group(t, l, 3), 1, n-20)
	m.del(3, 1, n-20)
	if got := segCount(t, dir, 1, func(n int) bool { return n < segsBefore[1]-2 }); got >= segsBefore[1]-2 {
		t.Fatalf("shard 1: %d segments after truncation, had %d", got, segsBefore[1])
	}
	// gc drops collected segments from the stats before it closes and
	// retires (removes or recycles) their files: wait for the files.
	testwait.Until(t, 5*time.Second, func() error {
		st = l.Stats()
		if files := len(segFiles(t, dir, 0)) + len(segFiles(t, dir, 1)); st.Segments != files {
			return fmt.Errorf("stats segments %d disagree with %d files", st.Segments, files)
		}
		return nil
	})
	m.verify(t, l, groups, n+1)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l = openLog(t, opts)
	m.verify(t, l, groups, n+1)
	l.Close()

	// A crash can undo unlinks that were not yet durable. Resurrect the
	// oldest segment alone (a gap follows it) and then all deleted segments
	// (a contiguous older prefix): either way recovery must rebuild the same
	// state, never the truncated entries.
	for _, all := range []bool{false, true} {
		for sh := range 2 {
			live := segFiles(t, dir, sh)
			firstLive, _ := parseSegName(filepath.Base(live[0]))
			for _, p := range segFiles(t, stale, sh) {
				id, _ := parseSegName(filepath.Base(p))
				if id >= firstLive || (!all && id != 1) {
					continue
				}
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, filepath.Base(filepath.Dir(p)), filepath.Base(p)), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		l = openLog(t, opts)
		m.verify(t, l, groups, n+1)
		// Appends after such a recovery land in the right place.
		for _, g := range groups {
			logs := entries(g, n+1, n+1, 2)
			mustStore(t, group(t, l, g), logs)
			m.store(g, logs)
		}
		l.Close()
		l = openLog(t, opts)
		m.verify(t, l, groups, n+2)
		// Remove the extra entry again for the next round.
		for _, g := range groups {
			mustDelete(t, group(t, l, g), n+1, n+1)
			m.del(g, n+1, n+1)
		}
		l.Close()
	}
}

// TestDropGroupFreesSegments checks that dropping a group unpins segments.
func TestDropGroupFreesSegments(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, Shards: 1, SegmentSize: 2 << 10, NoSync: true}
	l := openLog(t, opts)
	for i := uint64(1); i <= 150; i++ {
		mustStore(t, group(t, l, 1), entries(1, i, i, 1))
		mustStore(t, group(t, l, 2), entries(2, i, i, 1))
	}
	mustDelete(t, group(t, l, 2), 1, 150)
	before := len(segFiles(t, dir, 0))
	if p := l.Stats().Shards[0].PinningGroups; !slices.Equal(p, []uint64{1}) {
		t.Fatalf("pinning %v, want [1]", p)
	}
	if err := l.DropGroup(1); err != nil {
		t.Fatal(err)
	}
	after := segCount(t, dir, 0, func(n int) bool { return n == 1 })
	if after != 1 || before < 4 {
		t.Fatalf("segments %d -> %d, want -> 1", before, after)
	}
	if st := l.Stats(); st.Groups != 0 || st.Segments != 1 {
		t.Fatalf("stats after drop: %+v", st)
	}
	l.Close()
	l = openLog(t, opts)
	defer l.Close()
	checkBounds(t, group(t, l, 1), 0, 0)
	checkBounds(t, group(t, l, 2), 0, 0)
}
