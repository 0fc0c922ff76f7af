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
// The bounds: no pin holds more than RaftOptions.MaxPinnedEntries entries
// nor more than RaftOptions.MaxPinnedBytes bytes of entry data (about:
// logsize.go counts them as they are stored, never reading the log back)
// from the pin's index to the last index. A compaction that finds a pin
// further behind moves it up to the lowest index both bounds allow first
// (capped), and the holder is told: every read through the pin
// (LogPin.Entry), LogPin.Advance below the new index and LogPin.Err
// return a *LogPinCappedError naming the bound until the holder calls
// Advance at or above the new index (having resynchronised, a sync export
// by a new snapshot phase). PinLog refuses an index beyond a bound with
// the same error.
//
// Pins are in memory: they are released by LogPin.Release, and all at once
// when the replica closes (a restart, a removal); a holder on a new leader
// pins again. A state machine whose replicated state says where its
// consumers are in the log (the sync machine: the cursors of its export
// sub-tasks) holds the log on every replica with a LogHold
// (MachineEnv.Log): it sets it from its state after every open (a
// restart, a snapshot install) and every apply, so that a leader change
// or the loss of a server finds the log kept on the new leader too. A
// hold obeys the same bounds but never fails: one too far behind is
// capped (moved up), the replica goes on, and the consumer's own pin on
// the leader tells it.

// DefaultMaxPinnedEntries is RaftOptions.MaxPinnedEntries when unset.
const DefaultMaxPinnedEntries = 65536

// DefaultMaxPinnedBytes is RaftOptions.MaxPinnedBytes when unset: 1 GiB
// per copyset.
const DefaultMaxPinnedBytes = 1 << 30

// ErrPinReleased is returned by a released pin (LogPin.Release, or the
// replica closed).
var ErrPinReleased = errors.New("log pin released")

// PinBound names a bound of the log pins.
type PinBound int

const (
	// PinBoundEntries is RaftOptions.MaxPinnedEntries.
	PinBoundEntries PinBound = iota
	// PinBoundBytes is RaftOptions.MaxPinnedBytes.
	PinBoundBytes
)

func (b PinBound) String() string {
	if b == PinBoundBytes {
		return "bytes"
	}
	return "entries"
}

// LogPinCappedError says a bound (Bound, of Limit entries or bytes) moved
// a pin up from From to To, or refused a pin at From (To is then the
// lowest index the bound allowed): the entries in [From, To) may be gone.
type LogPinCappedError struct {
	Group    GroupID
	Holder   string
	From, To uint64
	Bound    PinBound
	Limit    uint64
}

func (e *LogPinCappedError) Error() string {
	return fmt.Sprintf("copyset %d/%d: log pin of %s at index %d held more than the maximum of %d pinned %s of log: the lowest index it may hold is %d",
		e.Group.Pool(), e.Group.Copyset(), e.Holder, e.From, e.Limit, e.Bound, e.To)
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
	hold     bool // a state machine's LogHold
}

// logPins is the set of pins of one copyset.
type logPins struct {
	group    GroupID
	max      uint64 // RaftOptions.MaxPinnedEntries
	maxBytes uint64 // RaftOptions.MaxPinnedBytes
	log      *slog.Logger
	// view is the log the pins hold and raftLast raft's last index (of
	// its log or snapshot), set by attach once raft runs (machines open
	// before: their holds wait for it).
	view     logView
	raftLast func() uint64

	// mu is held across a clamped DeleteRange, so that a pin taken or
	// moved meanwhile never names an index being deleted.
	mu     sync.Mutex
	pins   map[*LogPin]struct{}
	closed bool
	// lastCap is the cap that moved a pin furthest up (To), nil before
	// any: a pin asked below it and below the first index was let go by
	// the bound.
	lastCap *LogPinCappedError

	cappedTotal atomic.Uint64
}

// logView is what the pins read of the log: its bounds and the sizes of
// its entries (logCache).
type logView interface {
	FirstIndex() (uint64, error)
	LastIndex() (uint64, error)
	bytesFrom(index uint64) uint64
	lowestWithin(maxBytes uint64) uint64
}

