package copyset

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// logCache fronts a copyset's raft.LogStore with its most recent entries so
// that replication (the leader reads every entry it sends) and the FSM (a
// follower reads back every entry it applies) do not read the log store.
//
// It is raft.LogCache with a second bound: besides at most len(ring)
// entries, it holds at most maxBytes of entry Data, evicting from the
// oldest cached index. raft.LogCache bounds only the count, so 512 entries
// of 1 MiB writes kept half a GiB per copyset alive (and pushed the GC's
// heap goal to several GiB, every allocation then touching fresh memory).
//
// Invariants: every non-nil ring[i] has Index%len(ring) == i and is an entry
// the store holds (StoreLogs caches only after the store succeeded;
// DeleteRange drops the range's entries first); bytes is the sum of
// len(Data) over the non-nil slots; no entry with Index < lo is cached.
type logCache struct {
	store    raft.LogStore
	maxBytes int
	// pins, when set, clamp compactions (logpin.go); only DeleteRange
	// looks at them.
	pins *logPins

	mu    sync.Mutex
	sizes *logSizes // every entry stored, for the bytes bounds (pins, retention)
	ring  []*raft.Log
	bytes int
	lo    uint64

	// applied, when set, is this replica's applied index: an entry not
	// applied yet stays cached past maxBytes (its apply reads it back
	// otherwise, from the log on disk), up to unappliedMax bytes in all.
	applied *atomic.Uint64

	// Retention by bytes (logretain.go), guarded by mu: snapMark is
	// sizes.total before the first entry after the last snapshot, snapDue
	// set while a snapshot asked for on snapKick (capacity 1) is not taken.
	retain   retention
	snapMark uint64
	snapDue  bool
	snapKick chan struct{}
}

// unappliedMax bounds what a cache keeps past its maxBytes for entries not
// yet applied on this replica (a follower whose apply runs behind its log,
// as under 1 MiB writes at iodepth 8 into one copyset).
const unappliedMax = 32 << 20

// newLogCache returns a cache of at most entries entries and maxBytes bytes
// of entry data in front of store.
func newLogCache(entries, maxBytes int, store raft.LogStore) (*logCache, error) {
	if entries <= 0 || maxBytes <= 0 {
		return nil, fmt.Errorf("log cache: want positive bounds, got %d entries, %d bytes", entries, maxBytes)
	}
	return &logCache{store: store, maxBytes: maxBytes, ring: make([]*raft.Log, entries), sizes: newLogSizes(),
		snapKick: make(chan struct{}, 1)}, nil
}

