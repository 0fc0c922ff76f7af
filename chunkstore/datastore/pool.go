package datastore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/crc32"
)

// Pool directory layout. A FilePool owns one directory, PoolOptions.Dir, on
// the same file system as the Stores it serves (files move by rename):
//
//	pool.meta     JSON {"chunkSize", "pageSize", "blockSize", "fileSize",
//	              "crc"}: the geometry the files were formatted for, crc =
//	              crc32c of "chunkSize/pageSize/blockSize/fileSize" in
//	              decimal. OpenFilePool refuses a directory formatted for
//	              other sizes (ErrFileFormat).
//	<n>           a ready file: fileSize bytes, every byte written as zero
//	              (allocated, not sparse), fsynced. n is decimal.
//	<n>.tmp       a file being formatted; removed by OpenFilePool.
//	<n>.dirty     a recycled chunk or snapshot file; Run re-zeroes it in
//	              place and renames it to <n>.
//
// Other names are ignored. A ready file is a valid empty chunk file except
// for its meta page (all zero, version 0): the Store writes the meta page
// before giving the file its chunk name (see newFile), and the zero crc
// table matches the zero data (see crc.go).
const (
	poolMetaName    = "pool.meta"
	poolDirtySuffix = ".dirty"
	poolTmpSuffix   = ".tmp"
	// poolZeroBuf is the size of the zero buffer Run writes files with.
	poolZeroBuf = 1 << 20
	// poolRetry is how long Run waits after a failed format or re-zero.
	poolRetry = time.Second
	// poolLogEvery is the minimum interval of Run's progress log lines.
	poolLogEvery = 5 * time.Second
)

// PoolOptions configure a FilePool. The sizes must equal those of every Store
// using the pool; zero sizes take the Options defaults.
type PoolOptions struct {
	// Dir is the pool directory; OpenFilePool creates it if needed. It must
	// be on the same file system as the Stores' directories. Required.
	Dir string
	// Count is the number of ready files Run keeps formatted.
	Count int
	// ChunkSize, PageSize and BlockSize are the file geometry, as in
	// Options.
	ChunkSize, PageSize, BlockSize uint32
	// FS is the file system; nil means OSFS.
	FS FS
	// Logger receives progress and errors; nil discards them.
	Logger *slog.Logger
	// Quiet is how long Run waits after the last Take (or attempt) before
	// it formats or re-zeroes a file (0: DefaultPoolQuiet; negative: no
	// wait). See DefaultPoolQuiet.
	Quiet time.Duration
}

// DefaultPoolQuiet is PoolOptions.Quiet's default. Formatting yields to
// chunk creation: while chunks are being created Run writes no zeros, so a
// burst of creations (a restore, an ingest) is not slowed by the refill of
// the files it takes, and once the pool is empty the burst's files are
// created sparse, each block written once instead of zeroed and then
// written. On a virtual disk that gives freed blocks back to its host, a
// block's first write costs about 1.5 times an overwrite (fio, 1 MiB direct
// writes with fdatasync: docs/benchmarks.md, "What bounds the restore"), so
// the zeros of a refill compete with the burst at the disk's slowest rate.
//
// A burst comes in waves: a restore rebuilds one chunk per copyset at a
// time, so each server sees a creation per copyset, then none until those
// chunks are written (16 copysets of 16 MiB chunks restoring at 33 MB/s: a
// wave every 8 s). The quiet period is longer than such a gap: with 1 s,
// the pools of a 3-server cluster write about 2 GB of zeros during a
// 3.2 GB restore (docs/benchmarks.md, "Writes in flight per chunk rebuild,
// where the export's time goes, the pool's refill during a restore"). A
// file being formatted when a Take comes pauses until the quiet period has
// passed again (see zero).
const DefaultPoolQuiet = 10 * time.Second

