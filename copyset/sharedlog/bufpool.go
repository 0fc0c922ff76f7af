package sharedlog

import (
	"math/bits"
	"sync"
)

// Record buffers of large batches are recycled: a fresh multi-megabyte
// allocation costs page faults and zeroing on every append, several times
// the copy itself. A record's buffer is free once its request is answered
// (the shard copied it into its batch buffer and nothing else keeps it).

const (
	minPooledShift = 16 // 64 KiB: smaller records are cheap to allocate
	maxPooledShift = 25 // 32 MiB
)

var recPools [maxPooledShift + 1]sync.Pool

// poolClass returns the power-of-two class holding n bytes, or -1 when n is
// not pooled.
func poolClass(n int) int {
	if n < 1<<minPooledShift || n > 1<<maxPooledShift {
		return -1
	}
	return bits.Len(uint(n - 1))
}

// getRecBuf returns an empty buffer with room for n bytes.
func getRecBuf(n int) []byte {
	c := poolClass(n)
	if c < 0 {
		return make([]byte, 0, n)
	}
	if p, ok := recPools[c].Get().(*[]byte); ok {
		return (*p)[:0]
	}
	return make([]byte, 0, 1<<c)
}

// putRecBuf recycles b, which must come from getRecBuf and no longer be
// referenced.
func putRecBuf(b []byte) {
	c := poolClass(cap(b))
	if c < 0 || cap(b) != 1<<c {
		return
	}
	b = b[:0]
	recPools[c].Put(&b)
}
