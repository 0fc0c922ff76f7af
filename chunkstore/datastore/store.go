package datastore

import (
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"
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

// maxSyncWorkers bounds the number of chunks Sync and Close sync at once.
const maxSyncWorkers = 8

// Options configure a Store. Zero-valued sizes take the defaults. The sizes
// are part of the on-disk format: a directory must always be opened with the
// same ChunkSize, PageSize and BlockSize (Open refuses files of the wrong
// length).
type Options struct {
	// Dir is the directory holding the chunk files; Open creates it if
	// needed. Required.
	Dir string
	// ChunkSize is the number of data bytes per chunk, a multiple of
	// BlockSize. Default DefaultChunkSize.
	ChunkSize uint32
	// PageSize is the size of the meta page that precedes the data in every
	// chunk file, a multiple of MinPageSize large enough for the longest
	// clone meta page (MaxLocationLen plus a bitmap of ChunkSize/BlockSize
	// bits plus 29 bytes; 4 KiB suffices for 4 KiB blocks of 16 MiB chunks,
	// 512-byte blocks need 8 KiB). Default DefaultPageSize.
	PageSize uint32
	// BlockSize is the alignment of every I/O offset and length and the
	// unit of checksums, clone bitmaps and copy-on-write: a power of two of
	// at least 512 and at most ChunkSize. Default DefaultBlockSize.
	BlockSize uint32

	// FS is the file system; nil means OSFS. Tests pass a FaultFS.
	FS FS
	// Pool, if not nil, supplies preallocated files for new chunks and
	// snapshots and takes deleted ones back. Its sizes must equal these.
	Pool *FilePool
	// Cache, if not nil, caches verified data blocks of live chunks; it may
	// be shared by several Stores.
	Cache *BlockCache
	// Logger receives warnings (pool fallbacks, orphan snapshot files); nil
	// discards them.
	Logger *slog.Logger
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
	case int64(o.PageSize) < int64(metaPageMax(o.ChunkSize/o.BlockSize)):
		return o, fmt.Errorf("datastore: options: PageSize %d cannot hold a clone meta page of %d bytes: %w",
			o.PageSize, metaPageMax(o.ChunkSize/o.BlockSize), ErrInvalidArg)
	}
	return o, nil
}

// ChunkInfo describes one chunk, as returned by Store.GetChunkInfo. It is
// comparable with ==.
type ChunkInfo struct {
	// ID is the chunk id.
	ID uint64
	// Sn is the chunk's sequence number: the largest sn of any write applied
	// to it, starting with the sn of the write that created it.
	Sn uint64
	// CorrectedSn is the chunk's corrected sequence number (see
	// MetaPage.CorrectedSn); 0 if never set.
	CorrectedSn uint64
	// SnapSn is the sn of the chunk's copy-on-write snapshot, 0 if it has
	// none. (Curve reports it as the second element of chunkSn.)
	SnapSn uint64
	// Location is the clone source of a clone chunk, "" for a normal chunk.
	Location string
	// CloneUnwritten is the number of blocks of a clone chunk neither
	// written nor pasted yet (0 for a normal chunk; a clone chunk whose
	// last block is written becomes a normal chunk).
	CloneUnwritten int
}

// Stats are counters and gauges of a Store (see Store.Stats).
type Stats struct {
	// Chunks, Snapshots and Clones count the chunks, chunk snapshots and
	// clone chunks the Store holds now.
	Chunks, Snapshots, Clones int
	// CRCFailures counts block reads whose checksum did not match.
	CRCFailures uint64
	// PoolTakes counts files created from the pool; PoolFallbacks counts
	// files created on the write path because the pool had none ready.
	PoolTakes, PoolFallbacks uint64
	// CacheHits and CacheMisses count block lookups in Options.Cache.
	CacheHits, CacheMisses uint64
	// COWBlocks counts blocks copied into chunk snapshots.
	COWBlocks uint64
}

