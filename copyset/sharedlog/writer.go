// A shard's write path: requests queued for the writer goroutine (submit,
// run), group commit (process, commit: one write and one fdatasync for every
// record that fits in the active segment), the page padding of a write, and
// the sticky failure after a failed write (poison).

package sharedlog

import (
	"fmt"
	"os"
	"runtime"
)

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
// next spare when none is ready. Until then a segment freed by garbage
// collection becomes a spare (recycled, no zero-fill); segments die about as often as they are
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
