package datastore

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

const testLoc = "pool1/copyset2/7:0@cs"

func mustClone(t *testing.T, s *Store, id, sn, correctedSn uint64) {
	t.Helper()
	if err := s.CreateCloneChunk(id, sn, correctedSn, testChunkSize, testLoc); err != nil {
		t.Fatalf("CreateCloneChunk(%d): %v", id, err)
	}
}

func TestCreateCloneChunk(t *testing.T) {
	tests := []struct {
		name        string
		sn, corr    uint64
		size        uint32
		loc         string
		want        error
		wantCreated bool
	}{
		{"ok", 1, 0, testChunkSize, testLoc, nil, true},
		{"ok with corrected sn", 2, 5, testChunkSize, "obj@s3", nil, true},
		{"location at the limit", 1, 0, testChunkSize, strings.Repeat("l", MaxLocationLen), nil, true},
		{"sn 0", 0, 0, testChunkSize, testLoc, ErrInvalidArg, false},
		{"size too small", 1, 0, testChunkSize - testBlock, testLoc, ErrInvalidArg, false},
		{"size too large", 1, 0, testChunkSize * 2, testLoc, ErrInvalidArg, false},
		{"empty location", 1, 0, testChunkSize, "", ErrInvalidArg, false},
		{"location too long", 1, 0, testChunkSize, strings.Repeat("l", MaxLocationLen+1), ErrInvalidArg, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := openTest(t)
			err := s.CreateCloneChunk(1, tt.sn, tt.corr, tt.size, tt.loc)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("CreateCloneChunk: got %v, want %v", err, tt.want)
			}
			info, err := s.GetChunkInfo(1)
			if !tt.wantCreated {
				if !errors.Is(err, ErrChunkNotExist) {
					t.Fatalf("chunk exists after a failed create: %+v", info)
				}
				return
			}
			want := ChunkInfo{ID: 1, Sn: tt.sn, CorrectedSn: tt.corr, Location: tt.loc, CloneUnwritten: testBlocks}
			if err != nil || info != want {
				t.Fatalf("GetChunkInfo: %+v, %v; want %+v", info, err, want)
			}
			// Durable and reloaded as a clone.
			s = reopen(t, s)
			if info, _ := s.GetChunkInfo(1); info != want {
				t.Fatalf("after reopen: %+v", info)
			}
			if st := s.Stats(); st.Clones != 1 {
				t.Fatalf("Stats.Clones %d", st.Clones)
			}
		})
	}
}

func TestCreateCloneChunkExisting(t *testing.T) {
	tests := []struct {
		name     string
		sn, corr uint64
		loc      string
		want     error
	}{
		{"same attributes: replay succeeds", 2, 3, testLoc, nil},
		{"other sn", 1, 3, testLoc, ErrChunkExist},
		{"other corrected sn", 2, 4, testLoc, ErrChunkExist},
		{"other location", 2, 3, "other:0@cs", ErrChunkExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := openTest(t)
			mustClone(t, s, 1, 2, 3)
			if err := s.PasteChunk(1, blocksData(1, 0, 1), 0); err != nil {
				t.Fatal(err)
			}
			err := s.CreateCloneChunk(1, tt.sn, tt.corr, testChunkSize, tt.loc)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			// Nothing changed: the pasted block is still there.
			if info, _ := s.GetChunkInfo(1); info.CloneUnwritten != testBlocks-1 || info.Location != testLoc {
				t.Fatalf("info changed: %+v", info)
			}
		})
	}
	t.Run("normal chunk", func(t *testing.T) {
		s, _ := openTest(t)
		mustWrite(t, s, 1, 1, blocksData(1, 0, 1), 0)
		if err := s.CreateCloneChunk(1, 1, 0, testChunkSize, testLoc); !errors.Is(err, ErrChunkExist) {
			t.Fatalf("got %v, want ErrChunkExist", err)
		}
	})
}