// Store is the set of chunks in one directory. Create it with Open; all
// methods are safe for concurrent use (see the package documentation for
// what runs in parallel). A Store keeps one open file descriptor per chunk
// and one per snapshot, so RLIMIT_NOFILE must allow for all of them in all
// stores of a process.
type Store struct {
	opts  Options
	g     geometry
	fs    FS
	pool  *FilePool
	cache *BlockCache
	log   *slog.Logger
	id    uint64 // identity in the block cache

	// mu guards chunks and closed. It is held only for map access, never
	// across I/O. Lock order: chunkFile.syncMu, chunkFile.mu, then mu.
	mu     sync.RWMutex
	chunks map[uint64]*chunkFile
	closed bool

	// inflight counts operations that sync or remove files without holding
	// chunk locks throughout (create, delete, Sync). Close waits for them
	// before closing any file. Add is only called under mu with !closed.
	inflight sync.WaitGroup

	// views is the table of read views (view.go).
	views viewTable

	stats struct {
		crcFailures, poolTakes, poolFallbacks, cacheHits, cacheMisses, cowBlocks atomic.Uint64
		// fallbackLogged is when the last "pool empty" line was logged
		// (Unix ns): one per poolLogEvery, with the count so far.
		fallbackLogged atomic.Int64
		snaps, clones  atomic.Int64
	}
}

// Open opens the store in opts.Dir, creating the directory if needed. It
// disposes of leftover "*.tmp" files of interrupted creations (recycling
// them into the pool if there is one), ignores files with names it does not
// know, loads the meta page of every "chunk_<id>" file, and attaches every
// "chunk_<id>_snap_<sn>" file to its chunk. A snapshot file whose chunk does
// not exist (left by a crash inside DeleteChunk) is disposed of too.
//
// A file of the wrong length, or whose meta page fails to decode, makes Open
// fail with an error that names the file and wraps ErrFileFormat, ErrCRC or
// ErrIncompatible; two snapshot files of one chunk make it fail with
// ErrSnapshotConflict. Nothing is repaired. Open accepts any directory whose
// files were written by a Store with the same sizes, such as the files of
// another replica received in a Raft snapshot.
func Open(opts Options) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Store{
		opts:   opts,
		g:      newGeometry(opts.ChunkSize, opts.PageSize, opts.BlockSize),
		fs:     opts.FS,
		pool:   opts.Pool,
		cache:  opts.Cache,
		log:    opts.Logger,
		id:     storeSeq.Add(1),
		chunks: make(map[uint64]*chunkFile),
	}
	if s.fs == nil {
		s.fs = OSFS{}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.pool != nil && s.pool.g != s.g {
		return nil, fmt.Errorf("datastore: open: pool %s formatted for chunk/page/block size %d/%d/%d, store uses %d/%d/%d: %w",
			s.pool.dir, s.pool.g.chunkSize, s.pool.g.pageSize, s.pool.g.blockSize,
			s.g.chunkSize, s.g.pageSize, s.g.blockSize, ErrInvalidArg)
	}
	if err := s.fs.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("datastore: open: %w", err)
	}
	if err := s.load(); err != nil {
		s.closeViews()
		for _, c := range s.chunks {
			_ = c.f.Close()
			if c.snap != nil {
				_ = c.snap.f.Close()
			}
		}
		return nil, err
	}
	return s, nil
}

// load fills s.chunks from the directory and disposes of leftovers.
func (s *Store) load() error {
	dir := s.opts.Dir
	entries, err := s.fs.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("datastore: open: list %s: %w", dir, err)
	}
	page := make([]byte, s.g.pageSize)
	changed := false
	type snapEnt struct {
		id, sn uint64
		path   string
	}
	var snaps []snapEnt
	var vl viewLoad
	for _, e := range entries {
		id, sn, kind := parseFileName(e.Name())
		path := joinDir(dir, e.Name())
		if !e.Type().IsRegular() {
			continue
		}
		if kind == kindOther {
			if seq, ok := parseViewInfoName(e.Name()); ok {
				vl.infos = append(vl.infos, viewEnt{seq: seq, path: path})
			}
			continue
		}
		switch kind {
		case kindView:
			vl.files = append(vl.files, viewEnt{id, sn, path})
		case kindViewBase:
			vl.bases = append(vl.bases, viewEnt{id, sn, path})
		case kindTmp:
			if err := discardFile(s.fs, s.pool, path); err != nil {
				return fmt.Errorf("datastore: open: dispose of leftover temp file: %w", err)
			}
			changed = true
		case kindSnap:
			snaps = append(snaps, snapEnt{id, sn, path})
		case kindChunk:
			c, err := s.loadChunk(id, path, page)
			if err != nil {
				return fmt.Errorf("datastore: open: chunk file %s: %w", path, err)
			}
			s.chunks[id] = c
		}
	}
	for _, e := range snaps {
		c := s.chunks[e.id]
		if c == nil {
			s.log.Warn("datastore: disposing of snapshot file without chunk", "file", e.path)
			if err := discardFile(s.fs, s.pool, e.path); err != nil {
				return fmt.Errorf("datastore: open: dispose of orphan snapshot: %w", err)
			}
			changed = true
			continue
		}
		if c.snap != nil {
			return fmt.Errorf("datastore: open: chunk %d has snapshot files %s and %s: %w",
				e.id, c.snap.path, e.path, ErrSnapshotConflict)
		}
		sp, err := s.loadSnap(e.sn, e.path, page)
		if err != nil {
			return fmt.Errorf("datastore: open: snapshot file %s: %w", e.path, err)
		}
		c.snap = sp
		s.stats.snaps.Add(1)
	}
	viewsChanged, err := s.loadViews(vl)
	if err != nil {
		return fmt.Errorf("datastore: open: %w", err)
	}
	if changed || viewsChanged {
		if err := s.fs.SyncDir(dir); err != nil {
			return fmt.Errorf("datastore: open: sync dir %s: %w", dir, err)
		}
	}
	return nil
}

