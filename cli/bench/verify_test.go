package bench

import (
	"strings"
	"testing"
)

// trackerFixture is a tracker over 3 copysets x 4 blocks of 4 KiB.
func trackerFixture() (*tracker, layout) {
	l := newLayout(testConfig(RandRW, 4<<10, 16<<10))
	return newTracker(0x1234, l), l
}

func block(tr *tracker, l layout, g, seq uint64) []byte {
	b := make([]byte, l.bs)
	encodeAt(b, tr.run, l.addr(g), seq)
	return b
}

func TestTrackerAcceptsLastAcknowledged(t *testing.T) {
	tr, l := trackerFixture()
	s1 := tr.beginWrite(0)
	tr.endWrite(0, s1, true)
	s2 := tr.beginWrite(0)
	tr.endWrite(0, s2, true)
	snap := tr.beginRead(0)
	if m := tr.endRead(0, snap, block(tr, l, 0, s2)); m != nil {
		t.Fatalf("last acked write rejected: %s", m)
	}
	// The overwritten write is stale.
	m := tr.endRead(0, tr.beginRead(0), block(tr, l, 0, s1))
	if m == nil || !strings.Contains(m.Expected, "last acknowledged") {
		t.Fatalf("stale read accepted or badly described: %v", m)
	}
	// Another block's (valid) data is misplaced.
	if m := tr.endRead(0, tr.beginRead(0), block(tr, l, 1, s2)); m == nil || !strings.Contains(m.Got, "misplaced") {
		t.Fatalf("misplaced block: %v", m)
	}
	// Zeros where data was written.
	if m := tr.endRead(0, tr.beginRead(0), make([]byte, l.bs)); m == nil || m.Got != "zeros" {
		t.Fatalf("zeros: %v", m)
	}
	st := tr.stats()
	if st.Mismatches != 3 || len(st.Details) != 3 || st.Checked != 4 {
		t.Fatalf("stats %+v", st)
	}
}

func TestTrackerConcurrentWrites(t *testing.T) {
	tr, l := trackerFixture()
	old := tr.beginWrite(2)
	tr.endWrite(2, old, true)
	// Two overlapping writes: either may be the content afterwards, and
	// during them the old content is fine too.
	a := tr.beginWrite(2)
	b := tr.beginWrite(2)
	during := tr.beginRead(2)
	for _, s := range []uint64{old, a, b} {
		if m := tr.endRead(2, during, block(tr, l, 2, s)); m != nil {
			t.Fatalf("read during writes, seq %d: %s", s, m)
		}
	}
	tr.endWrite(2, b, true)
	tr.endWrite(2, a, true) // acked after b started: overlapped
	after := tr.beginRead(2)
	for _, s := range []uint64{a, b} {
		if m := tr.endRead(2, after, block(tr, l, 2, s)); m != nil {
			t.Fatalf("read after overlapping writes, seq %d: %s", s, m)
		}
	}
	if m := tr.endRead(2, after, block(tr, l, 2, old)); m == nil {
		t.Fatal("old content accepted after two later writes were acknowledged")
	}
	// A later write that does not overlap prunes both.
	c := tr.beginWrite(2)
	tr.endWrite(2, c, true)
	snap := tr.beginRead(2)
	if m := tr.endRead(2, snap, block(tr, l, 2, a)); m == nil {
		t.Fatal("pruned write accepted")
	}
	// A write that starts after the read did may be seen by it.
	d := tr.beginWrite(2)
	if m := tr.endRead(2, snap, block(tr, l, 2, d)); m != nil {
		t.Fatalf("write started after the read: %s", m)
	}
}

func TestTrackerFailedWritesStayPossible(t *testing.T) {
	tr, l := trackerFixture()
	a := tr.beginWrite(3)
	tr.endWrite(3, a, true)
	f := tr.beginWrite(3)
	tr.endWrite(3, f, false) // timed out: may land any time
	b := tr.beginWrite(3)
	tr.endWrite(3, b, true)
	snap := tr.beginRead(3)
	for _, s := range []uint64{f, b} {
		if m := tr.endRead(3, snap, block(tr, l, 3, s)); m != nil {
			t.Fatalf("seq %d: %s", s, m)
		}
	}
	if m := tr.endRead(3, snap, block(tr, l, 3, a)); m == nil {
		t.Fatal("overwritten write accepted")
	}
}

func TestTrackerUnwrittenBlocks(t *testing.T) {
	tr, l := trackerFixture()
	snap := tr.beginRead(5)
	other := newTracker(0x9999, l)
	for name, data := range map[string][]byte{
		"zeros":     make([]byte, l.bs),
		"foreign":   func() []byte { b := make([]byte, l.bs); fillRandom(b); return b }(),
		"other run": block(other, l, 5, 3),
	} {
		if m := tr.endRead(5, snap, data); m != nil {
			t.Errorf("%s: %s", name, m)
		}
	}
	// Data of this run in a block it never wrote is a misdirected write.
	if m := tr.endRead(5, snap, block(tr, l, 5, snap.clock)); m == nil {
		t.Error("this run's data in an unwritten block accepted")
	}
	bad := block(other, l, 5, 3)
	bad[10] ^= 1
	if m := tr.endRead(5, snap, bad); m == nil || !strings.Contains(m.Got, "checksum") {
		t.Errorf("corrupt foreign pattern: %v", m)
	}
	if st := tr.stats(); st.Unwritten != 5 || st.Mismatches != 2 {
		t.Errorf("stats %+v", st)
	}
}

func TestTrackerKeepsFirstMismatches(t *testing.T) {
	tr, l := trackerFixture()
	s := tr.beginWrite(0)
	tr.endWrite(0, s, true)
	for range 25 {
		tr.endRead(0, tr.beginRead(0), make([]byte, l.bs))
	}
	st := tr.stats()
	if st.Mismatches != 25 || len(st.Details) != MaxReportedMismatches {
		t.Fatalf("%d mismatches, %d details", st.Mismatches, len(st.Details))
	}
	if !strings.Contains(st.Details[0].String(), "pool 1 copyset 1 chunk 1 offset 0") {
		t.Fatalf("detail: %s", st.Details[0])
	}
}
