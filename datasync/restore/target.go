package restore

import (
	"context"
	"fmt"
)

// Chunk names a chunk of the target cluster.
type Chunk struct {
	Pool, Copyset uint32
	ID            uint64
}

func (c Chunk) String() string {
	return fmt.Sprintf("chunk %d of copyset %d/%d", c.ID, c.Pool, c.Copyset)
}

// Outcome is how the target's chunk store answered a mutating op that it
// did receive and apply (as a refusal or not).
type Outcome int

const (
	// Applied: the op succeeded.
	Applied Outcome = iota
	// Backward: refused, its sn is older than the chunk's (BACKWARD).
	Backward
	// Refused: a write refused because it needs a COW snapshot the chunk
	// cannot take (an older snapshot still exists).
	Refused
)

func (o Outcome) String() string {
	switch o {
	case Applied:
		return "applied"
	case Backward:
		return "BACKWARD"
	case Refused:
		return "refused (needs a snapshot)"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Target is the ChunkService of the cluster a restore writes into. Every
// method returns an error only for what the source never met: transport
// or server failures (after the implementation's own retries), or a status
// other than the outcomes listed. Implementations are safe for concurrent
// use: a restore sends ops of different copysets, of different chunks of
// one copyset, and writes to disjoint blocks of one chunk at once.
type Target interface {
	// CheckEmpty fails unless copyset (pool, copyset) exists and holds no
	// chunk; the error is one line naming the copyset.
	CheckEmpty(ctx context.Context, pool, copyset uint32) error
	// WriteChunk writes data at off of chunk c with sequence number sn
	// (ChunkService.WriteChunk): Applied, Backward or Refused.
	WriteChunk(ctx context.Context, c Chunk, off uint32, data []byte, sn uint64) (Outcome, error)
	// DeleteChunk deletes chunk c (sn 0: no sn check): Applied or Backward.
	DeleteChunk(ctx context.Context, c Chunk, sn uint64) (Outcome, error)
	// DeleteChunkSnapshotOrCorrectSn (ChunkService's): Applied or
	// Backward.
	DeleteChunkSnapshotOrCorrectSn(ctx context.Context, c Chunk, correctedSn uint64) (Outcome, error)
	// ChunkExists reports whether chunk c exists (GetChunkInfo).
	ChunkExists(ctx context.Context, c Chunk) (bool, error)
}

// Geometry is the chunk geometry of the export and the target.
type Geometry struct {
	ChunkSize, BlockSize uint32
}

// DefaultGeometry is chunkraft's: 16 MiB chunks of 4 KiB blocks.
var DefaultGeometry = Geometry{ChunkSize: 16 << 20, BlockSize: 4 << 10}

func (g Geometry) blocks() uint32 { return g.ChunkSize / g.BlockSize }

func (g Geometry) check() error {
	if g.BlockSize == 0 || g.ChunkSize == 0 || g.ChunkSize%g.BlockSize != 0 {
		return fmt.Errorf("restore: bad geometry: chunk size %d, block size %d", g.ChunkSize, g.BlockSize)
	}
	return nil
}
