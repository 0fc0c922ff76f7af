package sharedlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/hashicorp/raft"
)

// GroupStore is one group's view of the shared log. It implements
// raft.LogStore and raft.StableStore and is safe for concurrent use.
//
// It deliberately does not implement raft.MonotonicLogStore: the index
// tolerates gaps (raft keeps older logs after installing a snapshot and
// appends after the snapshot index), so raft's default behaviour is correct
// and it need not delete the whole log after every snapshot restore.
//
// Semantics, per raft index: StoreLogs(entries starting at a) replaces
// [a, ∞) with the entries (raft only appends past LastIndex, or after a
// DeleteRange of the conflicting suffix); DeleteRange(min, max) removes
// exactly [min, max]. FirstIndex and LastIndex are the smallest and largest
// stored indexes, 0 when the group is empty.
type GroupStore struct {
	l  *Log
	s  *shard
	st *groupState
}

var (
	_ raft.LogStore    = (*GroupStore)(nil)
	_ raft.StableStore = (*GroupStore)(nil)
)

// ID returns the group id.
func (g *GroupStore) ID() uint64 { return g.st.id }

func (g *GroupStore) rlock() error {
	if g.l.closed.Load() {
		return ErrClosed
	}
	g.st.mu.RLock()
	if g.st.dropped {
		g.st.mu.RUnlock()
		return ErrGroupDropped
	}
	return nil
}

// FirstIndex implements raft.LogStore.
func (g *GroupStore) FirstIndex() (uint64, error) {
	if err := g.rlock(); err != nil {
		return 0, err
	}
	defer g.st.mu.RUnlock()
	return g.st.idx.first(), nil
}

// LastIndex implements raft.LogStore.
func (g *GroupStore) LastIndex() (uint64, error) {
	if err := g.rlock(); err != nil {
		return 0, err
	}
	defer g.st.mu.RUnlock()
	return g.st.idx.last(), nil
}

// GetLog implements raft.LogStore. It returns raft.ErrLogNotFound for an
// index that is not stored. out's Data and Extensions are freshly allocated.
//
// The group lock is not held during the read, so a slow disk read never
// stalls the shard's writer. If the entry is deleted meanwhile and its
// segment collected, the read fails on the closed file and GetLog reports
// raft.ErrLogNotFound, as if it had looked a moment later (os.File keeps the
// descriptor valid while a read is in flight, so it cannot be reused).
func (g *GroupStore) GetLog(index uint64, out *raft.Log) error {
	if err := g.rlock(); err != nil {
		return err
	}
	l, ok := g.st.idx.get(index)
	g.st.mu.RUnlock()
	if !ok {
		return raft.ErrLogNotFound
	}
	seg := g.s.segment(l.seg)
	if seg == nil {
		return raft.ErrLogNotFound
	}
	buf := make([]byte, l.n)
	if _, err := seg.f.ReadAt(buf, l.off); err != nil {
		if errors.Is(err, os.ErrClosed) {
			if g.l.closed.Load() {
				return ErrClosed
			}
			return raft.ErrLogNotFound
		}
		return fmt.Errorf("sharedlog: group %d index %d: %w", g.st.id, index, err)
	}
	if err := decodeEntry(buf, out); err != nil || out.Index != index {
		if g.s.segment(l.seg) != seg {
			// Collected (and possibly recycled) while we read.
			return raft.ErrLogNotFound
		}
		return fmt.Errorf("sharedlog: group %d index %d: corrupt entry in segment %d at %d", g.st.id, index, l.seg, l.off)
	}
	return nil
}

// StoreLog implements raft.LogStore.
func (g *GroupStore) StoreLog(log *raft.Log) error {
	return g.StoreLogs([]*raft.Log{log})
}

// StoreLogs implements raft.LogStore. The entries must have strictly
// increasing indexes. They are durable (fdatasynced, possibly together with
// other groups' records) when it returns nil.
func (g *GroupStore) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	r := entryRequests.Get().(*request)
	rec, hold, parts, refs, err := encodeEntries(g.st.id, logs, r.ents)
	if err == nil {
		r.op, r.rec, r.parts = op{kind: recEntries, group: g.st.id, ents: refs}, rec, parts
		err = g.submit(r)
		putRecBuf(rec, hold) // answered, or never queued: the shard no longer reads it
	}
	// The request is answered, or was never queued: the shard's writer no
	// longer reads it, and the index holds copies of the refs.
	*r = request{op: op{ents: refs[:0]}, done: r.done}
	entryRequests.Put(r)
	return err
}

// entryRequests recycles StoreLogs' requests with their done channels and
// refs slices. The shard's writer answers a queued request exactly once,
// with one send on done that is its last use of the request, and StoreLogs
// has received that answer before it puts the request back: a recycled
// done channel is empty.
var entryRequests = sync.Pool{New: func() any { return &request{done: make(chan error, 1)} }}

// DeleteRange implements raft.LogStore: it durably removes [min, max].
func (g *GroupStore) DeleteRange(min, max uint64) error {
	if min > max {
		return nil
	}
	return g.submit(&request{op: op{kind: recDelete, group: g.st.id, min: min, max: max}, rec: encodeDelete(g.st.id, min, max)})
}

// submit queues r on the group's shard and waits for its answer; r gets
// a done channel unless it has one (an empty one, recycled).
func (g *GroupStore) submit(r *request) error {
	if g.l.closed.Load() {
		return ErrClosed
	}
	r.st = g.st
	if r.done == nil {
		r.done = make(chan error, 1)
	}
	return g.s.submit(r)
}

// Set implements raft.StableStore. The value is durable when it returns.
func (g *GroupStore) Set(key, val []byte) error {
	if len(key)+len(val) > maxRecordPayload-2*binary.MaxVarintLen64 {
		return fmt.Errorf("sharedlog: key and value of %d bytes exceed the record limit", len(key)+len(val))
	}
	v := append([]byte{}, val...)
	k := string(key)
	return g.submit(&request{op: op{kind: recSet, group: g.st.id, key: k, val: v}, rec: encodeSet(nil, g.st.id, k, v)})
}

// Get implements raft.StableStore. A missing key returns ErrKeyNotFound,
// whose text is exactly "not found" as raft expects.
func (g *GroupStore) Get(key []byte) ([]byte, error) {
	if err := g.rlock(); err != nil {
		return nil, err
	}
	defer g.st.mu.RUnlock()
	v, ok := g.st.kv[string(key)]
	if !ok {
		return nil, ErrKeyNotFound
	}
	return append([]byte{}, v...), nil
}

// SetUint64 implements raft.StableStore (stored as 8 bytes big endian, in
// the same key space as Set).
func (g *GroupStore) SetUint64(key []byte, val uint64) error {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], val)
	return g.Set(key, b[:])
}

// GetUint64 implements raft.StableStore. A missing key returns
// ErrKeyNotFound ("not found").
func (g *GroupStore) GetUint64(key []byte) (uint64, error) {
	v, err := g.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("sharedlog: group %d key %q holds %d bytes, not a uint64", g.st.id, key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}
