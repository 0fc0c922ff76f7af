package copyset

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// startSingle starts one test server under dir hosting copyset g with
// itself as the only member, and returns it and the copyset's leader.
// Snapshots happen only when the test takes them.
func startSingle(t *testing.T, dir string, g GroupID, maxPinned uint64) (*testServer, *Node) {
	t.Helper()
	return startSingleWith(t, dir, g, func(o *RaftOptions) { o.MaxPinnedEntries = maxPinned })
}

// startSingleWith is startSingle with the options set sets.
func startSingleWith(t *testing.T, dir string, g GroupID, set func(*RaftOptions)) (*testServer, *Node) {
	t.Helper()
	opts := fastRaft()
	opts.SnapshotThreshold, opts.SnapshotInterval = 1<<30, time.Hour
	set(&opts)
	s := startTestServer(t, "127.0.0.1:0", dir, opts)
	if _, err := s.mgr.Create(context.Background(), g, []PeerID{s.peer()}); err != nil {
		s.stop()
		t.Fatal(err)
	}
	return s, waitLeader(t, g, s)
}

// proposeN commits n file ops on leader and returns the last one's index.
func proposeN(t *testing.T, leader *Node, n int) uint64 {
	t.Helper()
	var idx uint64
	for i := range n {
		var err error
		if idx, _, err = leader.Propose(context.Background(), fileOp(fmt.Sprintf("k%d", i%5), fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	return idx
}

func firstIndex(t *testing.T, n *Node) uint64 {
	t.Helper()
	first, err := n.stores.log.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	return first
}

// TestLogPinHoldsTruncation: a snapshot's truncation keeps every entry
// from the pin on (raft carries on with the shorter truncation), moves on
// to an advanced pin, and truncates as usual once the pin is released.
// Run on both log stores.
func TestLogPinHoldsTruncation(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			testSharedLog = shared
			defer func() { testSharedLog = false }()
			g := NewGroupID(1, 1)
			s, n := startSingle(t, t.TempDir(), g, 0)
			defer s.stop()
			ctx := context.Background()
			p := proposeN(t, n, 5)
			pin, err := n.PinLog("test", p)
			if err != nil {
				t.Fatal(err)
			}
			proposeN(t, n, 60) // TrailingLogs is 8: raft would keep from ~last-7
			if err := n.Snapshot(ctx); err != nil {
				t.Fatal(err)
			}
			if first := firstIndex(t, n); first != p {
				t.Fatalf("first index %d after snapshot, want the pin %d", first, p)
			}
			if e, err := pin.Entry(p); err != nil || e.Index != p || len(e.Ops) != 1 {
				t.Fatalf("pinned entry: %+v %v", e, err)
			}
			if st := n.LogPins(); st.Pins != 1 || st.Lowest != p || st.Lag != n.raft.LastIndex()+1-p {
				t.Fatalf("pin status %+v (last %d)", st, n.raft.LastIndex())
			}
			q := p + 30
			if err := pin.Advance(q); err != nil {
				t.Fatal(err)
			}
			if err := pin.Advance(q - 1); err == nil {
				t.Fatal("a pin moved back")
			}
			proposeN(t, n, 5)
			if err := n.Snapshot(ctx); err != nil {
				t.Fatal(err)
			}
			if first := firstIndex(t, n); first != q {
				t.Fatalf("first index %d after advance, want %d", first, q)
			}
			pin.Release()
			if _, err := pin.Entry(q); !errors.Is(err, ErrPinReleased) {
				t.Fatalf("entry through a released pin: %v", err)
			}
			last := proposeN(t, n, 5)
			if err := n.Snapshot(ctx); err != nil {
				t.Fatal(err)
			}
			if first := firstIndex(t, n); first <= q || first != last-8+1 {
				t.Fatalf("first index %d after release, want %d (last %d - trailing 8 + 1)", first, last-8+1, last)
			}
			if _, err := n.LogEntry(q); !errors.Is(err, ErrLogCompacted) {
				t.Fatalf("read of a truncated index: %v", err)
			}
		})
	}
}

// TestLogPinCapped: a pin further than MaxPinnedEntries behind the last
// index is moved up at the next truncation, and its holder is told on its
// next read until it advances past the cap; PinLog refuses indexes out of
// the log or beyond the bound; closing the replica releases its pins.
func TestLogPinCapped(t *testing.T) {
	g := NewGroupID(1, 1)
	s, n := startSingle(t, t.TempDir(), g, 20)
	stopped := false
	defer func() {
		if !stopped {
			s.stop()
		}
	}()
	ctx := context.Background()
	p := proposeN(t, n, 3)
	pin, err := n.PinLog("sync", p)
	if err != nil {
		t.Fatal(err)
	}
	last := n.raft.LastIndex()
	if _, err := n.PinLog("x", last+2); !errors.Is(err, ErrLogBeyondLast) {
		t.Fatalf("pin beyond the last index: %v", err)
	}
	if _, err := n.PinLog("x", 0); !errors.Is(err, ErrLogCompacted) {
		t.Fatalf("pin at 0: %v", err)
	}
	last = proposeN(t, n, 40)
	if _, err := n.PinLog("x", last+1-21); err == nil {
		t.Fatal("pin over the bound accepted")
	}
	if err := n.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	to := last + 1 - 20
	var ce *LogPinCappedError
	if err := pin.Err(); !errors.As(err, &ce) || ce.From != p || ce.To != to || ce.Holder != "sync" {
		t.Fatalf("pin error after the cap: %v, want from %d to %d", err, p, to)
	}
	if _, err := pin.Entry(to); !errors.As(err, &ce) {
		t.Fatalf("read through a capped pin: %v", err)
	}
	if first := firstIndex(t, n); first != to {
		t.Fatalf("first index %d, want the capped pin %d", first, to)
	}
	if st := n.LogPins(); st.CappedTotal != 1 || st.Lowest != to || st.Lag != 20 {
		t.Fatalf("pin status %+v", st)
	}
	if err := pin.Advance(to - 1); !errors.As(err, &ce) {
		t.Fatalf("advance below the cap: %v", err)
	}
	if err := pin.Advance(to); err != nil {
		t.Fatal(err)
	}
	if e, err := pin.Entry(to); err != nil || e.Index != to {
		t.Fatalf("read after acknowledging the cap: %+v %v", e, err)
	}
	if _, err := pin.Entry(to - 1); !errors.Is(err, ErrLogCompacted) {
		t.Fatalf("read below the capped pin: %v", err)
	}
	s.stop()
	stopped = true
	if err := pin.Err(); !errors.Is(err, ErrPinReleased) {
		t.Fatalf("pin after close: %v", err)
	}
	if _, err := n.PinLog("x", to); !errors.Is(err, ErrPinReleased) {
		t.Fatalf("pin on a closed replica: %v", err)
	}
}

