package bench

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// MaxReportedMismatches is how many mismatches are kept with details.
const MaxReportedMismatches = 10

// maxVerifyBlocks bounds the blocks a verifying run tracks (~48 bytes each).
const maxVerifyBlocks = 16 << 20

// ackUnknown is the ack stamp of a write whose outcome is unknown (it
// failed): it may still be applied at any time, so it never gets overwritten.
const ackUnknown = math.MaxUint64

// Mismatch is a read whose content was not what the run had written.
type Mismatch struct {
	// At is when the read completed, from the start of the measured phase.
	At time.Duration `json:"at"`
	// Block is where the block lives (Run and Seq are 0).
	Block Stamp `json:"block"`
	// Size is the block size in bytes.
	Size uint32 `json:"size"`
	// Expected says which writes the block could hold.
	Expected string `json:"expected"`
	// Got says what it held.
	Got string `json:"got"`
	// Problem names what is wrong: "stale or unknown sequence", "torn",
	// "zeros", a damaged sector, ...
	Problem string `json:"problem"`
}

func (m Mismatch) String() string {
	return fmt.Sprintf("pool %d copyset %d chunk %d offset %d size %d: %s: expected %s; got %s (at %s)",
		m.Block.Pool, m.Block.Copyset, m.Block.Chunk, m.Block.Offset, m.Size, m.Problem, m.Expected, m.Got, m.At.Round(time.Millisecond))
}

// cand is a completed write that may be a block's current content: seq is
// its sequence number (and start stamp), ack the clock when it was
// acknowledged (ackUnknown if it failed).
type cand struct{ seq, ack uint64 }

// blockState is what the tracker knows of one block.
type blockState struct {
	cands   []cand
	pending []uint64 // sequence numbers of writes in flight
}

const trackerShards = 1024

// tracker remembers, per block, which writes may be its content. Sequence
// numbers and ack stamps come from one logical clock, so "acknowledged
// before that write started" is a comparison of two numbers. The clock only
// advances under a block's shard lock for the stamp taken there, which makes
// every write that starts after a read's snapshot carry a larger sequence
// number than the snapshot's clock.
type tracker struct {
	run    uint64
	layout layout
	start  time.Time

	clock  atomic.Uint64
	shards [trackerShards]sync.Mutex
	blocks []blockState

	checked    atomic.Int64 // reads checked against this run's writes
	unwritten  atomic.Int64 // reads of blocks this run had not written
	mismatches atomic.Int64

	mu      sync.Mutex
	details []Mismatch
}

func newTracker(run uint64, l layout) *tracker {
	return &tracker{run: run, layout: l, blocks: make([]blockState, l.total), start: time.Now()}
}

func (t *tracker) lock(g uint64) *sync.Mutex {
	m := &t.shards[g%trackerShards]
	m.Lock()
	return m
}

// beginWrite registers a write of block g and returns its sequence number.
func (t *tracker) beginWrite(g uint64) uint64 {
	m := t.lock(g)
	defer m.Unlock()
	seq := t.clock.Add(1)
	b := &t.blocks[g]
	b.pending = append(b.pending, seq)
	return seq
}

// beginWriteRun registers one write covering blocks [first, first+count).
func (t *tracker) beginWriteRun(first, count uint64) uint64 {
	seq := t.clock.Add(1)
	// Only prefill writes cover several blocks, and nothing reads while
	// they run, so taking the sequence number outside the locks is safe.
	for g := first; g < first+count; g++ {
		m := t.lock(g)
		t.blocks[g].pending = append(t.blocks[g].pending, seq)
		m.Unlock()
	}
	return seq
}

// endWrite records the outcome of write seq of block g.
func (t *tracker) endWrite(g, seq uint64, ok bool) {
	m := t.lock(g)
	defer m.Unlock()
	b := &t.blocks[g]
	if i := slices.Index(b.pending, seq); i >= 0 {
		b.pending = slices.Delete(b.pending, i, i+1)
	}
	if !ok {
		b.cands = append(b.cands, cand{seq: seq, ack: ackUnknown})
		return
	}
	ack := t.clock.Add(1)
	// Writes acknowledged before this one started are overwritten by it;
	// those acknowledged while it was in flight overlapped it and may have
	// been applied after it.
	kept := b.cands[:0]
	for _, c := range b.cands {
		if c.ack > seq {
			kept = append(kept, c)
		}
	}
	b.cands = append(kept, cand{seq: seq, ack: ack})
}

