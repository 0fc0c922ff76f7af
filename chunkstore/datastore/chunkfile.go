package datastore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

const (
	// chunkPrefix starts the name of every chunk file: "chunk_<id>".
	chunkPrefix = "chunk_"
	// snapInfix separates chunk id and sn in snapshot file names:
	// "chunk_<id>_snap_<sn>".
	snapInfix = "_snap_"
	// tmpSuffix marks a chunk or snapshot file under construction:
	// "chunk_<id>.tmp", "chunk_<id>_snap_<sn>.tmp".
	tmpSuffix = ".tmp"
)

// fileKind classifies a directory entry by name.
type fileKind int

const (
	kindOther    fileKind = iota // not ours: ignored
	kindChunk                    // "chunk_<id>"
	kindSnap                     // "chunk_<id>_snap_<sn>"
	kindTmp                      // either of the above + ".tmp": removed at Open
	kindView                     // "chunk_<id>_view_<seq>": pre-images (view.go)
	kindViewBase                 // "chunk_<id>_vbase_<seq>": a deleted chunk kept for views
)

// chunkFileName returns the file name of chunk id.
func chunkFileName(id uint64) string {
	return chunkPrefix + strconv.FormatUint(id, 10)
}

// snapFileName returns the file name of the snapshot of chunk id at sn.
func snapFileName(id, sn uint64) string {
	return chunkFileName(id) + snapInfix + strconv.FormatUint(sn, 10)
}

// parseDecimal parses a canonical decimal uint64: no sign, no leading zeros
// except "0" itself, so that formatting gives back the same string.
func parseDecimal(s string) (uint64, bool) {
	v, err := strconv.ParseUint(s, 10, 64)
	return v, err == nil && strconv.FormatUint(v, 10) == s
}

// parseFileName classifies name and returns the chunk id and, for snapshot
// files, the sn. Names that chunkFileName or snapFileName (plus tmpSuffix)
// would not produce are kindOther.
func parseFileName(name string) (id, sn uint64, kind fileKind) {
	rest, ok := strings.CutPrefix(name, chunkPrefix)
	if !ok {
		return 0, 0, kindOther
	}
	tmp := false
	if s, ok := strings.CutSuffix(rest, tmpSuffix); ok {
		rest, tmp = s, true
	}
	kind = kindChunk
	idPart := rest
	for _, in := range []struct {
		infix string
		kind  fileKind
	}{{snapInfix, kindSnap}, {viewInfix, kindView}, {baseInfix, kindViewBase}} {
		head, snPart, found := strings.Cut(rest, in.infix)
		if !found {
			continue
		}
		idPart, kind = head, in.kind
		if sn, ok = parseDecimal(snPart); !ok {
			return 0, 0, kindOther
		}
		break
	}
	if id, ok = parseDecimal(idPart); !ok {
		return 0, 0, kindOther
	}
	if tmp {
		kind = kindTmp
	}
	return id, sn, kind
}

// geometry is the file layout derived from the sizes of Options, shared by
// Store and FilePool:
//
//	[0, PageSize)                          meta page
//	[PageSize, PageSize+ChunkSize)         data; data offset X at PageSize+X
//	[PageSize+ChunkSize, fileSize)         crc table: 4 bytes per block, little-
//	                                       endian, then zero padding up to a
//	                                       multiple of PageSize
//
// Chunk and snapshot files have the same layout, so pool files serve both.
type geometry struct {
	chunkSize, pageSize, blockSize uint32
	blocks                         uint32 // chunkSize / blockSize
	dataOff                        int64  // file offset of data offset 0
	crcOff                         int64  // file offset of the crc table
	fileSize                       int64  // length of every file
	zeroCRC                        uint32 // crc32c of a zero block (see crc.go)
}

// newGeometry derives the layout from validated sizes.
func newGeometry(chunkSize, pageSize, blockSize uint32) geometry {
	blocks := chunkSize / blockSize
	crcLen := (int64(blocks)*4 + int64(pageSize) - 1) / int64(pageSize) * int64(pageSize)
	return geometry{
		chunkSize: chunkSize,
		pageSize:  pageSize,
		blockSize: blockSize,
		blocks:    blocks,
		dataOff:   int64(pageSize),
		crcOff:    int64(pageSize) + int64(chunkSize),
		fileSize:  int64(pageSize) + int64(chunkSize) + crcLen,
		zeroCRC:   zeroBlockCRC(blockSize),
	}
}

