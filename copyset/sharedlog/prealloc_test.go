package sharedlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/internal/testwait"
)

// rechain rewrites img, the image of segment id of shard 0, as a new
// incarnation of the file that wrote the same bytes up to end: a header with
// salt and the records before end chained from it. The records after end
// keep their links: valid records of the previous incarnation.
func rechain(t *testing.T, img []byte, id uint32, salt uint32, end int64) {
	t.Helper()
	h, err := parseSegHeader(img[:segHeaderSize], 0, id)
	if err != nil {
		t.Fatal(err)
	}
	h.salt = salt
	copy(img, appendSegHeader(nil, 0, id, h))
	link := salt
	off := int64(segHeaderSize)
	for off < end {
		n := int64(binary.LittleEndian.Uint32(img[off:]))
		link = setLink(img[off:off+recHeaderSize+n], link)
		off += recHeaderSize + n
	}
	if off != end {
		t.Fatalf("%d is not a record boundary", end)
	}
}

// TestRecycledSegmentStaleTail: a recycled segment whose new incarnation
// wrote exactly the same records as its previous one up to some point, so
// that the next record of the previous life, intact and with a valid crc,
// starts right at the end of the live data. Only the new salt tells them
// apart: recovery must end the log there, and appends after it must not
// revive the stale records.
func TestRecycledSegmentStaleTail(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, Shards: 1, SegmentSize: 64 << 10, NoSync: true}
	l := openLog(t, opts)
	prepareActive(t, l, zeroedSegment)
	g := group(t, l, 1)
	var ends []int64
	for i := uint64(1); i <= 20; i++ {
		req := entriesReq(t, g, entries(1, i, i, 1))
		if err := l.shards[0].submit(req); err != nil {
			t.Fatal(err)
		}
		ends = append(ends, req.off+int64(len(req.rec)))
	}
	id := l.Stats().Shards[0].ActiveSegment
	l.Close()
	path := filepath.Join(dir, "shard-000", segName(id))
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	oldSalt := oldSalt(old)
	work := filepath.Join(t.TempDir(), "img")
	for _, k := range []int{0, 1, 7, 19} {
		var end int64
		if k > 0 {
			end = ends[k-1]
		} else {
			end = ends[0] - int64(len(entriesReq(t, g, entries(1, 1, 1, 1)).rec))
		}
		img := slices.Clone(old)
		rechain(t, img, id, newSalt(oldSalt), end)
		writeCrashImage(t, dir, work, segName(id), img)
		l := openLog(t, Options{Dir: work, SegmentSize: opts.SegmentSize, NoSync: true})
		g := group(t, l, 1)
		if k == 0 {
			checkBounds(t, g, 0, 0)
		} else {
			checkBounds(t, g, 1, uint64(k))
			checkEntries(t, g, entries(1, 1, uint64(k), 1))
		}
		checkMissing(t, g, uint64(k+1))
		if got := l.shards[0].segment(id).size.Load(); got != end {
			t.Fatalf("k=%d: recovered %d bytes, want %d", k, got, end)
		}
		// An append whose record has the same length as the stale one it
		// overwrites: the stale records after it must stay dead.
		mustStore(t, g, entries(1, uint64(k+1), uint64(k+1), 2))
		l.Close()
		l = openLog(t, Options{Dir: work, SegmentSize: opts.SegmentSize, NoSync: true})
		g = group(t, l, 1)
		checkBounds(t, g, min(1, uint64(k+1)), uint64(k+1))
		checkEntries(t, g, entries(1, uint64(k+1), uint64(k+1), 2))
		checkMissing(t, g, uint64(k+2))
		l.Close()
	}
	// Control: with the old salt, the same image is all valid records.
	img := slices.Clone(old)
	rechain(t, img, id, oldSalt, ends[6])
	writeCrashImage(t, dir, work, segName(id), img)
	l = openLog(t, Options{Dir: work, SegmentSize: opts.SegmentSize, NoSync: true})
	checkBounds(t, group(t, l, 1), 1, 20)
	l.Close()
}

