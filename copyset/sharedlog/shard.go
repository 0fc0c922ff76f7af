package sharedlog

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/klauspost/crc32"
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

// request is one record waiting in a shard's commit queue.
type request struct {
	op
	st   *groupState
	rec  []byte
	off  int64 // where the writer placed rec in the active segment
	done chan error
}

// shard is one independent WAL: a directory of segments, a commit queue and
// the writer goroutine that drains it.
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
	activeBase int64 // size of the active segment before its first request record
	buf        []byte
	batch      []*request
	spare      []*request

	qmu    sync.Mutex // guards queue, closed, err
	queue  []*request
	closed bool
	err    error // sticky write/sync failure
	wake   chan struct{}
	done   chan struct{}

	batches, records, bytes, fsyncs atomic.Uint64
}

func newShard(id int, dir string, opts *Options) *shard {
	return &shard{
		id:       id,
		dir:      dir,
		segSize:  opts.SegmentSize,
		noSync:   opts.NoSync,
		logger:   opts.Logger.With("shard", id),
		groups:   make(map[uint64]*groupState),
		dropping: make(map[*groupState]struct{}),
		segs:     make(map[uint32]*segment),
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
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

// ---------------------------------------------------------------------------
// Write path

// submit queues reqs (in order, atomically with respect to other submits),
// and waits until all of them are durable and applied.
func (s *shard) submit(reqs ...*request) error {
	if err := s.enqueue(reqs...); err != nil {
		return err
	}
	var first error
	for _, r := range reqs {
		if err := <-r.done; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (s *shard) enqueue(reqs ...*request) error {
	s.qmu.Lock()
	if s.closed {
		s.qmu.Unlock()
		return ErrClosed
	}
	if s.err != nil {
		err := s.err
		s.qmu.Unlock()
		return err
	}
	s.queue = append(s.queue, reqs...)
	s.qmu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// run is the writer goroutine. It exits once Close was called and the queue
// is empty.
func (s *shard) run() {
	defer close(s.done)
	for {
		s.qmu.Lock()
		reqs := s.queue
		if len(reqs) > 0 {
			// Double buffering: the enqueuers fill the spare slice while
			// this one is processed.
			s.queue, s.spare = s.spare[:0], nil
		}
		closed := s.closed
		s.qmu.Unlock()
		if len(reqs) == 0 {
			if closed {
				return
			}
			<-s.wake
			continue
		}
		s.process(reqs)
		clear(reqs)
		s.spare = reqs[:0]
	}
}

// process writes reqs as few group commits as possible: everything that
// fits in the active segment goes out with one write and one fdatasync.
func (s *shard) process(reqs []*request) {
	s.qmu.Lock()
	err := s.err
	s.qmu.Unlock()
	if err != nil {
		for _, r := range reqs {
			r.done <- err
		}
		return
	}
	buf := s.buf[:0]
	batch := s.batch[:0]
	gc := false
	fail := func(err error, rest []*request) {
		for _, r := range batch {
			r.done <- err
		}
		for _, r := range rest {
			r.done <- err
		}
		batch = batch[:0]
	}
	for i := 0; i < len(reqs); {
		r := reqs[i]
		if r.st.wDropped {
			r.done <- ErrGroupDropped
			i++
			continue
		}
		size := s.active.size.Load()
		if size+int64(len(buf))+int64(len(r.rec)) > s.segSize && (len(buf) > 0 || size > s.activeBase) {
			// r does not fit: commit what we have, start a new segment and
			// retry r there.
			if len(buf) > 0 {
				if err := s.commit(buf, batch); err != nil {
					fail(err, reqs[i:])
					return
				}
				buf, batch = buf[:0], batch[:0]
			}
			if err := s.roll(); err != nil {
				s.poison(err)
				fail(err, reqs[i:])
				return
			}
			continue
		}
		r.off = size + int64(len(buf))
		buf = append(buf, r.rec...)
		batch = append(batch, r)
		switch r.kind {
		case recDrop:
			r.st.wDropped = true
			gc = true
		case recDelete:
			gc = true
		}
		i++
	}
	if len(buf) > 0 {
		if err := s.commit(buf, batch); err != nil {
			fail(err, nil)
			return
		}
	}
	if cap(buf) > 16<<20 {
		buf = nil // do not pin a huge buffer after a burst
	}
	s.buf = buf[:0]
	clear(batch)
	s.batch = batch[:0]
	if gc {
		s.gc()
	}
}

// commit appends buf (the records of batch) to the active segment, makes it
// durable, applies the records to the in-memory state and wakes the waiters.
func (s *shard) commit(buf []byte, batch []*request) error {
	seg := s.active
	size := seg.size.Load()
	if _, err := seg.f.WriteAt(buf, size); err != nil {
		s.poison(err)
		return err
	}
	if !s.noSync {
		if err := fdatasync(seg.f); err != nil {
			s.poison(err)
			return err
		}
		s.fsyncs.Add(1)
	}
	seg.size.Store(size + int64(len(buf)))
	s.batches.Add(1)
	s.records.Add(uint64(len(batch)))
	s.bytes.Add(uint64(len(buf)))
	for _, r := range batch {
		s.applyLive(r, seg.id)
	}
	for _, r := range batch {
		r.done <- nil
	}
	return nil
}

func (s *shard) applyLive(r *request, seg uint32) {
	st := r.st
	st.mu.Lock()
	st.apply(&r.op, seg, r.off)
	if r.kind == recDrop {
		st.dropped = true
	}
	st.mu.Unlock()
	if r.kind == recDrop {
		s.mu.Lock()
		delete(s.dropping, st)
		s.mu.Unlock()
	}
}

// poison makes every later request fail: after a failed write or fsync the
// state of the file is unknown (fsync errors are not retryable).
func (s *shard) poison(err error) {
	s.logger.Error("sharedlog: write failed, shard is read-only until reopened", "err", err)
	s.qmu.Lock()
	if s.err == nil {
		s.err = fmt.Errorf("sharedlog: shard %d failed: %w", s.id, err)
	}
	s.qmu.Unlock()
}

// roll starts a new segment. It writes the segment header followed by a
// checkpoint of every group's stable-store keys, so that older segments are
// never needed for them, fsyncs it and the directory, then collects garbage.
func (s *shard) roll() error {
	id := s.active.id + 1
	path := filepath.Join(s.dir, segName(id))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	buf := appendSegHeader(make([]byte, 0, 4096), s.id, id)
	for _, st := range s.allStates() {
		st.mu.RLock()
		keys := make([]string, 0, len(st.kv))
		for k := range st.kv {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			buf = encodeSet(buf, st.id, k, st.kv[k])
		}
		st.mu.RUnlock()
	}
	if _, err := f.WriteAt(buf, 0); err != nil {
		f.Close()
		return err
	}
	if !s.noSync {
		if err := fdatasync(f); err != nil {
			f.Close()
			return err
		}
		if err := syncDir(s.dir); err != nil {
			f.Close()
			return err
		}
		s.fsyncs.Add(1)
	}
	s.bytes.Add(uint64(len(buf)))
	seg := &segment{id: id, path: path, f: f}
	seg.size.Store(int64(len(buf)))
	s.addSegment(seg)
	s.active = seg
	s.activeBase = int64(len(buf))
	s.gc()
	return nil
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

// oldestLive returns the oldest segment still holding a live entry (the
// active segment if none), and the groups whose first entry is in it.
func (s *shard) oldestLive() (uint32, []uint64) {
	min := s.activeID()
	var pin []uint64
	for _, st := range s.allStates() {
		st.mu.RLock()
		seg, ok := st.idx.oldestSeg()
		st.mu.RUnlock()
		if !ok {
			continue
		}
		switch {
		case seg < min:
			min = seg
			pin = append(pin[:0], st.id)
		case seg == min:
			pin = append(pin, st.id)
		}
	}
	return min, pin
}

func (s *shard) activeID() uint32 {
	s.segMu.RLock()
	defer s.segMu.RUnlock()
	return s.segIDs[len(s.segIDs)-1]
}

// gc deletes, oldest first, the segments that no group has a live entry in.
// Runs on the writer goroutine (or during Open), so no record is written
// concurrently. Deleting only a prefix keeps the WAL a contiguous suffix,
// which recovery relies on: replaying from any segment at or before the
// oldest live one rebuilds the same state (see index).
func (s *shard) gc() {
	min, _ := s.oldestLive()
	var dead []*segment
	s.segMu.Lock()
	for len(s.segIDs) > 1 && s.segIDs[0] < min {
		id := s.segIDs[0]
		dead = append(dead, s.segs[id])
		delete(s.segs, id)
		s.segIDs = s.segIDs[1:]
	}
	s.segMu.Unlock()
	for _, seg := range dead {
		seg.f.Close()
		if err := os.Remove(seg.path); err != nil {
			s.logger.Warn("sharedlog: removing segment", "segment", seg.id, "err", err)
		} else {
			s.logger.Debug("sharedlog: removed segment", "segment", seg.id)
		}
	}
}

// close stops the writer after it has committed everything queued, then
// closes the segment files.
func (s *shard) close() error {
	s.qmu.Lock()
	s.closed = true
	s.qmu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	<-s.done
	var first error
	s.segMu.Lock()
	for _, id := range s.segIDs {
		if err := s.segs[id].f.Close(); err != nil && first == nil {
			first = err
		}
	}
	s.segMu.Unlock()
	return first
}

// ---------------------------------------------------------------------------
// Recovery

// recover rebuilds the shard from its segments. Rules:
//   - segment ids must be contiguous; files before the last gap are
//     leftovers of a garbage collection whose unlinks were not yet durable
//     and are deleted;
//   - a segment with a bad header ends the shard: it and every later segment
//     are deleted;
//   - a record that is short (torn) or fails its crc ends the shard: its
//     segment is truncated there and every later segment is deleted.
func (s *shard) recover(nshards int) error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return err
	}
	des, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	var ids []uint32
	for _, de := range des {
		if id, ok := parseSegName(de.Name()); ok && de.Type().IsRegular() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	var maxSeen uint32
	if len(ids) > 0 {
		maxSeen = ids[len(ids)-1]
	}
	start := 0
	for k := 1; k < len(ids); k++ {
		if ids[k] != ids[k-1]+1 {
			start = k
		}
	}
	dirty := false
	for _, id := range ids[:start] {
		s.logger.Info("sharedlog: removing stale segment before a gap", "segment", id)
		if err := os.Remove(filepath.Join(s.dir, segName(id))); err != nil {
			return err
		}
		dirty = true
	}
	ids = ids[start:]

	for k, id := range ids {
		seg, clean, err := s.scan(id, nshards)
		if err != nil {
			return err
		}
		if seg == nil || !clean {
			if seg != nil {
				s.addSegment(seg)
				end := seg.size.Load()
				if err := seg.f.Truncate(end); err != nil {
					return err
				}
				if err := fdatasync(seg.f); err != nil {
					return err
				}
			}
			later := ids[k+1:]
			if seg == nil {
				later = ids[k:]
			}
			if len(later) > 0 || seg == nil {
				s.logger.Error("sharedlog: discarding segments after a corrupt or torn record", "segment", id, "discarded", later)
			}
			for _, lid := range later {
				if err := os.Remove(filepath.Join(s.dir, segName(lid))); err != nil {
					return err
				}
			}
			dirty = true
			break
		}
		s.addSegment(seg)
	}
	// Groups left without entries or keys need no state.
	for id, st := range s.groups {
		if st.idx.empty() && len(st.kv) == 0 {
			delete(s.groups, id)
		}
	}
	if len(s.segIDs) == 0 {
		id := maxSeen + 1
		path := filepath.Join(s.dir, segName(id))
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		hdr := appendSegHeader(nil, s.id, id)
		if _, err := f.WriteAt(hdr, 0); err != nil {
			f.Close()
			return err
		}
		if err := fdatasync(f); err != nil {
			f.Close()
			return err
		}
		seg := &segment{id: id, path: path, f: f}
		seg.size.Store(int64(len(hdr)))
		s.addSegment(seg)
		dirty = true
	}
	if dirty {
		if err := syncDir(s.dir); err != nil {
			return err
		}
	}
	s.active = s.segs[s.segIDs[len(s.segIDs)-1]]
	s.activeBase = segHeaderSize
	s.gc()
	return nil
}

// scan opens segment id and applies its valid records. It returns a nil
// segment if the header is bad; clean is false if the scan stopped at a torn
// or corrupt record, whose offset is then the segment's size.
func (s *shard) scan(id uint32, nshards int) (seg *segment, clean bool, err error) {
	path := filepath.Join(s.dir, segName(id))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, false, err
	}
	r := bufio.NewReaderSize(f, 1<<20)
	var hdr [segHeaderSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil || checkSegHeader(hdr[:], s.id, id) != nil {
		if err == nil {
			err = checkSegHeader(hdr[:], s.id, id)
		}
		if !errors.Is(err, errBadSegHeader) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			f.Close()
			return nil, false, fmt.Errorf("sharedlog: %s: %w", path, err)
		}
		s.logger.Error("sharedlog: segment has a bad header", "segment", id, "err", err)
		f.Close()
		return nil, false, nil
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, false, err
	}
	fileSize := fi.Size()
	seg = &segment{id: id, path: path, f: f}
	off := int64(segHeaderSize)
	var payload []byte
	var rh [recHeaderSize]byte
	for {
		seg.size.Store(off)
		if _, err := io.ReadFull(r, rh[:]); err != nil {
			if err == io.EOF {
				return seg, true, nil
			}
			if err == io.ErrUnexpectedEOF {
				s.logger.Warn("sharedlog: torn record header at end of segment", "segment", id, "offset", off)
				return seg, false, nil
			}
			f.Close()
			return nil, false, err
		}
		n := binary.LittleEndian.Uint32(rh[0:4])
		if n > maxRecordPayload || off+recHeaderSize+int64(n) > fileSize {
			s.logger.Warn("sharedlog: torn record or corrupt record length", "segment", id, "offset", off, "length", n)
			return seg, false, nil
		}
		if cap(payload) < int(n) {
			payload = make([]byte, n)
		}
		payload = payload[:n]
		if _, err := io.ReadFull(r, payload); err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				s.logger.Warn("sharedlog: torn record at end of segment", "segment", id, "offset", off)
				return seg, false, nil
			}
			f.Close()
			return nil, false, err
		}
		crc := crc32.Update(recordCRC(rh[0:4], rh[8:]), castagnoli, payload)
		if crc != binary.LittleEndian.Uint32(rh[4:8]) {
			s.logger.Warn("sharedlog: record crc mismatch", "segment", id, "offset", off)
			return seg, false, nil
		}
		o, err := decodeOp(rh[:], payload)
		if err != nil {
			s.logger.Warn("sharedlog: undecodable record", "segment", id, "offset", off)
			return seg, false, nil
		}
		if int(o.group%uint64(nshards)) != s.id {
			f.Close()
			return nil, false, fmt.Errorf("sharedlog: %s: record of group %d does not belong to shard %d of %d", path, o.group, s.id, nshards)
		}
		st := s.groups[o.group]
		if st == nil {
			st = &groupState{id: o.group}
			s.groups[o.group] = st
		}
		st.apply(&o, id, off)
		off += recHeaderSize + int64(n)
	}
}