// TestCloneReads checks ReadChunk, ReadChunkClone and ReadChunkSnapshot of
// the live sn on a clone with blocks 2, 3 written and 5 pasted.
func TestCloneReads(t *testing.T) {
	s, _ := openTest(t)
	mustClone(t, s, 1, 1, 0)
	mustWrite(t, s, 1, 1, blocksData(1, 2, 2), 2*testBlock)
	if err := s.PasteChunk(1, blocksData(2, 5, 1), 5*testBlock); err != nil {
		t.Fatal(err)
	}
	written := map[uint32]byte{2: 1, 3: 1, 5: 2}
	tests := []struct {
		lo, n     uint32
		unwritten []Range
	}{
		{0, 8, []Range{{0, 2 * testBlock}, {4 * testBlock, testBlock}, {6 * testBlock, 2 * testBlock}}},
		{2, 2, nil},
		{5, 1, nil},
		{2, 4, []Range{{4 * testBlock, testBlock}}},
		{4, 1, []Range{{4 * testBlock, testBlock}}},
		{1, 3, []Range{{testBlock, testBlock}}},
		{5, testBlocks - 5, []Range{{6 * testBlock, (testBlocks - 6) * testBlock}}},
	}
	for _, tt := range tests {
		buf := bytes.Repeat([]byte{0xEE}, int(tt.n*testBlock))
		unwritten, err := s.ReadChunkClone(1, buf, tt.lo*testBlock)
		if err != nil {
			t.Fatalf("ReadChunkClone [%d, +%d): %v", tt.lo, tt.n, err)
		}
		if !reflect.DeepEqual(unwritten, tt.unwritten) {
			t.Fatalf("ReadChunkClone [%d, +%d): unwritten %v, want %v", tt.lo, tt.n, unwritten, tt.unwritten)
		}
		for b := tt.lo; b < tt.lo+tt.n; b++ {
			want := make([]byte, testBlock) // unwritten blocks are zero-filled
			if seed, ok := written[b]; ok {
				want = blockData(seed, b)
			}
			if !bytes.Equal(buf[(b-tt.lo)*testBlock:(b-tt.lo+1)*testBlock], want) {
				t.Fatalf("ReadChunkClone [%d, +%d): block %d differs", tt.lo, tt.n, b)
			}
		}
		// Plain reads work exactly when the whole range is written.
		err = s.ReadChunk(1, make([]byte, tt.n*testBlock), tt.lo*testBlock)
		if (len(tt.unwritten) == 0) != (err == nil) || (err != nil && !errors.Is(err, ErrPageNeverWritten)) {
			t.Fatalf("ReadChunk [%d, +%d): %v", tt.lo, tt.n, err)
		}
		err = s.ReadChunkSnapshot(1, 1, make([]byte, tt.n*testBlock), tt.lo*testBlock)
		if (len(tt.unwritten) == 0) != (err == nil) || (err != nil && !errors.Is(err, ErrPageNeverWritten)) {
			t.Fatalf("ReadChunkSnapshot [%d, +%d): %v", tt.lo, tt.n, err)
		}
	}
	// A normal chunk: everything, unwritten nil; a missing chunk: error.
	mustWrite(t, s, 2, 1, blocksData(3, 0, 1), 0)
	buf := make([]byte, 2*testBlock)
	if u, err := s.ReadChunkClone(2, buf, 0); err != nil || u != nil || !bytes.Equal(buf[:testBlock], blockData(3, 0)) {
		t.Fatalf("ReadChunkClone of normal chunk: %v, %v", u, err)
	}
	if _, err := s.ReadChunkClone(3, buf, 0); !errors.Is(err, ErrChunkNotExist) {
		t.Fatalf("ReadChunkClone of missing chunk: %v", err)
	}
	if _, err := s.ReadChunkClone(2, buf[:1], 0); !errors.Is(err, ErrInvalidArg) {
		t.Fatalf("ReadChunkClone unaligned: %v", err)
	}
}

