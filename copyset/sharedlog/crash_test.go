package sharedlog

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// model is the expected content of a set of groups.
type model struct {
	logs  map[uint64]map[uint64]*raft.Log
	terms map[uint64]uint64
}

func newModel() *model {
	return &model{logs: map[uint64]map[uint64]*raft.Log{}, terms: map[uint64]uint64{}}
}

func (m *model) clone() *model {
	c := newModel()
	for g, l := range m.logs {
		c.logs[g] = maps.Clone(l)
	}
	c.terms = maps.Clone(m.terms)
	return c
}

func (m *model) store(g uint64, logs []*raft.Log) {
	if m.logs[g] == nil {
		m.logs[g] = map[uint64]*raft.Log{}
	}
	for i := range m.logs[g] {
		if i >= logs[0].Index {
			delete(m.logs[g], i)
		}
	}
	for _, l := range logs {
		m.logs[g][l.Index] = l
	}
}

func (m *model) del(g, min, max uint64) {
	for i := range m.logs[g] {
		if i >= min && i <= max {
			delete(m.logs[g], i)
		}
	}
}

// verify checks l against m for groups and indexes up to maxIdx.
func (m *model) verify(t testing.TB, l *Log, groups []uint64, maxIdx uint64) {
	t.Helper()
	for _, g := range groups {
		gs := group(t, l, g)
		keys := slices.Sorted(maps.Keys(m.logs[g]))
		var first, last uint64
		if len(keys) > 0 {
			first, last = keys[0], keys[len(keys)-1]
		}
		checkBounds(t, gs, first, last)
		for i := uint64(0); i <= maxIdx; i++ {
			want, ok := m.logs[g][i]
			if !ok {
				checkMissing(t, gs, i)
				continue
			}
			checkEntries(t, gs, []*raft.Log{want})
		}
		term, err := gs.GetUint64([]byte("CurrentTerm"))
		want, ok := m.terms[g]
		switch {
		case !ok && (err == nil || err.Error() != "not found"):
			t.Fatalf("group %d: term %d %v, want not found", g, term, err)
		case ok && (err != nil || term != want):
			t.Fatalf("group %d: term %d %v, want %d", g, term, err, want)
		}
	}
}

