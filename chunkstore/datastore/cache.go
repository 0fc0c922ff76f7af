package datastore

import (
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/dgraph-io/ristretto/v2"
)

// BlockCache keeps hot data blocks of live chunks in memory, shared by any
// number of Stores (Options.Cache); it is a ristretto cache bounded in bytes.
// Snapshot files and meta pages are not cached (meta pages live in memory
// anyway).
//
// Entries are keyed by (store identity, chunk id, block index); the value
// also records the chunk's incarnation, a process-wide number given to every
// chunk file a Store opens or creates, and a lookup that finds another
// incarnation is a miss. Blocks enter the cache on a verified read (so they
// are never corrupt) and leave it:
//
//   - on WriteChunk, PasteChunk and copy-on-write of that block: the writer,
//     holding the chunk exclusively, deletes the written blocks' entries;
//   - on DeleteChunk: the chunk's incarnation retires, so its entries can
//     never hit again; they are also deleted to free the memory;
//   - on eviction by ristretto's admission policy.
//
// A block is inserted on its second miss, not its first: seen, a
// direct-mapped table of recently missed keys, is the doorkeeper. A block
// read once (every block of a uniform random read over more data than the
// cache holds) then costs one atomic swap instead of a ristretto insert (a
// copy, two allocations and policy work), which costs ~10 us of server CPU
// per 4 KiB read, a fifth of the read path, for a hit rate near zero
// (docs/performance.md, "Block cache doorkeeper").
//
// ristretto applies inserts asynchronously: an insert queued by a reader
// before a writer's delete could otherwise land after the delete removed the
// (not yet present) entry and serve stale data. Readers therefore flag the
// chunk when they insert, and a writer that finds the flag set first waits
// for the queued inserts to be applied (ristretto's Wait) and then deletes.
// Since readers insert under the chunk's shared lock and writers delete
// under its exclusive lock, no read after a write returns the overwritten
// bytes.
type BlockCache struct {
	// mu is held shared by every use of c and exclusively by Close, since
	// ristretto's Close must not race with other calls.
	mu     sync.RWMutex
	closed bool
	c      *ristretto.Cache[uint64, *cachedBlock]
	// seen holds the keys of recently missed blocks, at key&(len-1); its
	// length is a power of two. Collisions only delay an insert.
	seen []atomic.Uint64
}

// cachedBlock is a cache value; data is never modified after insertion.
type cachedBlock struct {
	store, chunk, inc uint64
	block             uint32
	data              []byte
}

// cacheEntryOverhead approximates the bytes a cached block costs beyond its
// data (value struct, ristretto's item and policy bookkeeping).
const cacheEntryOverhead = 160

// NewBlockCache returns a cache holding about maxBytes of blocks (at least
// 1 MiB). Close it after the last Store using it has closed.
func NewBlockCache(maxBytes int64) (*BlockCache, error) {
	maxBytes = max(maxBytes, 1<<20)
	c, err := ristretto.NewCache(&ristretto.Config[uint64, *cachedBlock]{
		NumCounters:        max(10*maxBytes/DefaultBlockSize, 1<<12),
		MaxCost:            maxBytes,
		BufferItems:        64,
		IgnoreInternalCost: true,
	})
	if err != nil {
		return nil, fmt.Errorf("datastore: block cache: %w", err)
	}
	slots := 1 << bits.Len64(uint64(max(2*maxBytes/DefaultBlockSize, 1<<12)-1))
	return &BlockCache{c: c, seen: make([]atomic.Uint64, slots)}, nil
}

// Close releases the cache. Stores still using it keep working, uncached.
func (b *BlockCache) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		b.c.Close()
	}
}

// use runs fn with the ristretto cache unless b is closed.
func (b *BlockCache) use(fn func(c *ristretto.Cache[uint64, *cachedBlock])) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if !b.closed {
		fn(b.c)
	}
}

// wait blocks until inserts queued so far are applied.
func (b *BlockCache) wait() { b.use(func(c *ristretto.Cache[uint64, *cachedBlock]) { c.Wait() }) }

// storeSeq and incSeq number store identities and chunk incarnations for the
// cache; both are process-wide and never reused.
var storeSeq, incSeq atomic.Uint64

// cacheKey mixes a block's identity into a 64-bit key. Collisions cost only
// hit rate: a value is checked against the full identity on lookup, and a
// delete of a colliding key removes a foreign block at worst.
func cacheKey(store, chunk uint64, block uint32) uint64 {
	h := store*0x9e3779b97f4a7c15 ^ chunk
	h ^= h >> 31
	h *= 0xbf58476d1ce4e5b9
	h ^= uint64(block) * 0x94d049bb133111eb
	h ^= h >> 29
	h *= 0x9e3779b97f4a7c15
	return h ^ h>>32
}

// get copies block of chunk c into dst and reports whether it was cached.
// The caller holds c.mu (shared or exclusive).
func (b *BlockCache) get(store uint64, c *chunkFile, block uint32, dst []byte) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return false
	}
	v, ok := b.c.Get(cacheKey(store, c.id, block))
	if !ok || v.store != store || v.chunk != c.id || v.inc != c.inc || v.block != block || len(v.data) != len(dst) {
		return false
	}
	copy(dst, v.data)
	return true
}

// put caches a copy of data, verified block block of chunk c, if the block
// missed recently before (see seen). The caller holds c.mu shared.
func (b *BlockCache) put(store uint64, c *chunkFile, block uint32, data []byte) {
	k := cacheKey(store, c.id, block)
	if b.seen[k&uint64(len(b.seen)-1)].Swap(k) != k {
		return // first miss: remember it only
	}
	v := &cachedBlock{store: store, chunk: c.id, inc: c.inc, block: block, data: append([]byte(nil), data...)}
	b.use(func(rc *ristretto.Cache[uint64, *cachedBlock]) {
		if rc.Set(k, v, int64(len(data))+cacheEntryOverhead) {
			c.cacheUsed.Store(true)
			c.cacheFilled.Store(true)
		}
	})
}

// invalidate removes blocks [lo, hi) of chunk c. The caller holds c.mu
// exclusively.
func (b *BlockCache) invalidate(store uint64, c *chunkFile, lo, hi uint32) {
	if !c.cacheUsed.Load() {
		return // nothing of this incarnation was ever cached
	}
	b.use(func(rc *ristretto.Cache[uint64, *cachedBlock]) {
		if c.cacheFilled.Swap(false) {
			rc.Wait()
		}
		for i := lo; i < hi; i++ {
			rc.Del(cacheKey(store, c.id, i))
		}
	})
}
