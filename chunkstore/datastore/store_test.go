package datastore

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/internal/testwait"
)

const (
	testChunkSize = 256 << 10
	testBlock     = 4096
	testPage      = 4096
	testBlocks    = testChunkSize / testBlock
	// testFileSize is the length of every chunk and snapshot file: meta
	// page, data, and a crc table of 4*64 bytes padded to one page.
	testFileSize = testPage + testChunkSize + testPage
)

// testOpts returns small-chunk options for dir.
func testOpts(dir string) Options {
	return Options{Dir: dir, ChunkSize: testChunkSize, PageSize: testPage, BlockSize: testBlock}
}

// openTest opens a store in a fresh temp dir and closes it at cleanup.
func openTest(t *testing.T) (*Store, string) {
	t.Helper()
	dir := t.TempDir()
	return openTestOpts(t, testOpts(dir)), dir
}

// openTestOpts opens a store with opts and closes it at cleanup.
func openTestOpts(t *testing.T, opts Options) *Store {
	t.Helper()
	s, err := Open(opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// reopen closes s and opens a new store with the same options.
func reopen(t *testing.T, s *Store) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return openTestOpts(t, s.Options())
}

// pattern returns n bytes derived from seed.
func pattern(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7) + byte(i>>12)
	}
	return b
}

// readAll reads the whole data area of chunk id.
func readAll(t *testing.T, s *Store, id uint64) []byte {
	t.Helper()
	buf := make([]byte, s.Options().ChunkSize)
	if err := s.ReadChunk(id, buf, 0); err != nil {
		t.Fatalf("ReadChunk(%d, all): %v", id, err)
	}
	return buf
}

func mustWrite(t *testing.T, s *Store, id, sn uint64, data []byte, off uint32) {
	t.Helper()
	if err := s.WriteChunk(id, sn, data, off); err != nil {
		t.Fatalf("WriteChunk(%d, sn %d, %d bytes at %d): %v", id, sn, len(data), off, err)
	}
}

func TestWriteReadRoundTrip(t *testing.T) {
	s, _ := openTest(t)
	tests := []struct {
		off uint32
		n   int
	}{
		{0, testBlock},
		{testBlock, testBlock},
		{5 * testBlock, 3 * testBlock},
		{testChunkSize - testBlock, testBlock},
		{testChunkSize / 2, testChunkSize / 2},
		{0, testChunkSize},
	}
	for i, tt := range tests {
		t.Run(fmt.Sprintf("off=%d/len=%d", tt.off, tt.n), func(t *testing.T) {
			id := uint64(100 + i)
			want := make([]byte, testChunkSize)
			data := pattern(byte(i+1), tt.n)
			copy(want[tt.off:], data)
			mustWrite(t, s, id, 1, data, tt.off)

			got := make([]byte, tt.n)
			if err := s.ReadChunk(id, got, tt.off); err != nil {
				t.Fatalf("ReadChunk: %v", err)
			}
			if !bytes.Equal(got, data) {
				t.Fatal("read back differs from written data")
			}
			// Everything outside the written range reads as zeros.
			if !bytes.Equal(readAll(t, s, id), want) {
				t.Fatal("whole-chunk read differs: unwritten ranges must be zero")
			}
		})
	}
}

func TestOverlappingWritesAndUnwrittenZeros(t *testing.T) {
	s, dir := openTest(t)
	want := make([]byte, testChunkSize)
	put := func(off uint32, data []byte) {
		mustWrite(t, s, 7, 1, data, off)
		copy(want[off:], data)
	}
	put(2*testBlock, pattern(1, 4*testBlock))
	put(3*testBlock, pattern(2, testBlock))
	put(testChunkSize-2*testBlock, pattern(3, 2*testBlock))
	if !bytes.Equal(readAll(t, s, 7), want) {
		t.Fatal("chunk contents differ")
	}
	// A block never written in the middle reads as zeros.
	buf := bytes.Repeat([]byte{0xEE}, testBlock)
	if err := s.ReadChunk(7, buf, 40*testBlock); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, make([]byte, testBlock)) {
		t.Fatal("unwritten block not zero")
	}
	// The file is meta page + chunk size + crc table, data at PageSize +
	// offset.
	raw, err := os.ReadFile(filepath.Join(dir, "chunk_7"))
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) != testFileSize {
		t.Fatalf("file size %d, want %d", len(raw), testFileSize)
	}
	if !bytes.Equal(raw[testPage:testPage+testChunkSize], want) {
		t.Fatal("data not at file offset PageSize + chunk offset")
	}
	var m MetaPage
	if err := m.Unmarshal(raw[:testPage]); err != nil || !reflect.DeepEqual(m, MetaPage{Version: MetaVersion, Sn: 1}) {
		t.Fatalf("on-disk meta page: %+v, %v", m, err)
	}
}

