package datastore

import (
	"errors"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
)

// Defaults for zero Options fields; they are Curve's shipped values.
const (
	// DefaultChunkSize is the size of a chunk's data: 16 MiB.
	DefaultChunkSize = 16 << 20
	// DefaultPageSize is the size of the meta page in front of a chunk's
	// data: 4 KiB.
	DefaultPageSize = 4 << 10
	// DefaultBlockSize is the I/O alignment unit: 4 KiB.
	DefaultBlockSize = 4 << 10
)

// maxSyncWorkers bounds the number of fsyncs Sync and Close run at once.
const maxSyncWorkers = 8

// Options configure a Store. Zero-valued sizes take the defaults. The sizes
// are part of the on-disk format: a directory must always be opened with the
// same ChunkSize and PageSize (Open refuses files of the wrong length).
type Options struct {
	// Dir is the directory holding the chunk files; Open creates it if
	// needed. Required.
	Dir string
	// ChunkSize is the number of data bytes per chunk, a multiple of
	// BlockSize. Default DefaultChunkSize.
	ChunkSize uint32
	// PageSize is the size of the meta page that precedes the data in every
	// chunk file, a multiple of MinPageSize. Default DefaultPageSize.
	PageSize uint32
	// BlockSize is the alignment of every I/O offset and length, a power of
	// two of at least 512 and at most ChunkSize. Default DefaultBlockSize.
	BlockSize uint32
}

// withDefaults fills in zero sizes and validates o.
func (o Options) withDefaults() (Options, error) {
	if o.ChunkSize == 0 {
		o.ChunkSize = DefaultChunkSize
	}
	if o.PageSize == 0 {
		o.PageSize = DefaultPageSize
	}
	if o.BlockSize == 0 {
		o.BlockSize = DefaultBlockSize
	}
	switch {
	case o.Dir == "":
		return o, fmt.Errorf("datastore: options: empty Dir: %w", ErrInvalidArg)
	case o.BlockSize < 512 || bits.OnesCount32(o.BlockSize) != 1:
		return o, fmt.Errorf("datastore: options: BlockSize %d is not a power of two >= 512: %w", o.BlockSize, ErrInvalidArg)
	case o.ChunkSize < o.BlockSize || o.ChunkSize%o.BlockSize != 0:
		return o, fmt.Errorf("datastore: options: ChunkSize %d is not a multiple of BlockSize %d: %w", o.ChunkSize, o.BlockSize, ErrInvalidArg)
	case o.PageSize%MinPageSize != 0:
		return o, fmt.Errorf("datastore: options: PageSize %d is not a multiple of %d: %w", o.PageSize, MinPageSize, ErrInvalidArg)
	}
	return o, nil
}

// ChunkInfo describes one chunk, as returned by Store.GetChunkInfo.
type ChunkInfo struct {
	// ID is the chunk id.
	ID uint64
	// Sn is the chunk's sequence number: the largest sn of any write applied
	// to it, starting with the sn of the write that created it.
	Sn uint64
	// CorrectedSn is the chunk's corrected sequence number (see
	// MetaPage.CorrectedSn); 0 if never set.
	CorrectedSn uint64
}

// Store is the set of chunks in one directory. Create it with Open; all
// methods are safe for concurrent use (see the package documentation for
// what runs in parallel). A Store keeps one open file descriptor per chunk,
// so RLIMIT_NOFILE must allow for all chunks of all stores of a process.
type Store struct {
	opts     Options
	dataOff  int64    // file offset of chunk data offset 0 (= PageSize)
	fileSize int64    // length of every chunk file (= PageSize + ChunkSize)
	dir      *os.File // Dir, kept open to fsync after creations and removals

	// mu guards chunks and closed. It is held only for map access, never
	// across I/O. Lock order: chunkFile.mu before mu.
	mu     sync.RWMutex
	chunks map[uint64]*chunkFile
	closed bool

	// inflight counts operations that use dir or fsync chunk files without
	// holding their locks (create, delete, Sync). Close waits for them
	// before closing any file. Add is only called under mu with !closed.
	inflight sync.WaitGroup
}

// Open opens the store in opts.Dir, creating the directory if needed. It
// removes leftover "chunk_<id>.tmp" files of interrupted creations, ignores
// files with names it does not know, and loads the meta page of every
// "chunk_<id>" file. A chunk file of the wrong length, or whose meta page
// fails to decode, makes Open fail with an error that names the file and
// wraps ErrFileFormat, ErrCRC or ErrIncompatible; nothing is repaired.
func Open(opts Options) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("datastore: open: %w", err)
	}
	dir, err := os.Open(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("datastore: open: %w", err)
	}
	s := &Store{
		opts:     opts,
		dataOff:  int64(opts.PageSize),
		fileSize: int64(opts.PageSize) + int64(opts.ChunkSize),
		dir:      dir,
		chunks:   make(map[uint64]*chunkFile),
	}
	if err := s.load(); err != nil {
		for _, c := range s.chunks {
			_ = c.f.Close()
		}
		_ = dir.Close()
		return nil, err
	}
	return s, nil
}

