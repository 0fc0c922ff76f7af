package datastore

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// blockData is the content a test gives block blk when writing with seed.
func blockData(seed byte, blk uint32) []byte {
	return pattern(seed+byte(blk)*31, testBlock)
}

// blocksData is blockData for blocks [blk, blk+n) concatenated.
func blocksData(seed byte, blk, n uint32) []byte {
	var b []byte
	for i := range n {
		b = append(b, blockData(seed, blk+i)...)
	}
	return b
}

// step is one operation of a COW scenario on chunk 1.
type step struct {
	op     string // "w" WriteChunk, "ds" DeleteChunkSnapshotOrCorrectSn, "del" DeleteChunk
	sn     uint64
	blk, n uint32
	seed   byte
	err    error
}

func w(sn uint64, blk, n uint32, seed byte) step {
	return step{op: "w", sn: sn, blk: blk, n: n, seed: seed}
}
func ds(sn uint64) step  { return step{op: "ds", sn: sn} }
func del(sn uint64) step { return step{op: "del", sn: sn} }
func (s step) fails(err error) step {
	s.err = err
	return s
}

func (st step) apply(s *Store) error {
	switch st.op {
	case "w":
		return s.WriteChunk(1, st.sn, blocksData(st.seed, st.blk, st.n), st.blk*testBlock)
	case "ds":
		return s.DeleteChunkSnapshotOrCorrectSn(1, st.sn)
	case "del":
		return s.DeleteChunk(1, st.sn)
	}
	panic("bad step " + st.op)
}

// checkBlocks reads blocks [0, 8) of chunk 1 with read (one 8-block read,
// mixing sources) and compares with want (block -> seed; absent: zero).
func checkBlocks(t *testing.T, what string, read func(buf []byte) error, want map[uint32]byte) {
	t.Helper()
	buf := make([]byte, 8*testBlock)
	if err := read(buf); err != nil {
		t.Fatalf("%s: read: %v", what, err)
	}
	for b := range uint32(8) {
		exp := make([]byte, testBlock)
		if seed, ok := want[b]; ok {
			exp = blockData(seed, b)
		}
		if !bytes.Equal(buf[b*testBlock:(b+1)*testBlock], exp) {
			t.Fatalf("%s: block %d differs from model (seed %d)", what, b, want[b])
		}
	}
}

