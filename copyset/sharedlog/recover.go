// Recovery of a shard at Open: its segments are checked, replayed into the
// groups' in-memory state and cut at the end of the valid log (recover,
// scan); leftovers of an interrupted garbage collection or spare preparation
// are removed.

package sharedlog

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/klauspost/crc32"
)

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
// zero-filling) and keeps at most Options.SpareSegments ready spares.
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

	// Keep up to maxSpares ready spares (the newest of the right size and
	// fully allocated); remove the others.
	slices.Sort(spares)
	for i := len(spares) - 1; i >= 0; i-- {
		path := filepath.Join(s.dir, spareName(spares[i]))
		if len(s.ready) < s.maxSpares {
			sp, err := s.openSpare(path)
			if err != nil {
				return err
			}
			if sp != nil {
				s.ready = append(s.ready, sp)
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