// loadChunk opens chunk file path of chunk id, using page as scratch space.
func (s *Store) loadChunk(id uint64, path string, page []byte) (*chunkFile, error) {
	f, err := openFile(s.fs, &s.g, path, page)
	if err != nil {
		return nil, err
	}
	var m MetaPage
	if err := m.Unmarshal(page); err != nil {
		_ = f.Close()
		return nil, err
	}
	if m.Location != "" && m.Bits != s.g.blocks {
		_ = f.Close()
		return nil, fmt.Errorf("clone bitmap of %d bits, chunk has %d blocks: %w", m.Bits, s.g.blocks, ErrFileFormat)
	}
	if m.Location != "" {
		s.stats.clones.Add(1)
	}
	m.Version = MetaVersion // the next page written for it is of this version
	return &chunkFile{id: id, path: path, inc: incSeq.Add(1), f: f, meta: m, applied: m.Seq}, nil
}

// loadSnap opens snapshot file path, named with sn.
func (s *Store) loadSnap(sn uint64, path string, page []byte) (*snapFile, error) {
	f, err := openFile(s.fs, &s.g, path, page)
	if err != nil {
		return nil, err
	}
	var m SnapMetaPage
	err = m.Unmarshal(page)
	switch {
	case err != nil:
	case m.Sn != sn:
		err = fmt.Errorf("meta page sn %d differs from file name: %w", m.Sn, ErrFileFormat)
	case m.Bits != s.g.blocks:
		err = fmt.Errorf("bitmap of %d bits, chunk has %d blocks: %w", m.Bits, s.g.blocks, ErrFileFormat)
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return &snapFile{path: path, f: f, meta: m}, nil
}

// Options returns the options the store runs with, defaults filled in.
func (s *Store) Options() Options { return s.opts }

// Stats returns the store's counters and gauges.
func (s *Store) Stats() Stats {
	s.mu.RLock()
	n := len(s.chunks)
	s.mu.RUnlock()
	return Stats{
		Chunks:        n,
		Snapshots:     int(s.stats.snaps.Load()),
		Clones:        int(s.stats.clones.Load()),
		CRCFailures:   s.stats.crcFailures.Load(),
		PoolTakes:     s.stats.poolTakes.Load(),
		PoolFallbacks: s.stats.poolFallbacks.Load(),
		CacheHits:     s.stats.cacheHits.Load(),
		CacheMisses:   s.stats.cacheMisses.Load(),
		COWBlocks:     s.stats.cowBlocks.Load(),
	}
}

// checkRange validates an I/O of n bytes at chunk offset off.
func (s *Store) checkRange(op string, id uint64, off uint32, n int) error {
	mask := s.g.blockSize - 1
	switch {
	case n == 0:
		return fmt.Errorf("datastore: %s chunk %d: empty range at offset %d: %w", op, id, off, ErrInvalidArg)
	case off&mask != 0:
		return fmt.Errorf("datastore: %s chunk %d: offset %d is not a multiple of block size %d: %w",
			op, id, off, s.g.blockSize, ErrInvalidArg)
	case uint64(n)&uint64(mask) != 0:
		return fmt.Errorf("datastore: %s chunk %d: length %d is not a multiple of block size %d: %w",
			op, id, n, s.g.blockSize, ErrInvalidArg)
	case uint64(off)+uint64(n) > uint64(s.g.chunkSize):
		return fmt.Errorf("datastore: %s chunk %d: range [%d, %d) exceeds chunk size %d: %w",
			op, id, off, uint64(off)+uint64(n), s.g.chunkSize, ErrInvalidArg)
	}
	return nil
}

// blockRange returns the block indexes [lo, hi) of a checked range.
func (s *Store) blockRange(off uint32, n int) (lo, hi uint32) {
	return off / s.g.blockSize, (off + uint32(n)) / s.g.blockSize
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

// isNotExist reports whether err is a lookup's ErrChunkNotExist.
func isNotExist(err error) bool { return errors.Is(err, ErrChunkNotExist) }

// Lock modes of lookup.
const (
	lockShared    = iota // mu.RLock
	lockExclusive        // mu.Lock
	lockRemove           // syncMu.Lock, then mu.Lock: may remove files
)

// lookup returns chunk id locked in mode, or an error wrapping
// ErrChunkNotExist or ErrClosed.
func (s *Store) lookup(op string, id uint64, mode int) (*chunkFile, error) {
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
		switch mode {
		case lockShared:
			c.mu.RLock()
		case lockExclusive:
			c.mu.Lock()
		default:
			c.syncMu.Lock()
			c.mu.Lock()
		}
		if !c.gone {
			return c, nil
		}
		unlock(c, mode)
	}
}

// unlock releases what lookup(mode) took.
func unlock(c *chunkFile, mode int) {
	switch mode {
	case lockShared:
		c.mu.RUnlock()
	case lockExclusive:
		c.mu.Unlock()
	default:
		c.mu.Unlock()
		c.syncMu.Unlock()
	}
}

// create creates chunk id with meta page m and returns it locked
// exclusively. It returns (nil, nil) if the chunk appeared meanwhile. While
// the file is being built the chunk is in the map, locked, so concurrent
// operations on it wait and operations on other chunks proceed. The file is
// durable (data, meta page and directory entry) when create returns.
func (s *Store) create(op string, id uint64, m MetaPage) (_ *chunkFile, err error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("datastore: %s chunk %d: %w", op, id, ErrClosed)
	}
	if _, ok := s.chunks[id]; ok {
		s.mu.Unlock()
		return nil, nil
	}
	c := &chunkFile{id: id, path: joinDir(s.opts.Dir, chunkFileName(id)), inc: incSeq.Add(1)}
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
	f, err := s.newFile(c.path, func(page []byte) error { return m.MarshalTo(page) })
	if err != nil {
		return nil, fmt.Errorf("datastore: %s chunk %d: create: %w", op, id, err)
	}
	c.f, c.meta = f, m
	if m.Location != "" {
		s.stats.clones.Add(1)
	}
	return c, nil
}

