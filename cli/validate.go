package cli

import (
	"errors"
	"fmt"

	"github.com/chunkraft/chunkraft/internal/location"
)

// The chunk geometry every chunkserver uses: requests are checked against it
// before they are sent, so that a bad one is refused with the rule it
// breaks rather than with the server's bare CHUNK_OP_STATUS_INVALID_REQUEST.
const (
	// ChunkSize is the size of a chunk's data: 16 MiB.
	ChunkSize = location.ChunkSize
	// BlockSize is the alignment of chunk I/O: offsets and sizes of reads,
	// writes and recovers are multiples of it.
	BlockSize = location.BlockSize
)

// checkIO checks [offset, offset+n) of a read, write or recover as the
// server does: n not 0, both block aligned, inside the chunk. what names n
// in the message (size, length).
func checkIO(offset, n uint64, what string) error {
	switch {
	case n == 0:
		return fmt.Errorf("%s is 0: want a multiple of %d, at most the %s chunk", what, BlockSize, sizeText(ChunkSize))
	case offset%BlockSize != 0:
		return fmt.Errorf("offset %d is not a multiple of %d", offset, BlockSize)
	case n%BlockSize != 0:
		return fmt.Errorf("%s %d is not a multiple of %d", what, n, BlockSize)
	}
	return checkInChunk(offset, n, what)
}

// checkInChunk checks that [offset, offset+n) lies inside the chunk; what
// names n in the message (size, length).
func checkInChunk(offset, n uint64, what string) error {
	switch {
	case n > ChunkSize:
		return fmt.Errorf("%s %d is larger than the %s chunk", what, n, sizeText(ChunkSize))
	case offset+n > ChunkSize:
		return fmt.Errorf("offset %d + %s %d ends at %d, beyond the end of the %s chunk (%d)",
			offset, what, n, offset+n, sizeText(ChunkSize), uint64(ChunkSize))
	}
	return nil
}

// errSnZero is the refusal of a request that needs a sequence number.
var errSnZero = errors.New("sn 0: sequence numbers start at 1")

// sizeText renders a byte count of whole MiB or KiB as such (16 MiB).
func sizeText(n uint64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
