package sharedlog

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// prepareSpare makes the active segment of l (one shard, default segment
// size) a preallocated one by writing, then deleting, large entries of
// fillerGroup.
func prepareSpare(t *testing.T, l *Log) {
	t.Helper()
	g := group(t, l, fillerGroup)
	data := make([]byte, 256<<10)
	idx := uint64(1)
	for deadline := time.Now().Add(10 * time.Second); !onSpare(l); idx++ {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for a spare segment: %+v", l.Stats())
		}
		mustStore(t, g, []*raft.Log{{Index: idx, Term: 1, Type: raft.LogCommand, Data: data}})
	}
	mustDelete(t, g, 1, idx)
}

// commitAndReopen commits reqs as one batch (commitOneBatch), then checks
// that every group of m reads back identical up to its last index in next,
// before and after closing and reopening l with opts. It closes l and the
// reopened log.
func commitAndReopen(t *testing.T, l *Log, opts Options, reqs []*request, m *model, groups []uint64, next map[uint64]uint64) {
	t.Helper()
	commitOneBatch(t, l, reqs)
	var maxIdx uint64
	for _, n := range next {
		maxIdx = max(maxIdx, n)
	}
	m.verify(t, l, groups, maxIdx+1)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, opts)
	defer l.Close()
	m.verify(t, l, groups, maxIdx+1)
}

// commitOneBatch submits reqs to shard 0 of l as one group commit and checks
// that the segment holds exactly what the former write path wrote: the
// records concatenated into one buffer, chained there with setLink from the
// link of the segment's last record, and padded with padToPage.
func commitOneBatch(t *testing.T, l *Log, reqs []*request) {
	t.Helper()
	s := l.shards[0]
	seg := s.active
	size, fileSize, link := seg.size.Load(), seg.fileSize.Load(), s.link
	// The old path, on copies of the records taken before the writer
	// chains them in place.
	var want []byte
	var offs []int64
	for _, r := range reqs {
		offs = append(offs, size+int64(len(want)))
		start := len(want)
		want = appendRecord(want, r)
		link = setLink(want[start:], link)
	}
	n := int64(len(want))
	want = padToPage(want, size, fileSize)
	batches := s.batches.Load()
	if err := s.submit(reqs...); err != nil {
		t.Fatal(err)
	}
	if got := s.batches.Load() - batches; got != 1 {
		t.Fatalf("the batch took %d group commits, want 1", got)
	}
	if s.active != seg {
		t.Fatal("the batch went to another segment")
	}
	if got := seg.size.Load(); got != size+n {
		t.Fatalf("segment size %d after the batch, want %d", got, size+n)
	}
	if s.link != link {
		t.Fatalf("link after the batch %#x, want %#x", s.link, link)
	}
	for i, r := range reqs {
		if r.off != offs[i] {
			t.Fatalf("record %d placed at %d, want %d", i, r.off, offs[i])
		}
	}
	got := make([]byte, len(want))
	if _, err := seg.f.ReadAt(got, size); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		i := 0
		for got[i] == want[i] {
			i++
		}
		t.Fatalf("segment differs from the copy path's bytes at %d (of %d written at %d)", size+int64(i), len(want), size)
	}
	if fi, err := seg.f.Stat(); err != nil {
		t.Fatal(err)
	} else if !seg.prealloc && fi.Size() != size+n {
		t.Fatalf("growing segment is %d bytes, want %d", fi.Size(), size+n)
	}
	if len(want) > int(n) {
		t.Logf("batch of %d records, %d bytes + %d bytes of padding", len(reqs), n, int64(len(want))-n)
	} else {
		t.Logf("batch of %d records, %d bytes, no padding", len(reqs), n)
	}
}

// eachSegmentKind runs test on a fresh one-shard log (NoSync) once with a
// growing active segment and once with a preallocated, zeroed one.
func eachSegmentKind(t *testing.T, test func(t *testing.T, l *Log, opts Options)) {
	for _, kind := range []string{growingSegment, zeroedSegment} {
		t.Run(kind, func(t *testing.T) {
			opts := Options{Dir: t.TempDir(), Shards: 1, NoSync: true}
			l := openLog(t, opts)
			defer l.Close()
			if kind == zeroedSegment {
				prepareSpare(t, l)
			}
			test(t, l, opts)
		})
	}
}

// TestLargeBatch commits one batch of more than IOV_MAX records (the
// pwritev must be split) and checks its bytes, then that every entry reads
// back identical, before and after a reopen.
func TestLargeBatch(t *testing.T) {
	eachSegmentKind(t, func(t *testing.T, l *Log, opts Options) {
		groups := []uint64{1, 2, 3, 4, 5}
		m := newModel()
		next := map[uint64]uint64{}
		var reqs []*request
		for i := range 2500 {
			g := groups[i%len(groups)]
			gs := group(t, l, g)
			if i%97 == 0 {
				reqs = append(reqs, termReq(gs, uint64(i%200)))
				m.terms[g] = uint64(i % 200)
				continue
			}
			from := next[g] + 1
			to := from + uint64(i%3) // 1 to 3 entries per record
			logs := entries(g, from, to, 1)
			reqs = append(reqs, entriesReq(t, gs, logs))
			m.store(g, logs)
			next[g] = to
		}
		commitAndReopen(t, l, opts, reqs, m, groups, next)
	})
}