func TestInvalidArgsChangeNothing(t *testing.T) {
	tests := []struct {
		name string
		sn   uint64
		off  uint32
		n    int
	}{
		{"empty", 1, 0, 0},
		{"empty at aligned offset", 1, testBlock, 0},
		{"unaligned offset", 1, 1, testBlock},
		{"offset half block", 1, testBlock / 2, testBlock},
		{"unaligned length", 1, 0, testBlock + 1},
		{"short length", 1, 0, 512},
		{"past end", 1, testChunkSize - testBlock, 2 * testBlock},
		{"offset at end", 1, testChunkSize, testBlock},
		{"offset far past end", 1, 1 << 31, testBlock},
		{"offset near uint32 max", 1, ^uint32(0) - testBlock + 1, testBlock},
		{"longer than chunk", 1, 0, testChunkSize + testBlock},
		{"sn 0", 0, 0, testBlock},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, dir := openTest(t)
			// On a missing chunk: error, and no file appears.
			err := s.WriteChunk(1, tt.sn, pattern(9, tt.n), tt.off)
			if !errors.Is(err, ErrInvalidArg) {
				t.Fatalf("WriteChunk on missing chunk: got %v, want ErrInvalidArg", err)
			}
			if ids := s.ListChunks(); len(ids) != 0 {
				t.Fatalf("ListChunks after failed write: %v", ids)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Fatalf("files appeared after a failed write: %v", ents)
			}

			// On an existing chunk (sn 2): error, data and sn unchanged,
			// even though the request sn 3 would otherwise bump it.
			mustWrite(t, s, 2, 2, pattern(1, testChunkSize), 0)
			before := readAll(t, s, 2)
			sn := tt.sn
			if sn != 0 {
				sn = 3
			}
			if err := s.WriteChunk(2, sn, pattern(9, tt.n), tt.off); !errors.Is(err, ErrInvalidArg) {
				t.Fatalf("WriteChunk on existing chunk: got %v, want ErrInvalidArg", err)
			}
			if !bytes.Equal(readAll(t, s, 2), before) {
				t.Fatal("failed write changed data")
			}
			if info, _ := s.GetChunkInfo(2); info.Sn != 2 {
				t.Fatalf("failed write changed sn to %d", info.Sn)
			}

			// Reads obey the same range rules (sn is not a read argument).
			if tt.sn != 0 {
				if err := s.ReadChunk(2, make([]byte, tt.n), tt.off); !errors.Is(err, ErrInvalidArg) {
					t.Fatalf("ReadChunk: got %v, want ErrInvalidArg", err)
				}
			}
			if err != nil && !strings.HasPrefix(err.Error(), "datastore: write chunk 1: ") {
				t.Fatalf("error lacks context: %q", err)
			}
		})
	}
}

func TestReadMissingChunk(t *testing.T) {
	s, _ := openTest(t)
	err := s.ReadChunk(42, make([]byte, testBlock), 0)
	if !errors.Is(err, ErrChunkNotExist) {
		t.Fatalf("ReadChunk: got %v, want ErrChunkNotExist", err)
	}
	if _, err := s.GetChunkInfo(42); !errors.Is(err, ErrChunkNotExist) {
		t.Fatalf("GetChunkInfo: got %v, want ErrChunkNotExist", err)
	}
}

