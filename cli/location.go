package cli

import (
	"fmt"

	"github.com/chunkraft/chunkraft/internal/location"
)

// CloneChunkSize is the size CreateCloneChunk declares: a whole chunk.
const CloneChunkSize = location.ChunkSize

// Clone source kinds, the suffix after the last '@' of a location.
const (
	LocationCS = "cs" // a chunk of this cluster
	LocationS3 = "s3" // an object in the server's object store
)

// CloneLocation is a parsed clone source (CreateCloneChunk's location).
type CloneLocation struct {
	Kind string // LocationCS or LocationS3
	// For LocationCS: the source chunk and the byte offset in it that block 0
	// of the clone reads.
	Source ChunkID
	Offset uint64
	// For LocationS3: the object name.
	Object string
}

// String renders the location in its wire form.
func (l CloneLocation) String() string {
	if l.Kind == LocationS3 {
		return l.Object + "@" + LocationS3
	}
	return fmt.Sprintf("%d/%d/%d:%d@%s", l.Source.Pool, l.Source.Copyset, l.Source.Chunk, l.Offset, LocationCS)
}

// ParseCloneLocation checks a clone location with the server's own parser
// (internal/location): <pool>/<copyset>/<chunkId>:<offset>@cs with the offset
// a multiple of 4 KiB inside the 16 MiB chunk, or <object>@s3. The server
// checks again (and whether the source exists).
func ParseCloneLocation(s string) (CloneLocation, error) {
	l, err := location.Parse(s)
	if err != nil {
		return CloneLocation{}, err
	}
	if l.Kind == location.S3 {
		return CloneLocation{Kind: LocationS3, Object: l.Object}, nil
	}
	return CloneLocation{
		Kind:   LocationCS,
		Source: ChunkID{CopysetID: CopysetID{Pool: l.Pool, Copyset: l.Copyset}, Chunk: l.Chunk},
		Offset: l.Offset,
	}, nil
}