// TestCOWRules runs sn/snapshot scenarios after Curve's rules (research
// §2.3), checks the state, the state after reopen, and the state after the
// whole scenario is replayed on top of itself (as a Raft log replay would).
func TestCOWRules(t *testing.T) {
	const A, B, C = 10, 20, 30
	tests := []struct {
		name    string
		steps   []step
		missing bool // chunk 1 does not exist at the end
		info    ChunkInfo
		live    map[uint32]byte
		snap    map[uint32]byte // content at info.SnapSn
		cow     uint64          // blocks copied, first run only
	}{
		{name: "first write creates the chunk at its sn",
			steps: []step{w(1, 0, 2, A)},
			info:  ChunkInfo{Sn: 1}, live: map[uint32]byte{0: A, 1: A}},
		{name: "same sn overwrites in place",
			steps: []step{w(1, 0, 2, A), w(1, 1, 1, B)},
			info:  ChunkInfo{Sn: 1}, live: map[uint32]byte{0: A, 1: B}},
		{name: "newer sn snapshots at the old sn and copies the written block",
			steps: []step{w(1, 0, 2, A), w(2, 0, 1, B)},
			info:  ChunkInfo{Sn: 2, SnapSn: 1}, live: map[uint32]byte{0: B, 1: A},
			snap: map[uint32]byte{0: A, 1: A}, cow: 1},
		{name: "first copy wins",
			steps: []step{w(1, 0, 2, A), w(2, 0, 1, B), w(2, 0, 2, C)},
			info:  ChunkInfo{Sn: 2, SnapSn: 1}, live: map[uint32]byte{0: C, 1: C},
			snap: map[uint32]byte{0: A, 1: A}, cow: 2},
		{name: "multi-block write copies only blocks not yet copied",
			steps: []step{w(1, 0, 4, A), w(2, 1, 1, B), w(2, 0, 4, C)},
			info:  ChunkInfo{Sn: 2, SnapSn: 1}, live: map[uint32]byte{0: C, 1: C, 2: C, 3: C},
			snap: map[uint32]byte{0: A, 1: A, 2: A, 3: A}, cow: 4},
		{name: "never written block is copied as zeros",
			steps: []step{w(1, 0, 1, A), w(2, 3, 1, B)},
			info:  ChunkInfo{Sn: 2, SnapSn: 1}, live: map[uint32]byte{0: A, 3: B},
			snap: map[uint32]byte{0: A}, cow: 1},
		{name: "sn jump of several",
			steps: []step{w(1, 0, 1, A), w(5, 0, 1, B)},
			info:  ChunkInfo{Sn: 5, SnapSn: 1}, live: map[uint32]byte{0: B}, snap: map[uint32]byte{0: A}, cow: 1},
		{name: "older sn is backward and changes nothing",
			steps: []step{w(2, 0, 1, A), w(1, 0, 1, B).fails(ErrBackward), w(1, 5, 1, B).fails(ErrBackward)},
			info:  ChunkInfo{Sn: 2}, live: map[uint32]byte{0: A}},
		{name: "new snapshot while an older one exists conflicts",
			steps: []step{w(1, 0, 1, A), w(2, 0, 1, B), w(3, 0, 1, C).fails(ErrSnapshotConflict)},
			info:  ChunkInfo{Sn: 2, SnapSn: 1}, live: map[uint32]byte{0: B}, snap: map[uint32]byte{0: A}, cow: 1},
		{name: "delete snapshot, then the next sn snapshots again",
			steps: []step{w(1, 0, 1, A), w(2, 0, 1, B), ds(2), w(3, 0, 1, C)},
			info:  ChunkInfo{Sn: 3, SnapSn: 2}, live: map[uint32]byte{0: C}, snap: map[uint32]byte{0: B}, cow: 2},
		{name: "delete snapshot with the chunk's sn sets no corrected sn",
			steps: []step{w(1, 0, 1, A), w(2, 0, 1, B), ds(2)},
			info:  ChunkInfo{Sn: 2}, live: map[uint32]byte{0: B}, cow: 1},
		{name: "delete snapshot and correct sn: later writes at that sn take no snapshot",
			steps: []step{w(1, 0, 1, A), w(2, 0, 1, B), ds(3), w(3, 0, 1, C)},
			info:  ChunkInfo{Sn: 3, CorrectedSn: 3}, live: map[uint32]byte{0: C}, cow: 1},
		{name: "corrected sn without snapshot avoids a snapshot",
			steps: []step{w(1, 0, 1, A), ds(2), w(2, 0, 1, B)},
			info:  ChunkInfo{Sn: 2, CorrectedSn: 2}, live: map[uint32]byte{0: B}},
		{name: "corrected sn makes older writes backward",
			steps: []step{w(1, 0, 1, A), ds(3), w(2, 0, 1, B).fails(ErrBackward)},
			info:  ChunkInfo{Sn: 1, CorrectedSn: 3}, live: map[uint32]byte{0: A}},
		{name: "write above corrected sn snapshots at the chunk's sn",
			steps: []step{w(1, 0, 1, A), ds(2), w(3, 0, 1, B)},
			info:  ChunkInfo{Sn: 3, CorrectedSn: 2, SnapSn: 1}, live: map[uint32]byte{0: B}, snap: map[uint32]byte{0: A}, cow: 1},
		{name: "delete snapshot below chunk sn is backward",
			steps: []step{w(3, 0, 1, A), ds(2).fails(ErrBackward)},
			info:  ChunkInfo{Sn: 3}, live: map[uint32]byte{0: A}},
		{name: "delete snapshot below corrected sn is backward",
			steps: []step{w(1, 0, 1, A), ds(3), ds(2).fails(ErrBackward)},
			info:  ChunkInfo{Sn: 1, CorrectedSn: 3}, live: map[uint32]byte{0: A}},
		{name: "delete snapshot of a missing chunk succeeds",
			steps:   []step{ds(4)},
			missing: true},
		{name: "delete chunk removes its snapshot",
			steps:   []step{w(1, 0, 1, A), w(2, 0, 1, B), del(2)},
			missing: true, cow: 1},
		{name: "delete chunk with older sn is backward",
			steps: []step{w(1, 0, 1, A), w(2, 0, 1, B), del(1).fails(ErrBackward)},
			info:  ChunkInfo{Sn: 2, SnapSn: 1}, live: map[uint32]byte{0: B}, snap: map[uint32]byte{0: A}, cow: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, dir := openTest(t)
			for i, st := range tt.steps {
				err := st.apply(s)
				if !errors.Is(err, st.err) || (st.err == nil) != (err == nil) {
					t.Fatalf("step %d %+v: got %v, want %v", i, st, err, st.err)
				}
			}
			if got := s.Stats().COWBlocks; got != tt.cow {
				t.Errorf("COWBlocks %d, want %d", got, tt.cow)
			}
			tt.info.ID = 1
			check := func(s *Store, when string) {
				t.Helper()
				info, err := s.GetChunkInfo(1)
				if tt.missing {
					if !errors.Is(err, ErrChunkNotExist) {
						t.Fatalf("%s: GetChunkInfo: %+v, %v; want missing", when, info, err)
					}
					if files := s.Files(); len(files) != 0 {
						t.Fatalf("%s: Files: %v", when, files)
					}
					ents, _ := os.ReadDir(dir)
					if len(ents) != 0 {
						t.Fatalf("%s: files left: %v", when, ents)
					}
					return
				}
				if err != nil || info != tt.info {
					t.Fatalf("%s: GetChunkInfo: %+v, %v; want %+v", when, info, err, tt.info)
				}
				checkBlocks(t, when+": live", func(b []byte) error { return s.ReadChunk(1, b, 0) }, tt.live)
				checkBlocks(t, when+": snapshot at chunk sn", func(b []byte) error {
					return s.ReadChunkSnapshot(1, info.Sn, b, 0)
				}, tt.live)
				wantFiles := []string{"chunk_1"}
				if info.SnapSn != 0 {
					checkBlocks(t, when+": snapshot", func(b []byte) error {
						return s.ReadChunkSnapshot(1, info.SnapSn, b, 0)
					}, tt.snap)
					wantFiles = append(wantFiles, fmt.Sprintf("chunk_1_snap_%d", info.SnapSn))
				}
				for _, sn := range []uint64{info.Sn + 1, info.Sn - 1, info.SnapSn + 1} {
					if sn == info.Sn || sn == info.SnapSn && sn != 0 {
						continue
					}
					if err := s.ReadChunkSnapshot(1, sn, make([]byte, testBlock), 0); !errors.Is(err, ErrChunkNotExist) {
						t.Fatalf("%s: ReadChunkSnapshot(sn %d): got %v, want ErrChunkNotExist", when, sn, err)
					}
				}
				if files := s.Files(); !slices.Equal(files, wantFiles) {
					t.Fatalf("%s: Files %v, want %v", when, files, wantFiles)
				}
				ents, _ := os.ReadDir(dir)
				var names []string
				for _, e := range ents {
					names = append(names, e.Name())
				}
				if !slices.Equal(names, wantFiles) {
					t.Fatalf("%s: directory %v, want %v", when, names, wantFiles)
				}
			}
			check(s, "after steps")
			s = reopen(t, s)
			check(s, "after reopen")
			for _, st := range tt.steps {
				_ = st.apply(s) // replay: errors such as ErrBackward are expected
			}
			check(s, "after replay")
			s = reopen(t, s)
			check(s, "after replay and reopen")
		})
	}
}

