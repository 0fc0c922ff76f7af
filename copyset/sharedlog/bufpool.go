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

// getRecBuf returns an empty buffer with room for n bytes.
func getRecBuf(n int) []byte {
	if n < 1<<minPooledShift {
		return make([]byte, 0, n)
	}
	return (*recBufs.Get(n))[:0]
}

// putRecBuf recycles b, which must come from getRecBuf and no longer be
// referenced.
func putRecBuf(b []byte) {
	if cap(b) < 1<<minPooledShift {
		return
	}
	recBufs.Put(&b)
}
