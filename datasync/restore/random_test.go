package restore

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
)

// randomOp applies one random chunk op (write, delete, corrected sn) to
// one of 4 chunks of src.
func randomOp(rng *rand.Rand, src *source) {
	id := uint64(1 + rng.IntN(4))
	switch k := rng.IntN(10); {
	case k < 7:
		bs := testGeometry.BlockSize
		first := uint32(rng.IntN(int(testGeometry.blocks())))
		n := 1 + uint32(rng.IntN(int(testGeometry.blocks()-first)))
		data := make([]byte, n*bs)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		if rng.IntN(4) == 0 {
			clear(data[:bs]) // zero blocks too
		}
		src.write(id, uint64(1+rng.IntN(6)), first*bs, data)
	case k < 8:
		src.remove(id, uint64(rng.IntN(4)))
	default:
		src.correct(id, uint64(1+rng.IntN(8)))
	}
}

// Random op sequences and a fuzzy snapshot phase, as the exporter makes
// one: the log is exported from I+1 (I pinned when the snapshot phase
// starts) while a walker reads the chunks that exist, in ascending id, each
// as one image at the moment it reaches it, with ops going on between the
// reads. The restore equals the source at the end, chunk for chunk: sn,
// corrected sn, snapshot sn, data and snapshot data, whether a rebuild's
// writes go one at a time or several at once.
func TestRandomExportsRestoreExactly(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			src := newSource(t)
			for range rng.IntN(30) {
				randomOp(rng, src)
			}
			start := src.index + 1 // I = src.index
			var chunks [][]*syncpb.Record
			var next uint64 // the walker's position: the next chunk id to read
			for {
				for range rng.IntN(6) {
					randomOp(rng, src)
				}
				ids := src.s.ListChunks()
				i, _ := slices.BinarySearch(ids, next)
				if i == len(ids) {
					break
				}
				chunks = append(chunks, src.snapshot(ids[i]))
				next = ids[i] + 1
			}
			for range rng.IntN(20) {
				randomOp(rng, src)
			}
			var binlog []*syncpb.Record
			if int(start) <= len(src.binlog) {
				binlog = src.binlog[start-1:]
			}
			e := &export{pool: 1, cs: 1, full: true, start: start, chunks: chunks, binlog: binlog, end: src.index + 1}
			for _, depth := range []int{1, 8} { // one write at a time, and several
				got, _, err := restoreInto(t, e, Options{WriteDepth: depth})
				if err != nil {
					t.Fatalf("write depth %d: %v", depth, err)
				}
				sameChunks(t, src.s, got)
			}
		})
	}
}