// newFile creates the durable chunk or snapshot file path whose meta page
// encode fills, from the pool when it has a file ready, and fsyncs the
// directory.
func (s *Store) newFile(path string, encode func(page []byte) error) (File, error) {
	page := make([]byte, s.g.pageSize)
	if err := encode(page); err != nil {
		return nil, err
	}
	f, pooled, err := newFile(s.fs, s.pool, &s.g, path, page)
	if err != nil {
		return nil, err
	}
	switch {
	case pooled:
		s.stats.poolTakes.Add(1)
	case s.pool != nil:
		n := s.stats.poolFallbacks.Add(1)
		now, last := time.Now().UnixNano(), s.stats.fallbackLogged.Load()
		if time.Duration(now-last) >= poolLogEvery && s.stats.fallbackLogged.CompareAndSwap(last, now) {
			s.log.Warn("datastore: chunk file pool empty, created file on the write path (sparse)",
				"file", path, "pool_fallbacks_total", n)
		}
	}
	if err := s.fs.SyncDir(s.opts.Dir); err != nil {
		_ = f.Close()
		_ = s.fs.Remove(path)
		return nil, fmt.Errorf("sync dir %s: %w", s.opts.Dir, err)
	}
	return f, nil
}

// forget removes c from the map if it is still there.
func (s *Store) forget(c *chunkFile) {
	s.mu.Lock()
	if s.chunks[c.id] == c {
		delete(s.chunks, c.id)
	}
	s.mu.Unlock()
}

