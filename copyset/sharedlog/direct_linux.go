//go:build linux

package sharedlog

import (
	"errors"
	"os"
	"syscall"
)

// dioAlign is the alignment of O_DIRECT writes: file offset, buffer address
// and length. 4096 covers every common logical block size.
const dioAlign = 4096

// directWriter writes group commits to preallocated segments with O_DIRECT,
// through a second descriptor of the segment file (segment.dio): the log is
// written once and rarely read back, and a buffered write into pages that
// were never cached (the segments were zero-filled with O_DIRECT, or hold a
// previous life's records long evicted) costs the kernel a fresh page-cache
// page per 4 KiB. Reads keep using the buffered descriptor, which Linux
// keeps coherent with direct writes.
//
// A batch starts where the previous one's records end, anywhere in a block,
// and ends padded to a page (padLen). The write starts at the block holding
// the batch's start: the block's bytes before it (the head: earlier records,
// already durable) are written again, unchanged, from a copy of the last
// partial block that the writer keeps (or, the first time in a segment,
// reads back through the buffered descriptor). Buffered writeback rewrites
// that block too, so this changes neither the bytes nor the offsets on
// disk. The records and the padding are copied after the head into one
// aligned buffer, reused between commits.
//
// Owned by the writer goroutine.
type directWriter struct {
	buf []byte // dioAlign-aligned, len(buf) == cap(buf)
	// buf[:tailEnd%dioAlign] holds tailSeg's bytes from the start of the
	// block holding tailEnd to tailEnd.
	tailSeg *segment
	tailEnd int64
	logged  bool // the fallback to buffered writes was logged

	// writes counts the direct writes made (tests).
	writes uint64
	// pwrite, if not nil, replaces the system call (tests).
	pwrite func(fd uintptr, b []byte, off int64) (int, error)
}

// writeDirect writes bufs (n bytes in all, records up to recEnd then the
// padding) at off in the active segment seg with O_DIRECT, if it can. It
// returns false, nil if it did not write them: the segment is not
// preallocated, the write would not end on a block boundary, or the direct
// descriptor cannot be used (no O_DIRECT on this filesystem: EINVAL, or a
// short write; then the segment is written with buffered writes from now
// on). The caller then writes bufs the ordinary way: the same bytes at the
// same offsets, over whatever part of them the direct write left. Any other
// write error is returned.
func (s *shard) writeDirect(seg *segment, bufs [][]byte, off, n, recEnd int64) (bool, error) {
	end := off + n
	if !seg.prealloc || seg.noDirect || end%dioAlign != 0 || end > seg.fileSize.Load() {
		return false, nil
	}
	w := &s.dw
	start := off &^ (dioAlign - 1)
	head := int(off - start)
	total := int(end - start)
	if head > 0 && (w.tailSeg != seg || w.tailEnd != off) {
		w.grow(head, 0)
		if _, err := seg.f.ReadAt(w.buf[:head], start); err != nil {
			w.tailSeg = nil
			return false, nil // the buffered write does not need the head
		}
	}
	if seg.dio == nil {
		f, err := os.OpenFile(seg.path, os.O_WRONLY|directIO, 0)
		if err != nil {
			s.directFallback(seg, err)
			return false, nil
		}
		seg.dio = f
	}
	w.grow(total, head)
	p := head
	for _, b := range bufs {
		p += copy(w.buf[p:], b)
	}
	nw, err := w.writeFile(seg.dio, w.buf[:total], start)
	if err != nil || nw != total {
		w.tailSeg = nil
		if err == nil || errors.Is(err, syscall.EINVAL) {
			s.directFallback(seg, err)
			return false, nil
		}
		return true, &os.PathError{Op: "pwrite", Path: seg.path, Err: err}
	}
	w.writes++
	// Keep the last partial block of records: the next batch starts there.
	tail := recEnd &^ (dioAlign - 1)
	k := copy(w.buf, w.buf[tail-start:recEnd-start])
	if cap(w.buf) > 16<<20 {
		// Do not pin a huge buffer after a burst.
		b := alignedZeros(64 << 10)
		copy(b, w.buf[:k])
		w.buf = b
	}
	w.tailSeg, w.tailEnd = seg, recEnd
	return true, nil
}

// grow makes buf at least n bytes long, keeping its first keep bytes.
func (w *directWriter) grow(n, keep int) {
	if len(w.buf) >= n {
		return
	}
	size := max(64<<10, 2*len(w.buf))
	for size < n {
		size *= 2
	}
	b := alignedZeros(size)
	copy(b, w.buf[:keep])
	w.buf = b
}

// directFallback stops direct writes to seg (closing its direct
// descriptor) after err (nil: a short write).
func (s *shard) directFallback(seg *segment, err error) {
	seg.noDirect = true
	if seg.dio != nil {
		seg.dio.Close()
		seg.dio = nil
	}
	if err == nil {
		err = errors.New("short write")
	}
	if !s.dw.logged {
		s.dw.logged = true
		s.logger.Info("sharedlog: O_DIRECT writes to the log do not work here, using buffered writes", "segment", seg.id, "err", err)
	}
}

// writeFile makes one pwrite(2) of b at off in f (retried if interrupted).
func (w *directWriter) writeFile(f *os.File, b []byte, off int64) (int, error) {
	pwrite := w.pwrite
	if pwrite == nil {
		pwrite = sysPwrite
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var werr error
	if err := rc.Control(func(fd uintptr) {
		for {
			n, werr = pwrite(fd, b, off)
			if werr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return 0, err
	}
	if werr != nil {
		return 0, werr
	}
	return n, nil
}

func sysPwrite(fd uintptr, b []byte, off int64) (int, error) {
	return syscall.Pwrite(int(fd), b, off)
}
