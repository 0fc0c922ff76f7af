package datastore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/internal/testwait"
)

func testPoolOpts(dir string, count int) PoolOptions {
	return PoolOptions{Dir: dir, Count: count, ChunkSize: testChunkSize, PageSize: testPage, BlockSize: testBlock}
}

// runPool runs p until the test ends and returns a function that stops it
// and waits for Run to return.
func runPool(t *testing.T, p *FilePool) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := p.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// waitPool waits until cond holds for p's stats.
func waitPool(t *testing.T, p *FilePool, what string, cond func(PoolStats) bool) PoolStats {
	t.Helper()
	var st PoolStats
	testwait.Until(t, 20*time.Second, func() error {
		if st = p.Stats(); !cond(st) {
			return fmt.Errorf("pool: waiting for %s: %+v", what, st)
		}
		return nil
	})
	return st
}

// waitSeen waits until Run has looked at p's counts since the last Take:
// it picked its next job, or began waiting out the quiet period.
func waitSeen(t *testing.T, p *FilePool) {
	t.Helper()
	testwait.Until(t, 20*time.Second, func() error {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.seenTaken != p.st.Taken {
			return fmt.Errorf("pool: Run last looked after %d takes of %d", p.seenTaken, p.st.Taken)
		}
		return nil
	})
}

func poolReady(n int) func(PoolStats) bool {
	return func(st PoolStats) bool { return st.Ready == n && st.Recycled == 0 && st.Formatting == 0 }
}

// checkZeroFile checks that path is a full-size, all-zero, allocated file.
func checkZeroFile(t *testing.T, path string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) != testFileSize || !bytes.Equal(raw, make([]byte, testFileSize)) {
		t.Fatalf("%s: %d bytes, not all zero", path, len(raw))
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Blocks*512 < testFileSize {
		t.Fatalf("%s is sparse: %d bytes allocated of %d", path, st.Blocks*512, testFileSize)
	}
}

