package sharedlog

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
)

// Spare segments.
//
// A commit's fdatasync is cheapest when it only has to flush data: when the
// write neither grows the file nor lands in blocks that were never written
// (fallocate'd "unwritten" extents must be converted), because either makes
// the filesystem commit inode and extent metadata through its journal (ext4:
// jbd2) on every fdatasync. So a shard appends to segments that were
// written to their full size (Options.SegmentSize) and made durable before
// they became active. Each shard keeps such spares ready, prepared by its
// preparer goroutine while the active segment fills:
//
//   - recycling: a segment freed by garbage collection is renamed to a
//     spare (and the rename made durable) instead of being deleted, while
//     fewer than Options.SpareSegments spares are ready (beyond, it is
//     removed). Copysets truncate their logs at moments of their own, so
//     segments die in bursts: the spares kept from one serve the rolls that
//     follow, each of which would otherwise zero-fill a segment. A
//     recycled file's old records stay in it; activation writes a header
//     with a new salt, which the link chain of every record depends on, so
//     recovery never takes them for records of the new incarnation;
//   - when none is ready, a new file NNNNNNNNNN.spare.tmp is zero-filled
//     (with O_DIRECT where the filesystem allows, so it neither costs a
//     copy into nor floods the page cache), fdatasynced, renamed to
//     NNNNNNNNNN.spare and the directory synced. A crash before the rename leaves a .tmp file,
//     which recovery deletes.
//
// The writer asks for a spare once the active segment is three quarters
// full (see prepAt; an idle or tiny log never pays for one; until then a
// freed segment is recycled), takes it at the next roll
// without waiting (if none is ready yet it starts a growing segment, and
// moves to the spare as soon as it is ready) and hands the segments that
// garbage collection frees to the preparer, which also deletes the ones it
// does not recycle. The preparer is owned by its shard: started by Open,
// stopped by Close after the writer.

// spareFile is a file ready to become a segment: at least SegmentSize long,
// written and durable.
type spareFile struct {
	f       *os.File
	path    string
	oldSalt uint32 // salt of the segment the file last held, 0 if none
	size    int64
}

const (
	prepChunk     = 1 << 20 // zero-fill write size
	prepSyncEvery = 8 << 20 // buffered zero-fill: fdatasync this often
)

func (s *shard) startPreparer() { go s.prepare() }

func (s *shard) stopPreparer() {
	s.prepMu.Lock()
	s.prepStop = true
	s.prepCond.Broadcast()
	s.prepMu.Unlock()
	<-s.prepDone
}

// takeSpare returns a ready spare, if any: the one made ready last, whose
// file is the likeliest to still be in the disk's and the filesystem's
// caches. Writer only.
func (s *shard) takeSpare() *spareFile {
	if !s.haveSpare.Load() {
		return nil
	}
	s.prepMu.Lock()
	defer s.prepMu.Unlock()
	n := len(s.ready)
	if n == 0 {
		return nil
	}
	sp := s.ready[n-1]
	s.ready[n-1] = nil
	s.ready = s.ready[:n-1]
	s.want = false
	s.haveSpare.Store(n > 1)
	return sp
}

// closeSpares closes the files of the ready spares (the shard closes; the
// files stay, for recovery to find).
func (s *shard) closeSpares() {
	for sp := s.takeSpare(); sp != nil; sp = s.takeSpare() {
		sp.f.Close()
	}
}

// requestSpare asks the preparer for a spare, unless one is ready.
func (s *shard) requestSpare() {
	s.prepMu.Lock()
	if len(s.ready) == 0 {
		s.want = true
		s.prepCond.Broadcast()
	}
	s.prepMu.Unlock()
}

// retire hands segments freed by garbage collection (files closed) to the
// preparer.
func (s *shard) retire(dead []*segment) {
	s.prepMu.Lock()
	s.dead = append(s.dead, dead...)
	s.prepCond.Broadcast()
	s.prepMu.Unlock()
}

func (s *shard) setReady(sp *spareFile) {
	s.ready = append(s.ready, sp)
	s.want = false
	s.haveSpare.Store(true)
}

func (s *shard) recyclable(d *segment) bool { return d.fileSize.Load() == s.segSize }

// prepare is the preparer goroutine. Retired segments come first: each is
// recycled while fewer than maxSpares spares are ready, else removed. On
// stop it still finishes those (renames and unlinks), but abandons a
// zero-fill.
func (s *shard) prepare() {
	defer close(s.prepDone)
	s.prepMu.Lock()
	defer s.prepMu.Unlock()
	for {
		switch {
		case len(s.dead) > 0:
			d := s.dead[0]
			s.dead[0] = nil
			s.dead = s.dead[1:]
			reuse := len(s.ready) < s.maxSpares && s.recyclable(d)
			s.prepMu.Unlock()
			var sp *spareFile
			if reuse {
				sp = s.recycle(d)
			} else {
				s.remove(d)
			}
			s.prepMu.Lock()
			if sp != nil {
				s.setReady(sp)
			}
		case s.prepStop:
			return
		case s.want && len(s.ready) == 0:
			s.prepMu.Unlock()
			sp, err := s.zeroFill()
			s.prepMu.Lock()
			switch {
			case sp != nil:
				s.setReady(sp)
			case err != nil:
				// Retried when the writer asks again (at its next roll).
				s.logger.Warn("sharedlog: preparing a spare segment failed", "err", err)
				s.want = false
			}
		default:
			s.prepCond.Wait()
		}
	}
}