// TestClonePaste checks that pastes fill only unwritten blocks.
func TestClonePaste(t *testing.T) {
	const W, P, Q = 1, 2, 3
	tests := []struct {
		name  string
		ops   func(t *testing.T, s *Store)
		want  map[uint32]byte // blocks [0, 8)
		unset int             // CloneUnwritten
	}{
		{"paste fills", func(t *testing.T, s *Store) {
			mustPaste(t, s, P, 0, 4)
		}, map[uint32]byte{0: P, 1: P, 2: P, 3: P}, testBlocks - 4},
		{"paste never overwrites client data", func(t *testing.T, s *Store) {
			mustWrite(t, s, 1, 1, blocksData(W, 1, 1), testBlock)
			mustWrite(t, s, 1, 1, blocksData(W, 3, 1), 3*testBlock)
			mustPaste(t, s, P, 0, 5)
		}, map[uint32]byte{0: P, 1: W, 2: P, 3: W, 4: P}, testBlocks - 5},
		{"paste never overwrites an earlier paste", func(t *testing.T, s *Store) {
			mustPaste(t, s, P, 2, 2)
			mustPaste(t, s, Q, 0, 6)
		}, map[uint32]byte{0: Q, 1: Q, 2: P, 3: P, 4: Q, 5: Q}, testBlocks - 6},
		{"client writes over pasted data", func(t *testing.T, s *Store) {
			mustPaste(t, s, P, 0, 2)
			mustWrite(t, s, 1, 1, blocksData(W, 1, 2), testBlock)
		}, map[uint32]byte{0: P, 1: W, 2: W}, testBlocks - 3},
		{"replayed paste after a write keeps the write", func(t *testing.T, s *Store) {
			mustPaste(t, s, P, 0, 2)
			mustWrite(t, s, 1, 1, blocksData(W, 1, 1), testBlock)
			mustPaste(t, s, P, 0, 2)
		}, map[uint32]byte{0: P, 1: W}, testBlocks - 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := openTest(t)
			mustClone(t, s, 1, 1, 0)
			tt.ops(t, s)
			check := func(s *Store) {
				t.Helper()
				buf := make([]byte, 8*testBlock)
				if _, err := s.ReadChunkClone(1, buf, 0); err != nil {
					t.Fatal(err)
				}
				for b := range uint32(8) {
					want := make([]byte, testBlock)
					if seed, ok := tt.want[b]; ok {
						want = blockData(seed, b)
					}
					if !bytes.Equal(buf[b*testBlock:(b+1)*testBlock], want) {
						t.Fatalf("block %d differs (want seed %d)", b, tt.want[b])
					}
				}
				if info, _ := s.GetChunkInfo(1); info.CloneUnwritten != tt.unset || info.Location != testLoc {
					t.Fatalf("info %+v, want %d unwritten", info, tt.unset)
				}
			}
			check(s)
			check(reopen(t, s)) // the bitmap is persisted
		})
	}
	t.Run("normal chunk: no-op", func(t *testing.T) {
		s, _ := openTest(t)
		mustWrite(t, s, 1, 1, blocksData(W, 0, 1), 0)
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		mustPaste(t, s, P, 0, 2)
		buf := make([]byte, 2*testBlock)
		if err := s.ReadChunk(1, buf, 0); err != nil || !bytes.Equal(buf, append(blockData(W, 0), make([]byte, testBlock)...)) {
			t.Fatalf("paste changed a normal chunk: %v", err)
		}
		if got := dirtyChunks(s); len(got) != 0 {
			t.Fatalf("paste on a normal chunk dirtied it: %v", got)
		}
	})
	t.Run("missing chunk", func(t *testing.T) {
		s, _ := openTest(t)
		if err := s.PasteChunk(1, blocksData(P, 0, 1), 0); !errors.Is(err, ErrChunkNotExist) {
			t.Fatalf("got %v, want ErrChunkNotExist", err)
		}
		if len(s.ListChunks()) != 0 {
			t.Fatal("paste created a chunk")
		}
	})
	t.Run("bad range", func(t *testing.T) {
		s, _ := openTest(t)
		mustClone(t, s, 1, 1, 0)
		if err := s.PasteChunk(1, make([]byte, 100), 0); !errors.Is(err, ErrInvalidArg) {
			t.Fatalf("got %v, want ErrInvalidArg", err)
		}
	})
}

func mustPaste(t *testing.T, s *Store, seed byte, blk, n uint32) {
	t.Helper()
	if err := s.PasteChunk(1, blocksData(seed, blk, n), blk*testBlock); err != nil {
		t.Fatalf("PasteChunk: %v", err)
	}
}

