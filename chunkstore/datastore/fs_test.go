package datastore

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// openFaulty opens a store over a FaultFS.
func openFaulty(t *testing.T) (*Store, *FaultFS, string) {
	t.Helper()
	dir := t.TempDir()
	ffs := NewFaultFS(nil)
	opts := testOpts(dir)
	opts.FS = ffs
	return openTestOpts(t, opts), ffs, dir
}

func TestFaultFSRules(t *testing.T) {
	dir := t.TempDir()
	ffs := NewFaultFS(OSFS{})
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	f, err := ffs.OpenFile(a, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	write := func() error { _, err := f.WriteAt([]byte("x"), 0); return err }
	read := func() error { _, err := f.ReadAt(make([]byte, 1), 0); return err }

	// A rule with a count fires that often, for matching ops and paths only.
	ffs.Inject(FaultRule{Ops: FaultWrite, Path: PathBase("a"), Err: syscall.ENOSPC, Count: 2})
	for i := range 2 {
		err := write()
		var pe *fs.PathError
		if !errors.Is(err, syscall.ENOSPC) || !errors.As(err, &pe) || pe.Path != a || pe.Op != "write" {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if err := write(); err != nil {
		t.Fatalf("third write: %v", err)
	}
	if err := read(); err != nil {
		t.Fatalf("read under a write rule: %v", err)
	}
	if ffs.Injected() != 2 {
		t.Fatalf("Injected %d", ffs.Injected())
	}

	// Default error is EIO; remove() ends the rule; SetEnabled toggles.
	remove := ffs.Inject(FaultRule{Ops: FaultRead | FaultSync})
	if err := read(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read: %v", err)
	}
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("sync: %v", err)
	}
	ffs.SetEnabled(false)
	if err := read(); err != nil {
		t.Fatalf("read while disabled: %v", err)
	}
	ffs.SetEnabled(true)
	remove()
	remove()
	if err := read(); err != nil {
		t.Fatalf("read after remove: %v", err)
	}

	// Rename: an open file is matched by its new name; the rule is tried
	// on both paths of a rename.
	if err := ffs.Rename(a, b); err != nil {
		t.Fatal(err)
	}
	ffs.Inject(FaultRule{Ops: FaultWrite, Path: PathBase("b")})
	if err := write(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("write after rename: %v", err)
	}
	ffs.Clear()
	ffs.Inject(FaultRule{Ops: FaultRename, Path: PathBase("c")})
	if err := ffs.Rename(b, filepath.Join(dir, "c")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("rename to c: %v", err)
	}
	ffs.Clear()

	// Create vs open, remove, stat, readdir, syncdir, mkdir.
	ffs.Inject(FaultRule{Ops: FaultCreate, Path: PathContains("new")})
	if _, err := ffs.OpenFile(filepath.Join(dir, "new"), os.O_RDWR|os.O_CREATE, 0o644); !errors.Is(err, syscall.EIO) {
		t.Fatalf("create: %v", err)
	}
	if err := ffs.MkdirAll(filepath.Join(dir, "newdir"), 0o755); !errors.Is(err, syscall.EIO) {
		t.Fatalf("mkdir: %v", err)
	}
	if _, err := ffs.OpenFile(b, os.O_RDWR, 0); err != nil {
		t.Fatalf("open of existing file under a create rule: %v", err)
	}
	ffs.Clear()
	ffs.Inject(FaultRule{Ops: FaultOpen | FaultRemove | FaultRead | FaultSync, Path: PathBase(filepath.Base(dir)), Err: syscall.EACCES})
	if _, err := ffs.ReadDir(dir); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("readdir: %v", err)
	}
	if err := ffs.SyncDir(dir); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("syncdir: %v", err)
	}
	if _, err := ffs.Stat(dir); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("stat: %v", err)
	}
	ffs.Clear()
	if err := ffs.Remove(b); err != nil {
		t.Fatal(err)
	}
}

// TestFaultENOSPCOnWrite: a write that fails with ENOSPC reports it and
// leaves a fresh block unchanged (zeros, valid checksum).
func TestFaultENOSPCOnWrite(t *testing.T) {
	s, ffs, _ := openFaulty(t)
	mustWrite(t, s, 1, 1, blocksData(1, 0, 1), 0)
	ffs.Inject(FaultRule{Ops: FaultWrite, Path: PathBase("chunk_1"), Err: syscall.ENOSPC})
	err := s.WriteChunk(1, 1, blocksData(2, 3, 2), 3*testBlock)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("WriteChunk: got %v, want ENOSPC", err)
	}
	// Other chunks are unaffected.
	mustWrite(t, s, 2, 1, blocksData(2, 0, 1), 0)
	ffs.Clear()
	buf := make([]byte, 2*testBlock)
	if err := s.ReadChunk(1, buf, 3*testBlock); err != nil || !bytes.Equal(buf, make([]byte, 2*testBlock)) {
		t.Fatalf("fresh blocks after ENOSPC: %v", err)
	}
	if err := s.ReadChunk(1, buf[:testBlock], 0); err != nil || !bytes.Equal(buf[:testBlock], blockData(1, 0)) {
		t.Fatalf("old block after ENOSPC: %v", err)
	}
	// The write succeeds once space is back.
	mustWrite(t, s, 1, 1, blocksData(2, 3, 2), 3*testBlock)

	// ENOSPC creating a chunk: error, no chunk, no file.
	ffs.Inject(FaultRule{Ops: FaultWrite | FaultCreate, Path: PathContains("chunk_3"), Err: syscall.ENOSPC})
	if err := s.WriteChunk(3, 1, blocksData(1, 0, 1), 0); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("create: got %v, want ENOSPC", err)
	}
	if err := s.CreateCloneChunk(3, 1, 0, testChunkSize, testLoc); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("create clone: got %v, want ENOSPC", err)
	}
	ffs.Clear()
	if got := s.ListChunks(); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("ListChunks: %v", got)
	}
	if got := s.Files(); !slices.Equal(got, []string{"chunk_1", "chunk_2"}) {
		t.Fatalf("Files: %v", got)
	}
}