// abortFill reports whether a zero-fill in progress should stop: on Close,
// or because a retired segment can be recycled instead.
func (s *shard) abortFill() bool {
	s.prepMu.Lock()
	defer s.prepMu.Unlock()
	if s.prepStop {
		return true
	}
	for _, d := range s.dead {
		if s.recyclable(d) {
			return true
		}
	}
	return false
}

// recycle renames retired segment d to a spare and makes the rename durable
// before the file can be reused: until then a crash may bring d back under
// its old name, and it must still hold d's records.
func (s *shard) recycle(d *segment) *spareFile {
	path := filepath.Join(s.dir, spareName(s.spareSeq))
	s.spareSeq++
	if err := os.Rename(d.path, path); err != nil {
		s.logger.Warn("sharedlog: recycling segment", "segment", d.id, "err", err)
		s.remove(d)
		return nil
	}
	if !s.noSync {
		if err := syncDir(s.dir); err != nil {
			s.logger.Warn("sharedlog: recycling segment", "segment", d.id, "err", err)
			os.Remove(path)
			return nil
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		s.logger.Warn("sharedlog: recycling segment", "segment", d.id, "err", err)
		os.Remove(path)
		return nil
	}
	s.recycled.Add(1)
	s.logger.Debug("sharedlog: recycled segment as a spare", "segment", d.id, "spare", filepath.Base(path))
	return &spareFile{f: f, path: path, oldSalt: d.salt, size: d.fileSize.Load()}
}

func (s *shard) remove(d *segment) {
	if err := os.Remove(d.path); err != nil {
		s.logger.Warn("sharedlog: removing segment", "segment", d.id, "err", err)
	} else {
		s.logger.Debug("sharedlog: removed segment", "segment", d.id)
	}
}

// zeroFill prepares a new spare. It returns nil, nil if aborted. With
// NoSync the file is only extended (sparse): nothing is flushed anyway.
func (s *shard) zeroFill() (*spareFile, error) {
	path := filepath.Join(s.dir, spareName(s.spareSeq))
	s.spareSeq++
	tmp := path + tmpSuffix
	f, err := s.fill(tmp)
	if err != nil || f == nil {
		if f != nil {
			f.Close()
		}
		os.Remove(tmp)
		return nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, err
	}
	if !s.noSync {
		if err := syncDir(s.dir); err != nil {
			f.Close()
			os.Remove(path)
			return nil, err
		}
	}
	s.prepared.Add(1)
	s.logger.Debug("sharedlog: prepared a spare segment", "spare", filepath.Base(path))
	return &spareFile{f: f, path: path, size: s.segSize}, nil
}

// fill creates tmp, writes SegmentSize zero bytes to it and fdatasyncs it.
// It returns the file opened for ordinary (buffered) I/O, or nil if
// aborted.
func (s *shard) fill(tmp string) (*os.File, error) {
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	if s.noSync {
		return f, f.Truncate(s.segSize)
	}
	direct := false
	w := f
	if directIO != 0 {
		if d, err := os.OpenFile(tmp, os.O_WRONLY|directIO, 0); err == nil {
			w, direct = d, true
		}
	}
	closeW := func() {
		if w != f {
			w.Close()
		}
	}
	zeros := alignedZeros(prepChunk)
	for off := int64(0); off < s.segSize; {
		if s.abortFill() {
			closeW()
			f.Close()
			return nil, nil
		}
		n := min(int64(prepChunk), s.segSize-off)
		if direct && n%4096 != 0 {
			// An O_DIRECT write must be a multiple of the block size:
			// finish with ordinary writes.
			closeW()
			w, direct = f, false
		}
		if _, err := w.WriteAt(zeros[:n], off); err != nil {
			if direct && errors.Is(err, syscall.EINVAL) {
				// The filesystem does not do O_DIRECT after all.
				closeW()
				w, direct = f, false
				continue
			}
			closeW()
			return f, err
		}
		off += n
		if !direct && (off%prepSyncEvery == 0 || off == s.segSize) {
			if err := fdatasync(f); err != nil {
				closeW()
				return f, err
			}
		}
	}
	closeW()
	if direct {
		// The data is on the device; this flushes its cache and commits
		// the file's size and extents.
		if err := fdatasync(f); err != nil {
			return f, err
		}
	}
	return f, nil
}

// openSpare opens an existing spare at recovery. It returns nil if the file
// cannot serve (wrong size, or not fully allocated although fsync is on).
func (s *shard) openSpare(path string) (*spareFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if fi.Size() != s.segSize || (!s.noSync && !fullyAllocated(fi)) {
		f.Close()
		return nil, nil
	}
	var b [segHeaderSize]byte
	n, _ := f.ReadAt(b[:], 0)
	return &spareFile{f: f, path: path, oldSalt: oldSalt(b[:n]), size: fi.Size()}, nil
}
