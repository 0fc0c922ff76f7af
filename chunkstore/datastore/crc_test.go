package datastore

import (
	"encoding/binary"
	"errors"
	stdcrc32 "hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var stdCastagnoli = stdcrc32.MakeTable(stdcrc32.Castagnoli)

// TestCRCTableLayout pins the crc table: at PageSize+ChunkSize, entry i at
// +4i, crc32c(block) XOR crc32c(zero block), zero for zero blocks.
func TestCRCTableLayout(t *testing.T) {
	s, dir := openTest(t)
	mustWrite(t, s, 1, 1, blocksData(1, 2, 2), 2*testBlock)
	mustWrite(t, s, 1, 1, make([]byte, testBlock), 5*testBlock) // explicit zeros
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "chunk_1"))
	if err != nil {
		t.Fatal(err)
	}
	zero := stdcrc32.Checksum(make([]byte, testBlock), stdCastagnoli)
	for b := uint32(0); b < testBlocks; b++ {
		got := binary.LittleEndian.Uint32(raw[testPage+testChunkSize+4*b:])
		var want uint32
		if b == 2 || b == 3 {
			want = stdcrc32.Checksum(blockData(1, b), stdCastagnoli) ^ zero
		}
		if got != want {
			t.Fatalf("entry %d: %#08x, want %#08x", b, got, want)
		}
	}
	// The padding after the table is zero.
	for i := testPage + testChunkSize + 4*testBlocks; i < testFileSize; i++ {
		if raw[i] != 0 {
			t.Fatalf("crc table padding byte %d is %#x", i, raw[i])
		}
	}
}

// TestCRCCorruption flips one byte on disk and expects the reads that cover
// it to fail with ErrCRC naming chunk and block, and the others to work.
func TestCRCCorruption(t *testing.T) {
	tests := []struct {
		name  string
		file  string
		off   int64  // file offset of the flipped byte
		block uint32 // block that must fail
		snap  bool   // the failing read is the snapshot read
	}{
		{"written block, first byte", "chunk_1", testPage + 2*testBlock, 2, false},
		{"written block, last byte", "chunk_1", testPage + 3*testBlock - 1, 2, false},
		{"never written block", "chunk_1", testPage + 40*testBlock + 17, 40, false},
		{"crc entry of a written block", "chunk_1", testPage + testChunkSize + 4*2 + 1, 2, false},
		{"crc entry of an unwritten block", "chunk_1", testPage + testChunkSize + 4*50, 50, false},
		{"snapshot block", "chunk_1_snap_1", testPage + 2*testBlock + 5, 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, dir := openTest(t)
			mustWrite(t, s, 1, 1, blocksData(1, 0, 4), 0)
			mustWrite(t, s, 1, 2, blocksData(2, 2, 1), 2*testBlock) // snapshot holds block 2
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			flipByte(t, filepath.Join(dir, tt.file), tt.off)
			s = openTestOpts(t, testOpts(dir))

			buf := make([]byte, testBlock)
			var err error
			if tt.snap {
				err = s.ReadChunkSnapshot(1, 1, buf, tt.block*testBlock)
			} else {
				err = s.ReadChunk(1, buf, tt.block*testBlock)
			}
			if !errors.Is(err, ErrCRC) {
				t.Fatalf("read of corrupt block: got %v, want ErrCRC", err)
			}
			for _, frag := range []string{"chunk 1", "block " + strconv.Itoa(int(tt.block))} {
				if !strings.Contains(err.Error(), frag) {
					t.Fatalf("error %q does not name %q", err, frag)
				}
			}
			if got := s.Stats().CRCFailures; got != 1 {
				t.Fatalf("CRCFailures %d, want 1", got)
			}
			// A read covering the block among others fails too.
			if !tt.snap {
				if err := s.ReadChunk(1, make([]byte, testChunkSize), 0); !errors.Is(err, ErrCRC) {
					t.Fatalf("whole-chunk read: %v", err)
				}
				if _, err := s.GetChunkHash(1, tt.block*testBlock+7, 3); !errors.Is(err, ErrCRC) {
					t.Fatalf("GetChunkHash over the block: %v", err)
				}
			}
			// Other blocks still read.
			other := (tt.block + 1) % testBlocks
			if err := s.ReadChunk(1, buf, other*testBlock); err != nil {
				t.Fatalf("read of intact block %d: %v", other, err)
			}
			// Rewriting a corrupt live block repairs it (once the snapshot,
			// which would copy the corrupt block first, is gone).
			if !tt.snap {
				if err := s.DeleteChunkSnapshotOrCorrectSn(1, 2); err != nil {
					t.Fatal(err)
				}
				mustWrite(t, s, 1, 2, blockData(3, tt.block), tt.block*testBlock)
				if err := s.ReadChunk(1, buf, tt.block*testBlock); err != nil {
					t.Fatalf("read after rewrite: %v", err)
				}
			}
		})
	}
}

