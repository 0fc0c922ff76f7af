package sharedlog

import "github.com/chunkraft/chunkraft/internal/bufpool"

// Record buffers are recycled: a fresh multi-megabyte
// allocation costs page faults and zeroing on every append, several times
// the copy that encodes the record. A record's buffer is free once its request is answered: until
// then the shard's writer owns it (it sets the record's link in it and
// writes it to the segment from there), after that nothing keeps it.

const (
	minPooledShift = 10 // 1 KiB: smaller records are cheap to allocate
	maxPooledShift = 25 // 32 MiB
)

var recBufs = bufpool.New(minPooledShift, maxPooledShift)

// getRecBuf returns an empty buffer with room for n bytes and, when it
// comes from the pool, the handle putRecBuf recycles it with (nil when it
// does not).
func getRecBuf(n int) (b []byte, hold *[]byte) {
	if n < 1<<minPooledShift {
		return make([]byte, 0, n), nil
	}
	hold = recBufs.Get(n)
	return (*hold)[:0], hold
}

// putRecBuf recycles b, which must come with hold from one getRecBuf call
// and no longer be referenced; it does nothing when hold is nil. Recycling
// through the pool's own handle allocates nothing.
func putRecBuf(b []byte, hold *[]byte) {
	if hold == nil {
		return
	}
	*hold = b
	recBufs.Put(hold)
}
