package cli

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

const (
	// CloneChunkSize is the size CreateCloneChunk declares: a whole chunk.
	CloneChunkSize = 16 << 20
	// cloneBlockSize is the alignment of a @cs source offset.
	cloneBlockSize = 4096
	// maxLocationLen is the server's bound on a location (Curve's
	// location_limit).
	maxLocationLen = 3000
)

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

const locationForms = "want <pool>/<copyset>/<chunkId>:<offset>@cs or <object>@s3"

// ParseCloneLocation checks the shape of a clone location, as the server
// parses it: split at the last '@' into body and kind; for "cs" the body is
// <pool>/<copyset>/<chunkId>:<offset> (split at the last ':') with the offset
// a multiple of 4 KiB inside the 16 MiB chunk; for "s3" it is a
// '/'-separated object name without empty, "." or ".." elements. The server
// checks again (and whether the source exists).
func ParseCloneLocation(s string) (CloneLocation, error) {
	if s == "" {
		return CloneLocation{}, fmt.Errorf("empty location: %s", locationForms)
	}
	if len(s) > maxLocationLen {
		return CloneLocation{}, fmt.Errorf("location is %d bytes long (max %d)", len(s), maxLocationLen)
	}
	bad := func(why string) (CloneLocation, error) {
		return CloneLocation{}, fmt.Errorf("bad location %q: %s", s, why)
	}
	at := strings.LastIndexByte(s, '@')
	if at < 0 {
		return bad("no @cs or @s3 suffix; " + locationForms)
	}
	body, kind := s[:at], s[at+1:]
	switch kind {
	case LocationS3:
		if why := objectNameProblem(body); why != "" {
			return bad(why)
		}
		return CloneLocation{Kind: LocationS3, Object: body}, nil
	case LocationCS:
	default:
		return bad(fmt.Sprintf("unknown kind %q; %s", kind, locationForms))
	}
	colon := strings.LastIndexByte(body, ':')
	if colon < 0 {
		return bad("no :<offset>; " + locationForms)
	}
	off, err := strconv.ParseUint(body[colon+1:], 10, 64)
	if err != nil {
		return bad(fmt.Sprintf("offset %q is not a number", body[colon+1:]))
	}
	if off%cloneBlockSize != 0 || off >= CloneChunkSize {
		return bad("offset must be a multiple of 4096 below 16 MiB")
	}
	parts := strings.Split(body[:colon], "/")
	if len(parts) != 3 {
		return bad(locationForms)
	}
	pool, err1 := strconv.ParseUint(parts[0], 10, 32)
	cs, err2 := strconv.ParseUint(parts[1], 10, 32)
	chunk, err3 := strconv.ParseUint(parts[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return bad("pool, copyset and chunk id must be numbers; " + locationForms)
	}
	return CloneLocation{
		Kind:   LocationCS,
		Source: ChunkID{CopysetID: CopysetID{Pool: uint32(pool), Copyset: uint32(cs)}, Chunk: chunk},
		Offset: off,
	}, nil
}

// objectNameProblem says what is wrong with an object name, "" if nothing.
func objectNameProblem(name string) string {
	switch {
	case name == "":
		return "empty object name before @s3"
	case !utf8.ValidString(name):
		return "object name is not valid UTF-8"
	case strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/"):
		return "object name starts or ends with '/'"
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return "object name contains a control character"
		}
	}
	for _, e := range strings.Split(name, "/") {
		switch e {
		case "":
			return "object name has an empty element (\"//\")"
		case ".", "..":
			return fmt.Sprintf("object name has a %q element", e)
		}
	}
	return ""
}
