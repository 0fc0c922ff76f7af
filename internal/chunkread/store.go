package chunkread

import (
	"context"
	"errors"
	"fmt"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/kinds"
)

// Chunks is a chunk store as an integrity scan reads it.
type Chunks interface {
	// ListChunks returns the ids of every chunk, ascending.
	ListChunks() []uint64
	// ChunkSize is the data bytes of every chunk.
	ChunkSize() uint32
	// GetChunkHash returns crc32c of [off, off+length) of a chunk's data in
	// decimal, verifying every block's checksum; "0" for a missing chunk.
	GetChunkHash(id uint64, off, length uint32) (string, error)
	// ChunkMeta returns a chunk's meta; false when the chunk does not exist.
	ChunkMeta(id uint64) (Meta, bool, error)
}

// LastOp is a chunk store that knows the last chunk op it applied: its
// log index and position in its entry (0, 0: none since the replica
// opened). Every chunk's state read after it returns reflects the ops up
// to that op; a reader that reads it before and after a chunk and gets
// the same answer read the chunk as of that op.
type LastOp interface {
	LastChunkOp() (index uint64, op uint32)
}

// Images is a chunk store as the sync export reads it: whole chunks with
// clone chunks materialised from their sources, so that an export never
// depends on the source cluster.
type Images interface {
	// ListChunks returns the chunk ids, ascending.
	ListChunks() []uint64
	// ChunkImage returns chunk id as of one moment; an error wrapping
	// ErrChunkGone if the chunk no longer exists. The image's data lies in
	// buf (filled in, allocating what it lacks) until the next ChunkImage
	// with buf.
	ChunkImage(id uint64, buf *ImageBuffers) (Image, error)
	// Materialize returns the data a clone chunk created with location
	// reads, size bytes.
	Materialize(ctx context.Context, location string, size uint32) ([]byte, error)
	// WriteFenced reports whether the chunk op of owner ("": a client's)
	// in the log entry at index was refused by a write fence when it
	// applied, and names the fence's owner. It answers for entries the
	// copyset has applied (a fence set later is not known yet).
	WriteFenced(index uint64, owner string) (holder string, refused bool)
}

// Views is a chunk store as disagg's read views use it.
type Views interface {
	// Views lists the live views.
	Views() []View
	// Pages lists view seq's chunks and their blocks with data at its
	// register index.
	Pages(seq uint64) ([]ChunkPages, error)
	// ReadPages reads the len(buf)/BlockSize consecutive blocks of chunk
	// from block first on, as of view seq, into buf (a non-zero multiple
	// of BlockSize). Errors wrap ErrViewGone, ErrViewOverBudget or
	// ErrPageNotInView when they are those.
	ReadPages(seq, chunk uint64, first uint32, buf []byte) error
	// BlockSize is the size of a page.
	BlockSize() uint32
}

// Clones tells which object a clone chunk reads from.
type Clones interface {
	// CloneObject returns the object an @s3 clone chunk reads from; "" for
	// a normal chunk, a missing one, or a clone of a chunk on another
	// server.
	CloneObject(chunk uint64) (string, error)
}

// Store is a copyset's chunk store, every way a tenant reads it.
type Store interface {
	Chunks
	Images
	Views
	Clones
}

// Provider is a state machine registered for kinds.Chunk that hands out
// its store.
type Provider interface {
	copyset.StateMachine
	ChunkStore() Store
}

// ErrNoStore answers a lookup on a copyset without a chunk store open.
var ErrNoStore = errors.New("copyset has no chunk store open")

// Of returns the chunk store of a running replica.
func Of(n *copyset.Node) (Store, error) {
	p, ok := copyset.MachineOf[Provider](n, kinds.Chunk)
	if !ok {
		return nil, fmt.Errorf("copyset %s: %w", n.Group(), ErrNoStore)
	}
	return p.ChunkStore(), nil
}

// In returns the chunk store among the machines opened before a machine's
// own (its MachineSpec.Open): the chunk machine opens first.
func In(opened copyset.Machines) (Store, error) {
	p, ok := copyset.MachineAs[Provider](opened, kinds.Chunk)
	if !ok {
		return nil, fmt.Errorf("the chunk machine must open before it: %w", ErrNoStore)
	}
	return p.ChunkStore(), nil
}