// TestCOWSnapshotReadRanges reads a snapshot with every offset/length
// combination over blocks [0, 6), half of them copied.
func TestCOWSnapshotReadRanges(t *testing.T) {
	s, _ := openTest(t)
	mustWrite(t, s, 1, 1, blocksData(1, 0, 6), 0)
	mustWrite(t, s, 1, 2, blocksData(2, 1, 1), testBlock)
	mustWrite(t, s, 1, 2, blocksData(2, 3, 2), 3*testBlock)
	// Snapshot sn 1 is blocksData(1) everywhere; live has seed 2 at 1, 3, 4.
	for lo := uint32(0); lo < 6; lo++ {
		for hi := lo + 1; hi <= 6; hi++ {
			buf := make([]byte, (hi-lo)*testBlock)
			if err := s.ReadChunkSnapshot(1, 1, buf, lo*testBlock); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf, blocksData(1, lo, hi-lo)) {
				t.Fatalf("snapshot [%d, %d) differs", lo, hi)
			}
		}
	}
	if err := s.ReadChunkSnapshot(1, 1, make([]byte, 3), 0); !errors.Is(err, ErrInvalidArg) {
		t.Fatalf("unaligned snapshot read: %v", err)
	}
	if err := s.ReadChunkSnapshot(2, 1, make([]byte, testBlock), 0); !errors.Is(err, ErrChunkNotExist) {
		t.Fatalf("snapshot read of missing chunk: %v", err)
	}
}

