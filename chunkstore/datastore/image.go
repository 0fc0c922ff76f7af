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
	// meta stamped with Seq.
	Name string
	Data []byte
	// SnapName and SnapData are the chunk's snapshot file, if it has one
	// (else empty and nil).
	SnapName string
	SnapData []byte
	// Seq is the op sequence number the image reflects: every op on the
	// chunk up to it (its meta page's Seq). A replay skips the chunk's ops
	// before it and applies the op at it again (see Replay in the package
	// doc).
	Seq uint64

	// Meta is the chunk's meta as in the image's meta page; ChunkData the
	// chunk's data (a slice of Data), every block verified against its
	// checksum. Unwritten blocks of a clone chunk read as zeros (Meta.Bitmap
	// says which).
	Meta      MetaPage
	ChunkData []byte
	// SnapMeta and SnapChunkData are the snapshot's, if it has one: the
	// blocks SnapMeta.Bitmap marks are the snapshot's own (verified); the
	// others read from the live chunk (ReadChunkSnapshot).
	SnapMeta      *SnapMetaPage
	SnapChunkData []byte
	// Views are the chunk's pre-image files (view.go), of the same moment.
	Views []FileImage
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
func (s *Store) ChunkImage(id uint64) (Image, error) { return s.ChunkImageInto(id, nil) }

// ImageBuffers is room for the files of one Image, reused from image to
// image by ChunkImageInto.
type ImageBuffers struct {
	Data, Snap []byte
}

// take returns b's buffer *p if it holds size bytes, else a new one, which
// it keeps in *p for the next image.
func take(p *[]byte, size int64) []byte {
	if int64(cap(*p)) < size {
		*p = make([]byte, size)
	}
	return (*p)[:size]
}

// ChunkImageInto is ChunkImage reading the files into buf's buffers
// (allocated there when missing or too small; nil buf: new ones): the
// image aliases them until the next ChunkImageInto with buf. A reader
// that goes through chunk after chunk so does not allocate (and fault in)
// the files' size for each.
func (s *Store) ChunkImageInto(id uint64, buf *ImageBuffers) (Image, error) {
	if buf == nil {
		buf = &ImageBuffers{}
	}
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
	m.Seq = max(m.Seq, c.applied)
	img := Image{Name: chunkFileName(id), Data: take(&buf.Data, s.g.fileSize), Seq: m.Seq, Meta: m}
	if err := readFull(c.f, img.Data); err != nil {
		return fail(err)
	}
	if err := m.MarshalTo(img.Data[:s.g.pageSize]); err != nil {
		return fail(err)
	}
	img.Meta.Bitmap = append([]byte(nil), m.Bitmap...)
	img.ChunkData = img.Data[s.g.dataOff : s.g.dataOff+int64(s.g.chunkSize)]
	if err := s.verifyImage(img.Data, fmt.Sprintf("chunk %d", id), nil); err != nil {
		return fail(err)
	}
	if sp := c.snap; sp != nil {
		img.SnapName = snapFileName(id, sp.meta.Sn)
		img.SnapData = take(&buf.Snap, s.g.fileSize)
		if err := readFull(sp.f, img.SnapData); err != nil {
			return fail(fmt.Errorf("snapshot sn %d: %w", sp.meta.Sn, err))
		}
		sm := sp.meta
		sm.Bitmap = append([]byte(nil), sm.Bitmap...)
		img.SnapMeta = &sm
		img.SnapChunkData = img.SnapData[s.g.dataOff : s.g.dataOff+int64(s.g.chunkSize)]
		if err := s.verifyImage(img.SnapData, fmt.Sprintf("chunk %d snapshot sn %d", id, sm.Sn), bitmap(sm.Bitmap)); err != nil {
			return fail(err)
		}
	}
	for _, vf := range c.views {
		fi, err := s.imageViewFile(vf)
		if err != nil {
			return fail(err)
		}
		img.Views = append(img.Views, fi)
	}
	return img, nil
}

// verifyImage checks the blocks of file image f against its crc table:
// every block, or those marked in only if it is not nil.
func (s *Store) verifyImage(f []byte, what string, only bitmap) error {
	for i := range s.g.blocks {
		if only != nil && !only.test(i) {
			continue
		}
		off := s.g.dataOff + int64(i)*int64(s.g.blockSize)
		if err := s.g.verifyBlock(what, i, f[off:off+int64(s.g.blockSize)], f[s.g.crcTableOff(i):], &s.stats.crcFailures); err != nil {
			return err
		}
	}
	return nil
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

// BlockMarked reports whether block i is marked in bm, a clone bitmap
// (MetaPage.Bitmap: written) or a snapshot bitmap (SnapMetaPage.Bitmap:
// copied). A block past the bitmap is not marked.
func BlockMarked(bm []byte, i uint32) bool {
	return int(i/8) < len(bm) && bitmap(bm).test(i)
}
