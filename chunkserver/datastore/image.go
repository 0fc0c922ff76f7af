package datastore

import (
	"fmt"
	"io"
)

// Image is a copy of one chunk's files as of one moment: what a follower
// or an export needs of the chunk when the live files, read piece by piece
// while writes go on, would mix moments (a block from one, its checksum
// from another; a snapshot older than the chunk blocks it preserves).
type Image struct {
	// Name and Data are the chunk file, its meta page the chunk's current
	// meta stamped with Index.
	Name string
	Data []byte
	// SnapName and SnapData are the chunk's snapshot file, if it has one
	// (else empty and nil).
	SnapName string
	SnapData []byte
	// Index is the log index the image reflects: every op on the chunk up
	// to it (its meta page's Index). A replay skips the chunk's ops before
	// it and applies the op at it again (see Replay in the package doc).
	Index uint64
}

// FileSize is the length of every chunk and snapshot file of the store.
func (s *Store) FileSize() int64 { return s.g.fileSize }

// ChunkImage returns an Image of chunk id, read under the chunk's lock so
// that no write, paste, snapshot change or delete of the chunk interleaves
// (reads of other chunks, and of this one, go on). A missing chunk gives an
// error wrapping ErrChunkNotExist. The image's meta page is the chunk's
// current meta (which Sync has perhaps not written yet) stamped with the
// index of the last op applied to the chunk. Each call allocates the files'
// size: stream chunks one at a time.
func (s *Store) ChunkImage(id uint64) (Image, error) {
	c, err := s.lookup("image", id, lockShared)
	if err != nil {
		return Image{}, err
	}
	defer c.mu.RUnlock()
	fail := func(err error) (Image, error) {
		return Image{}, fmt.Errorf("datastore: image of chunk %d: %w", id, err)
	}
	m := c.meta
	m.Version = MetaVersion
	m.Index = max(m.Index, c.applied)
	img := Image{Name: chunkFileName(id), Data: make([]byte, s.g.fileSize), Index: m.Index}
	if err := readFull(c.f, img.Data); err != nil {
		return fail(err)
	}
	if err := m.MarshalTo(img.Data[:s.g.pageSize]); err != nil {
		return fail(err)
	}
	if sp := c.snap; sp != nil {
		img.SnapName = snapFileName(id, sp.meta.Sn)
		img.SnapData = make([]byte, s.g.fileSize)
		if err := readFull(sp.f, img.SnapData); err != nil {
			return fail(fmt.Errorf("snapshot sn %d: %w", sp.meta.Sn, err))
		}
	}
	return img, nil
}

// readFull reads len(buf) bytes of f from offset 0; a file that is shorter
// (a sparse file never is) reads as zeros past its end.
func readFull(f File, buf []byte) error {
	n, err := f.ReadAt(buf, 0)
	if err == io.EOF {
		clear(buf[n:])
		return nil
	}
	return err
}