// TestMixedSizeBatch commits one batch of tiny, 4 KiB and 1 MiB records
// (and stable-store and delete records) and checks its bytes, then that
// every entry reads back identical, before and after a reopen.
func TestMixedSizeBatch(t *testing.T) {
	eachSegmentKind(t, func(t *testing.T, l *Log, opts Options) {
		groups := []uint64{1, 2, 3}
		m := newModel()
		next := map[uint64]uint64{}
		entry := func(g uint64, size int) *raft.Log {
			next[g]++
			data := make([]byte, size)
			for i := range data {
				data[i] = byte(i*31 + int(g))
			}
			return &raft.Log{Index: next[g], Term: 1, Type: raft.LogCommand, Data: data, AppendedAt: time.Unix(1700000000, int64(next[g]))}
		}
		var reqs []*request
		add := func(g uint64, sizes ...int) {
			var logs []*raft.Log
			for _, size := range sizes {
				logs = append(logs, entry(g, size))
			}
			reqs = append(reqs, entriesReq(t, group(t, l, g), logs))
			m.store(g, logs)
		}
		add(1, 1)
		add(2, 4<<10)
		add(3, 1<<20)
		add(1, 0, 10)
		reqs = append(reqs, termReq(group(t, l, 2), 7))
		m.terms[2] = 7
		add(2, 1<<20, 4<<10, 3)
		add(3, 4<<10)
		reqs = append(reqs, deleteReq(group(t, l, 3), 2, 2))
		m.del(3, 2, 2)
		add(1, 4<<10-recHeaderSize-7) // a record of about a page
		add(3, 5)
		commitAndReopen(t, l, opts, reqs, m, groups, next)
	})
}

// TestBatchWriterSplit writes more than IOV_MAX buffers of assorted sizes
// (empty ones included) with batchWriter and checks the file holds their
// concatenation at the offset.
func TestBatchWriterSplit(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "w")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bufs, want := testBuffers(3000)
	const off = 12345
	var w batchWriter
	for range 2 { // the second time with the writer's kept scratch space
		if err := w.writeAt(f, bufs, off); err != nil {
			t.Fatal(err)
		}
		checkFile(t, f, off, want)
	}
}

// testBuffers returns n buffers of assorted sizes and their concatenation.
func testBuffers(n int) ([][]byte, []byte) {
	sizes := []int{0, 1, 7, 21, 100, 4096, 4097, 65536}
	var bufs [][]byte
	var all []byte
	for i := range n {
		b := make([]byte, sizes[i%len(sizes)])
		for j := range b {
			b[j] = byte(i + j*13 + 1)
		}
		bufs = append(bufs, b)
		all = append(all, b...)
	}
	return bufs, all
}

func checkFile(t *testing.T, f *os.File, off int64, want []byte) {
	t.Helper()
	got := make([]byte, len(want))
	if _, err := f.ReadAt(got, off); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		i := 0
		for got[i] == want[i] {
			i++
		}
		t.Fatalf("file differs at %d of %d written at %d", i, len(want), off)
	}
}

// appendRecord appends the bytes of r's record (rec, or its parts) to b.
func appendRecord(b []byte, r *request) []byte {
	if r.parts == nil {
		return append(b, r.rec...)
	}
	for _, p := range r.parts {
		b = append(b, p...)
	}
	return b
}

// A record whose large payloads are referenced in place has exactly the
// bytes of one that copies them, and its entry offsets are the same.
func TestReferencedPayloadRecord(t *testing.T) {
	var logs []*raft.Log
	for i, size := range []int{3, 1 << 20, 4 << 10, refDataMin, refDataMin - 1, 0, 2 << 20} {
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(j*7 + i)
		}
		logs = append(logs, &raft.Log{Index: uint64(i + 1), Term: 2, Type: raft.LogCommand, Data: data,
			Extensions: []byte{byte(i)}, AppendedAt: time.Unix(1700000000, int64(i))})
	}
	rec, _, parts, refs, err := encodeEntries(9, logs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if parts == nil {
		t.Fatal("no payload referenced")
	}
	if len(rec) >= 1<<20 {
		t.Fatalf("record buffer of %d bytes: payloads were copied", len(rec))
	}
	got := appendRecord(nil, &request{rec: rec, parts: parts})

	saved := refDataMin
	refDataMin = math.MaxInt
	want, _, wantParts, wantRefs, err := encodeEntries(9, logs, nil)
	refDataMin = saved
	if err != nil || wantParts != nil {
		t.Fatalf("copying encode: parts %d, err %v", len(wantParts), err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("record bytes differ (%d vs %d bytes)", len(got), len(want))
	}
	if fmt.Sprint(refs) != fmt.Sprint(wantRefs) {
		t.Fatalf("entry refs %v, want %v", refs, wantRefs)
	}
	for i, ref := range refs {
		var l raft.Log
		if err := decodeEntry(got[ref.off:ref.off+ref.n], &l); err != nil || l.Index != logs[i].Index || !bytes.Equal(l.Data, logs[i].Data) {
			t.Fatalf("entry %d: index %d, err %v", i, l.Index, err)
		}
	}
}
