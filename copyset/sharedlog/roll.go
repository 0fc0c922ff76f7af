// Moving a shard's writes to the next segment (roll: into a spare the
// preparer has ready, or a new growing file), the start every segment is
// written with (segmentStart), and garbage collection of the segments no
// group needs any more (gc).

package sharedlog

import (
	"os"
	"path/filepath"
	"slices"
)

// roll starts the next segment, normally in a spare the preparer has
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

// gc retires, oldest first, the segments that no group has a live entry in:
// they leave the segment table, their files are closed (a concurrent GetLog
// then fails with os.ErrClosed and reports the entry missing) and the
// preparer keeps them as spares (up to Options.SpareSegments) or removes
// them. Runs on the writer
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