// TestCloneBecomesNormal fills a clone with a mix of writes and pastes.
func TestCloneBecomesNormal(t *testing.T) {
	tests := []struct {
		name string
		fill func(t *testing.T, s *Store)
	}{
		{"one write of everything", func(t *testing.T, s *Store) {
			mustWrite(t, s, 1, 1, blocksData(1, 0, testBlocks), 0)
		}},
		{"one paste of everything", func(t *testing.T, s *Store) {
			mustPaste(t, s, 1, 0, testBlocks)
		}},
		{"writes then a paste of the rest", func(t *testing.T, s *Store) {
			mustWrite(t, s, 1, 1, blocksData(1, 0, 10), 0)
			mustWrite(t, s, 1, 1, blocksData(1, 20, 10), 20*testBlock)
			mustPaste(t, s, 1, 0, testBlocks)
		}},
		{"pastes then the last block written", func(t *testing.T, s *Store) {
			mustPaste(t, s, 1, 0, testBlocks-1)
			mustWrite(t, s, 1, 1, blocksData(1, testBlocks-1, 1), (testBlocks-1)*testBlock)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := openTest(t)
			mustClone(t, s, 1, 1, 0)
			tt.fill(t, s)
			check := func(s *Store) {
				t.Helper()
				if info, _ := s.GetChunkInfo(1); info != (ChunkInfo{ID: 1, Sn: 1}) {
					t.Fatalf("info %+v, want a normal chunk", info)
				}
				if !bytes.Equal(readAll(t, s, 1), blocksData(1, 0, testBlocks)) {
					t.Fatal("data differs")
				}
				if u, err := s.ReadChunkClone(1, make([]byte, testBlock), 0); u != nil || err != nil {
					t.Fatalf("ReadChunkClone: %v, %v", u, err)
				}
				if st := s.Stats(); st.Clones != 0 {
					t.Fatalf("Stats.Clones %d", st.Clones)
				}
			}
			check(s)
			// A paste now is a no-op, a replayed create conflicts (as in
			// Curve), and the chunk can be snapshotted.
			mustPaste(t, s, 9, 0, 1)
			if err := s.CreateCloneChunk(1, 1, 0, testChunkSize, testLoc); !errors.Is(err, ErrChunkExist) {
				t.Fatalf("CreateCloneChunk on converted clone: %v", err)
			}
			check(s)
			s = reopen(t, s)
			check(s)
			mustWrite(t, s, 1, 2, blocksData(2, 0, 1), 0)
			if info, _ := s.GetChunkInfo(1); info.SnapSn != 1 {
				t.Fatalf("converted clone not snapshotted: %+v", info)
			}
		})
	}
}

// TestCloneSequenceNumbers: clones cannot be snapshotted (StatusConflict).
func TestCloneSequenceNumbers(t *testing.T) {
	tests := []struct {
		name     string
		sn, corr uint64
		op       func(s *Store) error
		want     error
		wantSn   uint64
	}{
		{"write at sn", 2, 0, func(s *Store) error { return s.WriteChunk(1, 2, blocksData(1, 0, 1), 0) }, nil, 2},
		{"write above sn needs a snapshot", 2, 0, func(s *Store) error { return s.WriteChunk(1, 3, blocksData(1, 0, 1), 0) }, ErrStatusConflict, 2},
		{"write below sn", 2, 0, func(s *Store) error { return s.WriteChunk(1, 1, blocksData(1, 0, 1), 0) }, ErrBackward, 2},
		{"write up to corrected sn bumps sn", 2, 4, func(s *Store) error { return s.WriteChunk(1, 4, blocksData(1, 0, 1), 0) }, nil, 4},
		{"write below corrected sn", 2, 4, func(s *Store) error { return s.WriteChunk(1, 3, blocksData(1, 0, 1), 0) }, ErrBackward, 2},
		{"write above corrected sn", 2, 4, func(s *Store) error { return s.WriteChunk(1, 5, blocksData(1, 0, 1), 0) }, ErrStatusConflict, 2},
		{"delete snapshot or correct sn", 2, 0, func(s *Store) error { return s.DeleteChunkSnapshotOrCorrectSn(1, 3) }, ErrStatusConflict, 2},
		{"delete chunk", 2, 0, func(s *Store) error { return s.DeleteChunk(1, 2) }, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := openTest(t)
			mustClone(t, s, 1, tt.sn, tt.corr)
			err := tt.op(s)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			info, err := s.GetChunkInfo(1)
			if tt.wantSn == 0 {
				if !errors.Is(err, ErrChunkNotExist) {
					t.Fatalf("chunk still there: %+v", info)
				}
				return
			}
			if info.Sn != tt.wantSn || info.SnapSn != 0 || info.Location != testLoc {
				t.Fatalf("info %+v, want sn %d, no snapshot, still a clone", info, tt.wantSn)
			}
		})
	}
}