// boundsStore is the FirstIndex/LastIndex of a log for logPins.deleteRange.
type boundsStore struct{ first, last uint64 }

func (b boundsStore) FirstIndex() (uint64, error) { return b.first, nil }
func (b boundsStore) LastIndex() (uint64, error)  { return b.last, nil }
func (b boundsStore) bytesFrom(uint64) uint64     { return 0 }
func (b boundsStore) lowestWithin(uint64) uint64  { return 0 }

// TestLogPinsDeleteRange: only a compaction (a prefix ending below the last
// index) is clamped, never the removal of a conflicting suffix.
func TestLogPinsDeleteRange(t *testing.T) {
	p := newLogPins(NewGroupID(1, 1), 100, DefaultMaxPinnedBytes, trLogger())
	var got [2]uint64
	del := func(lo, hi uint64) error { got = [2]uint64{lo, hi}; return nil }
	check := func(lo, hi uint64, want [2]uint64) {
		t.Helper()
		got = [2]uint64{}
		if err := p.deleteRange(boundsStore{1, 20}, lo, hi, del); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("delete [%d, %d]: deleted %v, want %v", lo, hi, got, want)
		}
	}
	check(1, 15, [2]uint64{1, 15}) // no pins
	p.pins[&LogPin{holder: "a", index: 5}] = struct{}{}
	p.pins[&LogPin{holder: "b", index: 9}] = struct{}{}
	check(1, 15, [2]uint64{1, 4})    // compaction held at the lowest pin
	check(1, 3, [2]uint64{1, 3})     // below every pin
	check(10, 20, [2]uint64{10, 20}) // conflicting suffix: never held
	check(1, 20, [2]uint64{1, 20})   // ends at the last index: not a compaction
	got = [2]uint64{7, 7}
	if err := p.deleteRange(boundsStore{5, 20}, 5, 15, del); err != nil || got != [2]uint64{7, 7} {
		t.Fatalf("compaction entirely above the pin deleted %v (%v)", got, err)
	}
}

// TestLogEntryRead: committed entries read back by index with their term,
// append time, type and ops (a batch envelope as its ops); indexes outside
// the log are the two named errors.
func TestLogEntryRead(t *testing.T) {
	g := NewGroupID(1, 1)
	s, n := startSingle(t, filepath.Join(t.TempDir(), "s"), g, 0)
	defer s.stop()
	idx, _, err := n.Propose(context.Background(), fileOp("a", "1"))
	if err != nil {
		t.Fatal(err)
	}
	e, err := n.LogEntry(idx)
	if err != nil {
		t.Fatal(err)
	}
	if e.Index != idx || e.Term != n.raft.CurrentTerm() || e.AppendedAt.IsZero() || e.Type != LogEntryOps ||
		len(e.Ops) != 1 || e.Ops[0].Kind != kindFile || string(e.Ops[0].Payload) != "a=1" {
		t.Fatalf("entry %d: %+v", idx, e)
	}
	if e, err := n.LogEntry(1); err != nil || e.Type != LogEntryConfiguration {
		t.Fatalf("bootstrap entry: %+v %v", e, err)
	}
	if _, err := n.LogEntry(0); !errors.Is(err, ErrLogCompacted) {
		t.Fatalf("index 0: %v", err)
	}
	if _, err := n.LogEntry(n.raft.CommitIndex() + 1); !errors.Is(err, ErrLogBeyondLast) {
		t.Fatalf("index past the commit index: %v", err)
	}

	batch := &raft.Log{Index: 9, Term: 2, Type: raft.LogCommand, Data: encodeBatch([][]byte{fileOp("x", "1"), append([]byte{opVersion, 201}, "y"...)})}
	e, err = decodeLogEntry(g, batch)
	if err != nil || len(e.Ops) != 2 || e.Ops[0].Kind != kindFile || e.Ops[1].Kind != 201 || string(e.Ops[1].Payload) != "y" {
		t.Fatalf("batch entry: %+v %v", e, err)
	}
	if _, err := decodeLogEntry(g, &raft.Log{Index: 9, Type: raft.LogCommand, Data: []byte{9}}); err == nil {
		t.Fatal("undecodable entry read without error")
	}
	if e, err := decodeLogEntry(g, &raft.Log{Index: 9, Type: raft.LogNoop}); err != nil || e.Type != LogEntryOther || e.Ops != nil {
		t.Fatalf("no-op entry: %+v %v", e, err)
	}
}
