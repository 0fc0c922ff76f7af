package copyset

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestLogSizes: the running total answers bytes from an index exactly at
// a sample and over by at most one sample gap between them; a replaced
// suffix is counted from where it was replaced; lowestWithin agrees with
// bytesFrom; below the oldest sample (entries stored before the replica
// opened, or evicted) the answer is extrapolated at the average size.
func TestLogSizes(t *testing.T) {
	s := newLogSizes()
	s.setBounds(256*4, 256*1000) // a sample every 4 entries or 1000 bytes
	if s.bytesFrom(1) != 0 || s.lowestWithin(10) != 0 {
		t.Fatal("an empty log holds bytes")
	}
	for i := uint64(10); i < 110; i++ {
		s.add(i, 100) // samples at 10, 14, ...
	}
	exact := func(from uint64) uint64 { return (110 - from) * 100 }
	for from := uint64(10); from < 110; from++ {
		got := s.bytesFrom(from)
		if got < exact(from) || got > exact(from)+3*100 {
			t.Fatalf("bytes from %d: %d, want %d to %d", from, got, exact(from), exact(from)+300)
		}
		if (from-10)%4 == 0 && got != exact(from) {
			t.Fatalf("bytes from sample %d: %d, want exactly %d", from, got, exact(from))
		}
	}
	if s.bytesFrom(110) != 0 {
		t.Fatal("bytes past the last entry")
	}
	for _, max := range []uint64{50, 100, 999, 1000, 5000, 9999, 10000, 1 << 20} {
		lo := s.lowestWithin(max)
		if s.bytesFrom(lo) > max || (lo > 0 && lo < 110 && s.bytesFrom(lo-1) <= max && (lo-10)%4 != 0) {
			t.Fatalf("lowest within %d: %d (bytes from it %d)", max, lo, s.bytesFrom(lo))
		}
	}
	if lo := s.lowestWithin(50); lo != 110 {
		t.Fatalf("lowest within less than the newest sample's span: %d, want the next index 110", lo)
	}
	// Below the oldest sample: 100 bytes an entry.
	if got := s.bytesFrom(5); got != exact(10)+5*100 {
		t.Fatalf("bytes from 5 (before the first entry seen): %d, want %d", got, exact(10)+500)
	}
	if lo := s.lowestWithin(exact(10) + 500); lo != 5 {
		t.Fatalf("lowest within an extrapolated span: %d, want 5", lo)
	}

	// Raft replaces a conflicting suffix from 102 (a sample: exact) on.
	for i := uint64(102); i < 105; i++ {
		s.add(i, 1000)
	}
	if got := s.bytesFrom(102); got != 3000 {
		t.Fatalf("bytes from the replaced suffix at a sample: %d, want 3000", got)
	}
	if got, want := s.bytesFrom(98), uint64(4*100+3000); got != want {
		t.Fatalf("bytes across the replaced suffix: %d, want %d", got, want)
	}
	// From 104 (not a sample): the old 104..109 stay counted, never less.
	s.add(104, 50)
	if got := s.bytesFrom(104); got != 50 {
		t.Fatalf("bytes from a suffix replaced between samples: %d, want 50", got)
	}
	if got := s.bytesFrom(102); got < 2050 {
		t.Fatalf("bytes from 102 after the second replace: %d, want at least 2050", got)
	}
}

// TestLogSizesRing: the ring evicts its oldest samples when full; the
// answers near the last index stay exact.
func TestLogSizesRing(t *testing.T) {
	s := newLogSizes()
	s.setBounds(256, 1<<30) // a sample every entry
	for i := uint64(1); i <= 3*logSizeSamples; i++ {
		s.add(i, 10)
	}
	if s.n != logSizeSamples || s.at(0).index != 2*logSizeSamples+1 {
		t.Fatalf("%d samples from %d", s.n, s.at(0).index)
	}
	if got := s.bytesFrom(3*logSizeSamples - 9); got != 100 {
		t.Fatalf("bytes of the last 10 entries: %d", got)
	}
	if got := s.bytesFrom(1); got != 3*logSizeSamples*10 {
		t.Fatalf("bytes from an evicted index: %d, want %d (extrapolated)", got, 3*logSizeSamples*10)
	}
	// What StoreLogs does per entry allocates nothing.
	next := uint64(3*logSizeSamples + 1)
	if a := testing.AllocsPerRun(1000, func() { s.add(next, 10); next++ }); a != 0 {
		t.Fatalf("%v allocations per stored entry", a)
	}
}

// proposeBig commits n file ops of about 1 KiB each on leader and returns
// the last one's index.
func proposeBig(t *testing.T, leader *Node, n int) uint64 {
	t.Helper()
	var idx uint64
	for range n {
		var err error
		if idx, _, err = leader.Propose(context.Background(), fileOp("big", strings.Repeat("x", 1000))); err != nil {
			t.Fatal(err)
		}
	}
	return idx
}