// Requests built like the GroupStore methods build them, so that a test can
// submit several at once and get them into one group commit.
func entriesReq(t testing.TB, g *GroupStore, logs []*raft.Log) *request {
	rec, _, parts, refs, err := encodeEntries(g.ID(), logs, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &request{op: op{kind: recEntries, group: g.ID(), ents: refs}, st: g.st, rec: rec, parts: parts, done: make(chan error, 1)}
}

func termReq(g *GroupStore, term uint64) *request {
	v := []byte{0, 0, 0, 0, 0, 0, 0, byte(term)}
	return &request{op: op{kind: recSet, group: g.ID(), key: "CurrentTerm", val: v}, st: g.st,
		rec: encodeSet(nil, g.ID(), "CurrentTerm", v), done: make(chan error, 1)}
}

func deleteReq(g *GroupStore, min, max uint64) *request {
	return &request{op: op{kind: recDelete, group: g.ID(), min: min, max: max}, st: g.st,
		rec: encodeDelete(g.ID(), min, max), done: make(chan error, 1)}
}

// writeCrashImage lays out a copy of the log directory src in dst, with the
// content of segment segName of shard 0 replaced by seg.
func writeCrashImage(t testing.TB, src, dst string, segName string, seg []byte) {
	t.Helper()
	if err := os.RemoveAll(dst); err != nil {
		t.Fatal(err)
	}
	copyDir(t, src, dst)
	if err := os.WriteFile(filepath.Join(dst, "shard-000", segName), seg, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Kinds of active segment the crash test runs on.
const (
	growingSegment  = "growing"  // a new log's first segment: every commit extends the file
	zeroedSegment   = "zeroed"   // a preallocated spare: zeros after the valid data
	recycledSegment = "recycled" // a recycled spare: its previous life's records after the valid data
)

const fillerGroup = 99 // a group outside the crash test's model

// prepareActive makes the active segment of l (one shard) a preallocated one
// of the given kind by writing (and then deleting) entries of fillerGroup.
func prepareActive(t *testing.T, l *Log, kind string) {
	t.Helper()
	s := l.shards[0]
	g := group(t, l, fillerGroup)
	idx := uint64(1)
	fill := func(until func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !until(); idx++ {
			if time.Now().After(deadline) {
				t.Fatalf("%s: timed out preparing the active segment: %+v", kind, l.Stats())
			}
			mustStore(t, g, entries(fillerGroup, idx, idx, 1))
		}
	}
	// Leave the growing first segment for a zero-filled spare.
	fill(func() bool { return onSpare(l) })
	if kind == recycledSegment {
		// Fill a few segments, free them all, wait until one is the spare,
		// and roll into it.
		first := l.Stats().Shards[0].ActiveSegment
		fill(func() bool { return l.Stats().Shards[0].ActiveSegment >= first+3 })
		mustDelete(t, g, 1, idx)
		fill(func() bool { st := l.Stats().Shards[0]; return st.Recycled > 0 && st.SpareReady })
		active := l.Stats().Shards[0].ActiveSegment
		fill(func() bool { return l.Stats().Shards[0].ActiveSegment > active })
	}
	mustDelete(t, g, 1, idx)
	seg := s.segment(l.Stats().Shards[0].ActiveSegment)
	if !seg.prealloc || seg.fileSize.Load() != s.segSize {
		t.Fatalf("%s: active segment is not preallocated (%d of %d bytes)", kind, seg.fileSize.Load(), s.segSize)
	}
}

// TestCrashDuringGroupCommit writes acknowledged batches, then one group
// commit of several records from several groups, and simulates a crash at
// every byte of that last write (the write cut there: the bytes after it
// are what the file held before) and a corrupted byte at every position of
// it. Recovery must yield the acknowledged state plus a prefix of the last
// batch's records, with every stored entry intact, and appends after the
// recovered end must never bring back a later record of the torn batch. It
// runs on the three kinds of active segment: growing (the file is cut),
// zero-filled and recycled (the rest of the file is zeros, or records of
// the file's previous life).
func TestCrashDuringGroupCommit(t *testing.T) {
	for _, kind := range []string{growingSegment, zeroedSegment, recycledSegment} {
		t.Run(kind, func(t *testing.T) { testCrashDuringGroupCommit(t, kind) })
	}
}

func testCrashDuringGroupCommit(t *testing.T, kind string) {
	dir := t.TempDir()
	opts := Options{Dir: dir, Shards: 1, NoSync: true}
	if kind != growingSegment {
		opts.SegmentSize = 64 << 10
	}
	l := openLog(t, opts)
	if kind != growingSegment {
		prepareActive(t, l, kind)
	}
	groups := []uint64{1, 2, 3, 4}
	m := newModel()
	for _, g := range groups {
		gs := group(t, l, g)
		for i := uint64(1); i <= 5; i += 2 {
			logs := entries(g, i, i+1, 1)
			mustStore(t, gs, logs)
			m.store(g, logs)
		}
		if err := gs.SetUint64([]byte("CurrentTerm"), 1); err != nil {
			t.Fatal(err)
		}
		m.terms[g] = 1
	}
	mustDelete(t, group(t, l, 2), 1, 2)
	m.del(2, 1, 2)

	// The last batch: one group commit of six records.
	s := l.shards[0]
	g := func(id uint64) *GroupStore { return group(t, l, id) }
	type step struct {
		req   *request
		apply func(*model)
	}
	steps := []step{
		{entriesReq(t, g(1), entries(1, 7, 9, 2)), func(m *model) { m.store(1, entries(1, 7, 9, 2)) }},
		{termReq(g(2), 2), func(m *model) { m.terms[2] = 2 }},
		{entriesReq(t, g(3), entries(3, 7, 7, 2)), func(m *model) { m.store(3, entries(3, 7, 7, 2)) }},
		{deleteReq(g(4), 4, 6), func(m *model) { m.del(4, 4, 6) }},
		{entriesReq(t, g(4), entries(4, 4, 8, 3)), func(m *model) { m.store(4, entries(4, 4, 8, 3)) }},
		{entriesReq(t, g(1), entries(1, 10, 10, 2)), func(m *model) { m.store(1, entries(1, 10, 10, 2)) }},
	}
	seg := s.active
	before := seg.size.Load()
	// What the file holds where the last batch will go.
	prior := make([]byte, seg.fileSize.Load())
	if _, err := seg.f.ReadAt(prior, 0); err != nil {
		t.Fatal(err)
	}
	if kind == recycledSegment && !slices.ContainsFunc(prior[before:], func(b byte) bool { return b != 0 }) {
		t.Fatal("recycled segment has no stale data after its valid records")
	}
	batches := s.batches.Load()
	var reqs []*request
	for _, st := range steps {
		reqs = append(reqs, st.req)
	}
	if err := s.submit(reqs...); err != nil {
		t.Fatal(err)
	}
	if got := s.batches.Load() - batches; got != 1 {
		t.Fatalf("last batch took %d group commits, want 1", got)
	}
	if s.active != seg {
		t.Fatal("the last batch went to another segment")
	}
	starts := make([]int64, len(reqs))
	ends := make([]int64, len(reqs))
	for i, r := range reqs {
		starts[i], ends[i] = r.off, r.off+int64(len(r.rec))
	}
	final := m.clone()
	for _, st := range steps {
		st.apply(final)
	}
	final.verify(t, l, groups, 12)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	files := segFiles(t, dir, 0)
	if kind == growingSegment && len(files) != 1 {
		t.Fatalf("segments: %v", files)
	}
	name := filepath.Base(files[len(files)-1])
	if name != filepath.Base(seg.path) {
		t.Fatalf("last segment file %s, active was %s", name, seg.path)
	}
	full, err := os.ReadFile(files[len(files)-1])
	if err != nil {
		t.Fatal(err)
	}
	// The write covered [before, written): the records, and for a
	// preallocated segment zeros up to the next page boundary.
	written := ends[len(ends)-1]
	switch {
	case kind == growingSegment && int64(len(full)) != written:
		t.Fatalf("segment is %d bytes, last record ends at %d", len(full), written)
	case kind != growingSegment:
		if int64(len(full)) != opts.SegmentSize {
			t.Fatalf("preallocated segment is %d bytes, want %d", len(full), opts.SegmentSize)
		}
		written = min((written+pageSize-1)/pageSize*pageSize, int64(len(full)))
	}
	// expect returns the model after the first k records of the last batch.
	expect := func(k int) *model {
		e := m.clone()
		for _, st := range steps[:k] {
			st.apply(e)
		}
		return e
	}
	// intact returns how many leading records of the last batch img holds
	// exactly as written.
	intact := func(img []byte) int {
		k := 0
		for k < len(ends) && ends[k] <= int64(len(img)) && bytes.Equal(img[starts[k]:ends[k]], full[starts[k]:ends[k]]) {
			k++
		}
		return k
	}
	work := filepath.Join(t.TempDir(), "img")
	reopen := Options{Dir: work, SegmentSize: opts.SegmentSize, NoSync: true}
	checks := 0
	check := func(desc string, img []byte, extra bool) {
		t.Helper()
		checks++
		k := intact(img)
		writeCrashImage(t, dir, work, name, img)
		l := openLog(t, reopen)
		defer func() { l.Close() }()
		exp := expect(k)
		exp.verify(t, l, groups, 12)
		wantSize := before
		if k > 0 {
			wantSize = ends[k-1]
		}
		if got := l.shards[0].segment(seg.id).size.Load(); got != wantSize {
			t.Fatalf("%s: recovered %d bytes of the segment, want %d", desc, got, wantSize)
		}
		fi, err := os.Stat(filepath.Join(work, "shard-000", name))
		switch {
		case err != nil:
			t.Fatal(err)
		case kind == growingSegment && fi.Size() != wantSize:
			t.Fatalf("%s: segment not truncated to %d: %d", desc, wantSize, fi.Size())
		case kind != growingSegment && fi.Size() != int64(len(img)):
			t.Fatalf("%s: preallocated segment changed size from %d to %d", desc, len(img), fi.Size())
		}
		if extra {
			// The recovered log accepts appends after the cut point and
			// keeps them, and no record of the torn batch that the file
			// still holds after them comes back.
			gs := group(t, l, 3)
			last, _ := gs.LastIndex()
			more := entries(3, last+1, last+2, 9)
			mustStore(t, gs, more)
			exp.store(3, more)
			l.Close()
			l = openLog(t, reopen)
			exp.verify(t, l, groups, 14)
		}
	}
	// The write reached the disk up to cut (for a growing segment the file
	// ends there; otherwise the old content follows).
	// Past the records (the page's zero padding) sample every 256 bytes.
	stride := func(cut int64) int64 {
		if cut >= ends[len(ends)-1] {
			return 256
		}
		return 1
	}
	for cut := before; cut < written; cut += stride(cut) {
		img := append(slices.Clone(full[:cut]), prior[min(cut, int64(len(prior))):]...)
		check(fmt.Sprintf("cut at %d", cut), img, cut%97 == 0 || kind != growingSegment && cut%7 == 0)
	}
	// A corrupted byte in the last batch.
	for p := before; p < ends[len(ends)-1]; p++ {
		img := slices.Clone(full)
		img[p] ^= 0x5a
		check(fmt.Sprintf("flip at %d", p), img, p%101 == 0 || kind != growingSegment && p%11 == 0)
	}
	if kind == growingSegment {
		// Trailing zeros (a file extended but never written) end the log.
		check("zero tail", append(slices.Clone(full), make([]byte, 100)...), true)
	} else {
		// The write reached the disk only from cut on (pages persisted out
		// of order): the later records of the batch are intact after a
		// broken one, and must stay dead after appends at the recovered end.
		for cut := before + 1; cut < written; cut += stride(cut) {
			img := slices.Clone(full)
			copy(img[before:cut], prior[before:cut])
			check(fmt.Sprintf("lost up to %d", cut), img, slices.Contains(starts, cut) || cut%13 == 0)
		}
		check("as written", full, true)
	}
	t.Logf("%s: %d crash images over a %d-record batch of %d bytes", kind, checks, len(steps), ends[len(ends)-1]-before)
}

// TestCorruptionInOlderSegment checks that a bad record in a non-last
// segment ends the shard there: the segment is truncated, later segments
// are deleted, and what remains is a prefix of each group's log.
func TestCorruptionInOlderSegment(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, Shards: 1, SegmentSize: 4 << 10, NoSync: true}
	l := openLog(t, opts)
	const n = 120
	for i := uint64(1); i <= n; i++ {
		for _, g := range []uint64{1, 2, 3} {
			mustStore(t, group(t, l, g), entries(g, i, i, 1))
		}
	}
	l.Close()
	files := segFiles(t, dir, 0)
	if len(files) < 4 {
		t.Fatalf("want >= 4 segments, got %d", len(files))
	}
	b, err := os.ReadFile(files[1])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	if err := os.WriteFile(files[1], b, 0o644); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, opts)
	defer l.Close()
	if got := segFiles(t, dir, 0); len(got) != 2 {
		t.Fatalf("after recovery %d segments, want 2", len(got))
	}
	for _, g := range []uint64{1, 2, 3} {
		gs := group(t, l, g)
		first, _ := gs.FirstIndex()
		last, _ := gs.LastIndex()
		if first != 1 || last >= n || last < 5 {
			t.Fatalf("group %d: [%d,%d]", g, first, last)
		}
		checkEntries(t, gs, entries(g, 1, last, 1))
		checkMissing(t, gs, last+1)
		mustStore(t, gs, entries(g, last+1, last+1, 2))
	}
}

// TestCrashDuringRoll simulates a crash right after a new segment file was
// created but before its header was durable.
func TestCrashDuringRoll(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, Shards: 1, SegmentSize: 4 << 10}
	l := openLog(t, opts)
	gs := group(t, l, 5)
	mustStore(t, gs, entries(5, 1, 40, 1))
	if err := gs.SetUint64([]byte("CurrentTerm"), 4); err != nil {
		t.Fatal(err)
	}
	l.Close()
	files := segFiles(t, dir, 0)
	last, _ := parseSegName(filepath.Base(files[len(files)-1]))
	for _, partial := range [][]byte{nil, segMagic[:], appendSegHeader(nil, 0, last+1, segHeader{salt: 1})[:segHeaderSize-1]} {
		p := filepath.Join(dir, "shard-000", segName(last+1))
		if err := os.WriteFile(p, partial, 0o644); err != nil {
			t.Fatal(err)
		}
		l = openLog(t, opts)
		gs = group(t, l, 5)
		checkBounds(t, gs, 1, 40)
		checkEntries(t, gs, entries(5, 1, 40, 1))
		if v, err := gs.GetUint64([]byte("CurrentTerm")); err != nil || v != 4 {
			t.Fatalf("term %d %v", v, err)
		}
		l.Close()
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("half-created segment not removed: %v", err)
		}
	}
}