func TestWriteSequenceNumbers(t *testing.T) {
	// Each case: chunk created with sn 5 and block 0 = pattern(1), then a
	// write of pattern(2) to block 0 with the given sn.
	// A newer sn also snapshots the chunk at sn 5 (see cow_test.go).
	tests := []struct {
		sn         uint64
		wantErr    error
		wantSn     uint64
		wantSnapSn uint64
		wantData   byte
	}{
		{1, ErrBackward, 5, 0, 1},
		{4, ErrBackward, 5, 0, 1},
		{5, nil, 5, 0, 2},
		{6, nil, 6, 5, 2},
		{1 << 40, nil, 1 << 40, 5, 2},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("sn=%d", tt.sn), func(t *testing.T) {
			s, dir := openTest(t)
			mustWrite(t, s, 1, 5, pattern(1, testBlock), 0)
			err := s.WriteChunk(1, tt.sn, pattern(2, testBlock), 0)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("WriteChunk: got %v, want %v", err, tt.wantErr)
			}
			check := func(s *Store) {
				info, err := s.GetChunkInfo(1)
				if err != nil || info != (ChunkInfo{ID: 1, Sn: tt.wantSn, SnapSn: tt.wantSnapSn}) {
					t.Fatalf("GetChunkInfo: %+v, %v; want sn %d", info, err, tt.wantSn)
				}
				buf := make([]byte, testBlock)
				if err := s.ReadChunk(1, buf, 0); err != nil || !bytes.Equal(buf, pattern(tt.wantData, testBlock)) {
					t.Fatalf("data after write: err %v, want pattern %d", err, tt.wantData)
				}
			}
			check(s)
			// The sn is persisted in the meta page.
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s2, err := Open(testOpts(dir))
			if err != nil {
				t.Fatal(err)
			}
			defer s2.Close()
			check(s2)
		})
	}
}

func TestBackwardAgainstCorrectedSn(t *testing.T) {
	dir := t.TempDir()
	// Make a chunk whose meta page carries correctedSn 8 > sn 3.
	writeChunkFile(t, filepath.Join(dir, "chunk_1"), MetaPage{Version: MetaVersion2, Sn: 3, CorrectedSn: 8})
	s, err := Open(testOpts(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if info, _ := s.GetChunkInfo(1); info != (ChunkInfo{ID: 1, Sn: 3, CorrectedSn: 8}) {
		t.Fatalf("GetChunkInfo: %+v", info)
	}
	if err := s.WriteChunk(1, 5, pattern(1, testBlock), 0); !errors.Is(err, ErrBackward) {
		t.Fatalf("write sn 5 < correctedSn 8: got %v, want ErrBackward", err)
	}
	mustWrite(t, s, 1, 8, pattern(1, testBlock), 0)
	if info, _ := s.GetChunkInfo(1); info != (ChunkInfo{ID: 1, Sn: 8, CorrectedSn: 8}) {
		t.Fatalf("GetChunkInfo after write sn 8: %+v", info)
	}
	// Delete checks sn only, as in Curve.
	if err := s.DeleteChunk(1, 8); err != nil {
		t.Fatal(err)
	}
}

func TestReplayIsIdempotent(t *testing.T) {
	s, _ := openTest(t)
	ops := func() {
		mustWrite(t, s, 3, 1, pattern(1, 8*testBlock), 0)
		mustWrite(t, s, 3, 1, pattern(2, 2*testBlock), 4*testBlock)
		mustWrite(t, s, 3, 2, pattern(3, testBlock), 16*testBlock)
	}
	ops()
	first := readAll(t, s, 3)
	// Replaying from the start: the sn-1 writes are now backward and must
	// change nothing; the sn-2 write is applied again.
	if err := s.WriteChunk(3, 1, pattern(1, 8*testBlock), 0); !errors.Is(err, ErrBackward) {
		t.Fatalf("replayed old write: got %v, want ErrBackward", err)
	}
	mustWrite(t, s, 3, 2, pattern(3, testBlock), 16*testBlock)
	mustWrite(t, s, 3, 2, pattern(3, testBlock), 16*testBlock)
	if !bytes.Equal(readAll(t, s, 3), first) {
		t.Fatal("replay changed the chunk")
	}
}

func TestDeleteChunk(t *testing.T) {
	s, dir := openTest(t)
	path := filepath.Join(dir, "chunk_9")

	// Missing chunk: success, whatever the sn.
	for _, sn := range []uint64{0, 1, 100} {
		if err := s.DeleteChunk(9, sn); err != nil {
			t.Fatalf("DeleteChunk(missing, sn %d): %v", sn, err)
		}
	}

	tests := []struct {
		name    string
		sn      uint64
		wantErr error
	}{
		{"older sn", 4, ErrBackward},
		{"sn 1", 1, ErrBackward},
		{"same sn", 5, nil},
		{"newer sn", 6, nil},
		{"sn 0 skips check", 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mustWrite(t, s, 9, 5, pattern(1, testBlock), 0)
			err := s.DeleteChunk(9, tt.sn)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("DeleteChunk: got %v, want %v", err, tt.wantErr)
			}
			_, statErr := os.Stat(path)
			if tt.wantErr != nil {
				if statErr != nil || !slices.Equal(s.ListChunks(), []uint64{9}) {
					t.Fatalf("refused delete removed the chunk: stat %v, list %v", statErr, s.ListChunks())
				}
				if err := s.DeleteChunk(9, 0); err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(statErr, os.ErrNotExist) {
				t.Fatalf("file still there after delete: %v", statErr)
			}
			if err := s.ReadChunk(9, make([]byte, testBlock), 0); !errors.Is(err, ErrChunkNotExist) {
				t.Fatalf("ReadChunk after delete: got %v, want ErrChunkNotExist", err)
			}
			if _, err := s.GetChunkInfo(9); !errors.Is(err, ErrChunkNotExist) {
				t.Fatalf("GetChunkInfo after delete: got %v", err)
			}
			if ids := s.ListChunks(); len(ids) != 0 {
				t.Fatalf("ListChunks after delete: %v", ids)
			}
			// Replayed delete: success.
			if err := s.DeleteChunk(9, tt.sn); err != nil {
				t.Fatalf("second DeleteChunk: %v", err)
			}
		})
	}

	// A write after a delete creates a fresh chunk: old data is gone and the
	// sn starts again from the request.
	mustWrite(t, s, 9, 5, pattern(1, 2*testBlock), 0)
	if err := s.DeleteChunk(9, 5); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, s, 9, 2, pattern(2, testBlock), testBlock)
	want := make([]byte, testChunkSize)
	copy(want[testBlock:], pattern(2, testBlock))
	if !bytes.Equal(readAll(t, s, 9), want) {
		t.Fatal("recreated chunk carries old data")
	}
	if info, _ := s.GetChunkInfo(9); info.Sn != 2 {
		t.Fatalf("recreated chunk sn %d, want 2", info.Sn)
	}
}

