package datastore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

const (
	// chunkPrefix starts the name of every chunk file: "chunk_<id>".
	chunkPrefix = "chunk_"
	// tmpSuffix marks a chunk file under construction: "chunk_<id>.tmp".
	tmpSuffix = ".tmp"
)

// fileKind classifies a directory entry by name.
type fileKind int

const (
	kindOther fileKind = iota // not ours: ignored
	kindChunk                 // "chunk_<id>"
	kindTmp                   // "chunk_<id>.tmp": removed at Open
)

// chunkFileName returns the file name of chunk id.
func chunkFileName(id uint64) string {
	return chunkPrefix + strconv.FormatUint(id, 10)
}

// parseFileName classifies name. An id must be canonical decimal (no sign,
// no leading zeros except "0" itself), so that chunkFileName(id) gives back
// the same name; anything else is kindOther.
func parseFileName(name string) (uint64, fileKind) {
	rest, ok := strings.CutPrefix(name, chunkPrefix)
	if !ok {
		return 0, kindOther
	}
	kind := kindChunk
	if s, ok := strings.CutSuffix(rest, tmpSuffix); ok {
		rest, kind = s, kindTmp
	}
	id, err := strconv.ParseUint(rest, 10, 64)
	if err != nil || strconv.FormatUint(id, 10) != rest {
		return 0, kindOther
	}
	return id, kind
}

// chunkFile is one open chunk.
//
// Lifecycle: a chunkFile enters the Store's map either at Open (loaded) or,
// locked and without a file, when the first write creates it; it leaves the
// map when it is deleted, when its creation fails, or when the Store closes,
// and is then marked gone. An operation that found a chunkFile in the map
// locks it and must look again if it is gone.
type chunkFile struct {
	id   uint64
	path string

	// mu orders operations on this chunk: writes, meta updates, deletion and
	// Close hold it exclusively, reads and GetChunkInfo share it. It guards
	// meta and gone; f is set once, before the chunkFile is first unlocked.
	mu   sync.RWMutex
	f    *os.File
	meta MetaPage
	gone bool

	// dirty is set after every pwrite to f (after it returns, never before)
	// and cleared by Store.Sync just before it fsyncs f, so that a write is
	// either covered by a running fsync or leaves the chunk dirty.
	dirty atomic.Bool
}

// writeAt writes p at file offset off and marks the chunk dirty, even after
// a failed (possibly partial) write. The caller holds mu exclusively.
func (c *chunkFile) writeAt(p []byte, off int64) error {
	_, err := c.f.WriteAt(p, off)
	c.dirty.Store(true)
	return err
}

// writeMeta encodes m into a fresh page of pageSize bytes, writes it at
// offset 0 and, on success, makes it the chunk's meta. The caller holds mu
// exclusively. The write is not fsynced: a version-1 meta page changes only
// within its first sector, and a lost update is redone by log replay.
func (c *chunkFile) writeMeta(m MetaPage, pageSize uint32) error {
	page := make([]byte, pageSize)
	if err := m.MarshalTo(page); err != nil {
		return err
	}
	if err := c.writeAt(page, 0); err != nil {
		return err
	}
	c.meta = m
	return nil
}

// sync fsyncs the chunk if it is dirty; after a failed fsync the chunk
// stays dirty. If checkGone, a failure on a chunk that was deleted meanwhile
// (its descriptor closed under us) is no error: the data is gone and needs no
// sync. checkGone takes mu shared, so a caller holding mu passes false.
func (c *chunkFile) sync(checkGone bool) error {
	if !c.dirty.Swap(false) {
		return nil
	}
	if err := c.f.Sync(); err != nil {
		if checkGone {
			c.mu.RLock()
			gone := c.gone
			c.mu.RUnlock()
			if gone {
				return nil
			}
		}
		c.dirty.Store(true)
		return fmt.Errorf("datastore: sync chunk %d: %w", c.id, err)
	}
	return nil
}

// createChunkFile builds a chunk file of size bytes whose first bytes are
// page: it writes "<path>.tmp", sizes it (sparse), writes page, fsyncs, and
// renames it to path. The caller fsyncs the directory. On error nothing is
// left behind.
func createChunkFile(path string, size int64, page []byte) (_ *os.File, err error) {
	tmp := path + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if err = f.Truncate(size); err != nil {
		return nil, err
	}
	if _, err = f.WriteAt(page, 0); err != nil {
		return nil, err
	}
	if err = f.Sync(); err != nil {
		return nil, err
	}
	if err = os.Rename(tmp, path); err != nil {
		return nil, err
	}
	return f, nil
}

// openChunkFile opens an existing chunk file for reading and writing, checks
// that it is size bytes long and decodes its meta page, using page (PageSize
// bytes) as scratch space. Errors do not name the file; the caller adds it.
func openChunkFile(path string, size int64, page []byte) (_ *os.File, _ MetaPage, err error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, MetaPage{}, err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
		}
	}()
	fi, err := f.Stat()
	if err != nil {
		return nil, MetaPage{}, err
	}
	if !fi.Mode().IsRegular() {
		return nil, MetaPage{}, fmt.Errorf("not a regular file (%v): %w", fi.Mode().Type(), ErrFileFormat)
	}
	if fi.Size() != size {
		return nil, MetaPage{}, fmt.Errorf("size %d bytes, want %d (meta page + chunk size): %w",
			fi.Size(), size, ErrFileFormat)
	}
	if _, err := f.ReadAt(page, 0); err != nil {
		return nil, MetaPage{}, fmt.Errorf("read meta page: %w", err)
	}
	var m MetaPage
	if err := m.Unmarshal(page); err != nil {
		return nil, MetaPage{}, err
	}
	return f, m, nil
}

// removeIfExists removes path; a missing file is not an error.
func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
