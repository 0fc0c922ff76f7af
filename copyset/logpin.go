package copyset

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
)

// Log retention pins. A state machine or worker that follows a copyset's
// log (LogEntry) from some index on holds a pin at that index: raft's log
// truncation after a snapshot (TrailingLogs entries kept, the rest of the
// snapshotted prefix deleted through the log store's DeleteRange) then
// keeps every entry from the lowest pin of the copyset on. The clamp is in
// logCache.DeleteRange, the wrapper raft writes through; StoreLogs and
// GetLog never look at pins.
//
// hashicorp/raft tolerates a DeleteRange that deletes less than asked: it
// compacts [FirstIndex, min(snapshot index, last - TrailingLogs)] and
// reads FirstIndex afresh at every compaction (snapshot.go,
// compactLogsWithTrailing), so what a pin kept is deleted by the first
// compaction after the pin moves on; replication reads entries by index
// and sends a snapshot only for one it cannot read, which a kept entry
// never is. Only a compaction (a prefix delete, ending below the last
// index) is clamped: raft's other DeleteRange, removing a conflicting
// suffix of uncommitted entries, is never held back (a pin is at or below
// the last index + 1, and entries a follower must replace are not the
// committed ones a holder follows).
//
// The bound: no pin holds more than RaftOptions.MaxPinnedEntries entries
// (the pin's index to the last index). A compaction that finds a pin
// further behind moves it up to last + 1 - MaxPinnedEntries first (capped),
// and the holder is told: every read through the pin (LogPin.Entry),
// LogPin.Advance below the new index and LogPin.Err return a
// *LogPinCappedError until the holder calls Advance at or above the new
// index (having resynchronised, a sync export by a new snapshot phase).
// Pins are in memory: they are released by LogPin.Release, and all at once
// when the replica closes (a restart, a removal); a holder on a new leader
// pins again.

// DefaultMaxPinnedEntries is RaftOptions.MaxPinnedEntries when unset.
const DefaultMaxPinnedEntries = 65536

// ErrPinReleased is returned by a released pin (LogPin.Release, or the
// replica closed).
var ErrPinReleased = errors.New("log pin released")

// LogPinCappedError says the bound (RaftOptions.MaxPinnedEntries) moved a
// pin up from From to To: the entries in [From, To) may be gone.
type LogPinCappedError struct {
	Group    GroupID
	Holder   string
	From, To uint64
}

func (e *LogPinCappedError) Error() string {
	return fmt.Sprintf("copyset %s: log pin of %s moved from index %d to %d: it held more than the maximum of pinned entries",
		e.Group, e.Holder, e.From, e.To)
}

// LogPin holds back the truncation of a copyset's raft log below an index.
// Its methods are safe for concurrent use.
type LogPin struct {
	n      *Node
	holder string
	// Guarded by n.pins.mu.
	index    uint64
	capped   *LogPinCappedError // set by the bound, cleared by Advance
	released bool
}

// logPins is the set of pins of one copyset.
type logPins struct {
	group GroupID
	max   uint64 // RaftOptions.MaxPinnedEntries
	log   *slog.Logger

	// mu is held across a clamped DeleteRange, so that a pin taken or
	// moved meanwhile never names an index being deleted.
	mu     sync.Mutex
	pins   map[*LogPin]struct{}
	closed bool

	cappedTotal atomic.Uint64
}

func newLogPins(g GroupID, max uint64, log *slog.Logger) *logPins {
	return &logPins{group: g, max: max, log: log, pins: make(map[*LogPin]struct{})}
}

// PinLog keeps every entry from index on in this replica's log until the
// pin is released or moved (Advance), within the bound of MaxPinnedEntries.
// holder names the pin's owner in errors, logs and metrics. The index must
// be held now (ErrLogCompacted otherwise) and at most the last index + 1
// (pinning what comes next), and may not be more than MaxPinnedEntries
// behind the last index.
func (n *Node) PinLog(holder string, index uint64) (*LogPin, error) {
	p := n.pins
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, fmt.Errorf("copyset %s: pin log for %s: %w", n.group, holder, ErrPinReleased)
	}
	first, last, err := n.logBounds()
	if err != nil {
		return nil, fmt.Errorf("pin log for %s: %w", holder, err)
	}
	if err := p.checkIndex(index, first, last); err != nil {
		return nil, fmt.Errorf("copyset %s: pin log for %s: %w", n.group, holder, err)
	}
	pin := &LogPin{n: n, holder: holder, index: index}
	p.pins[pin] = struct{}{}
	return pin, nil
}

// checkIndex tells why a pin may not be at index, or nil. The caller
// holds p.mu.
func (p *logPins) checkIndex(index, first, last uint64) error {
	switch {
	case index == 0 || index < first:
		return fmt.Errorf("index %d: %w (first index %d)", index, ErrLogCompacted, first)
	case index > last+1:
		return fmt.Errorf("index %d: %w (last index %d)", index, ErrLogBeyondLast, last)
	case last+1-index > p.max:
		return fmt.Errorf("index %d would hold %d entries, more than the maximum of %d pinned entries",
			index, last+1-index, p.max)
	}
	return nil
}