func TestReopen(t *testing.T) {
	s, dir := openTest(t)
	chunks := map[uint64]uint64{0: 1, 1: 3, 17: 2, 1 << 40: 9, ^uint64(0): 4}
	for id, sn := range chunks {
		mustWrite(t, s, id, sn, pattern(byte(id), 2*testBlock), testBlock)
	}
	mustWrite(t, s, 1, 3, pattern(1, testBlock), 0)
	if err := s.DeleteChunk(17, 0); err != nil {
		t.Fatal(err)
	}
	delete(chunks, 17)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s2, err := Open(testOpts(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	want := []uint64{0, 1, 1 << 40, ^uint64(0)}
	if got := s2.ListChunks(); !slices.Equal(got, want) {
		t.Fatalf("ListChunks: %v, want %v", got, want)
	}
	for id, sn := range chunks {
		info, err := s2.GetChunkInfo(id)
		if err != nil || info != (ChunkInfo{ID: id, Sn: sn}) {
			t.Fatalf("GetChunkInfo(%d): %+v, %v; want sn %d", id, info, err, sn)
		}
		buf := make([]byte, 2*testBlock)
		if err := s2.ReadChunk(id, buf, testBlock); err != nil || !bytes.Equal(buf, pattern(byte(id), 2*testBlock)) {
			t.Fatalf("ReadChunk(%d) after reopen: %v", id, err)
		}
	}
	buf := make([]byte, testBlock)
	if err := s2.ReadChunk(1, buf, 0); err != nil || !bytes.Equal(buf, pattern(1, testBlock)) {
		t.Fatalf("second write of chunk 1 lost: %v", err)
	}
	// The reopened store keeps working.
	mustWrite(t, s2, 1, 4, pattern(5, testBlock), 0)
}

func TestOpenCorruptChunkFile(t *testing.T) {
	tests := []struct {
		name    string
		corrupt func(t *testing.T, path string)
		want    error
	}{
		{"meta crc", func(t *testing.T, path string) { flipByte(t, path, 25) }, ErrCRC},
		{"meta location length", func(t *testing.T, path string) { flipByte(t, path, 17) }, ErrCRC},
		{"meta sn", func(t *testing.T, path string) { flipByte(t, path, 3) }, ErrCRC},
		{"meta version", func(t *testing.T, path string) { flipByte(t, path, 0) }, ErrIncompatible},
		{"zeroed meta page", func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt(make([]byte, testPage), 0); err != nil {
				t.Fatal(err)
			}
		}, ErrIncompatible},
		{"truncated", func(t *testing.T, path string) {
			if err := os.Truncate(path, testFileSize-testBlock); err != nil {
				t.Fatal(err)
			}
		}, ErrFileFormat},
		{"extended", func(t *testing.T, path string) {
			if err := os.Truncate(path, testFileSize+1); err != nil {
				t.Fatal(err)
			}
		}, ErrFileFormat},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, dir := openTest(t)
			mustWrite(t, s, 1, 1, pattern(1, testBlock), 0)
			mustWrite(t, s, 23, 2, pattern(1, testBlock), 0)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "chunk_23")
			tt.corrupt(t, path)
			s2, err := Open(testOpts(dir))
			if err == nil {
				s2.Close()
				t.Fatal("Open succeeded on a corrupt chunk file")
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Open: got %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("Open error does not name the file %s: %v", path, err)
			}
		})
	}
}

