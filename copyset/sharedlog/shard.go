// A shard, one independent WAL of the shared log: the in-memory state of
// its groups, its segment table, and close. Its write path is in writer.go,
// moving to the next segment and garbage collection in roll.go, recovery
// in recover.go, spare segment preparation in spare.go.

package sharedlog

import (
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
)

// groupState is the in-memory state of one group.
type groupState struct {
	id uint64

	mu      sync.RWMutex
	idx     index
	kv      map[string][]byte
	dropped bool // DropGroup applied: handles to this state are dead

	// wDropped is set by the writer goroutine when it has queued this
	// state's drop record; later requests for the state are refused. Only
	// the writer goroutine touches it.
	wDropped bool
}

// apply applies o, whose record starts at recOff in segment seg. st.mu must
// be held (or the state must not be shared yet, during recovery).
func (st *groupState) apply(o *op, seg uint32, recOff int64) {
	switch o.kind {
	case recEntries:
		if len(o.ents) == 0 {
			return
		}
		st.idx.truncateFrom(o.ents[0].index)
		for _, e := range o.ents {
			st.idx.appendAt(e.index, loc{seg: seg, n: e.n, off: recOff + int64(e.off)})
		}
	case recDelete:
		st.idx.deleteRange(o.min, o.max)
	case recSet:
		if st.kv == nil {
			st.kv = make(map[string][]byte)
		}
		st.kv[o.key] = o.val
	case recDrop:
		st.idx = index{}
		st.kv = nil
	}
}

// shard is one independent WAL: a directory of segments, a commit queue, the
// writer goroutine that drains it and the preparer goroutine that keeps a
// spare segment file ready (spare.go).
type shard struct {
	id      int
	dir     string
	segSize int64
	noSync  bool
	logger  *slog.Logger

	mu       sync.Mutex // guards groups and dropping
	groups   map[uint64]*groupState
	dropping map[*groupState]struct{} // drop queued, not applied yet

	segMu  sync.RWMutex // guards segs and segIDs
	segs   map[uint32]*segment
	segIDs []uint32 // ascending

	// Owned by the writer goroutine (by Open before it starts).
	active     *segment
	activeBase int64  // size of the active segment before its first request record
	link       uint32 // link of the active segment's last record (its salt if none)
	requested  bool   // a spare was requested since the active segment started
	batch      []*request
	bufs       [][]byte     // commit's list of buffers to write
	w          batchWriter  // writes bufs without copying them (pwritev)
	dw         directWriter // or copies them to write with O_DIRECT (Linux)
	free       []*request   // the queue's other buffer

	qmu    sync.Mutex // guards queue, closed, err
	queue  []*request
	closed bool
	err    error // sticky write/sync failure
	wake   chan struct{}
	done   chan struct{}

	// Spare segment preparation (spare.go). prepMu guards ready, want,
	// dead and prepStop.
	prepMu    sync.Mutex
	prepCond  *sync.Cond
	ready     []*spareFile // at most maxSpares
	maxSpares int          // Options.SpareSegments
	want      bool         // the writer asked for a spare
	dead      []*segment   // collected segments to recycle or remove, oldest first
	prepStop  bool
	prepDone  chan struct{}
	spareSeq  uint64      // number of the next spare file; the preparer's once it runs
	haveSpare atomic.Bool // len(ready) > 0

	batches, records, bytes, fsyncs atomic.Uint64
	recycled, prepared, spareMisses atomic.Uint64
}

func newShard(id int, dir string, opts *Options) *shard {
	s := &shard{
		id:        id,
		dir:       dir,
		segSize:   opts.SegmentSize,
		maxSpares: opts.SpareSegments,
		noSync:    opts.NoSync,
		logger:    opts.Logger.With("shard", id),
		groups:    make(map[uint64]*groupState),
		dropping:  make(map[*groupState]struct{}),
		segs:      make(map[uint32]*segment),
		wake:      make(chan struct{}, 1),
		done:      make(chan struct{}),
		prepDone:  make(chan struct{}),
	}
	s.prepCond = sync.NewCond(&s.prepMu)
	return s
}

// state returns the live state of group, creating it.
func (s *shard) state(group uint64) *groupState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.groups[group]
	if st == nil {
		st = &groupState{id: group}
		s.groups[group] = st
	}
	return st
}

func (s *shard) segment(id uint32) *segment {
	s.segMu.RLock()
	defer s.segMu.RUnlock()
	return s.segs[id]
}

func (s *shard) addSegment(seg *segment) {
	s.segMu.Lock()
	s.segs[seg.id] = seg
	s.segIDs = append(s.segIDs, seg.id)
	s.segMu.Unlock()
}

// allStates returns every state that may still hold data: live groups and
// groups whose drop is queued.
func (s *shard) allStates() []*groupState {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*groupState, 0, len(s.groups)+len(s.dropping))
	for _, st := range s.groups {
		out = append(out, st)
	}
	for st := range s.dropping {
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b *groupState) int {
		switch {
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		}
		return 0
	})
	return out
}

func (s *shard) activeID() uint32 {
	s.segMu.RLock()
	defer s.segMu.RUnlock()
	return s.segIDs[len(s.segIDs)-1]
}

// close stops the writer after it has committed everything queued, then the
// preparer, and closes the files.
func (s *shard) close() error {
	s.qmu.Lock()
	s.closed = true
	s.qmu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	<-s.done
	s.stopPreparer()
	var first error
	s.segMu.Lock()
	for _, id := range s.segIDs {
		if err := s.segs[id].close(); err != nil && first == nil {
			first = err
		}
	}
	s.segMu.Unlock()
	s.closeSpares()
	return first
}
