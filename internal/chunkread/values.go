package chunkread

import (
	"errors"

	vpb "github.com/chunkraft/chunkraft/proto/chunkraft/viewpb"
)

// Meta is the meta of a chunk that the crc of its first range covers.
type Meta struct {
	Sn, CorrectedSn, SnapSn uint64
	// CloneUnwritten is the blocks of a clone chunk not yet written.
	CloneUnwritten int
	// Location is the clone source, "" for a normal chunk.
	Location string
}

// Image is one chunk as of one moment, stamped with the log index of the
// last op applied to it; a clone chunk's data is materialised: Data is
// what a client reads.
type Image struct {
	ID uint64
	// Index and Op are the log index of the last op on the chunk and its
	// position among the ops of that entry: the image reflects every op on
	// the chunk up to (Index, Op) and none after.
	Index           uint64
	Op              uint32
	Sn, CorrectedSn uint64
	BlockSize       uint32
	// Data is the chunk's data, the chunk size long.
	Data []byte
	// SnapSn is the sn of the chunk's COW snapshot, 0 if it has none.
	SnapSn uint64
	// SnapCopied says, per block, whether the block was copied into the
	// snapshot: its snapshot content is SnapData's block; the snapshot
	// reads the other blocks from Data.
	SnapCopied []bool
	SnapData   []byte
}

// ImageBuffers is room for one Image, which a reader hands from call to
// call so that reading a chunk does not allocate (and fault in) a chunk's
// size each time. What it holds is the store's business.
type ImageBuffers struct {
	Data, Snap []byte
}

// ErrChunkGone is wrapped by ChunkImage for a chunk that no longer exists.
var ErrChunkGone = errors.New("chunk gone")

// View is a live read view of a copyset.
type View struct {
	Seq           uint64 // the register op's sequence number I
	Info          *vpb.ViewInfo
	Chunks        int
	Saved, Budget uint64
	Over          bool
}

// ChunkPages is a chunk of a view and its blocks with data at I.
type ChunkPages struct {
	Chunk  uint64
	Blocks []uint32
}

// Errors of Views.
var (
	ErrViewGone       = errors.New("read view does not exist (dropped, expired or never registered)")
	ErrViewOverBudget = errors.New("read view passed its pre-image budget and was dropped")
	ErrPageNotInView  = errors.New("page is not in the read view")
)