// TestFaultCOWFailure: if the snapshot copy fails, the chunk is not
// overwritten.
func TestFaultCOWFailure(t *testing.T) {
	for _, op := range []FaultOp{FaultWrite, FaultSync} {
		t.Run(op.String(), func(t *testing.T) {
			s, ffs, _ := openFaulty(t)
			mustWrite(t, s, 1, 1, blocksData(1, 0, 2), 0)
			mustWrite(t, s, 1, 2, blocksData(2, 1, 1), testBlock) // snapshot sn 1, block 1 copied
			ffs.Inject(FaultRule{Ops: op, Path: PathContains("_snap_"), Err: syscall.EIO})
			if err := s.WriteChunk(1, 2, blocksData(3, 0, 1), 0); !errors.Is(err, syscall.EIO) {
				t.Fatalf("WriteChunk: got %v, want EIO", err)
			}
			ffs.Clear()
			checkBlocks(t, "live", func(b []byte) error { return s.ReadChunk(1, b, 0) }, map[uint32]byte{0: 1, 1: 2})
			checkBlocks(t, "snapshot", func(b []byte) error { return s.ReadChunkSnapshot(1, 1, b, 0) }, map[uint32]byte{0: 1, 1: 1})
			mustWrite(t, s, 1, 2, blocksData(3, 0, 1), 0)
			checkBlocks(t, "snapshot after retry", func(b []byte) error { return s.ReadChunkSnapshot(1, 1, b, 0) }, map[uint32]byte{0: 1, 1: 1})
		})
	}
}

func TestFaultEIOOnRead(t *testing.T) {
	s, ffs, _ := openFaulty(t)
	mustWrite(t, s, 1, 1, blocksData(1, 0, 1), 0)
	ffs.Inject(FaultRule{Ops: FaultRead, Path: PathBase("chunk_1"), Err: syscall.EIO, Count: 1})
	err := s.ReadChunk(1, make([]byte, testBlock), 0)
	if !errors.Is(err, syscall.EIO) || errors.Is(err, ErrCRC) {
		t.Fatalf("ReadChunk: got %v, want EIO", err)
	}
	if _, err := s.GetChunkHash(1, 0, 10); err != nil {
		t.Fatalf("after the one-shot fault: %v", err)
	}
	if s.Stats().CRCFailures != 0 {
		t.Fatal("an I/O error counted as a crc failure")
	}
}

// TestFaultSync: a failed fsync fails Sync and keeps the chunk dirty (meta
// included); a later Sync writes it.
func TestFaultSync(t *testing.T) {
	s, ffs, dir := openFaulty(t)
	mustWrite(t, s, 1, 1, blocksData(1, 0, 1), 0)
	mustWrite(t, s, 2, 1, blocksData(1, 0, 1), 0)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, s, 1, 1, blocksData(2, 0, 1), 0)
	if err := s.DeleteChunkSnapshotOrCorrectSn(2, 5); err != nil { // meta only
		t.Fatal(err)
	}
	ffs.Inject(FaultRule{Ops: FaultSync, Path: PathContains("chunk_")})
	if err := s.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Sync: got %v, want EIO", err)
	}
	if got := dirtyChunks(s); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("dirty after failed Sync: %v", got)
	}
	ffs.Clear()
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := dirtyChunks(s); len(got) != 0 {
		t.Fatalf("dirty after Sync: %v", got)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "chunk_2"))
	if err != nil {
		t.Fatal(err)
	}
	var m MetaPage
	if err := m.Unmarshal(raw); err != nil || m.CorrectedSn != 5 {
		t.Fatalf("meta page on disk after Sync: %+v, %v", m, err)
	}
}

// TestFaultOpen: I/O errors while opening fail Open with the errno.
func TestFaultOpen(t *testing.T) {
	s, _ := openTest(t)
	mustWrite(t, s, 1, 1, blocksData(1, 0, 1), 0)
	opts := s.Options()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, op := range []FaultOp{FaultRead, FaultOpen, FaultCreate} {
		ffs := NewFaultFS(nil)
		ffs.Inject(FaultRule{Ops: op, Err: syscall.EIO})
		o := opts
		o.FS = ffs
		if s, err := Open(o); !errors.Is(err, syscall.EIO) {
			if s != nil {
				s.Close()
			}
			t.Fatalf("Open with %v faults: got %v, want EIO", op, err)
		}
	}
}