// TestCOWReplayAfterLostMeta models a crash that kept a snapshot file (made
// durable at creation) but lost the chunk's sn bump (persisted lazily):
// chunk sn == snap.sn. Replaying the write must not snapshot again nor
// copy the already overwritten block.
func TestCOWReplayAfterLostMeta(t *testing.T) {
	s, dir := openTest(t)
	const A, B = 10, 20
	mustWrite(t, s, 1, 1, blocksData(A, 0, 2), 0)
	mustWrite(t, s, 1, 2, blocksData(B, 0, 1), 0)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Roll the chunk's meta page back to sn 1.
	page := make([]byte, testPage)
	if err := (&MetaPage{Version: MetaVersion2, Sn: 1}).MarshalTo(page); err != nil {
		t.Fatal(err)
	}
	if err := writeFileAt(filepath.Join(dir, "chunk_1"), page, 0); err != nil {
		t.Fatal(err)
	}
	s = openTestOpts(t, testOpts(dir))
	if info, _ := s.GetChunkInfo(1); info != (ChunkInfo{ID: 1, Sn: 1, SnapSn: 1}) {
		t.Fatalf("after rollback: %+v", info)
	}
	// DeleteChunkSnapshotOrCorrectSn keeps a snapshot that is not older
	// than the chunk.
	if err := s.DeleteChunkSnapshotOrCorrectSn(1, 1); err != nil {
		t.Fatal(err)
	}
	if info, _ := s.GetChunkInfo(1); info.SnapSn != 1 {
		t.Fatalf("snapshot with snap.sn >= chunk.sn deleted: %+v", info)
	}
	// Replay: writes at sn 1 apply again without COW, the sn-2 write
	// re-bumps the sn without a new snapshot and skips copied block 0.
	mustWrite(t, s, 1, 1, blocksData(A, 0, 2), 0)
	if got := s.Stats().COWBlocks; got != 0 {
		t.Fatalf("sn-1 replay copied %d blocks", got)
	}
	// (Block 0 now holds A again, as it did when the sn-2 write came.)
	mustWrite(t, s, 1, 2, blocksData(B, 0, 1), 0)
	if info, _ := s.GetChunkInfo(1); info != (ChunkInfo{ID: 1, Sn: 2, SnapSn: 1}) {
		t.Fatalf("after replay: %+v", info)
	}
	checkBlocks(t, "live", func(b []byte) error { return s.ReadChunk(1, b, 0) }, map[uint32]byte{0: B, 1: A})
	checkBlocks(t, "snapshot", func(b []byte) error { return s.ReadChunkSnapshot(1, 1, b, 0) }, map[uint32]byte{0: A, 1: A})
}

