package datastore

import (
	"bytes"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
)

// openCached opens a store with a fresh block cache.
func openCached(t *testing.T) (*Store, *BlockCache) {
	t.Helper()
	c, err := NewBlockCache(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	opts := testOpts(t.TempDir())
	opts.Cache = c
	return openTestOpts(t, opts), c
}

// readThrice reads [blk, blk+n) of chunk id three times and checks each
// against want: a block enters the cache on its second miss (the
// doorkeeper) and, once ristretto applied the insert, the third read hits.
func readThrice(t *testing.T, s *Store, c *BlockCache, id uint64, blk, n uint32, want []byte) {
	t.Helper()
	for i := range 3 {
		buf := make([]byte, n*testBlock)
		if err := s.ReadChunk(id, buf, blk*testBlock); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if !bytes.Equal(buf, want) {
			t.Fatalf("read %d of chunk %d [%d, +%d): stale or wrong data", i, id, blk, n)
		}
		c.wait()
	}
}

func TestCacheNoStaleReads(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(t *testing.T, s *Store) // after blocks [0, 4) of chunk 1 are cached with seed 1
		want   map[uint32]byte              // blocks [0, 4) afterwards (absent: zero)
	}{
		{"overwrite", func(t *testing.T, s *Store) {
			mustWrite(t, s, 1, 1, blocksData(2, 1, 2), testBlock)
		}, map[uint32]byte{0: 1, 1: 2, 2: 2, 3: 1}},
		{"overwrite with a snapshot (COW)", func(t *testing.T, s *Store) {
			mustWrite(t, s, 1, 2, blocksData(2, 0, 1), 0)
		}, map[uint32]byte{0: 2, 1: 1, 2: 1, 3: 1}},
		{"delete and recreate", func(t *testing.T, s *Store) {
			if err := s.DeleteChunk(1, 0); err != nil {
				t.Fatal(err)
			}
			mustWrite(t, s, 1, 1, blocksData(2, 3, 1), 3*testBlock)
		}, map[uint32]byte{3: 2}},
		{"delete and recreate as clone, then paste", func(t *testing.T, s *Store) {
			if err := s.DeleteChunk(1, 0); err != nil {
				t.Fatal(err)
			}
			mustClone(t, s, 1, 1, 0)
			if err := s.PasteChunk(1, blocksData(3, 0, 4), 0); err != nil {
				t.Fatal(err)
			}
		}, map[uint32]byte{0: 3, 1: 3, 2: 3, 3: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, c := openCached(t)
			mustWrite(t, s, 1, 1, blocksData(1, 0, 4), 0)
			mustWrite(t, s, 2, 1, blocksData(9, 0, 4), 0)
			readThrice(t, s, c, 1, 0, 4, blocksData(1, 0, 4))
			readThrice(t, s, c, 2, 0, 4, blocksData(9, 0, 4))
			if st := s.Stats(); st.CacheHits < 8 {
				t.Fatalf("no cache hits: %+v", st)
			}
			tt.mutate(t, s)
			var want []byte
			for b := range uint32(4) {
				if seed, ok := tt.want[b]; ok {
					want = append(want, blockData(seed, b)...)
				} else {
					want = append(want, make([]byte, testBlock)...)
				}
			}
			readThrice(t, s, c, 1, 0, 4, want)
			for b := range uint32(4) { // block by block, mixing hits and misses
				readThrice(t, s, c, 1, b, 1, want[b*testBlock:(b+1)*testBlock])
			}
			readThrice(t, s, c, 2, 0, 4, blocksData(9, 0, 4)) // untouched chunk
		})
	}
}

// TestCachePasteOnCachedClone: pasting into blocks a clone read cached as
// part of a ReadChunkClone invalidates them.
func TestCachePasteOnCachedClone(t *testing.T) {
	s, c := openCached(t)
	mustClone(t, s, 1, 1, 0)
	mustWrite(t, s, 1, 1, blocksData(1, 0, 1), 0)
	buf := make([]byte, 2*testBlock)
	for range 2 {
		if _, err := s.ReadChunkClone(1, buf, 0); err != nil {
			t.Fatal(err)
		}
		c.wait()
	}
	if err := s.PasteChunk(1, blocksData(2, 0, 2), 0); err != nil {
		t.Fatal(err)
	}
	readThrice(t, s, c, 1, 0, 2, append(blockData(1, 0), blockData(2, 1)...))
}