// writeData writes whole blocks data at block lo of chunk c with their crc
// entries, invalidating them in the cache. The caller holds c.mu
// exclusively.
func (s *Store) writeData(c *chunkFile, lo uint32, data []byte) error {
	if s.cache != nil {
		s.cache.invalidate(s.id, c, lo, lo+uint32(len(data))/s.g.blockSize)
	}
	return s.g.writeBlocks(c.f, &c.dirty, lo, data)
}

// readData reads whole blocks at block lo of chunk c into buf, verifying
// their checksums, through the cache if there is one. The caller holds c.mu.
func (s *Store) readData(c *chunkFile, lo uint32, buf []byte) error {
	name := chunkName(c.id)
	if s.cache == nil {
		return s.g.readBlocks(c.f, name, lo, buf, &s.stats.crcFailures)
	}
	bs := s.g.blockSize
	n := uint32(len(buf)) / bs
	for i := uint32(0); i < n; {
		if s.cache.get(s.id, c, lo+i, buf[i*bs:(i+1)*bs]) {
			s.stats.cacheHits.Add(1)
			i++
			continue
		}
		j := i + 1
		for j < n && !s.cache.get(s.id, c, lo+j, buf[j*bs:(j+1)*bs]) {
			j++
		}
		// Blocks [i, j) missed; block j, if any, was a hit.
		s.stats.cacheMisses.Add(uint64(j - i))
		run := buf[i*bs : j*bs]
		if err := s.g.readBlocks(c.f, name, lo+i, run, &s.stats.crcFailures); err != nil {
			return err
		}
		for k := i; k < j; k++ {
			s.cache.put(s.id, c, lo+k, buf[k*bs:(k+1)*bs])
		}
		if j < n {
			s.stats.cacheHits.Add(1)
		}
		i = j + 1
	}
	return nil
}

// markMetaDirty records that c.meta changed, by the op at log index index
// (0: unstamped), which becomes its Index stamp; Sync writes it. The caller
// holds c.mu exclusively.
func markMetaDirty(c *chunkFile, index uint64) {
	c.meta.Seq = max(c.meta.Seq, index)
	c.metaDirty.Store(true)
}

// WriteChunk writes data at offset off of chunk id on behalf of a request
// with sequence number sn, following Curve's CSDataStore::WriteChunk:
//
//  1. len(data) must be a non-zero multiple of BlockSize, off a multiple of
//     BlockSize, off+len(data) at most ChunkSize, and sn not 0; otherwise
//     ErrInvalidArg. A missing chunk is created as a normal chunk with sn.
//  2. sn smaller than the chunk's sn or corrected sn: ErrBackward.
//  3. sn larger than the chunk's effective sn (max of sn and corrected sn)
//     takes a chunk snapshot, unless a snapshot with snap.sn >= chunk.sn
//     exists already (replay after the snapshot was made): an older
//     snapshot gives ErrSnapshotConflict, a clone chunk ErrStatusConflict;
//     otherwise "chunk_<id>_snap_<chunk.sn>" is created, empty.
//  4. sn larger than the chunk's sn becomes the chunk's sn.
//  5. If a snapshot exists, sn equals the chunk's sn, differs from its
//     corrected sn, and the chunk's sn is newer than the snapshot's, the
//     blocks of the range not yet in the snapshot are copied into it (COW,
//     see cow.go) and the snapshot is fsynced.
//  6. The data and its checksums are written. On a clone chunk the blocks
//     are marked written; a clone whose every block is written becomes a
//     normal chunk.
//
// A request failing in steps 1 to 3 changes nothing; an I/O error later may
// leave a partial write (see crc.go). The data is written with a plain
// pwrite, not fsynced; meta changes (sn, bitmap) are persisted by Sync (see
// the package documentation for what a crash preserves). Applying the same
// request twice leaves the same state, so replaying a log entry is harmless.
func (s *Store) WriteChunk(id, sn uint64, data []byte, off uint32) error {
	return s.WriteChunkAt(0, id, sn, data, off)
}

// WriteChunkAt is WriteChunk as the op at raft log index index (see Replay
// in the package documentation): on a chunk whose state is stamped with a
// later index it does nothing and succeeds.
func (s *Store) WriteChunkAt(index, id, sn uint64, data []byte, off uint32) error {
	return s.WriteChunkPreAt(index, id, sn, data, off, nil)
}