func TestPoolFormatTakeRecycle(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	opts := testPoolOpts(dir, 3)
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	opts.Quiet = -1 // refills at once; TestPoolQuiet covers the wait
	p, err := OpenFilePool(opts)
	if err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st != (PoolStats{Target: 3}) {
		t.Fatalf("new pool: %+v", st)
	}
	stop := runPool(t, p)
	st := waitPool(t, p, "3 ready", poolReady(3))
	if st.Formatted != 3 {
		t.Fatalf("Formatted %d", st.Formatted)
	}
	for _, name := range []string{"0", "1", "2"} {
		checkZeroFile(t, filepath.Join(dir, name))
	}
	if !strings.Contains(logs.String(), "chunk file pool ready") {
		t.Fatalf("no ready log line:\n%s", logs.String())
	}

	// Take moves a file out; Run formats a replacement.
	dst := filepath.Join(t.TempDir(), "taken")
	if err := p.Take(dst); err != nil {
		t.Fatal(err)
	}
	checkZeroFile(t, dst)
	waitPool(t, p, "refill", func(st PoolStats) bool { return st.Ready == 3 && st.Taken == 1 && st.Formatted == 4 })

	// Recycle: the file comes back dirty and is re-zeroed before it is
	// ready again.
	if err := os.WriteFile(dst, bytes.Repeat([]byte{0xAB}, testFileSize), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.Recycle(dst); err != nil {
		t.Fatal(err)
	}
	st = waitPool(t, p, "rezero", func(st PoolStats) bool { return st.Rezeroed == 1 && st.Ready == 4 && st.Recycled == 0 })
	if st.RecycledTotal != 1 {
		t.Fatalf("RecycledTotal %d", st.RecycledTotal)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Name() != poolMetaName {
			checkZeroFile(t, filepath.Join(dir, e.Name()))
		}
	}
	// A file of a foreign size is removed, not recycled.
	junk := filepath.Join(t.TempDir(), "junk")
	if err := os.WriteFile(junk, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.Recycle(junk); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(junk); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("foreign file kept: %v", err)
	}
	if err := p.Recycle(junk); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Recycle of missing file: %v", err)
	}

	// Run stops with ctx; Take drains the pool to ErrPoolEmpty.
	stop()
	for range 4 {
		if err := p.Take(filepath.Join(t.TempDir(), "x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Take(filepath.Join(t.TempDir(), "x")); !errors.Is(err, ErrPoolEmpty) {
		t.Fatalf("Take from empty pool: %v", err)
	}
	if st := p.Stats(); st.Empty != 1 || st.Ready != 0 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestPoolRunStopsAndResumes(t *testing.T) {
	dir := t.TempDir()
	p, err := OpenFilePool(testPoolOpts(dir, 50))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	waitPool(t, p, "some progress", func(st PoolStats) bool { return st.Ready >= 2 })
	if err := p.Run(ctx); err == nil {
		t.Fatal("second concurrent Run succeeded")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop after cancel")
	}
	st := p.Stats()
	if st.Formatting != 0 || st.Ready >= 50 {
		t.Fatalf("after stop: %+v", st)
	}
	// Leftover temp files and files of the wrong size are cleaned up by the
	// next OpenFilePool, which finds the ready files.
	if err := os.WriteFile(filepath.Join(dir, "9999.tmp"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "9998"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "9997.dirty"), make([]byte, testFileSize), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "unrelated"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	p2, err := OpenFilePool(testPoolOpts(dir, 2))
	if err != nil {
		t.Fatal(err)
	}
	st2 := p2.Stats()
	if st2.Ready != st.Ready || st2.Recycled != 1 {
		t.Fatalf("reopened pool: %+v, before %+v", st2, st)
	}
	for _, name := range []string{"9999.tmp", "9998"} {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s kept: %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "unrelated")); err != nil {
		t.Fatal(err)
	}
	// New file numbers do not collide with old ones.
	runPool(t, p2)
	waitPool(t, p2, "rezero", func(st PoolStats) bool { return st.Rezeroed == 1 })
	if _, err := os.Stat(filepath.Join(dir, "9997")); err != nil {
		t.Fatal(err)
	}
}

func TestPoolGeometry(t *testing.T) {
	dir := t.TempDir()
	p, err := OpenFilePool(testPoolOpts(dir, 0))
	if err != nil {
		t.Fatal(err)
	}
	other := testPoolOpts(dir, 0)
	other.ChunkSize *= 2
	if _, err := OpenFilePool(other); !errors.Is(err, ErrFileFormat) {
		t.Fatalf("pool reopened with other sizes: %v", err)
	}
	o := testOpts(t.TempDir())
	o.ChunkSize *= 2
	o.Pool = p
	if _, err := Open(o); !errors.Is(err, ErrInvalidArg) {
		t.Fatalf("store with other sizes than its pool: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, poolMetaName), []byte(`{"chunkSize":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenFilePool(testPoolOpts(dir, 0)); !errors.Is(err, ErrCRC) {
		t.Fatalf("pool meta with bad crc: %v", err)
	}
	for _, bad := range []PoolOptions{{}, {Dir: dir, Count: -1}, {Dir: dir, BlockSize: 3}} {
		if _, err := OpenFilePool(bad); !errors.Is(err, ErrInvalidArg) {
			t.Fatalf("OpenFilePool(%+v): %v", bad, err)
		}
	}
}

// TestStoreWithPool: chunks and snapshots come from the pool, deleted files
// go back, re-zeroed files serve new chunks cleanly, and an empty pool falls
// back to creating files.
func TestStoreWithPool(t *testing.T) {
	root := t.TempDir()
	poolDir := filepath.Join(root, "pool")
	p, err := OpenFilePool(testPoolOpts(poolDir, 3))
	if err != nil {
		t.Fatal(err)
	}
	stop := runPool(t, p)
	waitPool(t, p, "3 ready", poolReady(3))
	stop() // control refills by hand below

	opts := testOpts(filepath.Join(root, "store"))
	opts.Pool = p
	s := openTestOpts(t, opts)
	mustWrite(t, s, 1, 1, blocksData(1, 0, testBlocks), 0)
	mustWrite(t, s, 1, 2, blocksData(2, 0, 2), 0) // snapshot from the pool
	if err := s.CreateCloneChunk(2, 1, 0, testChunkSize, testLoc); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.PoolTakes != 3 || st.PoolFallbacks != 0 {
		t.Fatalf("stats: %+v", st)
	}
	// The pool is empty: the next chunk is created on the write path.
	mustWrite(t, s, 3, 1, blocksData(3, 0, 1), 0)
	if st := s.Stats(); st.PoolTakes != 3 || st.PoolFallbacks != 1 {
		t.Fatalf("stats after fallback: %+v", st)
	}
	checkBlocks(t, "pooled chunk", func(b []byte) error { return s.ReadChunk(1, b, 0) },
		map[uint32]byte{0: 2, 1: 2, 2: 1, 3: 1, 4: 1, 5: 1, 6: 1, 7: 1})
	checkBlocks(t, "pooled snapshot", func(b []byte) error { return s.ReadChunkSnapshot(1, 1, b, 0) },
		map[uint32]byte{0: 1, 1: 1, 2: 1, 3: 1, 4: 1, 5: 1, 6: 1, 7: 1})

	// Deleting recycles chunk and snapshot files into the pool.
	if err := s.DeleteChunk(1, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteChunk(3, 0); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Recycled != 3 || st.Ready != 0 {
		t.Fatalf("pool after deletes: %+v", st)
	}
	runPool(t, p)
	waitPool(t, p, "re-zeroed", poolReady(3))

	// New chunks, snapshots and clones from re-zeroed files read as zeros
	// and verify.
	mustWrite(t, s, 4, 1, blocksData(4, 5, 1), 5*testBlock)
	mustWrite(t, s, 4, 2, blocksData(5, 6, 1), 6*testBlock)
	if err := s.CreateCloneChunk(5, 1, 0, testChunkSize, testLoc); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.PoolTakes != 6 {
		t.Fatalf("stats: %+v", st)
	}
	if !bytes.Equal(readAll(t, s, 4)[:5*testBlock], make([]byte, 5*testBlock)) {
		t.Fatal("recycled chunk not zero")
	}
	checkBlocks(t, "recycled snapshot", func(b []byte) error { return s.ReadChunkSnapshot(4, 1, b, 0) },
		map[uint32]byte{5: 4})
	buf := make([]byte, testChunkSize)
	if u, err := s.ReadChunkClone(5, buf, 0); err != nil || len(u) != 1 || !bytes.Equal(buf, make([]byte, testChunkSize)) {
		t.Fatalf("recycled clone: %v, %v", u, err)
	}
	if h, err := s.GetChunkHash(5, 0, testChunkSize); err != nil || h == "0" {
		t.Fatalf("hash of recycled clone: %s, %v", h, err)
	}
	// Reopen: every file is a valid chunk or snapshot.
	s = reopen(t, s)
	if got := s.Files(); !slices.Equal(got, []string{"chunk_2", "chunk_4", "chunk_5", "chunk_4_snap_1"}) {
		t.Fatalf("Files: %v", got)
	}
}

// TestPoolQuiet: Run formats no file while Takes keep coming (within the
// quiet period of the last one) and refills once they stop.
func TestPoolQuiet(t *testing.T) {
	open := func(quiet time.Duration) *FilePool {
		opts := testPoolOpts(t.TempDir(), 2)
		opts.Quiet = quiet
		p, err := OpenFilePool(opts)
		if err != nil {
			t.Fatal(err)
		}
		runPool(t, p)
		waitPool(t, p, "2 ready", poolReady(2))
		return p
	}
	take := func(p *FilePool) {
		t.Helper()
		if err := p.Take(filepath.Join(t.TempDir(), "taken")); err != nil {
			t.Fatal(err)
		}
	}

	// A quiet period longer than the test: a Take is not refilled, and a
	// Take of the last file leaves the pool empty (the store then creates
	// its files sparse).
	held := open(time.Hour)
	take(held)
	waitSeen(t, held) // Run saw the Take: it waits out the quiet period
	if st := held.Stats(); st.Ready != 1 || st.Formatted != 2 || st.Formatting != 0 {
		t.Fatalf("within the quiet period: %+v, want 1 ready, 2 formatted, none formatting", st)
	}
	take(held)
	if err := held.Take(filepath.Join(t.TempDir(), "x")); !errors.Is(err, ErrPoolEmpty) {
		t.Fatalf("Take of an empty pool: %v", err)
	}
	// Run waits out the first Take's quiet period (an hour) before it
	// looks at the counts again.
	if st := held.Stats(); st.Ready != 0 || st.Formatted != 2 || st.Formatting != 0 {
		t.Fatalf("empty pool within the quiet period: %+v", st)
	}

	// A short one: the pool refills after the last Take.
	short := open(50 * time.Millisecond)
	take(short)
	take(short)
	st := waitPool(t, short, "refill after the quiet period", poolReady(2))
	if st.Formatted != 4 || st.Taken != 2 {
		t.Fatalf("after refill: %+v", st)
	}
}

// TestPoolSetTarget: a larger target is formatted up to; after a smaller
// one the ready files stay, and formatting resumes only once takes bring
// the pool below the target; a target below 1 is refused and changes
// nothing.
func TestPoolSetTarget(t *testing.T) {
	dir := t.TempDir()
	opts := testPoolOpts(dir, 1)
	opts.Quiet = -1
	p, err := OpenFilePool(opts)
	if err != nil {
		t.Fatal(err)
	}
	runPool(t, p)
	waitPool(t, p, "1 ready", poolReady(1))
	if err := p.SetTarget(3); err != nil {
		t.Fatal(err)
	}
	st := waitPool(t, p, "3 ready", poolReady(3))
	if st.Target != 3 || st.Formatted != 3 {
		t.Fatalf("after SetTarget(3): %+v", st)
	}
	if err := p.SetTarget(0); err == nil || p.Stats().Target != 3 {
		t.Fatalf("SetTarget(0): %v, target %d", err, p.Stats().Target)
	}
	if err := p.SetTarget(1); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := p.Take(filepath.Join(dir, fmt.Sprintf("taken-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	waitSeen(t, p) // Run would format now if it were to
	if st := p.Stats(); st.Ready != 1 || st.Target != 1 || st.Formatted != 3 || st.Formatting != 0 {
		t.Fatalf("after SetTarget(1) and 2 takes: %+v", st)
	}
	if err := p.Take(filepath.Join(dir, "taken-2")); err != nil {
		t.Fatal(err)
	}
	if st := waitPool(t, p, "1 ready again", poolReady(1)); st.Formatted != 4 {
		t.Fatalf("refill after the last take: %+v", st)
	}
}

// gateFS holds the first write of a file being formatted until release is
// closed, and notes when each write to such files was done.
type gateFS struct {
	FS
	armed   chan struct{} // closed: hold the next format write
	entered chan struct{} // closed when a write is held
	release chan struct{}
	once    sync.Once
	mu      sync.Mutex
	at      []time.Time // when each write was done, past the hold
}

// writeTimes returns when each write was done.
func (g *gateFS) writeTimes() []time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.at)
}

type gateFile struct {
	File
	g *gateFS
}

func (g *gateFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := g.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, poolTmpSuffix) {
		return f, err
	}
	return gateFile{File: f, g: g}, nil
}

func (f gateFile) WriteAt(b []byte, off int64) (int, error) {
	select {
	case <-f.g.armed:
		f.g.once.Do(func() {
			close(f.g.entered)
			<-f.g.release
		})
	default:
	}
	f.g.mu.Lock()
	f.g.at = append(f.g.at, time.Now())
	f.g.mu.Unlock()
	return f.File.WriteAt(b, off)
}

// TestPoolFormatPausesForTake: a Take while a file is being formatted
// pauses the format between writes until the quiet period has passed
// again; the pause is counted and the format then completes.
func TestPoolFormatPausesForTake(t *testing.T) {
	g := &gateFS{FS: OSFS{}, armed: make(chan struct{}), entered: make(chan struct{}),
		release: make(chan struct{})}
	opts := testPoolOpts(t.TempDir(), 2)
	opts.FS = g
	opts.Quiet = 2 * time.Second
	p, err := OpenFilePool(opts)
	if err != nil {
		t.Fatal(err)
	}
	runPool(t, p)
	waitPool(t, p, "2 ready", poolReady(2))
	close(g.armed)
	if err := p.Take(filepath.Join(t.TempDir(), "a")); err != nil {
		t.Fatal(err)
	}
	select { // Run formats a replacement after the quiet period
	case <-g.entered:
	case <-time.After(20 * time.Second):
		t.Fatalf("no format began: %+v", p.Stats())
	}
	tookB := time.Now()
	if err := p.Take(filepath.Join(t.TempDir(), "b")); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	st := waitPool(t, p, "a pause", func(st PoolStats) bool { return st.Paused == 1 })
	if st.Formatting != 1 || st.Ready != 0 {
		t.Fatalf("paused: %+v, want 1 formatting, none ready", st)
	}
	before := len(g.writeTimes())
	st = waitPool(t, p, "refill", poolReady(2))
	if st.Paused != 1 || st.Formatted != 4 {
		t.Fatalf("after refill: %+v", st)
	}
	// No format write during the pause: the format wrote nothing more
	// until the quiet period after the second Take had passed.
	resumed := tookB.Add(opts.Quiet)
	for i, at := range g.writeTimes()[before:] {
		if at.Before(resumed) {
			t.Fatalf("format write %d of the pause done %v after the Take, inside the %v quiet period", i, at.Sub(tookB), opts.Quiet)
		}
	}
	ents, _ := os.ReadDir(opts.Dir)
	for _, e := range ents {
		if e.Name() != poolMetaName {
			checkZeroFile(t, filepath.Join(opts.Dir, e.Name()))
		}
	}
}