// load fills s.chunks from the directory and removes leftover temp files.
func (s *Store) load() error {
	entries, err := s.dir.ReadDir(-1)
	if err != nil {
		return fmt.Errorf("datastore: open: list %s: %w", s.opts.Dir, err)
	}
	page := make([]byte, s.opts.PageSize)
	removed := false
	for _, e := range entries {
		id, kind := parseFileName(e.Name())
		path := filepath.Join(s.opts.Dir, e.Name())
		switch kind {
		case kindTmp:
			if !e.Type().IsRegular() {
				continue
			}
			if err := removeIfExists(path); err != nil {
				return fmt.Errorf("datastore: open: remove leftover temp file: %w", err)
			}
			removed = true
		case kindChunk:
			f, m, err := openChunkFile(path, s.fileSize, page)
			if err != nil {
				return fmt.Errorf("datastore: open: chunk file %s: %w", path, err)
			}
			s.chunks[id] = &chunkFile{id: id, path: path, f: f, meta: m}
		}
	}
	if removed {
		if err := s.dir.Sync(); err != nil {
			return fmt.Errorf("datastore: open: sync dir %s: %w", s.opts.Dir, err)
		}
	}
	return nil
}

// Options returns the options the store runs with, defaults filled in.
func (s *Store) Options() Options { return s.opts }

// checkRange validates an I/O of n bytes at chunk offset off.
func (s *Store) checkRange(op string, id uint64, off uint32, n int) error {
	mask := s.opts.BlockSize - 1
	switch {
	case n == 0:
		return fmt.Errorf("datastore: %s chunk %d: empty range at offset %d: %w", op, id, off, ErrInvalidArg)
	case off&mask != 0:
		return fmt.Errorf("datastore: %s chunk %d: offset %d is not a multiple of block size %d: %w",
			op, id, off, s.opts.BlockSize, ErrInvalidArg)
	case uint64(n)&uint64(mask) != 0:
		return fmt.Errorf("datastore: %s chunk %d: length %d is not a multiple of block size %d: %w",
			op, id, n, s.opts.BlockSize, ErrInvalidArg)
	case uint64(off)+uint64(n) > uint64(s.opts.ChunkSize):
		return fmt.Errorf("datastore: %s chunk %d: range [%d, %d) exceeds chunk size %d: %w",
			op, id, off, uint64(off)+uint64(n), s.opts.ChunkSize, ErrInvalidArg)
	}
	return nil
}

// enter registers an operation in s.inflight, or fails if s is closed.
func (s *Store) enter(op string) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return fmt.Errorf("datastore: %s: %w", op, ErrClosed)
	}
	s.inflight.Add(1)
	return nil
}

// lookup returns the chunk id, locked exclusively or shared, or an error
// wrapping ErrChunkNotExist or ErrClosed.
func (s *Store) lookup(op string, id uint64, exclusive bool) (*chunkFile, error) {
	for {
		s.mu.RLock()
		closed, c := s.closed, s.chunks[id]
		s.mu.RUnlock()
		if closed {
			return nil, fmt.Errorf("datastore: %s chunk %d: %w", op, id, ErrClosed)
		}
		if c == nil {
			return nil, fmt.Errorf("datastore: %s chunk %d: %w", op, id, ErrChunkNotExist)
		}
		if exclusive {
			c.mu.Lock()
		} else {
			c.mu.RLock()
		}
		if !c.gone {
			return c, nil
		}
		if exclusive {
			c.mu.Unlock()
		} else {
			c.mu.RUnlock()
		}
	}
}

// lookupOrCreate returns chunk id locked exclusively, creating it with meta
// sn sn if it does not exist.
func (s *Store) lookupOrCreate(id, sn uint64) (*chunkFile, error) {
	for {
		c, err := s.lookup("write", id, true)
		if !errors.Is(err, ErrChunkNotExist) {
			return c, err
		}
		c, err = s.create(id, sn)
		if c != nil || err != nil {
			return c, err
		}
		// Another writer created the chunk first: look again.
	}
}