func newLogPins(g GroupID, max, maxBytes uint64, log *slog.Logger) *logPins {
	return &logPins{group: g, max: max, maxBytes: maxBytes, log: log, pins: make(map[*LogPin]struct{})}
}

// attach gives the pins the log they hold and places the holds set
// before.
func (p *logPins) attach(v logView, raftLast func() uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.view, p.raftLast = v, raftLast
	for pin := range p.pins {
		if pin.hold {
			p.placeHold(pin, pin.index)
		}
	}
}

// lowest returns the lowest index a pin may hold with last the last
// index, and the bound that sets it. The caller holds p.mu.
func (p *logPins) lowest(last uint64) (uint64, PinBound, uint64) {
	lo := last + 1 - min(p.max, last+1)
	if p.view != nil {
		if b := min(p.view.lowestWithin(p.maxBytes), last+1); b > lo {
			return b, PinBoundBytes, p.maxBytes
		}
	}
	return lo, PinBoundEntries, p.max
}

// capped is the error of a pin of holder at index moved up (or refused)
// to the lowest index to.
func (p *logPins) capped(holder string, index uint64, to uint64, b PinBound, limit uint64) *LogPinCappedError {
	return &LogPinCappedError{Group: p.group, Holder: holder, From: index, To: to, Bound: b, Limit: limit}
}

// PinLog keeps every entry from index on in this replica's log until the
// pin is released or moved (Advance), within the bounds (MaxPinnedEntries,
// MaxPinnedBytes). holder names the pin's owner in errors, logs and
// metrics. The index must be held now (ErrLogCompacted otherwise, also a
// *LogPinCappedError when a bound let it go) and at most the last index +
// 1 (pinning what comes next), and may not be further behind the last
// index than the bounds allow (a *LogPinCappedError).
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
	if err := p.checkIndex(holder, index, first, last); err != nil {
		return nil, fmt.Errorf("copyset %s: pin log for %s: %w", n.group, holder, err)
	}
	pin := &LogPin{n: n, holder: holder, index: index}
	p.pins[pin] = struct{}{}
	return pin, nil
}

// checkIndex tells why a pin of holder may not be at index, or nil (a
// *LogPinCappedError for an index beyond a bound, or below the first
// index and a cap that moved a pin past it: also ErrLogCompacted). The
// caller holds p.mu.
func (p *logPins) checkIndex(holder string, index, first, last uint64) error {
	switch {
	case index != 0 && index < first && p.lastCap != nil && index < p.lastCap.To:
		c := p.lastCap
		return fmt.Errorf("index %d: %w (first index %d): %w", index, ErrLogCompacted, first,
			p.capped(holder, index, c.To, c.Bound, c.Limit))
	case index == 0 || index < first:
		return fmt.Errorf("index %d: %w (first index %d)", index, ErrLogCompacted, first)
	case index > last+1:
		return fmt.Errorf("index %d: %w (last index %d)", index, ErrLogBeyondLast, last)
	}
	if lo, b, limit := p.lowest(last); index < lo {
		return p.capped(holder, index, lo, b, limit)
	}
	return nil
}

// logBounds returns the first index the log store holds and the last
// index of the replica (of its log or its snapshot); first is last + 1
// when the store is empty.
func (n *Node) logBounds() (first, last uint64, err error) {
	first, last, err = logBounds(n.stores.log, n.raft.LastIndex())
	if err != nil {
		return 0, 0, fmt.Errorf("copyset %s: log bounds: %w", n.group, err)
	}
	return first, last, nil
}