// TestRecycling runs a raft-like workload (append, truncate old prefixes)
// with fsync on and small segments: freed segments must become spares
// (little zero-filling), at most SpareSegments spares exist, every segment file is
// preallocated, and the state survives a reopen. The groups keep about a
// quarter of a segment of entries, so a segment dies early in the life of
// the one after next, before the writer asks for a spare (at three
// quarters): each roll should find a recycled spare.
func TestRecycling(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, Shards: 1, SegmentSize: 16 << 10}
	l := openLog(t, opts)
	m := newModel()
	groups := []uint64{1, 2, 3}
	const n, batch = 2000, 5
	for i := uint64(1); i <= n; i += batch {
		for _, g := range groups {
			logs := entries(g, i, i+batch-1, 1)
			mustStore(t, group(t, l, g), logs)
			m.store(g, logs)
			if i%10 == 1 && i > 20 {
				mustDelete(t, group(t, l, g), 1, i-20)
				m.del(g, 1, i-20)
			}
		}
	}
	// Let the preparer finish what garbage collection handed it (the
	// counts below judge a preparer that does not).
	_ = testwait.For(10*time.Second, func() error {
		s := l.shards[0]
		s.prepMu.Lock()
		defer s.prepMu.Unlock()
		if len(s.dead) != 0 || (s.want && len(s.ready) == 0) {
			return errors.New("the preparer is busy")
		}
		return nil
	})
	st := l.Stats()
	t.Logf("segments %d recycled %d prepared %d misses %d disk %d data %d", st.Segments, st.Recycled, st.Prepared, st.SpareMisses, st.DiskBytes, st.DataBytes)
	if st.Recycled < 10 || st.Recycled < 3*st.Prepared {
		t.Fatalf("recycled %d segments, zero-filled %d: want mostly recycled", st.Recycled, st.Prepared)
	}
	spares, _ := filepath.Glob(filepath.Join(dir, "shard-000", "*"+spareSuffix+"*"))
	if len(spares) > DefaultSpareSegments {
		t.Fatalf("spare files: %v", spares)
	}
	for _, p := range segFiles(t, dir, 0) {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		// The first segment of a new log grows; it is long collected.
		if fi.Size() != opts.SegmentSize || !fullyAllocated(fi) {
			t.Fatalf("%s: %d bytes, allocated %v", p, fi.Size(), fullyAllocated(fi))
		}
	}
	m.verify(t, l, groups, n+1)
	l.Close()
	l = openLog(t, opts)
	defer l.Close()
	m.verify(t, l, groups, n+1)
}

// TestSparePreparation checks a zero-filled spare (fsync on): full size,
// allocated, zeros, and used by the next roll without a miss.
func TestSparePreparation(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, Shards: 1, SegmentSize: 256 << 10}
	l := openLog(t, opts)
	defer l.Close()
	g := group(t, l, 1)
	i := uint64(1)
	for !onSpare(l) {
		mustStore(t, g, entries(1, i, i, 1))
		i++
	}
	for !l.Stats().Shards[0].SpareReady {
		mustStore(t, g, entries(1, i, i, 1))
		i++
	}
	spares, _ := filepath.Glob(filepath.Join(dir, "shard-000", "*"+spareSuffix))
	if len(spares) != 1 {
		t.Fatalf("spares %v", spares)
	}
	b, err := os.ReadFile(spares[0])
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(spares[0])
	if int64(len(b)) != opts.SegmentSize || !fullyAllocated(fi) || slices.ContainsFunc(b, func(c byte) bool { return c != 0 }) {
		t.Fatalf("spare: %d bytes, allocated %v, not all zeros", len(b), fullyAllocated(fi))
	}
	active := l.Stats().Shards[0].ActiveSegment
	for l.Stats().Shards[0].ActiveSegment == active {
		mustStore(t, g, entries(1, i, i, 1))
		i++
	}
	st := l.Stats().Shards[0]
	if st.SpareMisses != 0 || st.Prepared < 2 {
		t.Fatalf("stats %+v", st)
	}
	// The segment's file did not grow: every commit was a pure overwrite.
	if seg := l.shards[0].segment(active); seg.fileSize.Load() != opts.SegmentSize {
		t.Fatalf("segment %d grew to %d", active, seg.fileSize.Load())
	}
	checkEntries(t, g, entries(1, 1, i-1, 1))
}

// TestCrashDuringSparePreparation: leftovers of spare preparation and
// activation at recovery. A half zero-filled .spare.tmp (the crash came
// before its rename), spares of the wrong size and spares beyond
// SpareSegments (1 here) are removed; a spare into which an activation had
// written the next segment's header (the crash came before its rename to a
// segment name) is still just a spare. The log's content is unaffected and
// the kept spare is used.
func TestCrashDuringSparePreparation(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, Shards: 1, SegmentSize: 64 << 10, SpareSegments: 1}
	l := openLog(t, opts)
	g := group(t, l, 1)
	mustStore(t, g, entries(1, 1, 30, 1))
	if err := g.SetUint64([]byte("CurrentTerm"), 3); err != nil {
		t.Fatal(err)
	}
	active := l.Stats().Shards[0].ActiveSegment
	l.Close()
	sh := filepath.Join(dir, "shard-000")
	write := func(name string, b []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(sh, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The next segment's start, written into a spare that was not renamed.
	activated := appendSegHeader(nil, 0, active+1, segHeader{salt: 77, prevEnd: 999})
	activated = append(activated, make([]byte, opts.SegmentSize-int64(len(activated)))...)
	write(spareName(40), activated)
	write(spareName(41)+tmpSuffix, make([]byte, 10<<10))      // zero-fill interrupted
	write(spareName(42), make([]byte, 10<<10))                // wrong size
	write(spareName(39), make([]byte, opts.SegmentSize))      // a surplus spare
	write(spareName(43)+tmpSuffix, nil)                       // created, nothing written
	write("notes.txt", []byte("not the log's; left alone\n")) // unrelated file

	l = openLog(t, opts)
	g = group(t, l, 1)
	checkBounds(t, g, 1, 30)
	checkEntries(t, g, entries(1, 1, 30, 1))
	if v, err := g.GetUint64([]byte("CurrentTerm")); err != nil || v != 3 {
		t.Fatalf("term %d %v", v, err)
	}
	left, _ := os.ReadDir(sh)
	var names []string
	for _, de := range left {
		names = append(names, de.Name())
	}
	want := []string{segName(active), spareName(40), "notes.txt"}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("files after recovery %v, want %v", names, want)
	}
	st := l.Stats().Shards[0]
	if !st.SpareReady || st.ActiveSegment != active {
		t.Fatalf("stats %+v", st)
	}
	// The growing first segment moves to the kept spare at the next write,
	// which becomes segment active+1 with a fresh header.
	mustStore(t, g, entries(1, 31, 31, 1))
	st = l.Stats().Shards[0]
	if st.ActiveSegment != active+1 || st.SpareMisses != 0 {
		t.Fatalf("stats after roll %+v", st)
	}
	if _, err := os.Stat(filepath.Join(sh, spareName(40))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("spare not renamed: %v", err)
	}
	l.Close()
	l = openLog(t, opts)
	checkEntries(t, group(t, l, 1), entries(1, 1, 31, 1))
	l.Close()
}

