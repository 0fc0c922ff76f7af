package datastore

import "fmt"

// Chunk snapshots (copy-on-write), after Curve's CSChunkFile and
// CSSnapshot (research §2.3).
//
// A volume snapshot bumps the volume's sn at the MDS; the first write with
// the new sn to a chunk whose effective sn (max of sn and corrected sn) is
// older creates the file "chunk_<id>_snap_<old sn>" (see WriteChunk for the
// exact rules) and from then on, before a block of the chunk is overwritten
// for the first time, copies its old content into the snapshot at the same
// data offset. The snapshot file has the chunk file's layout: a meta page
// (SnapMetaPage: version, sn, bitmap of copied blocks, crc), the data, and a
// crc table. Reading the snapshot (ReadChunkSnapshot) takes copied blocks
// from the snapshot file and the rest from the live chunk. The snapshot-clone
// server removes the snapshot with DeleteChunkSnapshotOrCorrectSn once it
// has read it.
//
// Durability: a snapshot file is durable (meta page, directory entry) when
// created, and every copy is fsynced (data, crc table, then meta page with
// the new bitmap, then fsync) before the chunk block it preserves is
// overwritten, as Curve's snapshot files are always O_DSYNC. So after a
// crash a block whose new data reached the chunk is in the snapshot, and a
// replayed write finds it in the bitmap instead of copying the new data.

// createSnapshot creates the empty snapshot of chunk c at its current sn.
// The caller holds c.mu exclusively and has checked that c has no snapshot.
func (s *Store) createSnapshot(c *chunkFile) error {
	m := SnapMetaPage{Version: SnapMetaVersion, Sn: c.meta.Sn, Bits: s.g.blocks, Bitmap: newBitmap(s.g.blocks)}
	path := joinDir(s.opts.Dir, snapFileName(c.id, m.Sn))
	f, err := s.newFile(path, func(page []byte) error { return m.MarshalTo(page) })
	if err != nil {
		return fmt.Errorf("create snapshot sn %d: %w", m.Sn, err)
	}
	c.snap = &snapFile{path: path, f: f, meta: m}
	s.stats.snaps.Add(1)
	return nil
}

// cow copies the blocks in [lo, hi) not yet in c's snapshot from the chunk
// into the snapshot, then persists the snapshot's bitmap and fsyncs it. The
// in-memory bitmap changes only when all of that succeeded. The caller holds
// c.mu exclusively; c has a snapshot.
func (s *Store) cow(c *chunkFile, lo, hi uint32) error {
	sp := c.snap
	bm := bitmap(append([]byte(nil), sp.meta.Bitmap...))
	n, err := s.copyOut(c, bm, lo, hi, func(a, b uint32, buf []byte) error {
		if err := s.g.writeBlocks(sp.f, &c.snapDirty, a, buf); err != nil {
			return fmt.Errorf("write snapshot sn %d: %w", sp.meta.Sn, err)
		}
		bm.setRange(a, b)
		return nil
	})
	if err != nil {
		return fmt.Errorf("copy-on-write: %w", err)
	}
	if n == 0 {
		return nil
	}
	m := sp.meta
	m.Bitmap = bm
	page := make([]byte, s.g.pageSize)
	if err := m.MarshalTo(page); err != nil {
		return err
	}
	if err := writeAt(sp.f, &c.snapDirty, page, 0); err != nil {
		return fmt.Errorf("copy-on-write: write snapshot sn %d meta page: %w", sp.meta.Sn, err)
	}
	c.snapDirty.Store(false)
	if err := sp.f.Sync(); err != nil {
		c.snapDirty.Store(true)
		return fmt.Errorf("copy-on-write: sync snapshot sn %d: %w", sp.meta.Sn, err)
	}
	sp.meta = m
	s.stats.cowBlocks.Add(uint64(n))
	return nil
}

// copyOut is the one copy path of copy-on-write snapshots and of read-view
// pre-images (view.go): it reads from chunk c, verified, every run of
// blocks in [lo, hi) that saved does not mark, hands each run to put, and
// returns the number of blocks copied. The caller holds c.mu exclusively.
func (s *Store) copyOut(c *chunkFile, saved bitmap, lo, hi uint32, put func(a, b uint32, buf []byte) error) (int, error) {
	return s.copyOutFrom(c, saved, lo, hi, nil, put)
}

// copyOutFrom is copyOut taking a run's content from have when it returns
// it (non-nil) instead of reading the chunk.
func (s *Store) copyOutFrom(c *chunkFile, saved bitmap, lo, hi uint32, have func(a, b uint32) []byte, put func(a, b uint32, buf []byte) error) (int, error) {
	bs := s.g.blockSize
	n := 0
	err := saved.runs(lo, hi, false, func(a, b uint32) error {
		var buf []byte
		if have != nil {
			buf = have(a, b)
		}
		if buf == nil {
			buf = make([]byte, (b-a)*bs)
			if err := s.g.readBlocks(c.f, chunkName(c.id), a, buf, &s.stats.crcFailures); err != nil {
				return fmt.Errorf("read: %w", err)
			}
		}
		if err := put(a, b, buf); err != nil {
			return err
		}
		n += int(b - a)
		return nil
	})
	return n, err
}

// removeSnapshot disposes of c's snapshot file and fsyncs the directory. The
// caller holds c.syncMu and c.mu exclusively.
func (s *Store) removeSnapshot(c *chunkFile) error {
	sp := c.snap
	if err := discardFile(s.fs, s.pool, sp.path); err != nil {
		return fmt.Errorf("delete snapshot sn %d: %w", sp.meta.Sn, err)
	}
	_ = sp.f.Close() // the file is gone
	c.snap = nil
	c.snapDirty.Store(false)
	s.stats.snaps.Add(-1)
	if err := s.fs.SyncDir(s.opts.Dir); err != nil {
		return fmt.Errorf("delete snapshot sn %d: sync dir %s: %w", sp.meta.Sn, s.opts.Dir, err)
	}
	return nil
}

