package datastore

import "fmt"

// Clone chunks (Curve's lazy clone, research §2.4).
//
// A clone chunk is created empty by CreateCloneChunk with the location of its
// source data ("<file>:<offset>@cs" or "<object>@s3") and a bitmap with one
// bit per block, all clear. A block's bit is set when a client writes it
// (WriteChunk) or when the chunkserver pastes it from the source
// (PasteChunk); pastes never touch blocks already set, so client data always
// wins over source data. When the last bit is set the chunk becomes a
// normal chunk: location and bitmap are dropped. Plain reads of unset blocks
// fail with ErrPageNeverWritten; ReadChunkClone reads written blocks and
// reports the unset ones so that the caller can fetch them from the source.
// Clone chunks cannot be snapshotted (ErrStatusConflict).
//
// Location and bitmap live in the meta page (MetaVersion2); bitmap changes
// are persisted by Sync after the data they mark (see Store.Sync).

// Range is a byte range [Off, Off+Len) of chunk data.
type Range struct {
	Off, Len uint32
}

// CreateCloneChunk creates chunk id as a clone chunk of location with
// sequence number sn and corrected sn correctedSn, all blocks unwritten. sn
// must not be 0, size must equal ChunkSize, and location must be non-empty
// and at most MaxLocationLen bytes (else ErrInvalidArg). If the chunk exists
// and is a clone chunk with the same location, sn and corrected sn, it is
// success (a replay); any other existing chunk gives ErrChunkExist. The file
// is durable when CreateCloneChunk returns.
func (s *Store) CreateCloneChunk(id, sn, correctedSn uint64, size uint32, location string) error {
	return s.CreateCloneChunkAt(0, id, sn, correctedSn, size, location)
}

// CreateCloneChunkAt is CreateCloneChunk as the op at raft log index index
// (see WriteChunkAt).
func (s *Store) CreateCloneChunkAt(index, id, sn, correctedSn uint64, size uint32, location string) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("datastore: create clone chunk %d: "+format, append([]any{id}, args...)...)
	}
	switch {
	case sn == 0:
		return fail("sequence number 0: %w", ErrInvalidArg)
	case size != s.g.chunkSize:
		return fail("size %d, chunk size %d: %w", size, s.g.chunkSize, ErrInvalidArg)
	case location == "":
		return fail("empty location: %w", ErrInvalidArg)
	case len(location) > MaxLocationLen:
		return fail("location of %d bytes, limit %d: %w", len(location), MaxLocationLen, ErrInvalidArg)
	}
	for {
		c, err := s.lookup("create clone", id, lockShared)
		if err == nil {
			m, replayed := c.meta, c.replayed(index)
			c.mu.RUnlock()
			if replayed {
				return nil
			}
			if m.Location == location && m.Sn == sn && m.CorrectedSn == correctedSn {
				return nil
			}
			return fail("exists with sn %d, corrected sn %d, location %q: %w",
				m.Sn, m.CorrectedSn, m.Location, ErrChunkExist)
		}
		if !isNotExist(err) {
			return err
		}
		c, err = s.create("create clone", id, MetaPage{
			Version: MetaVersion, Sn: sn, CorrectedSn: correctedSn,
			Location: location, Bits: s.g.blocks, Bitmap: newBitmap(s.g.blocks), Seq: index,
		})
		if err != nil {
			return err
		}
		if c != nil {
			c.applied = index
			c.mu.Unlock()
			return nil
		}
		// Created concurrently: compare with it.
	}
}

// markWritten sets blocks [lo, hi) in clone chunk c's bitmap and turns c into
// a normal chunk when all are set, for the op at log index index. The caller
// holds c.mu exclusively.
func (s *Store) markWritten(c *chunkFile, lo, hi uint32, index uint64) {
	bm := bitmap(c.meta.Bitmap)
	bm.setRange(lo, hi)
	if bm.count() == int(s.g.blocks) {
		c.meta.Location, c.meta.Bits, c.meta.Bitmap = "", 0, nil
		s.stats.clones.Add(-1)
	}
	markMetaDirty(c, index)
}

// PasteChunk writes the blocks of data (at offset off of chunk id) that are
// still unwritten in clone chunk id, leaving blocks written by clients or
// earlier pastes untouched, and marks them written. Range rules as for
// WriteChunk. On a normal chunk it does nothing; a missing chunk gives
// ErrChunkNotExist. Replaying a paste is harmless: its blocks are set.
func (s *Store) PasteChunk(id uint64, data []byte, off uint32) error {
	return s.PasteChunkAt(0, id, data, off)
}

// PasteChunkAt is PasteChunk as the op at raft log index index (see
// WriteChunkAt).
func (s *Store) PasteChunkAt(index, id uint64, data []byte, off uint32) error {
	if err := s.checkRange("paste", id, off, len(data)); err != nil {
		return err
	}
	c, err := s.lookup("paste", id, lockExclusive)
	if err != nil {
		return err
	}
	defer c.mu.Unlock()
	if !c.admit(index) {
		return nil
	}
	if !c.isClone() {
		return nil
	}
	lo, hi := s.blockRange(off, len(data))
	bs := s.g.blockSize
	bm := bitmap(c.meta.Bitmap)
	var runs []Range
	_ = bm.runs(lo, hi, false, func(a, b uint32) error {
		runs = append(runs, Range{a, b - a})
		return nil
	})
	for _, r := range runs {
		a, b := r.Off, r.Off+r.Len
		if err := s.writeData(c, a, data[(a-lo)*bs:(b-lo)*bs]); err != nil {
			return fmt.Errorf("datastore: paste chunk %d: %w", id, err)
		}
		s.markWritten(c, a, b, index)
		if !c.isClone() {
			break // the last unwritten run was just pasted
		}
	}
	return nil
}

// ReadChunkClone reads len(buf) bytes at offset off of chunk id like
// ReadChunk, except that on a clone chunk unwritten blocks read as zeros and
// their byte ranges within [off, off+len(buf)) are returned, ascending and
// merged, as captured atomically with the data (under the chunk's lock): the
// caller fills exactly those ranges from the clone source. For a normal
// chunk unwritten is nil.
func (s *Store) ReadChunkClone(id uint64, buf []byte, off uint32) (unwritten []Range, err error) {
	if err := s.checkRange("read clone", id, off, len(buf)); err != nil {
		return nil, err
	}
	c, err := s.lookup("read clone", id, lockShared)
	if err != nil {
		return nil, err
	}
	defer c.mu.RUnlock()
	lo, hi := s.blockRange(off, len(buf))
	if !c.isClone() {
		if err := s.readData(c, lo, buf); err != nil {
			return nil, fmt.Errorf("datastore: read clone chunk %d: %w", id, err)
		}
		return nil, nil
	}
	bs := s.g.blockSize
	bm := bitmap(c.meta.Bitmap)
	part := func(a, b uint32) []byte { return buf[(a-lo)*bs : (b-lo)*bs] }
	err = bm.runs(lo, hi, true, func(a, b uint32) error { return s.readData(c, a, part(a, b)) })
	if err != nil {
		return nil, fmt.Errorf("datastore: read clone chunk %d: %w", id, err)
	}
	_ = bm.runs(lo, hi, false, func(a, b uint32) error {
		clear(part(a, b))
		unwritten = append(unwritten, Range{Off: a * bs, Len: (b - a) * bs})
		return nil
	})
	return unwritten, nil
}