// chunkFile is one open chunk, with its snapshot if it has one.
//
// Lifecycle: a chunkFile enters the Store's map either at Open (loaded) or,
// locked and without a file, when the first write or CreateCloneChunk
// creates it; it leaves the map when it is deleted, when its creation fails,
// or when the Store closes, and is then marked gone. An operation that found
// a chunkFile in the map locks it and must look again if it is gone.
//
// Lock order: syncMu, then mu, then Store.mu. Operations that remove files
// of the chunk (DeleteChunk, DeleteChunkSnapshotOrCorrectSn) hold syncMu and
// mu, so Store.Sync, which holds only syncMu while it does I/O, never writes
// to or fsyncs a file that was handed back to the pool.
type chunkFile struct {
	id   uint64
	path string
	// inc identifies this incarnation of the chunk in the block cache: a
	// chunk deleted and created again gets a new one, so cached blocks of
	// the old file never match.
	inc uint64

	syncMu sync.Mutex

	// mu orders operations on this chunk: writes, pastes, meta updates,
	// snapshot creation and removal, deletion and Close hold it
	// exclusively; reads, GetChunkInfo and GetChunkHash share it. It guards
	// meta, snap and gone; f is set once, before the chunkFile is first
	// unlocked.
	mu   sync.RWMutex
	f    File
	meta MetaPage // current meta, ahead of the page on disk while metaDirty
	snap *snapFile
	// views are the chunk's pre-image files, one per read view covering it
	// (view.go).
	views []*viewFile
	gone  bool
	// applied is the highest log index of an op applied to this chunk
	// (refused or not), at least meta.Index: the chunk's state reflects
	// every op on it up to applied. Guarded by mu.
	applied uint64

	// dirty is set after every pwrite to f (after it returns, never before)
	// and cleared by sync just before it fsyncs f, so that a write is either
	// covered by a running fsync or leaves the chunk dirty.
	dirty atomic.Bool
	// metaDirty is set (under mu) when meta changed and its page has not
	// been written; sync writes it after fsyncing the data (see Store.Sync).
	metaDirty atomic.Bool
	// snapDirty is as dirty for the snapshot file. COW fsyncs the snapshot
	// before the chunk data it preserved is overwritten, so it is set only
	// briefly or after a failed fsync.
	snapDirty atomic.Bool
	// cacheFilled is set by readers that put blocks of this chunk into the
	// block cache; a writer that finds it set drains the cache's pending
	// inserts before invalidating (see BlockCache). cacheUsed is set with
	// it and never cleared: while it is false the cache holds nothing of
	// this incarnation and writers skip invalidation.
	cacheFilled, cacheUsed atomic.Bool
}

// replayed reports whether the op at log index index is already reflected
// in the chunk's stamped state (index below meta.Index), so that applying it
// again must change nothing (see Replay in the package documentation). The
// op at meta.Index itself is applied again: as the last op that changed the
// meta, applying it again on its own result is idempotent. The caller holds
// mu.
func (c *chunkFile) replayed(index uint64) bool { return index != 0 && index < c.meta.Seq }

// admit is what every stamped op on the chunk does first: it reports
// whether the op at seq must be applied (not replayed), and if so records
// it as the chunk's last op (applied). The caller holds mu exclusively.
func (c *chunkFile) admit(seq uint64) bool {
	if c.replayed(seq) {
		return false
	}
	c.applied = max(c.applied, seq)
	return true
}

// isClone reports whether the chunk is a clone chunk. The caller holds mu.
func (c *chunkFile) isClone() bool { return c.meta.Location != "" }

// snapFile is the copy-on-write snapshot of a chunk (see cow.go), guarded by
// its chunk's mu like the chunk itself.
type snapFile struct {
	path string
	f    File
	meta SnapMetaPage
}