// TestOldFormatRefused: a directory of format v1 fails to open with
// ErrUnsupportedFormat, and nothing in it is touched.
func TestOldFormatRefused(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "shard-000"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, metaName), []byte("sharedlog v1 shards 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(dir, "shard-000", segName(1))
	if err := os.WriteFile(seg, []byte("CRSL\x01\x00\x00\x00 v1 segment"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(Options{Dir: dir, Logger: quiet})
	if !errors.Is(err, ErrUnsupportedFormat) || !strings.Contains(err.Error(), "v1") {
		t.Fatalf("Open of a v1 directory: %v", err)
	}
	if _, err := os.Stat(seg); err != nil {
		t.Fatalf("v1 segment touched: %v", err)
	}
	// A v1 segment (intact header) in a v2 directory is refused too, not
	// mistaken for a torn segment and deleted.
	if err := os.WriteFile(filepath.Join(dir, metaName), []byte("sharedlog v2 shards 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var h [24]byte
	copy(h[:], segMagic[:])
	binary.LittleEndian.PutUint32(h[4:8], 1)
	binary.LittleEndian.PutUint32(h[12:16], 1)
	binary.LittleEndian.PutUint32(h[20:24], recordCRC(h[0:20], nil))
	if err := os.WriteFile(seg, h[:], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Options{Dir: dir, Logger: quiet}); !errors.Is(err, ErrUnsupportedFormat) {
		t.Fatalf("Open with a v1 segment: %v", err)
	}
	if _, err := os.Stat(seg); err != nil {
		t.Fatalf("v1 segment touched: %v", err)
	}
}

// TestSparePool: segments freed together (one truncation frees several)
// are all kept as spares, up to SpareSegments, and serve the next rolls
// without a zero-fill; recovery keeps at most SpareSegments of them.
func TestSparePool(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, Shards: 1, SegmentSize: 64 << 10, SpareSegments: 3}
	l := openLog(t, opts)
	g := group(t, l, 1)
	i := uint64(1)
	for l.Stats().Segments < 6 {
		mustStore(t, g, entries(1, i, i+9, 1))
		i += 10
	}
	mustDelete(t, g, 1, i-2) // frees every segment but the active one
	spares := func() int {
		t.Helper()
		names, err := filepath.Glob(filepath.Join(dir, "shard-000", "*"+spareSuffix))
		if err != nil {
			t.Fatal(err)
		}
		return len(names)
	}
	if err := testwait.For(10*time.Second, func() error {
		s := l.shards[0]
		s.prepMu.Lock()
		defer s.prepMu.Unlock()
		if len(s.dead) != 0 || len(s.ready) != 3 {
			return fmt.Errorf("%d retired segments left, %d spares", len(s.dead), len(s.ready))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	st := l.Stats()
	if st.Spares != 3 || st.Recycled < 2 || spares() != 3 {
		t.Fatalf("after the burst: %d spares (%d files), %d recycled: want 3, at least 2 recycled", st.Spares, spares(), st.Recycled)
	}
	l.Close()

	opts.SpareSegments = 2
	l = openLog(t, opts)
	defer l.Close()
	g = group(t, l, 1)
	checkEntries(t, g, entries(1, i-1, i-1, 1))
	if st := l.Stats(); st.Spares != 2 || spares() != 2 {
		t.Fatalf("reopened with SpareSegments 2: %d spares, %d files", st.Spares, spares())
	}
	// Two rolls use the two spares, without a zero-fill or a miss.
	before := l.Stats().Shards[0]
	for l.Stats().Shards[0].ActiveSegment < before.ActiveSegment+2 {
		mustStore(t, g, entries(1, i, i+9, 1))
		i += 10
	}
	if st := l.Stats().Shards[0]; st.Prepared != before.Prepared || st.SpareMisses != 0 {
		t.Fatalf("rolls into kept spares: prepared %d -> %d, %d misses", before.Prepared, st.Prepared, st.SpareMisses)
	}
	checkEntries(t, g, entries(1, i-20, i-1, 1))
}