// logBounds returns the first index the log store holds and the last
// index of the replica (of its log or its snapshot); first is last + 1
// when the store is empty.
func (n *Node) logBounds() (first, last uint64, err error) {
	var storeLast uint64
	if first, err = n.stores.log.FirstIndex(); err == nil {
		storeLast, err = n.stores.log.LastIndex()
	}
	if err != nil {
		return 0, 0, fmt.Errorf("copyset %s: log bounds: %w", n.group, err)
	}
	last = max(storeLast, n.raft.LastIndex())
	if first == 0 {
		first = last + 1
	}
	return first, last, nil
}

// Index returns the index the pin holds the log from.
func (p *LogPin) Index() uint64 {
	p.n.pins.mu.Lock()
	defer p.n.pins.mu.Unlock()
	return p.index
}

// Err returns ErrPinReleased for a released pin, the *LogPinCappedError of
// a cap the holder has not acknowledged with Advance, else nil.
func (p *LogPin) Err() error {
	p.n.pins.mu.Lock()
	defer p.n.pins.mu.Unlock()
	return p.errLocked()
}

func (p *LogPin) errLocked() error {
	if p.released {
		return fmt.Errorf("copyset %s: log pin of %s: %w", p.n.group, p.holder, ErrPinReleased)
	}
	if p.capped != nil {
		return p.capped
	}
	return nil
}

// Advance moves the pin forward to index (entries below it may then be
// truncated); it never moves back. After a cap, Advance to the new index
// or above acknowledges it; below, it returns the *LogPinCappedError.
// index may be at most the last index + 1.
func (p *LogPin) Advance(index uint64) error {
	ps := p.n.pins
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p.released {
		return p.errLocked()
	}
	if index < p.index {
		if p.capped != nil {
			return p.capped
		}
		return fmt.Errorf("copyset %s: log pin of %s: advance to %d: the pin is at %d and only moves forward",
			p.n.group, p.holder, index, p.index)
	}
	_, last, err := p.n.logBounds()
	if err != nil {
		return err
	}
	if index > last+1 {
		return fmt.Errorf("copyset %s: log pin of %s: advance to %d: %w (last index %d)",
			p.n.group, p.holder, index, ErrLogBeyondLast, last)
	}
	p.index, p.capped = index, nil
	return nil
}

// Entry reads the committed log entry at index (Node.LogEntry), failing
// first with the pin's Err: a holder learns of a cap on its next read.
func (p *LogPin) Entry(index uint64) (LogEntry, error) {
	if err := p.Err(); err != nil {
		return LogEntry{}, err
	}
	return p.n.LogEntry(index)
}

// Release lets the log be truncated past the pin. It is idempotent.
func (p *LogPin) Release() {
	ps := p.n.pins
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p.released = true
	delete(ps.pins, p)
}

// releaseAll releases every pin and refuses new ones (the replica closes).
func (p *logPins) releaseAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for pin := range p.pins {
		pin.released = true
	}
	clear(p.pins)
}

// deleteRange runs del on the part of [lo, hi] the pins let go: all of
// it unless it is a compaction (lo at or below the first index, hi below
// the last) and some pin is inside it. Pins more than max entries behind
// the last index are capped first. It holds p.mu throughout.
func (p *logPins) deleteRange(store interface {
	FirstIndex() (uint64, error)
	LastIndex() (uint64, error)
}, lo, hi uint64, del func(lo, hi uint64) error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.pins) == 0 {
		return del(lo, hi)
	}
	first, err := store.FirstIndex()
	if err != nil {
		return fmt.Errorf("copyset %s: pinned delete range: %w", p.group, err)
	}
	last, err := store.LastIndex()
	if err != nil {
		return fmt.Errorf("copyset %s: pinned delete range: %w", p.group, err)
	}
	if lo > first || hi >= last {
		return del(lo, hi) // not a compaction: a conflicting suffix
	}
	floor := uint64(0)
	lowest := last + 1 - min(p.max, last+1) // the lowest index a pin may hold
	for pin := range p.pins {
		if pin.index < lowest {
			if pin.capped == nil {
				pin.capped = &LogPinCappedError{Group: p.group, Holder: pin.holder, From: pin.index, To: lowest}
			} else {
				pin.capped.To = lowest
			}
			p.cappedTotal.Add(1)
			p.log.Warn("log pin capped: it held more than the maximum of pinned entries",
				"holder", pin.holder, "from", pin.index, "to", lowest, "max_pinned_entries", p.max)
			pin.index = lowest
		}
		if floor == 0 || pin.index < floor {
			floor = pin.index
		}
	}
	if floor <= lo {
		return nil
	}
	return del(lo, min(hi, floor-1))
}

// LogPinStatus is a point-in-time view of a copyset's pins (metrics).
type LogPinStatus struct {
	Pins int
	// Lowest is the lowest pinned index (0 without pins); Lag the entries
	// from it to the last index, what the bound MaxPinnedEntries limits.
	Lowest, Lag uint64
	// CappedTotal counts the pins the bound moved up since the replica
	// opened.
	CappedTotal uint64
}

// LogPins returns the replica's pin status.
func (n *Node) LogPins() LogPinStatus {
	p := n.pins
	p.mu.Lock()
	defer p.mu.Unlock()
	st := LogPinStatus{Pins: len(p.pins), CappedTotal: p.cappedTotal.Load()}
	for pin := range p.pins {
		if st.Lowest == 0 || pin.index < st.Lowest {
			st.Lowest = pin.index
		}
	}
	if st.Lowest > 0 {
		if last, err := n.stores.log.LastIndex(); err == nil && last+1 > st.Lowest {
			st.Lag = last + 1 - st.Lowest
		}
	}
	return st
}