// WriteChunkPreAt is WriteChunkAt for a write whose op carries pre, the
// pre-image PreImageFor gave the leader (nil: none).
func (s *Store) WriteChunkPreAt(index, id, sn uint64, data []byte, off uint32, pre *PreImage) error {
	if err := s.checkRange("write", id, off, len(data)); err != nil {
		return err
	}
	if sn == 0 {
		return fmt.Errorf("datastore: write chunk %d: sequence number 0: %w", id, ErrInvalidArg)
	}
	c, err := s.lookupOrCreate(id, sn, index)
	if err != nil {
		return err
	}
	defer c.mu.Unlock()
	if !c.admit(index) {
		return nil
	}
	m := &c.meta
	if sn < m.Sn || sn < m.CorrectedSn {
		return fmt.Errorf("datastore: write chunk %d: request sn %d, chunk sn %d, corrected sn %d: %w",
			id, sn, m.Sn, m.CorrectedSn, ErrBackward)
	}
	if sn > max(m.Sn, m.CorrectedSn) && (c.snap == nil || c.snap.meta.Sn < m.Sn) {
		switch {
		case c.snap != nil:
			return fmt.Errorf("datastore: write chunk %d: request sn %d needs a snapshot, chunk sn %d still has snapshot sn %d: %w",
				id, sn, m.Sn, c.snap.meta.Sn, ErrSnapshotConflict)
		case c.isClone():
			return fmt.Errorf("datastore: write chunk %d: request sn %d > chunk sn %d would snapshot a clone chunk: %w",
				id, sn, max(m.Sn, m.CorrectedSn), ErrStatusConflict)
		}
		if err := s.createSnapshot(c); err != nil {
			return fmt.Errorf("datastore: write chunk %d: %w", id, err)
		}
	}
	if sn > m.Sn {
		m.Sn = sn
		markMetaDirty(c, index)
	}
	lo, hi := s.blockRange(off, len(data))
	if c.snap != nil && sn == m.Sn && sn != m.CorrectedSn && m.Sn > c.snap.meta.Sn {
		if err := s.cow(c, lo, hi); err != nil {
			return fmt.Errorf("datastore: write chunk %d: %w", id, err)
		}
	}
	if len(c.views) > 0 {
		if err := s.captureViews(c, index, lo, hi, pre); err != nil {
			return fmt.Errorf("datastore: write chunk %d: %w", id, err)
		}
	}
	if err := s.writeData(c, lo, data); err != nil {
		return fmt.Errorf("datastore: write chunk %d: %w", id, err)
	}
	if c.isClone() {
		s.markWritten(c, lo, hi, index)
	}
	return nil
}

// lookupOrCreate returns chunk id locked exclusively, creating it as a
// normal chunk with sn sn, stamped with index, if it does not exist.
func (s *Store) lookupOrCreate(id, sn, index uint64) (*chunkFile, error) {
	for {
		c, err := s.lookup("write", id, lockExclusive)
		if !isNotExist(err) {
			return c, err
		}
		c, err = s.create("write", id, MetaPage{Version: MetaVersion, Sn: sn, Seq: index})
		if c != nil || err != nil {
			return c, err
		}
		// Another writer created the chunk first: look again.
	}
}

// ReadChunk reads len(buf) bytes at offset off of chunk id into buf. The
// range rules of WriteChunk apply (ErrInvalidArg); a missing chunk gives
// ErrChunkNotExist; a clone chunk with unwritten blocks in the range gives
// ErrPageNeverWritten (use ReadChunkClone). Every block is verified against
// its checksum (ErrCRC). Ranges never written read as zeros. Reads of one
// chunk run in parallel with each other but not with writes of that chunk,
// so a read never sees half of a write.
func (s *Store) ReadChunk(id uint64, buf []byte, off uint32) error {
	if err := s.checkRange("read", id, off, len(buf)); err != nil {
		return err
	}
	c, err := s.lookup("read", id, lockShared)
	if err != nil {
		return err
	}
	defer c.mu.RUnlock()
	if err := s.readLive(c, buf, off); err != nil {
		return fmt.Errorf("datastore: read chunk %d: %w", id, err)
	}
	return nil
}

// readLive is ReadChunk on locked chunk c.
func (s *Store) readLive(c *chunkFile, buf []byte, off uint32) error {
	lo, hi := s.blockRange(off, len(buf))
	if c.isClone() && !bitmap(c.meta.Bitmap).all(lo, hi) {
		return fmt.Errorf("clone chunk range [%d, %d) has unwritten blocks: %w", off, off+uint32(len(buf)), ErrPageNeverWritten)
	}
	return s.readData(c, lo, buf)
}