// TestCacheStoresShareCache: two stores with the same chunk ids do not see
// each other's blocks, also after one is reopened.
func TestCacheStoresShareCache(t *testing.T) {
	c, err := NewBlockCache(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var stores []*Store
	for i := range 2 {
		opts := testOpts(t.TempDir())
		opts.Cache = c
		s := openTestOpts(t, opts)
		mustWrite(t, s, 1, 1, blocksData(byte(i+1), 0, 1), 0)
		stores = append(stores, s)
	}
	for range 2 {
		for i, s := range stores {
			readThrice(t, s, c, 1, 0, 1, blockData(byte(i+1), 0))
		}
	}
	// Swap store 0's directory content behind its back while closed, as a
	// snapshot install does, and reopen: no block of the old files is served.
	dir := stores[0].Options().Dir
	if err := stores[0].Close(); err != nil {
		t.Fatal(err)
	}
	opts := testOpts(dir)
	opts.Cache = c
	s := openTestOpts(t, opts)
	mustWrite(t, s, 1, 1, blocksData(7, 0, 1), 0)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTestOpts(t, opts)
	readThrice(t, s, c, 1, 0, 1, blockData(7, 0))
}

// TestCacheConcurrentNoStale: readers never see a block version older than
// the last write that completed before their read began.
func TestCacheConcurrentNoStale(t *testing.T) {
	s, _ := openCached(t)
	const blocks = 4
	write := func(v uint64) {
		for b := range uint32(blocks) {
			data := make([]byte, testBlock)
			binary.LittleEndian.PutUint64(data, v)
			if err := s.WriteChunk(1, 1, data, b*testBlock); err != nil {
				t.Error(err)
			}
		}
	}
	write(1)
	var done atomic.Uint64
	done.Store(1)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for r := range 4 {
		wg.Go(func() {
			buf := make([]byte, testBlock)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				b := uint32(i+r) % blocks
				min := done.Load()
				if err := s.ReadChunk(1, buf, b*testBlock); err != nil {
					t.Error(err)
					return
				}
				if v := binary.LittleEndian.Uint64(buf); v < min {
					t.Errorf("block %d: read version %d after version %d was written", b, v, min)
					return
				}
			}
		})
	}
	for v := uint64(2); v < 300 && !t.Failed(); v++ {
		write(v)
		done.Store(v)
	}
	close(stop)
	wg.Wait()
	if st := s.Stats(); st.CacheHits == 0 {
		t.Logf("no cache hits during the race (stats %+v)", st)
	}
}

// TestCacheClosedWhileInUse: a closed cache makes the stores using it
// uncached, not broken.
func TestCacheClosedWhileInUse(t *testing.T) {
	s, c := openCached(t)
	mustWrite(t, s, 1, 1, blocksData(1, 0, 2), 0)
	readThrice(t, s, c, 1, 0, 2, blocksData(1, 0, 2))
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 200 {
			if err := s.WriteChunk(1, 1, blocksData(byte(i), 0, 2), 0); err != nil {
				t.Error(err)
				return
			}
			if err := s.ReadChunk(1, make([]byte, 2*testBlock), 0); err != nil {
				t.Error(err)
				return
			}
		}
	})
	c.Close()
	wg.Wait()
	c.Close()
	mustWrite(t, s, 1, 1, blocksData(9, 0, 2), 0)
	readThrice(t, s, c, 1, 0, 2, blocksData(9, 0, 2))
}

// TestCacheDoorkeeper: a block read once is not inserted; read again it is,
// and the next read hits.
func TestCacheDoorkeeper(t *testing.T) {
	s, c := openCached(t)
	mustWrite(t, s, 1, 1, blocksData(1, 0, 1), 0)
	read := func() {
		t.Helper()
		buf := make([]byte, testBlock)
		if err := s.ReadChunk(1, buf, 0); err != nil {
			t.Fatal(err)
		}
		c.wait()
	}
	read()
	read()
	if st := s.Stats(); st.CacheHits != 0 || st.CacheMisses != 2 {
		t.Fatalf("after two reads: %d hits, %d misses; want 0 and 2 (inserted on the second miss)", st.CacheHits, st.CacheMisses)
	}
	read()
	if st := s.Stats(); st.CacheHits != 1 {
		t.Fatalf("third read: %d hits, want 1", st.CacheHits)
	}
}
