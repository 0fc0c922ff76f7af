package sharedlog

import "github.com/chunkraft/chunkraft/internal/bufpool"

// Record buffers are recycled: a fresh multi-megabyte
// allocation costs page faults and zeroing on every append, several times
// the copy itself. A record's buffer is free once its request is answered
// (the shard copied it into its batch buffer and nothing else keeps it).

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