// writeChunkFile creates a chunk file at path with meta page m and zero data,
// as a Store with testOpts would.
func writeChunkFile(t *testing.T, path string, m MetaPage) {
	t.Helper()
	page := make([]byte, testPage)
	if err := m.MarshalTo(page); err != nil {
		t.Fatal(err)
	}
	g := newGeometry(testChunkSize, testPage, testBlock)
	f, _, err := newFile(OSFS{}, nil, &g, path, page)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// flipByte flips a bit of the byte at offset off of the file at path.
func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestOpenFileNames(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(testOpts(dir))
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, s, 5, 1, pattern(1, testBlock), 0)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	write := func(name string, size int) {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Leftovers of interrupted creations are removed, at any size.
	write("chunk_6.tmp", 0)
	write("chunk_5.tmp", testFileSize)
	write("chunk_5_snap_3.tmp", testFileSize)
	// Other names are ignored and kept, even if they look almost like chunks.
	others := []string{"foo", "chunk_", "chunk_abc", "chunk_007", "chunk_-1", "chunk_5_snap_01",
		"chunk_5_snap_", "chunk_5_snap_x", "chunk__snap_1", "chunk_5_snap_1_snap_2",
		"chunk_99999999999999999999", "xchunk_5", "chunk_x.tmp", "raft.db"}
	for _, name := range others {
		write(name, 10)
	}
	if err := os.Mkdir(filepath.Join(dir, "chunk_8.tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	others = append(others, "chunk_8.tmp")

	s2, err := Open(testOpts(dir))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s2.Close()
	if got := s2.ListChunks(); !slices.Equal(got, []uint64{5}) {
		t.Fatalf("ListChunks: %v, want [5]", got)
	}
	for _, name := range []string{"chunk_6.tmp", "chunk_5.tmp", "chunk_5_snap_3.tmp"} {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("leftover %s not removed: %v", name, err)
		}
	}
	for _, name := range others {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatalf("unrelated file %s touched: %v", name, err)
		}
	}
	buf := make([]byte, testBlock)
	if err := s2.ReadChunk(5, buf, 0); err != nil || !bytes.Equal(buf, pattern(1, testBlock)) {
		t.Fatalf("chunk 5 after reopen: %v", err)
	}
}

func TestParseFileName(t *testing.T) {
	tests := []struct {
		name   string
		id, sn uint64
		kind   fileKind
	}{
		{"chunk_0", 0, 0, kindChunk},
		{"chunk_12", 12, 0, kindChunk},
		{"chunk_18446744073709551615", ^uint64(0), 0, kindChunk},
		{"chunk_12.tmp", 12, 0, kindTmp},
		{"chunk_1_snap_2", 1, 2, kindSnap},
		{"chunk_0_snap_0", 0, 0, kindSnap},
		{"chunk_7_snap_18446744073709551615", 7, ^uint64(0), kindSnap},
		{"chunk_1_snap_2.tmp", 1, 2, kindTmp},
		{"chunk_18446744073709551616", 0, 0, kindOther},
		{"chunk_012", 0, 0, kindOther},
		{"chunk_+1", 0, 0, kindOther},
		{"chunk_1.tmp.tmp", 0, 0, kindOther},
		{"chunk_1_snap_02", 0, 0, kindOther},
		{"chunk_1_snap_", 0, 0, kindOther},
		{"chunk__snap_2", 0, 0, kindOther},
		{"chunk_1_snap_2_snap_3", 0, 0, kindOther},
		{"chunk_1_SNAP_2", 0, 0, kindOther},
		{"chunk_.tmp", 0, 0, kindOther},
		{"Chunk_1", 0, 0, kindOther},
		{"", 0, 0, kindOther},
	}
	for _, tt := range tests {
		id, sn, kind := parseFileName(tt.name)
		if id != tt.id || sn != tt.sn || kind != tt.kind {
			t.Errorf("parseFileName(%q) = %d, %d, %d; want %d, %d, %d", tt.name, id, sn, kind, tt.id, tt.sn, tt.kind)
		}
		if kind == kindChunk && chunkFileName(id) != tt.name {
			t.Errorf("chunkFileName(%d) = %q, want %q", id, chunkFileName(id), tt.name)
		}
		if kind == kindSnap && snapFileName(id, sn) != tt.name {
			t.Errorf("snapFileName(%d, %d) = %q, want %q", id, sn, snapFileName(id, sn), tt.name)
		}
	}
}

func TestOptions(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		opts Options
		want Options // zero: expect ErrInvalidArg
	}{
		{"defaults", Options{Dir: dir}, Options{Dir: dir, ChunkSize: 16 << 20, PageSize: 4096, BlockSize: 4096}},
		{"512-byte blocks, 8 KiB page", Options{Dir: dir, ChunkSize: 1 << 20, PageSize: 8192, BlockSize: 512},
			Options{Dir: dir, ChunkSize: 1 << 20, PageSize: 8192, BlockSize: 512}},
		{"no dir", Options{}, Options{}},
		{"block not power of two", Options{Dir: dir, BlockSize: 3000}, Options{}},
		{"block too small", Options{Dir: dir, BlockSize: 256}, Options{}},
		{"chunk not multiple of block", Options{Dir: dir, ChunkSize: 4096*3 + 512}, Options{}},
		{"chunk smaller than block", Options{Dir: dir, ChunkSize: 2048}, Options{}},
		{"page not sector multiple", Options{Dir: dir, PageSize: 1000}, Options{}},
		{"page too small for clone meta", Options{Dir: dir, PageSize: 2048}, Options{}},
		{"page too small for 512-byte block bitmap", Options{Dir: dir, BlockSize: 512}, Options{}},
		{"512-byte blocks of 16 MiB, 8 KiB page", Options{Dir: dir, BlockSize: 512, PageSize: 8192},
			Options{Dir: dir, ChunkSize: 16 << 20, PageSize: 8192, BlockSize: 512}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Open(tt.opts)
			if tt.want == (Options{}) {
				if !errors.Is(err, ErrInvalidArg) {
					t.Fatalf("Open: got %v, want ErrInvalidArg", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := s.Options(); got != tt.want {
				t.Fatalf("Options: %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestDefaultChunkSize runs the whole cycle with the 16 MiB default on a
// sparse file.
func TestDefaultChunkSize(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	const last = DefaultChunkSize - DefaultBlockSize
	mustWrite(t, s, 1, 1, pattern(1, DefaultBlockSize), last)
	mustWrite(t, s, 1, 1, pattern(2, DefaultBlockSize), 0)
	if err := s.WriteChunk(1, 1, pattern(3, 2*DefaultBlockSize), last); !errors.Is(err, ErrInvalidArg) {
		t.Fatalf("write past 16 MiB: got %v", err)
	}
	// 4096 blocks need a 16 KiB crc table.
	fi, err := os.Stat(filepath.Join(dir, "chunk_1"))
	if err != nil || fi.Size() != DefaultPageSize+DefaultChunkSize+16<<10 {
		t.Fatalf("file size: %v, %v; want %d", fi, err, DefaultPageSize+DefaultChunkSize+16<<10)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	buf := make([]byte, DefaultBlockSize)
	for _, c := range []struct {
		off  uint32
		seed byte
	}{{last, 1}, {0, 2}} {
		if err := s.ReadChunk(1, buf, c.off); err != nil || !bytes.Equal(buf, pattern(c.seed, DefaultBlockSize)) {
			t.Fatalf("ReadChunk at %d: %v", c.off, err)
		}
	}
	if err := s.ReadChunk(1, buf, DefaultChunkSize/2); err != nil || !bytes.Equal(buf, make([]byte, DefaultBlockSize)) {
		t.Fatalf("unwritten block: %v", err)
	}
	// A store opened with another chunk size refuses the file.
	s.Close()
	if _, err := Open(Options{Dir: dir, ChunkSize: testChunkSize}); !errors.Is(err, ErrFileFormat) {
		t.Fatalf("Open with other ChunkSize: got %v, want ErrFileFormat", err)
	}
}

func dirtyChunks(s *Store) []uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var ids []uint64
	for id, c := range s.chunks {
		if c.dirty.Load() || c.metaDirty.Load() || c.snapDirty.Load() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

func TestSync(t *testing.T) {
	s, _ := openTest(t)
	if err := s.Sync(); err != nil {
		t.Fatalf("Sync of empty store: %v", err)
	}
	for id := range uint64(20) {
		mustWrite(t, s, id, 1, pattern(byte(id), testBlock), 0)
	}
	if got := dirtyChunks(s); len(got) != 20 {
		t.Fatalf("dirty after writes: %v", got)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := dirtyChunks(s); len(got) != 0 {
		t.Fatalf("dirty after Sync: %v", got)
	}
	// A new write, and an sn bump that rewrites the meta page, dirty again.
	mustWrite(t, s, 3, 1, pattern(1, testBlock), testBlock)
	mustWrite(t, s, 4, 2, pattern(1, testBlock), testBlock)
	if got := dirtyChunks(s); !slices.Equal(got, []uint64{3, 4}) {
		t.Fatalf("dirty: %v, want [3 4]", got)
	}
	// Reads and failed writes do not.
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	_ = readAll(t, s, 5)
	_ = s.WriteChunk(5, 0, pattern(1, testBlock), 0)
	_ = s.WriteChunk(4, 1, pattern(1, testBlock), 0)
	if got := dirtyChunks(s); len(got) != 0 {
		t.Fatalf("dirty after reads and failed writes: %v", got)
	}
	// A deleted dirty chunk does not break Sync.
	mustWrite(t, s, 6, 1, pattern(1, testBlock), 0)
	if err := s.DeleteChunk(6, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
}

// TestConcurrent runs writers, readers, deleters, Sync and ListChunks in
// parallel on disjoint and shared chunks; run it with -race.
func TestConcurrent(t *testing.T) {
	s, dir := openTest(t)
	const (
		writers = 8
		rounds  = 60
	)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	// Each writer owns a chunk and keeps a model of it.
	models := make([][]byte, writers)
	for w := range writers {
		models[w] = make([]byte, testChunkSize)
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			id := uint64(w)
			for r := range rounds {
				nb := 1 + rng.IntN(8)
				off := uint32(rng.IntN(testChunkSize/testBlock-nb)) * testBlock
				data := pattern(byte(r*writers+w), nb*testBlock)
				sn := uint64(1 + r/20)
				if r > 0 && r%20 == 0 {
					// A new volume snapshot: end the previous one first
					// (the second round's write takes snapshot sn-1).
					if err := s.DeleteChunkSnapshotOrCorrectSn(id, sn-1); err != nil {
						t.Errorf("writer %d: delete snapshot: %v", w, err)
						return
					}
				}
				if err := s.WriteChunk(id, sn, data, off); err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
				copy(models[w][off:], data)
				got := make([]byte, nb*testBlock)
				if err := s.ReadChunk(id, got, off); err != nil || !bytes.Equal(got, data) {
					t.Errorf("writer %d: read own write: %v", w, err)
					return
				}
			}
		})
	}
	// Shared chunk 1000: several goroutines create, write, read and delete
	// it; only the absence of races and of unexpected errors is checked.
	for g := range 4 {
		wg.Go(func() {
			buf := make([]byte, testBlock)
			for r := range rounds {
				switch (r + g) % 4 {
				case 0, 1:
					if err := s.WriteChunk(1000, 1, pattern(byte(g), testBlock), uint32(g)*testBlock); err != nil {
						t.Errorf("shared write: %v", err)
					}
				case 2:
					if err := s.ReadChunk(1000, buf, 0); err != nil && !errors.Is(err, ErrChunkNotExist) {
						t.Errorf("shared read: %v", err)
					}
				case 3:
					if err := s.DeleteChunk(1000, 0); err != nil {
						t.Errorf("shared delete: %v", err)
					}
				}
			}
		})
	}
	var bg sync.WaitGroup
	bg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := s.Sync(); err != nil {
				t.Errorf("Sync: %v", err)
			}
			_ = s.ListChunks()
			_, _ = s.GetChunkInfo(0)
		}
	})
	wg.Wait()
	close(stop)
	bg.Wait()
	if t.Failed() {
		return
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := dirtyChunks(s); len(got) != 0 {
		t.Fatalf("dirty after final Sync: %v", got)
	}
	for w := range writers {
		if !bytes.Equal(readAll(t, s, uint64(w)), models[w]) {
			t.Fatalf("chunk %d differs from its model", w)
		}
		if info, _ := s.GetChunkInfo(uint64(w)); info.Sn != 1+(rounds-1)/20 {
			t.Fatalf("chunk %d sn %d", w, info.Sn)
		}
	}
	// Whatever the shared chunk's fate, no temp file is left behind.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), tmpSuffix) {
			t.Fatalf("temp file left: %s", e.Name())
		}
	}
}

// TestCloseConcurrent closes the store while operations run: each either
// succeeds or fails with ErrClosed (or ErrChunkNotExist for reads).
func TestCloseConcurrent(t *testing.T) {
	s, dir := openTest(t)
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			buf := make([]byte, testBlock)
			for r := 0; ; r++ {
				id := uint64(g*1000 + r%5)
				var err error
				switch r % 4 {
				case 0, 1:
					err = s.WriteChunk(id, 1, pattern(byte(r), testBlock), 0)
				case 2:
					err = s.ReadChunk(id, buf, 0)
					if errors.Is(err, ErrChunkNotExist) {
						err = nil
					}
				case 3:
					err = s.Sync()
				}
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("op %d: %v", r%4, err)
					return
				}
			}
		})
	}
	// Let the workers create some chunks (bounded, in case they failed).
	_ = testwait.For(5*time.Second, func() error {
		if n := len(s.ListChunks()); n < 10 {
			return fmt.Errorf("%d chunks", n)
		}
		return nil
	})
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wg.Wait()
	// Everything written is consistent on reopen.
	s2, err := Open(testOpts(dir))
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	s2.Close()
}

func TestClosed(t *testing.T) {
	s, _ := openTest(t)
	mustWrite(t, s, 1, 1, pattern(1, testBlock), 0)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, testBlock)
	_, infoErr := s.GetChunkInfo(1)
	_, cloneErr := s.ReadChunkClone(1, buf, 0)
	_, hashErr := s.GetChunkHash(1, 0, testBlock)
	for name, err := range map[string]error{
		"write":         s.WriteChunk(1, 1, buf, 0),
		"create":        s.WriteChunk(2, 1, buf, 0),
		"read":          s.ReadChunk(1, buf, 0),
		"read snapshot": s.ReadChunkSnapshot(1, 1, buf, 0),
		"read clone":    cloneErr,
		"paste":         s.PasteChunk(1, buf, 0),
		"create clone":  s.CreateCloneChunk(3, 1, 0, testChunkSize, "a@s3"),
		"delete snap":   s.DeleteChunkSnapshotOrCorrectSn(1, 2),
		"hash":          hashErr,
		"delete":        s.DeleteChunk(1, 0),
		"info":          infoErr,
		"sync":          s.Sync(),
		"close":         s.Close(),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: got %v, want ErrClosed", name, err)
		}
	}
	if ids := s.ListChunks(); len(ids) != 0 {
		t.Errorf("ListChunks after Close: %v", ids)
	}
	if files := s.Files(); len(files) != 0 {
		t.Errorf("Files after Close: %v", files)
	}
}