// GetLog implements raft.LogStore. The returned Log shares Data with the
// cached entry; raft never writes to it.
func (c *logCache) GetLog(idx uint64, out *raft.Log) error {
	c.mu.Lock()
	if l := c.ring[idx%uint64(len(c.ring))]; l != nil && l.Index == idx {
		*out = *l
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	return c.store.GetLog(idx, out)
}

// StoreLog implements raft.LogStore.
func (c *logCache) StoreLog(l *raft.Log) error { return c.StoreLogs([]*raft.Log{l}) }

// StoreLogs implements raft.LogStore: it stores logs and, once stored,
// caches them.
func (c *logCache) StoreLogs(logs []*raft.Log) error {
	if err := c.store.StoreLogs(logs); err != nil {
		return err
	}
	if len(logs) == 0 {
		return nil
	}
	n := uint64(len(c.ring))
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range logs {
		s := l.Index % n
		if old := c.ring[s]; old != nil {
			c.bytes -= len(old.Data)
		}
		c.ring[s] = l
		c.bytes += len(l.Data)
		c.sizes.add(l.Index, len(l.Data))
	}
	if lim := c.retain.snapshotBytes; lim > 0 && !c.snapDue && c.sizes.total >= c.snapMark+lim {
		c.snapDue = true
		select {
		case c.snapKick <- struct{}{}:
		default:
		}
	}
	last := logs[len(logs)-1].Index
	// Entries older than the ring's window were overwritten above or by
	// earlier stores; start eviction inside the window.
	if last >= n && c.lo < last-n+1 {
		c.lo = last - n + 1
	}
	for c.bytes > c.maxBytes && c.lo < last {
		if c.applied != nil && c.lo > c.applied.Load() && c.bytes <= unappliedMax {
			break // the rest is still to be applied here
		}
		s := c.lo % n
		if l := c.ring[s]; l != nil && l.Index == c.lo {
			c.bytes -= len(l.Data)
			c.ring[s] = nil
		}
		c.lo++
	}
	return nil
}

// DeleteRange implements raft.LogStore: it drops the range's entries from
// the cache and deletes [min, max] from the store (raft deletes a suffix on
// conflict, and a prefix on compaction after every snapshot: a copyset
// snapshots every few MiB of log, so the entries after the prefix, in
// flight to followers and not yet applied on them, stay cached), or, for
// a compaction, the part of it
// below the trailing entries the retention keeps (logretain.go) and below
// the lowest log pin (logpin.go).
func (c *logCache) DeleteRange(min, max uint64) error {
	max, ok, err := c.trailing(min, max)
	if err != nil || !ok {
		return err
	}
	if c.pins != nil {
		return c.pins.deleteRange(c, min, max, c.deleteRange)
	}
	return c.deleteRange(min, max)
}

// trailing returns the end of the part of [lo, hi] that may be deleted
// with the trailing entries of the retention kept, and false if none may:
// all of it unless [lo, hi] is a compaction (lo at or below the first
// index, hi below the last), else up to the index before keepFrom.
func (c *logCache) trailing(lo, hi uint64) (uint64, bool, error) {
	first, err := c.store.FirstIndex()
	if err != nil {
		return 0, false, fmt.Errorf("compaction: %w", err)
	}
	last, err := c.store.LastIndex()
	if err != nil {
		return 0, false, fmt.Errorf("compaction: %w", err)
	}
	if lo > first || hi >= last {
		return hi, true, nil // not a compaction: a conflicting suffix, or the whole log
	}
	c.mu.Lock()
	from := c.retain.keepFrom(last, c.sizes.lowestWithin)
	c.mu.Unlock()
	if from <= lo {
		return 0, false, nil
	}
	return min(hi, from-1), true, nil
}

// setRetention sets the retention policy (logretain.go).
func (c *logCache) setRetention(r retention) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.retain = r
}

// retention returns the retention policy.
func (c *logCache) retention() retention {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.retain
}

// snapshotTaken says that a snapshot covers the log up to index: the bytes
// since the last snapshot count from the entry after it.
func (c *logCache) snapshotTaken(index uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.snapMark = c.sizes.total - min(c.sizes.bytesFrom(index+1), c.sizes.total)
	c.snapDue = false
}

// snapshotFailed lets StoreLogs ask for a snapshot again.
func (c *logCache) snapshotFailed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.snapDue = false
}

func (c *logCache) deleteRange(min, max uint64) error {
	c.mu.Lock()
	c.forget(min, max)
	c.mu.Unlock()
	return c.store.DeleteRange(min, max)
}

// forget drops the cached entries of [lo, hi]: a compaction (a prefix)
// leaves the entries after it cached, a conflict (a suffix) the ones
// before it. Eviction steps over the emptied slots, from lo at the
// latest (the entries a conflict's replacements are stored at). Called
// with mu held.
func (c *logCache) forget(lo, hi uint64) {
	for i, l := range c.ring {
		if l != nil && l.Index >= lo && l.Index <= hi {
			c.bytes -= len(l.Data)
			c.ring[i] = nil
		}
	}
	c.lo = min(c.lo, lo)
}

// bytesFrom returns about how many bytes of entry data the log holds from
// index to its last entry (logSizes).
func (c *logCache) bytesFrom(index uint64) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sizes.bytesFrom(index)
}

// lowestWithin returns the lowest index from which the log holds at most
// maxBytes of entry data to its last entry (logSizes).
func (c *logCache) lowestWithin(maxBytes uint64) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sizes.lowestWithin(maxBytes)
}

// FirstIndex implements raft.LogStore.
func (c *logCache) FirstIndex() (uint64, error) { return c.store.FirstIndex() }

// LastIndex implements raft.LogStore.
func (c *logCache) LastIndex() (uint64, error) { return c.store.LastIndex() }