// ReadChunkSnapshot reads len(buf) bytes at offset off of chunk id as of
// sequence number sn (Curve's ReadSpecifiedChunk): if sn is the chunk's sn
// it reads the live chunk (as ReadChunk); else if the chunk has a snapshot
// with sn, blocks copied into the snapshot come from it and the others from
// the live chunk; else it fails with ErrChunkNotExist, as it does for a
// missing chunk. Range rules and checksums as for ReadChunk.
func (s *Store) ReadChunkSnapshot(id, sn uint64, buf []byte, off uint32) error {
	if err := s.checkRange("read snapshot of", id, off, len(buf)); err != nil {
		return err
	}
	c, err := s.lookup("read snapshot of", id, lockShared)
	if err != nil {
		return err
	}
	defer c.mu.RUnlock()
	if sn == c.meta.Sn {
		if err := s.readLive(c, buf, off); err != nil {
			return fmt.Errorf("datastore: read snapshot sn %d of chunk %d: %w", sn, id, err)
		}
		return nil
	}
	if c.snap == nil || c.snap.meta.Sn != sn {
		have := uint64(0)
		if c.snap != nil {
			have = c.snap.meta.Sn
		}
		return fmt.Errorf("datastore: read snapshot sn %d of chunk %d: chunk sn %d, snapshot sn %d: %w",
			sn, id, c.meta.Sn, have, ErrChunkNotExist)
	}
	sp := c.snap
	lo, hi := s.blockRange(off, len(buf))
	bs := s.g.blockSize
	bm := bitmap(sp.meta.Bitmap)
	part := func(a, b uint32) []byte { return buf[(a-lo)*bs : (b-lo)*bs] }
	name := fmt.Sprintf("chunk %d snapshot sn %d", id, sn)
	err = bm.runs(lo, hi, true, func(a, b uint32) error {
		return s.g.readBlocks(sp.f, name, a, part(a, b), &s.stats.crcFailures)
	})
	if err == nil {
		err = bm.runs(lo, hi, false, func(a, b uint32) error { return s.readData(c, a, part(a, b)) })
	}
	if err != nil {
		return fmt.Errorf("datastore: read snapshot sn %d of chunk %d: %w", sn, id, err)
	}
	return nil
}

// DeleteChunkSnapshotOrCorrectSn ends a volume snapshot for chunk id
// (Curve's DeleteSnapshotOrCorrectSn), in this order:
//
//  1. a missing chunk is success;
//  2. a clone chunk fails with ErrStatusConflict;
//  3. correctedSn smaller than the chunk's sn or corrected sn fails with
//     ErrBackward;
//  4. a snapshot older than the chunk (snap.sn < chunk.sn) is deleted, its
//     file recycled and the directory fsynced; a snapshot with snap.sn >=
//     chunk.sn was taken after the volume snapshot this request ends, and
//     stays;
//  5. correctedSn larger than the chunk's effective sn becomes its corrected
//     sn, so later writes with sn up to correctedSn take no snapshot
//     (persisted by Sync).
//
// Replaying it is harmless: the snapshot is gone and the corrected sn set.
func (s *Store) DeleteChunkSnapshotOrCorrectSn(id, correctedSn uint64) error {
	return s.DeleteChunkSnapshotOrCorrectSnAt(0, id, correctedSn)
}

// DeleteChunkSnapshotOrCorrectSnAt is DeleteChunkSnapshotOrCorrectSn as the
// op at raft log index index (see WriteChunkAt). Before it removes a
// snapshot it makes the chunk's meta page, stamped with index, durable
// (after the chunk's data): a crash must not leave the snapshot gone while
// the page on disk predates its removal, or the replay of an earlier write
// that the snapshot made fail would succeed.
func (s *Store) DeleteChunkSnapshotOrCorrectSnAt(index, id, correctedSn uint64) error {
	if err := s.enter("delete snapshot or correct sn"); err != nil {
		return err
	}
	defer s.inflight.Done()
	c, err := s.lookup("delete snapshot or correct sn of", id, lockRemove)
	if isNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unlock(c, lockRemove)
	if !c.admit(index) {
		return nil
	}
	m := &c.meta
	switch {
	case c.isClone():
		return fmt.Errorf("datastore: delete snapshot or correct sn of chunk %d: clone chunk: %w", id, ErrStatusConflict)
	case correctedSn < m.Sn || correctedSn < m.CorrectedSn:
		return fmt.Errorf("datastore: delete snapshot or correct sn of chunk %d: corrected sn %d, chunk sn %d, corrected sn %d: %w",
			id, correctedSn, m.Sn, m.CorrectedSn, ErrBackward)
	}
	if correctedSn > max(m.Sn, m.CorrectedSn) {
		m.CorrectedSn = correctedSn
		markMetaDirty(c, index)
	}
	if c.snap != nil && m.Sn > c.snap.meta.Sn {
		markMetaDirty(c, index)
		if err := s.syncChunk(c, true); err != nil {
			return fmt.Errorf("datastore: delete snapshot or correct sn of chunk %d: %w", id, err)
		}
		if err := s.removeSnapshot(c); err != nil {
			return fmt.Errorf("datastore: delete snapshot or correct sn of chunk %d: %w", id, err)
		}
	}
	return nil
}