// endWriteRun records the outcome of a write covering several blocks.
func (t *tracker) endWriteRun(first, count, seq uint64, ok bool) {
	for g := first; g < first+count; g++ {
		t.endWrite(g, seq, ok)
	}
}

// readSnap is what a read may find, as of its start.
type readSnap struct {
	clock   uint64
	written bool
	accept  []uint64
	last    uint64 // sequence number of the last acknowledged write, 0 if none
}

// beginRead snapshots what a read of block g starting now may return.
func (t *tracker) beginRead(g uint64) readSnap {
	m := t.lock(g)
	defer m.Unlock()
	b := &t.blocks[g]
	s := readSnap{clock: t.clock.Load(), written: len(b.cands)+len(b.pending) > 0}
	if !s.written {
		return s
	}
	s.accept = make([]uint64, 0, len(b.cands)+len(b.pending))
	var lastAck uint64
	for _, c := range b.cands {
		s.accept = append(s.accept, c.seq)
		if c.ack != ackUnknown && c.ack > lastAck {
			lastAck, s.last = c.ack, c.seq
		}
	}
	s.accept = append(s.accept, b.pending...)
	return s
}

// expected renders the acceptable versions of s.
func (s readSnap) expected() string {
	if !s.written {
		return "zeros, foreign data or a pattern of this block"
	}
	var b strings.Builder
	if s.last != 0 {
		fmt.Fprintf(&b, "seq %d (last acknowledged)", s.last)
	}
	var others []string
	for _, q := range s.accept {
		if q != s.last {
			others = append(others, fmt.Sprint(q))
		}
	}
	if len(others) > 0 {
		if b.Len() > 0 {
			b.WriteString(" or ")
		}
		fmt.Fprintf(&b, "seq %s (in flight, overlapping or failed)", strings.Join(others, ", "))
	}
	fmt.Fprintf(&b, " or a write started after the read (seq > %d)", s.clock)
	return b.String()
}

// endRead checks data read from block g against s and counts a mismatch.
// It returns the mismatch if it is one of the first MaxReportedMismatches.
func (t *tracker) endRead(g uint64, s readSnap, data []byte) *Mismatch {
	a := t.layout.addr(g)
	where := Stamp{Pool: a.id.Pool, Copyset: a.id.Copyset, Chunk: a.id.Chunk, Offset: a.offset}
	c := DecodeBlock(data, where)
	problem := t.judge(s, c)
	if problem == "" {
		return nil
	}
	m := Mismatch{At: time.Since(t.start), Block: where, Size: uint32(len(data)), Expected: s.expected(), Got: c.String(), Problem: problem}
	t.mismatches.Add(1)
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.details) >= MaxReportedMismatches {
		return nil
	}
	t.details = append(t.details, m)
	return &m
}

// judge returns "" if c is a content a read with snapshot s may return.
func (t *tracker) judge(s readSnap, c Content) string {
	fresh := c.Kind == Pattern && !c.Torn() && c.Versions[0].Run == t.run && c.Versions[0].Seq > s.clock
	if s.written || fresh {
		t.checked.Add(1)
	} else {
		t.unwritten.Add(1)
	}
	switch {
	case c.Kind == Bad:
		return "damaged or misplaced"
	case fresh:
		return "" // a write that started after the read did
	case !s.written:
		if c.Kind == Pattern {
			for _, v := range c.Versions {
				if v.Run == t.run {
					return "data of this run in a block it had not written"
				}
			}
		}
		return ""
	case c.Kind != Pattern:
		return c.Kind.String()
	case c.Torn():
		return "torn"
	case c.Versions[0].Run != t.run:
		return "stale (another run's data)"
	case !slices.Contains(s.accept, c.Versions[0].Seq):
		return "stale or unknown sequence"
	}
	return ""
}

// VerifyStats summarise a verifying run.
type VerifyStats struct {
	// Checked reads were compared against this run's writes.
	Checked int64 `json:"checked"`
	// Unwritten reads hit blocks this run had not written; they were only
	// checked for damaged or misplaced pattern sectors.
	Unwritten int64 `json:"unwritten"`
	// Mismatches counts failed checks; Details holds the first
	// MaxReportedMismatches of them.
	Mismatches int64      `json:"mismatches"`
	Details    []Mismatch `json:"details,omitempty"`
}

func (t *tracker) stats() *VerifyStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return &VerifyStats{
		Checked:    t.checked.Load(),
		Unwritten:  t.unwritten.Load(),
		Mismatches: t.mismatches.Load(),
		Details:    slices.Clone(t.details),
	}
}