// create creates chunk id with meta sn sn and returns it locked
// exclusively. It returns (nil, nil) if the chunk appeared meanwhile. While
// the file is being built the chunk is in the map, locked, so concurrent
// operations on it wait and operations on other chunks proceed.
func (s *Store) create(id, sn uint64) (_ *chunkFile, err error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("datastore: write chunk %d: %w", id, ErrClosed)
	}
	if _, ok := s.chunks[id]; ok {
		s.mu.Unlock()
		return nil, nil
	}
	c := &chunkFile{id: id, path: filepath.Join(s.opts.Dir, chunkFileName(id))}
	c.mu.Lock() // c is not shared yet, so this cannot invert the lock order
	s.chunks[id] = c
	s.inflight.Add(1)
	s.mu.Unlock()
	defer s.inflight.Done()

	defer func() {
		if err != nil {
			c.gone = true
			s.forget(c)
			c.mu.Unlock()
		}
	}()
	m := MetaPage{Version: MetaVersion, Sn: sn}
	page := make([]byte, s.opts.PageSize)
	if err := m.MarshalTo(page); err != nil {
		return nil, fmt.Errorf("datastore: create chunk %d: %w", id, err)
	}
	f, err := createChunkFile(c.path, s.fileSize, page)
	if err != nil {
		return nil, fmt.Errorf("datastore: create chunk %d: %w", id, err)
	}
	if err := s.dir.Sync(); err != nil {
		_ = f.Close()
		_ = os.Remove(c.path)
		return nil, fmt.Errorf("datastore: create chunk %d: sync dir %s: %w", id, s.opts.Dir, err)
	}
	c.f, c.meta = f, m
	return c, nil
}

// forget removes c from the map if it is still there.
func (s *Store) forget(c *chunkFile) {
	s.mu.Lock()
	if s.chunks[c.id] == c {
		delete(s.chunks, c.id)
	}
	s.mu.Unlock()
}

// WriteChunk writes data at offset off of chunk id on behalf of a request
// with sequence number sn.
//
// len(data) must be a non-zero multiple of BlockSize, off a multiple of
// BlockSize, off+len(data) at most ChunkSize, and sn not 0 (as in Curve);
// otherwise the error wraps ErrInvalidArg. If the chunk does not exist it is created with
// sn as its sn. If sn is smaller than the chunk's sn or corrected sn the
// error wraps ErrBackward. If sn is larger than the chunk's sn, the new sn is
// written to the meta page first (this version takes no copy-on-write
// snapshot of the old data; that comes with chunk snapshots). A failed
// request changes nothing, except that an I/O error may leave a partial
// write.
//
// The data is written with a plain pwrite, not fsynced, and the chunk is
// marked dirty for Sync. Writing the same data twice leaves the same bytes,
// so replaying a log entry is harmless.
func (s *Store) WriteChunk(id, sn uint64, data []byte, off uint32) error {
	if err := s.checkRange("write", id, off, len(data)); err != nil {
		return err
	}
	if sn == 0 {
		return fmt.Errorf("datastore: write chunk %d: sequence number 0: %w", id, ErrInvalidArg)
	}
	c, err := s.lookupOrCreate(id, sn)
	if err != nil {
		return err
	}
	defer c.mu.Unlock()
	if sn < c.meta.Sn || sn < c.meta.CorrectedSn {
		return fmt.Errorf("datastore: write chunk %d: request sn %d, chunk sn %d, corrected sn %d: %w",
			id, sn, c.meta.Sn, c.meta.CorrectedSn, ErrBackward)
	}
	if sn > c.meta.Sn {
		m := c.meta
		m.Sn = sn
		if err := c.writeMeta(m, s.opts.PageSize); err != nil {
			return fmt.Errorf("datastore: write chunk %d: update sn to %d: %w", id, sn, err)
		}
	}
	if err := c.writeAt(data, s.dataOff+int64(off)); err != nil {
		return fmt.Errorf("datastore: write chunk %d: %w", id, err)
	}
	return nil
}

// ReadChunk reads len(buf) bytes at offset off of chunk id into buf. The
// range rules of WriteChunk apply (error wrapping ErrInvalidArg); a missing
// chunk gives an error wrapping ErrChunkNotExist. Ranges never written read
// as zeros. Reads of one chunk run in parallel with each other but not with
// writes of that chunk, so a read never sees half of a write.
func (s *Store) ReadChunk(id uint64, buf []byte, off uint32) error {
	if err := s.checkRange("read", id, off, len(buf)); err != nil {
		return err
	}
	c, err := s.lookup("read", id, false)
	if err != nil {
		return err
	}
	defer c.mu.RUnlock()
	if _, err := c.f.ReadAt(buf, s.dataOff+int64(off)); err != nil {
		return fmt.Errorf("datastore: read chunk %d: %w", id, err)
	}
	return nil
}