// maxWritePiece bounds one write(2) into a chunk, snapshot or pool file.
// Linux (6.x, ext4) caches a buffered write in page-cache folios as
// large as the write allows, up to 2 MiB, and a later 4 KiB overwrite of
// part of a large folio costs several times one of a small folio (ext4
// walks every block of the folio on each write). Random small overwrites
// are the chunk store's common case and large client writes are common
// too, so large writes go down in 64 KiB pieces: a later 4 KiB overwrite
// costs over three times the CPU after 1 MiB writes that it costs after
// 64 KiB ones, and the pieces cost a 1 MiB overwrite ~20% more CPU than
// one call (docs/performance.md, "Chunk writes in 64 KiB pieces").
const maxWritePiece = 64 << 10

// writePieces writes p at file offset off of f in maxWritePiece pieces.
func writePieces(f File, p []byte, off int64) error {
	for len(p) > 0 {
		n := min(len(p), maxWritePiece)
		if _, err := f.WriteAt(p[:n], off); err != nil {
			return err
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

// writeAt writes p at file offset off of f (in pieces, see maxWritePiece)
// and marks dirty, even after a failed (possibly partial) write.
func writeAt(f File, dirty *atomic.Bool, p []byte, off int64) error {
	err := writePieces(f, p, off)
	dirty.Store(true)
	return err
}

// newFile builds a file of g.fileSize bytes at path whose first bytes are
// page (a full meta page) and whose data and crc table read as zeros: it
// makes "<path>.tmp" (from pool if it is not nil and has a ready file,
// otherwise a sparse file), writes page, fsyncs, and renames it to path. The
// caller fsyncs the directory. pooled reports whether the pool supplied the
// file. On error nothing is left behind (a pooled file is removed, not
// recycled: its state is unknown).
func newFile(fsys FS, pool *FilePool, g *geometry, path string, page []byte) (_ File, pooled bool, err error) {
	tmp := path + tmpSuffix
	var f File
	if pool != nil {
		switch err := pool.Take(tmp); {
		case err == nil:
			pooled = true
		case errors.Is(err, ErrPoolEmpty):
		default:
			return nil, false, err
		}
	}
	if pooled {
		f, err = fsys.OpenFile(tmp, os.O_RDWR, 0)
	} else {
		f, err = fsys.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	}
	if err != nil {
		if pooled {
			_ = fsys.Remove(tmp)
		}
		return nil, pooled, err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = fsys.Remove(tmp)
		}
	}()
	if !pooled {
		if err = f.Truncate(g.fileSize); err != nil {
			return nil, pooled, err
		}
	}
	if _, err = f.WriteAt(page, 0); err != nil {
		return nil, pooled, err
	}
	if err = f.Sync(); err != nil {
		return nil, pooled, err
	}
	if err = fsys.Rename(tmp, path); err != nil {
		return nil, pooled, err
	}
	return f, pooled, nil
}

// openFile opens an existing chunk or snapshot file for reading and writing,
// checks that it is g.fileSize bytes long and reads its meta page into page
// (PageSize bytes). Errors do not name the file; the caller adds it.
func openFile(fsys FS, g *geometry, path string, page []byte) (_ File, err error) {
	fi, err := fsys.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%v): %w", fi.Mode().Type(), ErrFileFormat)
	}
	if fi.Size() != g.fileSize {
		return nil, fmt.Errorf("size %d bytes, want %d (meta page + chunk size + crc table): %w",
			fi.Size(), g.fileSize, ErrFileFormat)
	}
	f, err := fsys.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	if _, err := f.ReadAt(page, 0); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("read meta page: %w", err)
	}
	return f, nil
}

// discardFile disposes of a removed chunk or snapshot file at path: it is
// recycled into pool if there is one, otherwise removed. A missing file is
// not an error. The caller fsyncs the directory.
func discardFile(fsys FS, pool *FilePool, path string) error {
	var err error
	if pool != nil {
		err = pool.Recycle(path)
	} else {
		err = fsys.Remove(path)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// joinDir returns the path of name in dir.
func joinDir(dir, name string) string { return filepath.Join(dir, name) }