func BenchmarkWriteChunk(b *testing.B) {
	s, err := Open(testOpts(b.TempDir()))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	data := pattern(1, testBlock)
	b.SetBytes(testBlock)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := s.WriteChunk(uint64(i%16), 1, data, uint32(i%(testChunkSize/testBlock))*testBlock); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadChunk(b *testing.B) {
	s, err := Open(testOpts(b.TempDir()))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.WriteChunk(1, 1, pattern(1, testChunkSize), 0); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, testBlock)
	b.SetBytes(testBlock)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := s.ReadChunk(1, buf, uint32(i%(testChunkSize/testBlock))*testBlock); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadChunkCached(b *testing.B) {
	c, err := NewBlockCache(64 << 20)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	opts := testOpts(b.TempDir())
	opts.Cache = c
	s, err := Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.WriteChunk(1, 1, pattern(1, testChunkSize), 0); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, testBlock)
	b.SetBytes(testBlock)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := s.ReadChunk(1, buf, uint32(i%(testChunkSize/testBlock))*testBlock); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteChunkCOW measures first writes after a snapshot: each copies
// a block into the snapshot and fsyncs it.
func BenchmarkWriteChunkCOW(b *testing.B) {
	s, err := Open(testOpts(b.TempDir()))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	data := pattern(1, testBlock)
	b.SetBytes(testBlock)
	for i := 0; b.Loop(); i++ {
		id, blk := uint64(i/testBlocks), uint32(i%testBlocks)
		if blk == 0 {
			if err := s.WriteChunk(id, 1, pattern(2, testChunkSize), 0); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.WriteChunk(id, 2, data, blk*testBlock); err != nil {
			b.Fatal(err)
		}
	}
}
