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
	"runtime"
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
	st *groupState
	// rec is the encoded record. From submit until the request is answered
	// the writer owns it: it sets the link in place and writes rec itself to
	// the segment, so the submitter must neither change nor reuse it
	// before then.
	rec []byte
	// parts, when not nil, is the record instead of rec: its pieces in
	// order, parts[0] starting with the header (encodeEntries). The same
	// ownership rule holds for every piece.
	parts [][]byte
	off   int64 // where the writer placed the record in the active segment
	done  chan error
}

// length is the byte length of r's record.
func (r *request) length() int64 {
	if r.parts == nil {
		return int64(len(r.rec))
	}
	var n int64
	for _, p := range r.parts {
		n += int64(len(p))
	}
	return n
}

// head is the buffer holding the start of r's record (its header).
func (r *request) head() []byte {
	if r.parts != nil {
		return r.parts[0]
	}
	return r.rec
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
	ready     *spareFile // at most one spare per shard
	want      bool       // the writer asked for a spare
	dead      []*segment // collected segments to recycle or remove, oldest first
	prepStop  bool
	prepDone  chan struct{}
	spareSeq  uint64      // number of the next spare file; the preparer's once it runs
	haveSpare atomic.Bool // ready != nil

	batches, records, bytes, fsyncs atomic.Uint64
	recycled, prepared, spareMisses atomic.Uint64
}

func newShard(id int, dir string, opts *Options) *shard {
	s := &shard{
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
		prepDone: make(chan struct{}),
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
			// Double buffering: the enqueuers fill the other slice while
			// this one is processed.
			s.queue, s.free = s.free[:0], nil
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
		s.free = reqs[:0]
		// The waiters just woken are only runnable (a channel send does
		// not hand them the processor): let them run before draining the
		// queue, so that those with another record submit it into the next
		// group commit rather than just after it started. Otherwise, on a
		// busy machine, the cheaper the fdatasync the smaller the batches,
		// and every fdatasync costs CPU.
		runtime.Gosched()
	}
}

// process writes reqs as few group commits as possible: everything that
// fits in the active segment goes out with one write and one fdatasync.
// Each record is chained (its link set) in its own buffer, r.rec: the
// request owns it, and nothing else reads or writes it until the request is
// answered, so the records are written from where they were encoded (or,
// for an O_DIRECT write, copied once into the writer's aligned buffer).
func (s *shard) process(reqs []*request) {
	s.qmu.Lock()
	err := s.err
	s.qmu.Unlock()
	if err == nil && !s.active.prealloc && s.haveSpare.Load() {
		// Every commit to the active segment grows its file (the first
		// segment of a new log, or one started while no spare was ready),
		// so each fdatasync also commits metadata: switch to the
		// preallocated spare now.
		if err = s.roll(); err != nil {
			s.poison(err)
		}
	}
	if err != nil {
		for _, r := range reqs {
			r.done <- err
		}
		return
	}
	batch := s.batch[:0]
	var n int64 // bytes of the records in batch
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
		rlen := r.length()
		if size+n+rlen > s.segSize && (len(batch) > 0 || size > s.activeBase) {
			// r does not fit: commit what we have, start a new segment and
			// retry r there.
			if len(batch) > 0 {
				if err := s.commit(batch, n); err != nil {
					fail(err, reqs[i:])
					return
				}
				batch, n = batch[:0], 0
			}
			if err := s.roll(); err != nil {
				s.poison(err)
				fail(err, reqs[i:])
				return
			}
			continue
		}
		r.off = size + n
		s.link = setLink(r.head(), s.link)
		n += rlen
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
	if len(batch) > 0 {
		if err := s.commit(batch, n); err != nil {
			fail(err, nil)
			return
		}
	}
	clear(batch)
	s.batch = batch[:0]
	if gc {
		s.gc()
	}
}