// logBounds is Node.logBounds over log store v and raft's last index.
func logBounds(v interface {
	FirstIndex() (uint64, error)
	LastIndex() (uint64, error)
}, raftLast uint64) (first, last uint64, err error) {
	var storeLast uint64
	if first, err = v.FirstIndex(); err == nil {
		storeLast, err = v.LastIndex()
	}
	if err != nil {
		return 0, 0, err
	}
	last = max(storeLast, raftLast)
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
// the last) and some pin is inside it. Pins further behind the last index
// than the bounds allow are capped first. It holds p.mu throughout.
func (p *logPins) deleteRange(store logView, lo, hi uint64, del func(lo, hi uint64) error) error {
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
	lowest, bound, limit := p.lowest(last) // the lowest index a pin may hold
	for pin := range p.pins {
		if pin.index < lowest {
			p.capPin(pin, lowest, bound, limit)
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

// capPin moves pin up to the lowest index the bound allows and records
// why. The caller holds p.mu.
func (p *logPins) capPin(pin *LogPin, lowest uint64, bound PinBound, limit uint64) {
	if pin.capped == nil {
		pin.capped = p.capped(pin.holder, pin.index, lowest, bound, limit)
	} else {
		pin.capped.To, pin.capped.Bound, pin.capped.Limit = lowest, bound, limit
	}
	if p.lastCap == nil || lowest >= p.lastCap.To {
		p.lastCap = p.capped(pin.holder, pin.index, lowest, bound, limit)
	}
	p.cappedTotal.Add(1)
	p.log.Warn("log pin capped: it held more than the maximum of pinned "+bound.String(),
		"holder", pin.holder, "from", pin.index, "to", lowest, "bound", bound.String(), "limit", limit)
	pin.index = lowest
}

// LogPinStatus is a point-in-time view of a copyset's pins (metrics).
type LogPinStatus struct {
	Pins int
	// Lowest is the lowest pinned index (0 without pins); Lag the entries
	// from it to the last index, what the bound MaxPinnedEntries limits;
	// LagBytes about the bytes of those entries, what MaxPinnedBytes
	// limits.
	Lowest, Lag, LagBytes uint64
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
			st.LagBytes = n.stores.cache.bytesFrom(st.Lowest)
		}
	}
	return st
}

// LogHold is a state machine's hold on its replica's log (MachineEnv.Log):
// a pin the machine moves to the lowest index its replicated state still
// needs from the log, the same on every replica. Its methods are safe for
// concurrent use; they never fail and never block on raft.
type LogHold struct {
	pins *logPins
	pin  *LogPin // in pins.pins while it holds
}

// newHold returns a hold of holder that holds nothing yet.
func (p *logPins) newHold(holder string) *LogHold {
	return &LogHold{pins: p, pin: &LogPin{holder: holder, hold: true}}
}

// Hold keeps the log from index on; 0 releases it. The index is moved
// into the log: a hold below the first index the replica holds holds
// nothing (the replica no longer has what a consumer needs to go on from
// there; one that becomes leader here fails it), one beyond the last
// index + 1 holds from there. A hold further behind than the bounds allow
// is capped (moved up, logged) and stays capped until index passes where
// the bound put it. Before the log store opens, the index is kept as is
// and placed when it opens.
func (h *LogHold) Hold(index uint64) {
	p := h.pins
	p.mu.Lock()
	defer p.mu.Unlock()
	pin := h.pin
	_, held := p.pins[pin]
	switch {
	case p.closed:
	case index == 0:
		delete(p.pins, pin)
	case held && pin.capped != nil && index < pin.index:
		// the bound moved it past index: it stays there
	default:
		p.placeHold(pin, index)
	}
}

// Release lets the log go (Hold(0)).
func (h *LogHold) Release() { h.Hold(0) }

// Index returns the index the hold holds the log from, 0 when it holds
// nothing.
func (h *LogHold) Index() uint64 {
	p := h.pins
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, held := p.pins[h.pin]; !held {
		return 0
	}
	return h.pin.index
}

// placeHold puts hold pin at index, moved into the log and the bounds
// (LogHold.Hold). The caller holds p.mu.
func (p *logPins) placeHold(pin *LogPin, index uint64) {
	pin.index, pin.capped = index, nil
	p.pins[pin] = struct{}{}
	if p.view == nil {
		return // attach places it
	}
	first, last, err := logBounds(p.view, p.raftLast())
	if err != nil {
		p.log.Warn("log hold: read the log bounds; holding as asked", "holder", pin.holder, "index", index, "err", err)
		return
	}
	if index < first {
		delete(p.pins, pin)
		return
	}
	pin.index = min(index, last+1)
	if lo, b, limit := p.lowest(last); pin.index < lo {
		p.capPin(pin, lo, b, limit)
	}
}
