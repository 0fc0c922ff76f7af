package sharedlog

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/crc32"
)

// linkCRC computes the CRC-32C of its two words without crc32.Update; it
// must agree with it.
func TestLinkCRCMatchesUpdate(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		prev, crc := r.Uint32(), r.Uint32()
		var b [8]byte
		binary.LittleEndian.PutUint32(b[0:4], prev)
		binary.LittleEndian.PutUint32(b[4:8], crc)
		if got, want := linkCRC(prev, crc), crc32.Update(0, castagnoli, b[:]); got != want {
			t.Fatalf("linkCRC(%#x, %#x) = %#x, crc32.Update gives %#x", prev, crc, got, want)
		}
	}
}