// commit writes the records of batch (already chained, n bytes in all,
// placed from the active segment's end of valid data on) at that end, makes
// them durable, applies them to the in-memory state and wakes the waiters.
// The records and the zeros that pad them to a page are written as their
// concatenation would be, the same bytes at the same offsets, in one of two
// ways. To a preallocated segment, where the filesystem takes O_DIRECT
// (Linux), they are copied into one aligned buffer after the start of their
// first block (bytes already written, written again unchanged) and written
// with one O_DIRECT pwrite (writeDirect, direct_linux.go); the page cache is
// neither filled nor copied into. Otherwise, or if the direct write fails
// with EINVAL or is short (then the segment stays on this path), it is one
// pwritev of the records' own buffers and the padding (more than one call
// only for a batch of more than IOV_MAX buffers, or after a short write).
// The fdatasync follows either way: O_DIRECT flushes neither the device's
// cache nor metadata. In a preallocated segment the write lands in blocks
// that are already allocated and written, so the fdatasync flushes data
// only: no inode or extent change for the journal.
func (s *shard) commit(batch []*request, n int64) error {
	seg := s.active
	size := seg.size.Load()
	bufs := s.bufs[:0]
	for _, r := range batch {
		if r.parts != nil {
			bufs = append(bufs, r.parts...)
		} else {
			bufs = append(bufs, r.rec)
		}
	}
	pad := padLen(size, n, seg.fileSize.Load())
	if pad > 0 {
		bufs = append(bufs, zeroPage[:pad])
	}
	done, err := s.writeDirect(seg, bufs, size, n+pad, size+n)
	if !done {
		err = s.w.writeAt(seg.f, bufs, size)
	}
	clear(bufs) // do not pin the records' buffers
	s.bufs = bufs[:0]
	if err != nil {
		err = fmt.Errorf("sharedlog: writing %d records (%d bytes) at offset %d: %w", len(batch), n, size, err)
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
	end := size + n
	seg.size.Store(end)
	if end > seg.fileSize.Load() {
		seg.fileSize.Store(end)
	}
	s.batches.Add(1)
	s.records.Add(uint64(len(batch)))
	s.bytes.Add(uint64(n))
	for _, r := range batch {
		s.applyLive(r, seg.id)
	}
	for _, r := range batch {
		r.done <- nil
	}
	if !s.requested && end >= s.prepAt(seg) {
		s.requested = true
		s.requestSpare()
	}
	return nil
}

// prepAt is the fill of the active segment at which the writer asks for the
// next spare. Until then a segment freed by garbage collection becomes the
// spare (recycled, no zero-fill); segments die about as often as they are
// started, so the later the request the more rolls recycle. A preallocated
// segment asks at three quarters: zero-filling a segment sequentially takes
// far less time than filling a quarter of one with small records, and a late
// spare costs little (the roll starts a growing segment, and the writer
// moves to the spare once it is ready). A growing segment (a new log's
// first, or one started without a spare) asks after 1 MiB, or a quarter: it
// should be left soon, but an idle log or a test should not pay for a spare.
func (s *shard) prepAt(seg *segment) int64 {
	if seg.prealloc {
		return s.segSize - s.segSize/4
	}
	return max(1, min(s.segSize/4, 1<<20))
}

// pageSize is the page cache's unit.
var pageSize = int64(os.Getpagesize())

var zeroPage = make([]byte, pageSize)

// padLen returns how many zeros pad n bytes written at off in a file of
// length fileSize to the next page boundary: none if that boundary is
// beyond the end of the file. Overwriting part of a page that is not in the
// page cache (a preallocated or recycled segment's pages, written long ago
// or with O_DIRECT) makes the kernel read it from disk first, synchronously,
// in the write call; covering the rest of the page avoids that read. It
// costs no extra I/O (writeback writes whole pages anyway) and the zeros lie
// beyond the end of the valid records, where recovery expects zeros or
// garbage. The next write starts in the last page, which is now cached
// (a buffered write), or which the writer keeps a copy of (an O_DIRECT
// write, which the padding also makes end on a block boundary).
func padLen(off, n, fileSize int64) int64 {
	end := off + n
	pad := -end & (pageSize - 1)
	if pad == 0 || end+pad > fileSize {
		return 0
	}
	return pad
}

// padToPage returns buf, to be written at off in a file of length fileSize,
// extended with padLen zeros. buf's spare capacity may be used.
func padToPage(buf []byte, off, fileSize int64) []byte {
	return append(buf, zeroPage[:padLen(off, int64(len(buf)), fileSize)]...)
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

// roll starts the next segment, normally in the spare the preparer has
// ready, else (the preparer is behind, or failed) in a new file that grows
// as it is written. Either way the segment starts with its header, which
// records where the previous segment's records end, and a checkpoint of
// every group's stable-store keys so that older segments are never needed
// for them; both are durable before any record is written after them.
// Then it collects garbage.
func (s *shard) roll() error {
	prev := s.active
	id := prev.id + 1
	h := segHeader{prevEnd: prev.size.Load()}
	var (
		seg  *segment
		link uint32
		err  error
	)
	if sp := s.takeSpare(); sp != nil {
		seg, link, err = s.activateSpare(sp, id, h)
		s.requested = false
	} else {
		s.spareMisses.Add(1)
		s.logger.Warn("sharedlog: no spare segment ready at roll, starting a growing segment", "segment", id)
		seg, link, err = s.createSegment(id, h, !s.noSync)
		s.requested = true
		s.requestSpare()
	}
	if err != nil {
		return err
	}
	s.addSegment(seg)
	prev.closeDirect() // no longer written
	s.active = seg
	s.activeBase = seg.size.Load()
	s.link = link
	s.gc()
	return nil
}

// segmentStart returns the first bytes of segment id: its header and the
// checkpoint, chained from h.salt, and the link of the last record.
func (s *shard) segmentStart(id uint32, h segHeader) ([]byte, uint32) {
	buf := appendSegHeader(make([]byte, 0, 4096), s.id, id, h)
	link := h.salt
	for _, st := range s.allStates() {
		st.mu.RLock()
		keys := make([]string, 0, len(st.kv))
		for k := range st.kv {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			start := len(buf)
			buf = encodeSet(buf, st.id, k, st.kv[k])
			link = setLink(buf[start:], link)
		}
		st.mu.RUnlock()
	}
	return buf, link
}

// activateSpare turns spare sp into segment id: it writes the segment's
// start over the beginning of the file (a new salt, so nothing from the
// file's previous life continues the chain), makes it durable, then renames
// the file to the segment's name and syncs the directory. Until that rename
// is durable the file is still a spare to recovery, whatever it holds.
func (s *shard) activateSpare(sp *spareFile, id uint32, h segHeader) (*segment, uint32, error) {
	h.salt = newSalt(sp.oldSalt)
	buf, link := s.segmentStart(id, h)
	fail := func(err error) (*segment, uint32, error) {
		sp.f.Close()
		return nil, 0, err
	}
	if _, err := sp.f.WriteAt(padToPage(buf, 0, sp.size), 0); err != nil {
		return fail(err)
	}
	if !s.noSync {
		if err := fdatasync(sp.f); err != nil {
			return fail(err)
		}
		s.fsyncs.Add(1)
	}
	path := filepath.Join(s.dir, segName(id))
	if err := os.Rename(sp.path, path); err != nil {
		return fail(err)
	}
	if !s.noSync {
		if err := syncDir(s.dir); err != nil {
			return fail(err)
		}
	}
	s.bytes.Add(uint64(len(buf)))
	seg := &segment{id: id, path: path, f: sp.f, salt: h.salt, prealloc: true}
	seg.size.Store(int64(len(buf)))
	seg.fileSize.Store(max(sp.size, int64(len(buf))))
	return seg, link, nil
}

// createSegment creates segment id as a new file holding only its start
// (it grows as records are appended).
func (s *shard) createSegment(id uint32, h segHeader, sync bool) (*segment, uint32, error) {
	path := filepath.Join(s.dir, segName(id))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, 0, err
	}
	h.salt = newSalt(0)
	buf, link := s.segmentStart(id, h)
	if _, err := f.WriteAt(buf, 0); err != nil {
		f.Close()
		return nil, 0, err
	}
	if sync {
		if err := fdatasync(f); err != nil {
			f.Close()
			return nil, 0, err
		}
		if err := syncDir(s.dir); err != nil {
			f.Close()
			return nil, 0, err
		}
		s.fsyncs.Add(1)
	}
	s.bytes.Add(uint64(len(buf)))
	seg := &segment{id: id, path: path, f: f, salt: h.salt}
	seg.size.Store(int64(len(buf)))
	seg.fileSize.Store(int64(len(buf)))
	return seg, link, nil
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

// gc retires, oldest first, the segments that no group has a live entry in:
// they leave the segment table, their files are closed (a concurrent GetLog
// then fails with os.ErrClosed and reports the entry missing) and the
// preparer recycles one as the spare or removes them. Runs on the writer
// goroutine (or during Open), so no record is written concurrently.
// Retiring only a prefix keeps the WAL a contiguous suffix, which recovery
// relies on: replaying from any segment at or before the oldest live one
// rebuilds the same state (see index).
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
	if len(dead) == 0 {
		return
	}
	for _, seg := range dead {
		seg.close()
	}
	s.retire(dead)
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
	if sp := s.takeSpare(); sp != nil {
		sp.f.Close()
	}
	return first
}

// ---------------------------------------------------------------------------
// Recovery

// recover rebuilds the shard from its segments. Rules:
//   - segment ids must be contiguous; files before the last gap are
//     leftovers of a garbage collection whose unlinks (or renames to a
//     spare) were not yet durable and are deleted;
//   - a segment with a bad header ends the shard: it and every later segment
//     are deleted (a segment file gets its name only once its header is
//     durable, so this is damage, or a crash of the old create path);
//   - a segment is valid up to where the next segment's header says it
//     ends (prevEnd); a record before that point that is short, fails its
//     crc or its link, or does not decode ends the shard there: every later
//     segment is deleted;
//   - in the last segment the first such record is the end of the log: the
//     rest of the file is zeros (preallocated), records from the file's
//     previous life (a recycled spare: another salt, so they do not
//     continue the chain) or a torn batch, and is left as it is, except
//     that a file that was not preallocated is truncated there.
//
// It also removes unfinished spares (*.spare.tmp, a crash during
// zero-filling) and keeps at most one ready spare.
func (s *shard) recover(nshards int) error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return err
	}
	des, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	dirty := false
	var ids []uint32
	var spares []uint64
	for _, de := range des {
		if !de.Type().IsRegular() {
			continue
		}
		if id, ok := parseSegName(de.Name()); ok {
			ids = append(ids, id)
			continue
		}
		seq, tmp, ok := parseSpareName(de.Name())
		if !ok {
			continue
		}
		s.spareSeq = max(s.spareSeq, seq+1)
		if tmp {
			s.logger.Info("sharedlog: removing a spare segment whose preparation did not finish", "file", de.Name())
			if err := os.Remove(filepath.Join(s.dir, de.Name())); err != nil {
				return err
			}
			dirty = true
			continue
		}
		spares = append(spares, seq)
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
	for _, id := range ids[:start] {
		s.logger.Info("sharedlog: removing stale segment before a gap", "segment", id)
		if err := os.Remove(filepath.Join(s.dir, segName(id))); err != nil {
			return err
		}
		dirty = true
	}
	ids = ids[start:]

	// Open the segments and read their headers.
	var segs []*segment
	var hdrs []segHeader
	// On error the files not yet in the segment table are closed here, the
	// others by Open (closeFiles).
	closeAll := func() {
		for _, seg := range segs {
			if s.segment(seg.id) != seg {
				seg.close()
			}
		}
	}
	for k, id := range ids {
		seg, h, err := s.openSegment(id)
		if err != nil {
			closeAll()
			return err
		}
		if seg == nil {
			later := ids[k:]
			s.logger.Error("sharedlog: segment has a bad header, discarding it and every later segment", "segment", id, "discarded", later)
			for _, lid := range later {
				if err := os.Remove(filepath.Join(s.dir, segName(lid))); err != nil {
					closeAll()
					return err
				}
			}
			dirty = true
			break
		}
		segs = append(segs, seg)
		hdrs = append(hdrs, h)
	}

	// Replay them.
	for k := 0; k < len(segs); k++ {
		seg := segs[k]
		next := k+1 < len(segs)
		limit := seg.fileSize.Load()
		if next && hdrs[k+1].prevEnd > 0 {
			limit = hdrs[k+1].prevEnd
		}
		end, link, why, err := s.scan(seg, limit, nshards)
		if err != nil {
			closeAll()
			return err
		}
		seg.size.Store(end)
		s.addSegment(seg)
		if next && (end == limit || hdrs[k+1].prevEnd == 0) {
			continue
		}
		if next {
			var discarded []uint32
			for _, o := range segs[k+1:] {
				discarded = append(discarded, o.id)
				o.close()
				if err := os.Remove(o.path); err != nil {
					segs = segs[:k+1]
					closeAll()
					return err
				}
			}
			s.logger.Error("sharedlog: corrupt record before the end of a full segment, discarding every later segment",
				"segment", seg.id, "offset", end, "end", limit, "reason", why, "discarded", discarded)
			segs = segs[:k+1]
			dirty = true
		}
		// seg is the last segment: appends continue at end.
		s.link = link
		if end < seg.fileSize.Load() {
			if why == whyZeros {
				s.logger.Debug("sharedlog: end of log", "segment", seg.id, "offset", end)
			} else {
				s.logger.Info("sharedlog: end of log before the end of the last segment (a torn write, or records of a recycled file's previous life)",
					"segment", seg.id, "offset", end, "reason", why)
			}
			if !seg.prealloc {
				if err := seg.f.Truncate(end); err != nil {
					closeAll()
					return err
				}
				if err := fdatasync(seg.f); err != nil {
					closeAll()
					return err
				}
				seg.fileSize.Store(end)
			}
		}
	}
	// Groups left without entries or keys need no state.
	for id, st := range s.groups {
		if st.idx.empty() && len(st.kv) == 0 {
			delete(s.groups, id)
		}
	}
	if len(s.segIDs) == 0 {
		seg, link, err := s.createSegment(maxSeen+1, segHeader{}, true)
		if err != nil {
			return err
		}
		s.addSegment(seg)
		s.link = link
		dirty = true
	}

	// Keep one ready spare (the newest of the right size and fully
	// allocated); remove the others.
	slices.Sort(spares)
	for i := len(spares) - 1; i >= 0; i-- {
		path := filepath.Join(s.dir, spareName(spares[i]))
		if s.ready == nil {
			sp, err := s.openSpare(path)
			if err != nil {
				return err
			}
			if sp != nil {
				s.ready = sp
				s.haveSpare.Store(true)
				continue
			}
		}
		if err := os.Remove(path); err != nil {
			return err
		}
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

// openSegment opens segment id and checks its header. It returns a nil
// segment (and closes the file) if the header is bad.
func (s *shard) openSegment(id uint32) (*segment, segHeader, error) {
	path := filepath.Join(s.dir, segName(id))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, segHeader{}, err
	}
	var b [segHeaderSize]byte
	n, err := f.ReadAt(b[:], 0)
	if err != nil && err != io.EOF {
		f.Close()
		return nil, segHeader{}, err
	}
	h, err := parseSegHeader(b[:n], s.id, id)
	if err != nil {
		f.Close()
		if errors.Is(err, errBadSegHeader) {
			return nil, segHeader{}, nil
		}
		return nil, segHeader{}, fmt.Errorf("sharedlog: %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, segHeader{}, err
	}
	seg := &segment{id: id, path: path, f: f, salt: h.salt, prealloc: fi.Size() >= s.segSize}
	seg.fileSize.Store(fi.Size())
	return seg, h, nil
}

// Why scan stopped before its limit, for logs. whyZeros is the normal end
// of a preallocated segment.
const (
	whyZeros   = "zeros"
	whyTornHdr = "short record header"
	whyLink    = "record does not continue the segment's chain"
	whyLength  = "record length beyond the segment's end"
	whyTorn    = "short record"
	whyCRC     = "record crc mismatch"
	whyDecode  = "undecodable record"
)

// scan applies the valid records of seg, which lie before limit. It
// returns where they end, the link of the last one (the salt if none) and,
// if that is before limit, why.
func (s *shard) scan(seg *segment, limit int64, nshards int) (end int64, link uint32, why string, err error) {
	limit = max(limit, segHeaderSize)
	r := bufio.NewReaderSize(io.NewSectionReader(seg.f, segHeaderSize, limit-segHeaderSize), 1<<20)
	off := int64(segHeaderSize)
	link = seg.salt
	var payload []byte
	var rh [recHeaderSize]byte
	for {
		if off == limit {
			return off, link, "", nil
		}
		if _, err := io.ReadFull(r, rh[:]); err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return off, link, whyTornHdr, nil
			}
			return 0, 0, "", err
		}
		if rh == [recHeaderSize]byte{} {
			return off, link, whyZeros, nil
		}
		crc := binary.LittleEndian.Uint32(rh[4:8])
		next := binary.LittleEndian.Uint32(rh[recLinkOff : recLinkOff+4])
		if next != linkCRC(link, crc) {
			return off, link, whyLink, nil
		}
		n := binary.LittleEndian.Uint32(rh[0:4])
		if n > maxRecordPayload || off+recHeaderSize+int64(n) > limit {
			return off, link, whyLength, nil
		}
		if cap(payload) < int(n) {
			payload = make([]byte, n)
		}
		payload = payload[:n]
		if _, err := io.ReadFull(r, payload); err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return off, link, whyTorn, nil
			}
			return 0, 0, "", err
		}
		if crc32.Update(recordCRC(rh[0:4], rh[recTypeOff:]), castagnoli, payload) != crc {
			return off, link, whyCRC, nil
		}
		o, err := decodeOp(rh[:], payload)
		if err != nil {
			return off, link, whyDecode, nil
		}
		if int(o.group%uint64(nshards)) != s.id {
			return 0, 0, "", fmt.Errorf("sharedlog: %s: record of group %d does not belong to shard %d of %d", seg.path, o.group, s.id, nshards)
		}
		st := s.groups[o.group]
		if st == nil {
			st = &groupState{id: o.group}
			s.groups[o.group] = st
		}
		st.apply(&o, seg.id, off)
		link = next
		off += recHeaderSize + int64(n)
	}
}
