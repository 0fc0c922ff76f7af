package location

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/chunkraft/chunkraft/internal/objstore"
)

const (
	// MaxLen bounds a location (Curve's location_limit).
	MaxLen = 3000
	// ChunkSize is the size of a source chunk; a @cs offset lies below it.
	ChunkSize = 16 << 20
	// BlockSize is the alignment of a @cs offset.
	BlockSize = 4096
)

// Kinds: the suffix after the last '@'.
const (
	CS = "cs" // a chunk of this cluster
	S3 = "s3" // an object in the object store
)

// Forms describes the accepted forms, for error messages.
const Forms = "want <pool>/<copyset>/<chunkId>:<offset>@cs or <object>@s3"

// Location is a parsed clone source.
type Location struct {
	Kind string // CS or S3
	// CS: the source chunk and the byte offset in it that clone block 0 reads.
	Pool, Copyset uint32
	Chunk         uint64
	Offset        uint64
	// S3: the object name.
	Object string
}

// String renders the location in its wire form.
func (l Location) String() string {
	if l.Kind == S3 {
		return l.Object + "@" + S3
	}
	return fmt.Sprintf("%d/%d/%d:%d@%s", l.Pool, l.Copyset, l.Chunk, l.Offset, CS)
}

// Parse parses and checks a location.
func Parse(s string) (Location, error) {
	if s == "" {
		return Location{}, fmt.Errorf("empty location: %s", Forms)
	}
	if len(s) > MaxLen {
		return Location{}, fmt.Errorf("location is %d bytes long (max %d)", len(s), MaxLen)
	}
	bad := func(why string) (Location, error) {
		return Location{}, fmt.Errorf("bad location %q: %s", s, why)
	}
	at := strings.LastIndexByte(s, '@')
	if at < 0 {
		return bad("no @cs or @s3 suffix; " + Forms)
	}
	body, kind := s[:at], s[at+1:]
	switch kind {
	case S3:
		if err := objstore.ValidateName(body); err != nil {
			return bad(err.Error())
		}
		return Location{Kind: S3, Object: body}, nil
	case CS:
	default:
		return bad(fmt.Sprintf("unknown kind %q; %s", kind, Forms))
	}
	colon := strings.LastIndexByte(body, ':')
	if colon < 0 {
		return bad("no :<offset>; " + Forms)
	}
	off, err := strconv.ParseUint(body[colon+1:], 10, 64)
	if err != nil {
		return bad(fmt.Sprintf("offset %q is not a number", body[colon+1:]))
	}
	if off%BlockSize != 0 || off >= ChunkSize {
		return bad("offset must be a multiple of 4096 below 16 MiB")
	}
	parts := strings.Split(body[:colon], "/")
	if len(parts) != 3 {
		return bad(Forms)
	}
	pool, err1 := strconv.ParseUint(parts[0], 10, 32)
	cs, err2 := strconv.ParseUint(parts[1], 10, 32)
	chunk, err3 := strconv.ParseUint(parts[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return bad("pool, copyset and chunk id must be numbers; " + Forms)
	}
	return Location{Kind: CS, Pool: uint32(pool), Copyset: uint32(cs), Chunk: chunk, Offset: off}, nil
}