// TestLogPinBytesCapped: a pin holding more bytes of log than
// MaxPinnedBytes is moved up at the next truncation to where the bytes
// behind the last index fit the bound (well inside the entries bound),
// its holder told with a *LogPinCappedError naming the bytes bound;
// PinLog refuses an index beyond it the same way; a pin within the bound
// holds.
func TestLogPinBytesCapped(t *testing.T) {
	const bound = 16 << 10
	s, n := startSingleWith(t, t.TempDir(), NewGroupID(1, 1), func(o *RaftOptions) { o.MaxPinnedBytes = bound })
	defer s.stop()
	ctx := context.Background()
	p := proposeBig(t, n, 2)
	pin, err := n.PinLog("sync", p)
	if err != nil {
		t.Fatal(err)
	}
	proposeBig(t, n, 10) // ~11 KiB behind: within the bound
	if err := n.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pin.Err(); err != nil || firstIndex(t, n) != p {
		t.Fatalf("a pin within the bytes bound: %v, first index %d, want %d", err, firstIndex(t, n), p)
	}
	if st := n.LogPins(); st.LagBytes < 11*1000 || st.LagBytes > bound {
		t.Fatalf("pin status %+v: want about 11 KiB held", st)
	}
	last := proposeBig(t, n, 30) // ~41 KiB behind
	var ce *LogPinCappedError
	if _, err := n.PinLog("x", p+1); !errors.As(err, &ce) || ce.Bound != PinBoundBytes || ce.Limit != bound {
		t.Fatalf("pin beyond the bytes bound: %v", err)
	}
	if err := n.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pin.Err(); !errors.As(err, &ce) || ce.Bound != PinBoundBytes || ce.Limit != bound || ce.From != p {
		t.Fatalf("pin error after the bytes cap: %v", err)
	}
	if !strings.Contains(ce.Error(), "16384 pinned bytes") {
		t.Fatalf("the error does not name the bound: %v", ce)
	}
	to := ce.To
	if held := last + 1 - to; held > bound/1000 || held < bound/1000-4 {
		t.Fatalf("capped to %d: %d entries of ~1 KiB behind the last index %d, want about %d", to, held, last, bound/1000)
	}
	if first := firstIndex(t, n); first != to {
		t.Fatalf("first index %d, want the capped pin %d", first, to)
	}
	if st := n.LogPins(); st.CappedTotal != 1 || st.Lowest != to || st.LagBytes > bound {
		t.Fatalf("pin status %+v", st)
	}
	// A holder pinning again where it was is told the bound let it go.
	if _, err := n.PinLog("sync", p); !errors.Is(err, ErrLogCompacted) || !errors.As(err, &ce) || ce.Bound != PinBoundBytes || ce.To != to {
		t.Fatalf("pin again below the cap: %v", err)
	}
	if err := pin.Advance(to); err != nil {
		t.Fatal(err)
	}
	if err := pin.Err(); err != nil {
		t.Fatalf("after acknowledging the cap: %v", err)
	}
}

// TestLogHold: a machine's hold keeps the log like a pin, moves back and
// forth within the log, holds nothing below the first index, is capped by
// the bounds without failing (and stays capped while asked for less),
// and lets the log go when released.
func TestLogHold(t *testing.T) {
	s, n := startSingle(t, t.TempDir(), NewGroupID(1, 1), 20)
	defer s.stop()
	ctx := context.Background()
	h := n.pins.newHold("test machine")
	p := proposeN(t, n, 3)
	h.Hold(p)
	proposeN(t, n, 10)
	if err := n.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if first := firstIndex(t, n); first != p || h.Index() != p {
		t.Fatalf("first index %d, hold at %d; want both %d", first, h.Index(), p)
	}
	h.Hold(p - 1) // below the first index: nothing to hold
	if h.Index() != 0 || n.LogPins().Pins != 0 {
		t.Fatalf("hold below the log at %d (%+v)", h.Index(), n.LogPins())
	}
	h.Hold(p + 2)
	last := proposeN(t, n, 40)
	if err := n.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	to := last + 1 - 20
	if h.Index() != to || firstIndex(t, n) != to {
		t.Fatalf("capped hold at %d, first index %d, want %d", h.Index(), firstIndex(t, n), to)
	}
	h.Hold(p + 2) // still behind: it stays where the bound put it
	if h.Index() != to {
		t.Fatalf("capped hold moved back to %d", h.Index())
	}
	h.Hold(last + 5) // beyond the log: from the next index
	if h.Index() != n.raft.LastIndex()+1 {
		t.Fatalf("hold beyond the log at %d, last %d", h.Index(), n.raft.LastIndex())
	}
	h.Release()
	last = proposeN(t, n, 10)
	if err := n.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if first := firstIndex(t, n); first != last-8+1 || n.LogPins().Pins != 0 {
		t.Fatalf("first index %d after release, want %d", first, last-8+1)
	}
}