// DeleteChunk removes chunk id, its snapshot if it has one, and their files
// (recycled into the pool if there is one), and fsyncs the directory. A
// missing chunk is success, so replaying a delete is harmless. If sn is not
// 0 and is smaller than the chunk's sn (the chunk was written after the
// volume this request knows of), the error wraps ErrBackward and the chunk
// stays; sn 0 skips that check. The corrected sn is not checked (as in
// Curve).
func (s *Store) DeleteChunk(id, sn uint64) error { return s.DeleteChunkAt(0, id, sn) }

// DeleteChunkAt is DeleteChunk as the op at raft log index index (see
// WriteChunkAt).
func (s *Store) DeleteChunkAt(index, id, sn uint64) error {
	if err := s.enter("delete chunk"); err != nil {
		return err
	}
	defer s.inflight.Done()
	c, err := s.lookup("delete", id, lockRemove)
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
	if sn != 0 && sn < c.meta.Sn {
		return fmt.Errorf("datastore: delete chunk %d: request sn %d, chunk sn %d: %w",
			id, sn, c.meta.Sn, ErrBackward)
	}
	if c.snap != nil {
		if err := s.removeSnapshot(c); err != nil {
			return fmt.Errorf("datastore: delete chunk %d: %w", id, err)
		}
	}
	if len(c.views) > 0 {
		if err := s.moveAside(c, index); err != nil {
			return fmt.Errorf("datastore: delete chunk %d: %w", id, err)
		}
	} else {
		if err := discardFile(s.fs, s.pool, c.path); err != nil {
			return fmt.Errorf("datastore: delete chunk %d: %w", id, err)
		}
		_ = c.f.Close() // the file is gone; nothing of it is worth an error
	}
	s.dropChunk(c)
	if err := s.fs.SyncDir(s.opts.Dir); err != nil {
		return fmt.Errorf("datastore: delete chunk %d: sync dir %s: %w", id, s.opts.Dir, err)
	}
	return nil
}

// dropChunk marks c gone and removes it from the map and the cache. The
// caller holds c.mu exclusively and has closed its files.
func (s *Store) dropChunk(c *chunkFile) {
	c.gone = true
	s.forget(c)
	c.dirty.Store(false)
	c.metaDirty.Store(false)
	if c.isClone() {
		s.stats.clones.Add(-1)
	}
	if s.cache != nil {
		s.cache.invalidate(s.id, c, 0, s.g.blocks)
	}
}

// GetChunkInfo returns the meta data of chunk id, or an error wrapping
// ErrChunkNotExist.
func (s *Store) GetChunkInfo(id uint64) (ChunkInfo, error) {
	c, err := s.lookup("get info of", id, lockShared)
	if err != nil {
		return ChunkInfo{}, err
	}
	defer c.mu.RUnlock()
	info := ChunkInfo{ID: id, Sn: c.meta.Sn, CorrectedSn: c.meta.CorrectedSn, Location: c.meta.Location}
	if c.snap != nil {
		info.SnapSn = c.snap.meta.Sn
	}
	if c.isClone() {
		info.CloneUnwritten = int(s.g.blocks) - bitmap(c.meta.Bitmap).count()
	}
	return info, nil
}

// ListChunks returns the ids of all chunks in ascending order (none after
// Close). A chunk whose creation is in progress may be included.
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

// Files returns the name, relative to Dir, of every file of the store:
// the chunk and snapshot files (chunkFiles), then the read views' files
// (view_load.go).
func (s *Store) Files() []string { return append(s.chunkFiles(), s.viewFileNames()...) }

// chunkFiles returns the name, relative to Dir, of every chunk and snapshot file: the
// chunk files in ascending id order, then the snapshot files in ascending
// chunk id order. It is the list a Raft snapshot streams; call Sync first
// so the files are complete on disk, and keep writes out while they are
// read. A Store opened on a directory holding exactly these files (with the
// same sizes) has the same chunks and snapshots. None after Close.
func (s *Store) chunkFiles() []string {
	s.mu.RLock()
	cs := make([]*chunkFile, 0, len(s.chunks))
	for _, c := range s.chunks {
		cs = append(cs, c)
	}
	s.mu.RUnlock()
	slices.SortFunc(cs, func(a, b *chunkFile) int {
		switch {
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		}
		return 0
	})
	var chunks, snaps []string
	for _, c := range cs {
		c.mu.RLock()
		if !c.gone {
			chunks = append(chunks, chunkFileName(c.id))
			if c.snap != nil {
				snaps = append(snaps, snapFileName(c.id, c.snap.meta.Sn))
			}
		}
		c.mu.RUnlock()
	}
	return append(chunks, snaps...)
}