// TestCRCCorruptionBlocksCOW: a corrupt block is not copied into a snapshot;
// the write fails with ErrCRC and changes nothing.
func TestCRCCorruptionBlocksCOW(t *testing.T) {
	s, dir := openTest(t)
	mustWrite(t, s, 1, 1, blocksData(1, 0, 2), 0)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	flipByte(t, filepath.Join(dir, "chunk_1"), testPage+testBlock+1)
	s = openTestOpts(t, testOpts(dir))
	if err := s.WriteChunk(1, 2, blocksData(2, 0, 2), 0); !errors.Is(err, ErrCRC) {
		t.Fatalf("COW over corrupt block: got %v, want ErrCRC", err)
	}
	// Block 0 (valid) was not copied or written either: COW of a range is
	// all or nothing per run.
	if err := s.ReadChunkSnapshot(1, 1, make([]byte, testBlock), 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, testBlock)
	if err := s.ReadChunk(1, buf, 0); err != nil || string(buf) != string(blockData(1, 0)) {
		t.Fatalf("block 0 changed: %v", err)
	}
}

func TestGetChunkHash(t *testing.T) {
	s, _ := openTest(t)
	data := blocksData(5, 0, testBlocks)
	mustWrite(t, s, 1, 1, data, 0)
	mustWrite(t, s, 2, 1, blocksData(6, 3, 1), 3*testBlock)
	want2 := make([]byte, testChunkSize)
	copy(want2[3*testBlock:], blocksData(6, 3, 1))
	hash := func(b []byte) string {
		return strconv.FormatUint(uint64(stdcrc32.Checksum(b, stdCastagnoli)), 10)
	}
	tests := []struct {
		id          uint64
		off, length uint32
		want        string
		err         error
	}{
		{1, 0, testChunkSize, hash(data), nil},
		{1, 0, testBlock, hash(data[:testBlock]), nil},
		{1, 1, 1, hash(data[1:2]), nil},
		{1, testBlock - 3, 10, hash(data[testBlock-3 : testBlock+7]), nil},
		{1, 123, 3*testBlock + 1000, hash(data[123 : 123+3*testBlock+1000]), nil},
		{1, testChunkSize - 1, 1, hash(data[testChunkSize-1:]), nil},
		{1, testChunkSize, 0, "0", nil},
		{1, 5, 0, "0", nil},
		{2, 0, testChunkSize, hash(want2), nil},
		{2, 0, 3 * testBlock, hash(make([]byte, 3*testBlock)), nil},
		{99, 0, testChunkSize, "0", nil},
		{99, testChunkSize, 1, "", ErrInvalidArg},
		{1, testChunkSize - 1, 2, "", ErrInvalidArg},
		{1, 0, testChunkSize + 1, "", ErrInvalidArg},
		{1, ^uint32(0), 2, "", ErrInvalidArg},
	}
	for _, tt := range tests {
		got, err := s.GetChunkHash(tt.id, tt.off, tt.length)
		if got != tt.want || !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
			t.Errorf("GetChunkHash(%d, %d, %d) = %q, %v; want %q, %v", tt.id, tt.off, tt.length, got, err, tt.want, tt.err)
		}
	}
	// Replicas with equal data agree although their meta pages differ.
	s2, _ := openTest(t)
	mustWrite(t, s2, 1, 7, data, 0)
	h1, _ := s.GetChunkHash(1, 0, testChunkSize)
	h2, _ := s2.GetChunkHash(1, 0, testChunkSize)
	if h1 != h2 {
		t.Fatalf("hash depends on meta page: %s vs %s", h1, h2)
	}
}

// TestGetChunkHashDefaultSize hashes a 16 MiB chunk in pieces.
func TestGetChunkHashDefaultSize(t *testing.T) {
	s := openTestOpts(t, Options{Dir: t.TempDir()})
	data := pattern(3, 3*DefaultBlockSize)
	mustWrite(t, s, 1, 1, data, DefaultChunkSize/2)
	full := make([]byte, DefaultChunkSize)
	copy(full[DefaultChunkSize/2:], data)
	got, err := s.GetChunkHash(1, 0, DefaultChunkSize)
	if want := strconv.FormatUint(uint64(stdcrc32.Checksum(full, stdCastagnoli)), 10); err != nil || got != want {
		t.Fatalf("GetChunkHash: %s, %v; want %s", got, err, want)
	}
}

// TestDataHash: DataHash is the crc32c of every chunk's whole data in
// chunk id order; it reads the data region raw, so a byte corrupted on
// disk changes the hash instead of failing it.
func TestDataHash(t *testing.T) {
	s, dir := openTest(t)
	a, b := blocksData(7, 0, testBlocks), blocksData(8, 2, 1)
	mustWrite(t, s, 2, 1, b, 2*testBlock)
	mustWrite(t, s, 1, 1, a, 0)
	full := append(append([]byte(nil), a...), make([]byte, testChunkSize)...)
	copy(full[testChunkSize+2*testBlock:], b)
	want := stdcrc32.Checksum(full, stdCastagnoli)
	if got, err := s.DataHash(); err != nil || got != want {
		t.Fatalf("DataHash: %08x, %v; want %08x", got, err, want)
	}

	f, err := os.OpenFile(filepath.Join(dir, chunkFileName(2)), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff}, s.g.dataOff+2*testBlock); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got, err := s.DataHash(); err != nil || got == want {
		t.Fatalf("DataHash after corrupting chunk 2 on disk: %08x, %v; want a different hash and no error", got, err)
	}
}
