package chunkstore_test

import (
	"testing"

	"github.com/chunkraft/chunkraft/integrity"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// TestHashRangeFoldsMeta: two chunks with equal data but different sn
// hash alike except in their first range.
func TestHashRangeFoldsMeta(t *testing.T) {
	c := startTestCluster(t, 1)
	c.Write(t, 1, 1, 4<<20, block(9), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	c.Write(t, 2, 3, 4<<20, block(9), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	store := chunksOf(t, c, 0)
	h := func(chunk uint64, off uint32) uint32 {
		v, err := integrity.RangeCRC(store, chunk, off, 4<<20)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if h(1, 4<<20) != h(2, 4<<20) {
		t.Fatal("equal data ranges hash differently")
	}
	if h(1, 0) == h(2, 0) {
		t.Fatal("first range ignores the chunk's sn")
	}
	if h(5, 0) == h(1, 0) {
		t.Fatal("a missing chunk hashes like an existing one")
	}
}