// Sync makes every change applied before it was called durable: it fsyncs
// each chunk file with unsynced writes, then writes its meta page if the meta
// changed (sn, corrected sn, clone bitmap) and fsyncs again, and fsyncs each
// snapshot file with unsynced writes; several chunks at a time. A write that
// runs concurrently with Sync is either made durable or leaves its chunk
// dirty for the next Sync. Call it before truncating the Raft log entries
// whose changes it covers.
//
// A meta page is written only after the data it describes was fsynced, so
// on disk a meta page is never ahead of the data: a durable sn means every
// older write is durable (their replays, refused with ErrBackward, lose
// nothing), and a durable clone bitmap bit means its block is durable (a
// replayed paste skips it safely).
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
	var todo []*chunkFile
	for _, c := range s.chunks {
		if c.dirty.Load() || c.metaDirty.Load() || c.snapDirty.Load() {
			todo = append(todo, c)
		}
	}
	s.mu.RUnlock()
	return errors.Join(s.syncViews(), s.syncAll(todo, false))
}

// syncAll runs syncChunk(c, locked) for every chunk in cs, at most
// maxSyncWorkers at a time, and joins the errors.
func (s *Store) syncAll(cs []*chunkFile, locked bool) error {
	switch len(cs) {
	case 0:
		return nil
	case 1:
		return s.syncChunk(cs[0], locked)
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
				errs[i] = s.syncChunk(cs[i], locked)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// syncChunk makes chunk c durable (see Sync). Unless locked, it holds c.syncMu
// throughout, so the files cannot be removed under it, and c.mu shared only
// to capture the meta page: writers proceed during the fsyncs. If locked, the
// caller holds c.mu exclusively and no other sync of c runs.
func (s *Store) syncChunk(c *chunkFile, locked bool) error {
	if !locked {
		c.syncMu.Lock()
		defer c.syncMu.Unlock()
		c.mu.RLock()
	}
	if c.gone {
		if !locked {
			c.mu.RUnlock()
		}
		return nil
	}
	var page []byte
	var err error
	if c.metaDirty.Swap(false) {
		page = make([]byte, s.g.pageSize)
		if err = c.meta.MarshalTo(page); err != nil {
			c.metaDirty.Store(true)
		}
	}
	snap := c.snap
	if !locked {
		c.mu.RUnlock()
	}
	if err != nil {
		return fmt.Errorf("datastore: sync chunk %d: %w", c.id, err)
	}
	fsync := func(f File, dirty *atomic.Bool) error {
		if !dirty.Swap(false) {
			return nil
		}
		if err := f.Sync(); err != nil {
			dirty.Store(true)
			return err
		}
		return nil
	}
	err = fsync(c.f, &c.dirty)
	if err == nil && page != nil {
		err = writeAt(c.f, &c.dirty, page, 0)
		if err == nil {
			err = fsync(c.f, &c.dirty)
		}
	}
	if err != nil {
		if page != nil {
			c.metaDirty.Store(true)
		}
		return fmt.Errorf("datastore: sync chunk %d: %w", c.id, err)
	}
	if snap != nil {
		if err := fsync(snap.f, &c.snapDirty); err != nil {
			return fmt.Errorf("datastore: sync snapshot of chunk %d: %w", c.id, err)
		}
	}
	return nil
}

// Close waits for running operations, syncs every chunk (as Sync), and
// closes every file. Operations started after Close fail with an error
// wrapping ErrClosed; so does a second Close. Close neither closes the pool
// nor the cache.
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
	errs := []error{s.syncViews(), s.syncAll(live, true)}
	for _, c := range live {
		c.gone = true
		if err := c.f.Close(); err != nil {
			errs = append(errs, fmt.Errorf("datastore: close chunk %d: %w", c.id, err))
		}
		if c.snap != nil {
			if err := c.snap.f.Close(); err != nil {
				errs = append(errs, fmt.Errorf("datastore: close snapshot of chunk %d: %w", c.id, err))
			}
		}
		c.mu.Unlock()
	}
	s.closeViews()
	return errors.Join(errs...)
}