// writeFileAt writes p at off of the file at path through the OS.
func writeFileAt(path string, p []byte, off int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(p, off)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func TestOpenSnapshotFiles(t *testing.T) {
	// makeDir writes chunk 1 at sn 2 with snapshot sn 1 and closes.
	makeDir := func(t *testing.T) string {
		s, dir := openTest(t)
		mustWrite(t, s, 1, 1, blocksData(1, 0, 1), 0)
		mustWrite(t, s, 1, 2, blocksData(2, 0, 1), 0)
		mustWrite(t, s, 2, 1, blocksData(3, 0, 1), 0)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	copyFile := func(t *testing.T, from, to string) {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name   string
		mangle func(t *testing.T, dir string)
		want   error
	}{
		{"two snapshots of one chunk", func(t *testing.T, dir string) {
			path := filepath.Join(dir, "chunk_1_snap_5")
			copyFile(t, filepath.Join(dir, "chunk_1_snap_1"), path)
			page := make([]byte, testPage)
			m := SnapMetaPage{Version: SnapMetaVersion1, Sn: 5, Bits: testBlocks, Bitmap: newBitmap(testBlocks)}
			if err := m.MarshalTo(page); err != nil {
				t.Fatal(err)
			}
			if err := writeFileAt(path, page, 0); err != nil {
				t.Fatal(err)
			}
		}, ErrSnapshotConflict},
		{"snapshot name and meta disagree", func(t *testing.T, dir string) {
			if err := os.Rename(filepath.Join(dir, "chunk_1_snap_1"), filepath.Join(dir, "chunk_1_snap_7")); err != nil {
				t.Fatal(err)
			}
		}, ErrFileFormat},
		{"snapshot of wrong size", func(t *testing.T, dir string) {
			if err := os.Truncate(filepath.Join(dir, "chunk_1_snap_1"), testFileSize-1); err != nil {
				t.Fatal(err)
			}
		}, ErrFileFormat},
		{"snapshot meta corrupt", func(t *testing.T, dir string) {
			flipByte(t, filepath.Join(dir, "chunk_1_snap_1"), 3)
		}, ErrCRC},
		{"snapshot with a chunk meta page", func(t *testing.T, dir string) {
			copyFile(t, filepath.Join(dir, "chunk_2"), filepath.Join(dir, "chunk_1_snap_1"))
		}, ErrIncompatible},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := makeDir(t)
			tt.mangle(t, dir)
			s, err := Open(testOpts(dir))
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Open: got %v, want %v", err, tt.want)
			}
		})
	}

	t.Run("orphan snapshot is disposed of", func(t *testing.T) {
		dir := makeDir(t)
		copyFile(t, filepath.Join(dir, "chunk_1_snap_1"), filepath.Join(dir, "chunk_9_snap_1"))
		s := openTestOpts(t, testOpts(dir))
		if _, err := os.Stat(filepath.Join(dir, "chunk_9_snap_1")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("orphan snapshot kept: %v", err)
		}
		want := []string{"chunk_1", "chunk_2", "chunk_1_snap_1"}
		if got := s.Files(); !slices.Equal(got, want) {
			t.Fatalf("Files: %v, want %v", got, want)
		}
		if st := s.Stats(); st.Chunks != 2 || st.Snapshots != 1 {
			t.Fatalf("Stats: %+v", st)
		}
	})
}

// TestOpenReceivedFiles copies the files listed by Files into a new
// directory, as a Raft snapshot install does, and opens a store there.
func TestOpenReceivedFiles(t *testing.T) {
	s, dir := openTest(t)
	for id := uint64(3); id > 0; id-- {
		mustWrite(t, s, id, 1, blocksData(byte(id), 0, 4), 0)
		mustWrite(t, s, id, 2, blocksData(byte(id+10), 1, 1), testBlock)
	}
	mustWrite(t, s, 10, 1, blocksData(9, 2, 1), 2*testBlock)
	if err := s.CreateCloneChunk(11, 1, 0, testChunkSize, "vol:0@cs"); err != nil {
		t.Fatal(err)
	}
	if err := s.PasteChunk(11, blocksData(7, 0, 2), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	files := s.Files()
	want := []string{"chunk_1", "chunk_2", "chunk_3", "chunk_10", "chunk_11",
		"chunk_1_snap_1", "chunk_2_snap_1", "chunk_3_snap_1"}
	if !slices.Equal(files, want) {
		t.Fatalf("Files: %v, want %v", files, want)
	}
	dst := t.TempDir()
	for _, name := range files {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := openTestOpts(t, testOpts(dst))
	for _, id := range []uint64{1, 2, 3, 10, 11} {
		a, _ := s.GetChunkInfo(id)
		b, err := r.GetChunkInfo(id)
		if err != nil || a != b {
			t.Fatalf("chunk %d: info %+v vs received %+v, %v", id, a, b, err)
		}
		ha, _ := s.GetChunkHash(id, 0, testChunkSize)
		hb, err := r.GetChunkHash(id, 0, testChunkSize)
		if err != nil || ha != hb {
			t.Fatalf("chunk %d: hash %s vs %s, %v", id, ha, hb, err)
		}
	}
	checkBlocks(t, "received snapshot", func(b []byte) error { return r.ReadChunkSnapshot(2, 1, b, 0) },
		map[uint32]byte{0: 2, 1: 2, 2: 2, 3: 2})
	if !slices.Equal(r.Files(), want) {
		t.Fatalf("received Files: %v", r.Files())
	}
	if st := r.Stats(); st.Chunks != 5 || st.Snapshots != 3 || st.Clones != 1 {
		t.Fatalf("received Stats: %+v", st)
	}
	for _, id := range []uint64{11, 1} {
		if err := r.DeleteChunk(id, 0); err != nil {
			t.Fatal(err)
		}
	}
	if st := r.Stats(); st.Chunks != 3 || st.Snapshots != 2 || st.Clones != 0 {
		t.Fatalf("Stats after deletes: %+v", st)
	}
}