// DeleteChunk removes chunk id and its file, and fsyncs the directory. A
// missing chunk is success, so replaying a delete is harmless. If sn is not
// 0 and is smaller than the chunk's sn (the chunk was written after the
// volume this request knows of), the error wraps ErrBackward and the chunk
// stays; sn 0 skips that check. The corrected sn is not checked (as in
// Curve).
func (s *Store) DeleteChunk(id, sn uint64) error {
	if err := s.enter("delete chunk"); err != nil {
		return err
	}
	defer s.inflight.Done()
	c, err := s.lookup("delete", id, true)
	if errors.Is(err, ErrChunkNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer c.mu.Unlock()
	if sn != 0 && sn < c.meta.Sn {
		return fmt.Errorf("datastore: delete chunk %d: request sn %d, chunk sn %d: %w",
			id, sn, c.meta.Sn, ErrBackward)
	}
	if err := removeIfExists(c.path); err != nil {
		return fmt.Errorf("datastore: delete chunk %d: %w", id, err)
	}
	c.gone = true
	s.forget(c)
	c.dirty.Store(false)
	_ = c.f.Close() // the file is gone; nothing of it is worth an error
	if err := s.dir.Sync(); err != nil {
		return fmt.Errorf("datastore: delete chunk %d: sync dir %s: %w", id, s.opts.Dir, err)
	}
	return nil
}

// GetChunkInfo returns the meta data of chunk id, or an error wrapping
// ErrChunkNotExist.
func (s *Store) GetChunkInfo(id uint64) (ChunkInfo, error) {
	c, err := s.lookup("get info of", id, false)
	if err != nil {
		return ChunkInfo{}, err
	}
	defer c.mu.RUnlock()
	return ChunkInfo{ID: id, Sn: c.meta.Sn, CorrectedSn: c.meta.CorrectedSn}, nil
}

// ListChunks returns the ids of all chunks in ascending order (none after
// Close). A chunk whose first write is in progress may be included.
func (s *Store) ListChunks() []uint64 {
	s.mu.RLock()
	ids := make([]uint64, 0, len(s.chunks))
	for id := range s.chunks {
		ids = append(ids, id)
	}
	s.mu.RUnlock()
	slices.Sort(ids)
	return ids
}

// Sync fsyncs every dirty chunk file, several at a time. Every write that
// returned before Sync was called is durable when Sync returns nil; a write
// that runs concurrently with Sync is either made durable or leaves its
// chunk dirty for the next Sync. Call it before truncating the Raft log
// entries whose writes it covers.
//
// On error (which joins the errors of all chunks that failed) the failed
// chunks stay dirty, but the caller must not assume a later Sync recovers:
// after a failed fsync the kernel may have dropped the data. Treat it as an
// I/O failure of the store.
func (s *Store) Sync() error {
	if err := s.enter("sync"); err != nil {
		return err
	}
	defer s.inflight.Done()
	s.mu.RLock()
	var dirty []*chunkFile
	for _, c := range s.chunks {
		if c.dirty.Load() {
			dirty = append(dirty, c)
		}
	}
	s.mu.RUnlock()
	return syncAll(dirty, true)
}

// syncAll runs c.sync(checkGone) for every chunk in cs, at most
// maxSyncWorkers at a time, and joins the errors.
func syncAll(cs []*chunkFile, checkGone bool) error {
	switch len(cs) {
	case 0:
		return nil
	case 1:
		return cs[0].sync(checkGone)
	}
	errs := make([]error, len(cs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(len(cs), maxSyncWorkers) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(cs) {
					return
				}
				errs[i] = cs[i].sync(checkGone)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Close waits for running operations, fsyncs the dirty chunks, and closes
// every file. Operations started after Close fail with an error wrapping
// ErrClosed; so does a second Close.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("datastore: close: %w", ErrClosed)
	}
	s.closed = true
	chunks := s.chunks
	s.chunks = nil
	s.mu.Unlock()
	s.inflight.Wait()

	// Lock every chunk: running reads and writes finish first, later ones
	// see the chunk gone and then the store closed. No one else holds two
	// chunk locks, so the order does not matter.
	live := make([]*chunkFile, 0, len(chunks))
	for _, c := range chunks {
		c.mu.Lock()
		if c.gone {
			c.mu.Unlock()
			continue
		}
		live = append(live, c)
	}
	errs := []error{syncAll(live, false)}
	for _, c := range live {
		c.gone = true
		if err := c.f.Close(); err != nil {
			errs = append(errs, fmt.Errorf("datastore: close chunk %d: %w", c.id, err))
		}
		c.mu.Unlock()
	}
	if err := s.dir.Close(); err != nil {
		errs = append(errs, fmt.Errorf("datastore: close: %w", err))
	}
	return errors.Join(errs...)
}
