package copyset

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/raft"
)

// countingStore counts GetLog calls that reach the store and can fail
// StoreLogs.
type countingStore struct {
	*raft.InmemStore
	gets     int
	storeErr error
}

func (s *countingStore) GetLog(idx uint64, out *raft.Log) error {
	s.gets++
	return s.InmemStore.GetLog(idx, out)
}

func (s *countingStore) StoreLogs(logs []*raft.Log) error {
	if s.storeErr != nil {
		return s.storeErr
	}
	return s.InmemStore.StoreLogs(logs)
}

func entries(lo, hi uint64, size int) []*raft.Log {
	var out []*raft.Log
	for i := lo; i <= hi; i++ {
		out = append(out, &raft.Log{Index: i, Term: 1, Data: make([]byte, size)})
	}
	return out
}

// cached reports which of [lo, hi] GetLog serves without the store.
func cached(t *testing.T, c *logCache, s *countingStore, lo, hi uint64) []uint64 {
	t.Helper()
	var hits []uint64
	for i := lo; i <= hi; i++ {
		before := s.gets
		var l raft.Log
		if err := c.GetLog(i, &l); err != nil {
			t.Fatalf("GetLog(%d): %v", i, err)
		}
		if l.Index != i {
			t.Fatalf("GetLog(%d) returned index %d", i, l.Index)
		}
		if s.gets == before {
			hits = append(hits, i)
		}
	}
	return hits
}

func TestLogCacheBounds(t *testing.T) {
	for _, tc := range []struct {
		name              string
		entries, maxBytes int
		size              int
		wantLo            uint64 // cached: [wantLo, 20]
	}{
		{"count bound", 8, 1 << 20, 10, 13},
		{"byte bound evicts oldest", 16, 50, 10, 16},
		{"entry larger than the budget keeps only the newest", 16, 5, 10, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &countingStore{InmemStore: raft.NewInmemStore()}
			c, err := newLogCache(tc.entries, tc.maxBytes, s)
			if err != nil {
				t.Fatal(err)
			}
			for lo := uint64(1); lo <= 20; lo += 4 {
				if err := c.StoreLogs(entries(lo, lo+3, tc.size)); err != nil {
					t.Fatal(err)
				}
			}
			hits := cached(t, c, s, 1, 20)
			if len(hits) == 0 || hits[0] != tc.wantLo || hits[len(hits)-1] != 20 || len(hits) != int(20-tc.wantLo+1) {
				t.Fatalf("cached indexes %v, want %d..20", hits, tc.wantLo)
			}
			sum := 0
			for _, l := range c.ring {
				if l != nil {
					sum += len(l.Data)
				}
			}
			if sum != c.bytes {
				t.Fatalf("bytes %d, sum of cached data %d", c.bytes, sum)
			}
		})
	}
}

func TestLogCacheDeleteRangeAndStoreError(t *testing.T) {
	s := &countingStore{InmemStore: raft.NewInmemStore()}
	c, err := newLogCache(16, 1<<20, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.StoreLogs(entries(1, 12, 10)); err != nil {
		t.Fatal(err)
	}
	// A conflicting suffix: the entries before it stay cached.
	if err := c.DeleteRange(9, 12); err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	if err := c.GetLog(10, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog(10) after DeleteRange: %v, want ErrLogNotFound", err)
	}
	if c.bytes != 80 {
		t.Fatalf("bytes %d after DeleteRange(9, 12), want 80 (entries 1-8)", c.bytes)
	}
	// A compaction (a prefix): the entries after it stay cached.
	if err := c.DeleteRange(1, 4); err != nil {
		t.Fatal(err)
	}
	if err := c.GetLog(3, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog(3) after DeleteRange(1, 4): %v, want ErrLogNotFound", err)
	}
	gets := s.gets
	for i := uint64(5); i <= 8; i++ {
		if err := c.GetLog(i, &l); err != nil || l.Index != i {
			t.Fatalf("GetLog(%d) after the compaction: %v %d", i, err, l.Index)
		}
	}
	if s.gets != gets || c.bytes != 40 {
		t.Fatalf("after the compaction: %d store reads for cached entries, bytes %d (want 40)", s.gets-gets, c.bytes)
	}
	if err := c.DeleteRange(5, 8); err != nil {
		t.Fatal(err)
	}
	if c.bytes != 0 {
		t.Fatalf("bytes %d after deleting every entry, want 0", c.bytes)
	}
	s.storeErr = errors.New("disk gone")
	if err := c.StoreLogs(entries(5, 6, 10)); !errors.Is(err, s.storeErr) {
		t.Fatalf("StoreLogs: %v, want the store's error", err)
	}
	if err := c.GetLog(5, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog(5) after failed store: %v, want ErrLogNotFound (nothing cached)", err)
	}
	if _, err := newLogCache(0, 1, s); err == nil {
		t.Fatal("newLogCache(0, 1): no error")
	}
}

func TestLogCacheKeepsUnapplied(t *testing.T) {
	s := &countingStore{InmemStore: raft.NewInmemStore()}
	c, err := newLogCache(512, 30, s) // room for three 10-byte entries
	if err != nil {
		t.Fatal(err)
	}
	var applied atomic.Uint64
	c.applied = &applied
	applied.Store(2)
	if err := c.StoreLogs(entries(1, 8, 10)); err != nil {
		t.Fatal(err)
	}
	// 1 and 2 are applied and evicted; 3-8 are not applied and stay.
	if c.bytes != 60 {
		t.Fatalf("bytes %d, want 60 (entries 3-8, not applied yet)", c.bytes)
	}
	var l raft.Log
	for i := uint64(3); i <= 8; i++ {
		if err := c.GetLog(i, &l); err != nil || l.Index != i {
			t.Fatalf("GetLog(%d): %v %d", i, err, l.Index)
		}
	}
	if s.gets != 0 {
		t.Fatalf("%d store reads for entries not applied yet, want 0", s.gets)
	}
	// Once applied, the next store evicts them down to maxBytes.
	applied.Store(9)
	if err := c.StoreLogs(entries(9, 9, 10)); err != nil {
		t.Fatal(err)
	}
	if c.bytes != 30 {
		t.Fatalf("bytes %d once applied, want 30", c.bytes)
	}
	// Past unappliedMax, entries are evicted applied or not.
	big := entries(10, 10+unappliedMax/(1<<20), 1<<20)
	if err := c.StoreLogs(big); err != nil {
		t.Fatal(err)
	}
	if c.bytes > unappliedMax {
		t.Fatalf("bytes %d, want at most unappliedMax %d", c.bytes, unappliedMax)
	}
}