// PoolStats is a snapshot of a FilePool's state and counters.
type PoolStats struct {
	// Ready is the number of formatted files Take can hand out.
	Ready int
	// Target is PoolOptions.Count.
	Target int
	// Formatting is the number of files Run is formatting or re-zeroing
	// right now (0 or 1).
	Formatting int
	// Recycled is the number of recycled files waiting to be re-zeroed.
	Recycled int
	// Taken counts files handed out by Take since OpenFilePool.
	Taken uint64
	// Empty counts Takes that found no ready file.
	Empty uint64
	// Formatted counts new files Run formatted.
	Formatted uint64
	// Rezeroed counts recycled files Run re-zeroed.
	Rezeroed uint64
	// RecycledTotal counts files Recycle accepted.
	RecycledTotal uint64
	// Paused counts the times a format or re-zero paused for a Take.
	Paused uint64
}

// FilePool hands out preallocated, zero-filled files for chunks and
// snapshots, so that creating a chunk on the write path is a rename instead
// of an allocation, and takes deleted files back for reuse (Curve's
// FilePool). One pool serves all Stores of a disk. Take and Recycle are safe
// for concurrent use; Run does the formatting in the caller's goroutine.
type FilePool struct {
	dir string
	g   geometry
	fs  FS
	log *slog.Logger

	// wake, buffered 1, tells Run that Take or Recycle changed the counts.
	wake    chan struct{}
	running atomic.Bool
	quiet   time.Duration
	// lastTake is the time of the last Take, Unix nanoseconds.
	lastTake atomic.Int64

	// mu guards everything below.
	mu         sync.Mutex
	want       int      // files to keep ready (SetTarget)
	ready      []uint64 // file numbers of ready files; Take pops the last
	dirty      []uint64 // file numbers of recycled files, FIFO
	next       uint64   // next unused file number
	formatting int
	st         PoolStats // counters only
	// seenTaken is st.Taken when Run last looked at the counts, to pick a
	// job or to begin waiting out a quiet period: tests wait for it to
	// reach Taken before they check that Run did nothing.
	seenTaken uint64
}

// poolMeta is the JSON content of pool.meta.
type poolMeta struct {
	ChunkSize uint32 `json:"chunkSize"`
	PageSize  uint32 `json:"pageSize"`
	BlockSize uint32 `json:"blockSize"`
	FileSize  int64  `json:"fileSize"`
	CRC       uint32 `json:"crc"`
}

func (m poolMeta) checksum() uint32 {
	s := fmt.Sprintf("%d/%d/%d/%d", m.ChunkSize, m.PageSize, m.BlockSize, m.FileSize)
	return crc32.Checksum([]byte(s), castagnoli)
}

// OpenFilePool opens (creating if needed) the pool in opts.Dir: it checks or
// writes pool.meta, removes leftovers of interrupted formatting and files of
// the wrong size, and counts ready and recycled files. It starts nothing;
// call Run to format.
func OpenFilePool(opts PoolOptions) (*FilePool, error) {
	o, err := (Options{Dir: opts.Dir, ChunkSize: opts.ChunkSize, PageSize: opts.PageSize,
		BlockSize: opts.BlockSize}).withDefaults()
	if err != nil {
		return nil, fmt.Errorf("datastore: pool: %w", err)
	}
	if opts.Count < 0 {
		return nil, fmt.Errorf("datastore: pool: negative Count %d: %w", opts.Count, ErrInvalidArg)
	}
	p := &FilePool{
		dir:   opts.Dir,
		g:     newGeometry(o.ChunkSize, o.PageSize, o.BlockSize),
		fs:    opts.FS,
		log:   opts.Logger,
		want:  opts.Count,
		wake:  make(chan struct{}, 1),
		quiet: opts.Quiet,
	}
	if p.quiet == 0 {
		p.quiet = DefaultPoolQuiet
	}
	if p.fs == nil {
		p.fs = OSFS{}
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if err := p.fs.MkdirAll(p.dir, 0o755); err != nil {
		return nil, fmt.Errorf("datastore: pool: %w", err)
	}
	if err := p.checkMeta(); err != nil {
		return nil, fmt.Errorf("datastore: pool %s: %w", p.dir, err)
	}
	if err := p.scan(); err != nil {
		return nil, fmt.Errorf("datastore: pool %s: %w", p.dir, err)
	}
	return p, nil
}

// checkMeta compares pool.meta with the geometry, writing it if missing.
func (p *FilePool) checkMeta() error {
	want := poolMeta{ChunkSize: p.g.chunkSize, PageSize: p.g.pageSize, BlockSize: p.g.blockSize, FileSize: p.g.fileSize}
	want.CRC = want.checksum()
	path := joinDir(p.dir, poolMetaName)
	f, err := p.fs.OpenFile(path, os.O_RDONLY, 0)
	switch {
	case err == nil:
		defer f.Close()
		buf := make([]byte, 4096)
		n, err := f.ReadAt(buf, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read %s: %w", poolMetaName, err)
		}
		var got poolMeta
		if err := json.Unmarshal(buf[:n], &got); err != nil {
			return fmt.Errorf("%s: %v: %w", poolMetaName, err, ErrFileFormat)
		}
		if got.CRC != got.checksum() {
			return fmt.Errorf("%s: %w", poolMetaName, ErrCRC)
		}
		if got != want {
			return fmt.Errorf("%s: formatted for %+v, want %+v: %w", poolMetaName, got, want, ErrFileFormat)
		}
		return nil
	case errors.Is(err, fs.ErrNotExist):
		b, _ := json.Marshal(want)
		err := writeFileDurable(p.fs, path, path+poolTmpSuffix, b)
		if err == nil {
			err = p.fs.SyncDir(p.dir)
		}
		return err
	default:
		return err
	}
}

// scan fills ready, dirty and next from the directory.
func (p *FilePool) scan() error {
	ents, err := p.fs.ReadDir(p.dir)
	if err != nil {
		return err
	}
	removed := false
	remove := func(name, why string) error {
		p.log.Warn("chunk file pool: removing file", "file", name, "reason", why)
		removed = true
		if err := p.fs.Remove(joinDir(p.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	for _, e := range ents {
		name := e.Name()
		base, kind := name, ""
		for _, suf := range []string{poolTmpSuffix, poolDirtySuffix} {
			if b, ok := strings.CutSuffix(name, suf); ok {
				base, kind = b, suf
			}
		}
		n, ok := parseDecimal(base)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		p.next = max(p.next, n+1)
		if kind == poolTmpSuffix {
			if err := remove(name, "interrupted format"); err != nil {
				return err
			}
			continue
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		if fi.Size() != p.g.fileSize {
			if err := remove(name, fmt.Sprintf("size %d, want %d", fi.Size(), p.g.fileSize)); err != nil {
				return err
			}
			continue
		}
		if kind == poolDirtySuffix {
			p.dirty = append(p.dirty, n)
		} else {
			p.ready = append(p.ready, n)
		}
	}
	slices.Sort(p.ready)
	slices.Sort(p.dirty)
	if removed {
		return p.fs.SyncDir(p.dir)
	}
	return nil
}

func (p *FilePool) path(n uint64, suffix string) string {
	return joinDir(p.dir, strconv.FormatUint(n, 10)+suffix)
}

// signal wakes Run if it waits.
func (p *FilePool) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// SetTarget changes how many files the pool keeps ready (PoolOptions.Count;
// at least 1). A larger target is formatted up to by Run, under the same
// quiet rule; after a smaller one the files already ready stay and Take
// uses them, and Run formats again only once fewer than the target are
// ready. Recycled files are re-zeroed whatever the target.
func (p *FilePool) SetTarget(n int) error {
	if n < 1 {
		return fmt.Errorf("datastore: pool %s: target %d: must be at least 1", p.dir, n)
	}
	p.mu.Lock()
	p.want = n
	p.mu.Unlock()
	p.signal()
	return nil
}

// Stats returns the pool's current state and counters.
func (p *FilePool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.st
	st.Ready, st.Target, st.Formatting, st.Recycled = len(p.ready), p.want, p.formatting, len(p.dirty)
	return st
}

// Take renames a ready file to dstPath, which must be on the pool's file
// system and should not exist (rename replaces it). The file is PageSize +
// ChunkSize + crc table bytes of zeros. It returns an error wrapping
// ErrPoolEmpty if no file is ready, or the rename's error (the file then
// stays in the pool). The caller fsyncs dstPath's directory to make the move
// durable; until then a crash may leave the file in the pool.
func (p *FilePool) Take(dstPath string) error {
	p.lastTake.Store(time.Now().UnixNano())
	p.mu.Lock()
	if len(p.ready) == 0 {
		p.st.Empty++
		p.mu.Unlock()
		p.signal()
		return fmt.Errorf("datastore: pool %s: take for %s: %w", p.dir, dstPath, ErrPoolEmpty)
	}
	n := p.ready[len(p.ready)-1]
	p.ready = p.ready[:len(p.ready)-1]
	p.mu.Unlock()
	if err := p.fs.Rename(p.path(n, ""), dstPath); err != nil {
		p.mu.Lock()
		p.ready = append(p.ready, n)
		p.mu.Unlock()
		return fmt.Errorf("datastore: pool %s: take: %w", p.dir, err)
	}
	p.mu.Lock()
	p.st.Taken++
	p.mu.Unlock()
	p.signal()
	return nil
}

// Recycle moves the file at path (a deleted chunk or snapshot file, on the
// pool's file system) into the pool, where Run re-zeroes it before it counts
// as ready. A file of the wrong size is removed instead. A missing file gives
// an error wrapping fs.ErrNotExist. The caller fsyncs path's directory.
func (p *FilePool) Recycle(path string) error {
	fi, err := p.fs.Stat(path)
	if err != nil {
		return fmt.Errorf("datastore: pool %s: recycle: %w", p.dir, err)
	}
	if !fi.Mode().IsRegular() || fi.Size() != p.g.fileSize {
		p.log.Warn("chunk file pool: not recycling file of foreign size", "file", path, "size", fi.Size())
		if err := p.fs.Remove(path); err != nil {
			return fmt.Errorf("datastore: pool %s: recycle: %w", p.dir, err)
		}
		return nil
	}
	p.mu.Lock()
	n := p.next
	p.next++
	p.mu.Unlock()
	if err := p.fs.Rename(path, p.path(n, poolDirtySuffix)); err != nil {
		return fmt.Errorf("datastore: pool %s: recycle: %w", p.dir, err)
	}
	p.mu.Lock()
	p.dirty = append(p.dirty, n)
	p.st.RecycledTotal++
	p.mu.Unlock()
	p.signal()
	return nil
}

// Run re-zeroes recycled files (first) and formats new files until Count
// are ready, each only once no Take has happened for the quiet period
// (PoolOptions.Quiet), then waits for Take and Recycle to give it more
// work. It blocks until ctx ends and returns nil then, leaving a file it
// was working on to be redone later; it returns an error only if Run is
// already running. An I/O error is logged and the work retried after a
// pause. The caller owns the goroutine that calls Run.
func (p *FilePool) Run(ctx context.Context) error {
	if !p.running.CompareAndSwap(false, true) {
		return fmt.Errorf("datastore: pool %s: Run already running", p.dir)
	}
	defer p.running.Store(false)
	st := p.Stats()
	p.log.Info("chunk file pool running", "dir", p.dir, "ready", st.Ready, "recycled", st.Recycled,
		"target", st.Target, "file_size", p.g.fileSize)
	lastLog := time.Now()
	wasFull := st.Ready >= st.Target
	for ctx.Err() == nil {
		if !p.waitQuiet(ctx) {
			break
		}
		p.mu.Lock()
		p.seenTaken = p.st.Taken
		var n uint64
		job := ""
		switch {
		case len(p.dirty) > 0:
			n, job = p.dirty[0], "rezero"
			p.dirty = p.dirty[1:]
		case len(p.ready) < p.want:
			n, job = p.next, "format"
			p.next++
		}
		if job != "" {
			p.formatting++
		}
		p.mu.Unlock()

		if job == "" {
			select {
			case <-ctx.Done():
			case <-p.wake:
			}
			continue
		}
		var err error
		if job == "rezero" {
			err = p.rezero(ctx, n)
		} else {
			err = p.format(ctx, n)
		}
		p.mu.Lock()
		p.formatting--
		switch {
		case err == nil:
			p.ready = append(p.ready, n)
			if job == "rezero" {
				p.st.Rezeroed++
			} else {
				p.st.Formatted++
			}
		case job == "rezero" && errors.Is(err, fs.ErrNotExist):
			// Removed behind the pool's back: forget it.
		case job == "rezero":
			p.dirty = append(p.dirty, n) // retry later
		}
		ready, want := len(p.ready), p.want
		p.mu.Unlock()

		switch {
		case err != nil && ctx.Err() != nil:
			// Interrupted by shutdown: not an error.
		case err != nil:
			p.log.Error("chunk file pool: "+job+" failed", "dir", p.dir, "file", n, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(poolRetry):
			}
		case ready >= want && !wasFull:
			p.log.Info("chunk file pool ready", "dir", p.dir, "ready", ready, "target", want)
			lastLog = time.Now()
		case time.Since(lastLog) >= poolLogEvery:
			p.log.Info("chunk file pool progress", "dir", p.dir, "ready", ready, "target", want)
			lastLog = time.Now()
		}
		wasFull = ready >= want
	}
	p.log.Info("chunk file pool stopped", "dir", p.dir)
	return nil
}

// waitQuiet waits until no Take has happened for the quiet period (see
// DefaultPoolQuiet); false if ctx ended first.
func (p *FilePool) waitQuiet(ctx context.Context) bool {
	for p.quiet > 0 {
		left := p.quiet - time.Since(time.Unix(0, p.lastTake.Load()))
		if left <= 0 {
			return true
		}
		p.mu.Lock()
		p.seenTaken = p.st.Taken
		p.mu.Unlock()
		t := time.NewTimer(left)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
	return ctx.Err() == nil
}

// format creates ready file n: it writes "<n>.tmp" full of zeros, fsyncs
// it, renames it to "<n>" and fsyncs the directory. On error the temp file
// is removed.
func (p *FilePool) format(ctx context.Context, n uint64) (err error) {
	tmp := p.path(n, poolTmpSuffix)
	f, err := p.fs.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	err = p.zero(ctx, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = p.fs.Rename(tmp, p.path(n, ""))
	}
	if err != nil {
		_ = p.fs.Remove(tmp)
		return err
	}
	return p.fs.SyncDir(p.dir)
}

// rezero overwrites recycled file "<n>.dirty" with zeros, fsyncs it and
// renames it to "<n>". On error the file stays dirty.
func (p *FilePool) rezero(ctx context.Context, n uint64) error {
	path := p.path(n, poolDirtySuffix)
	f, err := p.fs.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	err = p.zero(ctx, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = p.fs.Rename(path, p.path(n, ""))
	}
	if err == nil {
		err = p.fs.SyncDir(p.dir)
	}
	return err
}

// zeroBuf is the shared source of zeros for formatting; never written.
var zeroBuf = make([]byte, poolZeroBuf)

// zero writes zeros over [0, fileSize) of f and fsyncs it, giving up
// between writes when ctx ends. A Take after zero began pauses it between
// writes until the quiet period has passed again, so a refill competes
// with a new burst of creations for one write at most. The crc table goes
// down a page at a time: every chunk write later updates a few bytes of it,
// and a small write into a page-cache folio costs more the larger the folio
// (maxWritePiece); the table is a few pages, so this costs nothing
// (docs/performance.md, "The crc table written a page at a time").
func (p *FilePool) zero(ctx context.Context, f File) error {
	began := time.Now().UnixNano()
	for off := int64(0); off < p.g.fileSize; {
		if p.lastTake.Load() > began {
			p.mu.Lock()
			p.st.Paused++
			p.mu.Unlock()
			if !p.waitQuiet(ctx) {
				return ctx.Err()
			}
			began = time.Now().UnixNano()
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		end, piece := p.g.crcOff, int64(poolZeroBuf)
		if off >= p.g.crcOff {
			end, piece = p.g.fileSize, int64(p.g.pageSize)
		}
		n := min(piece, end-off)
		if err := writePieces(f, zeroBuf[:n], off); err != nil {
			return err
		}
		off += n
	}
	return f.Sync()
}
