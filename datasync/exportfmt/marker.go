package exportfmt

import (
	"fmt"

	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
)

const (
	// MarkerMagic starts every restore marker (a framed object, see
	// framed.go).
	MarkerMagic = "CRSMRK"
	// MarkerFile is the last element of a copyset's restore marker name.
	MarkerFile = "restore-marker.pb"
	// MaxMarkerSize bounds an encoded restore marker (its clone chunks'
	// bitmaps are most of it).
	MaxMarkerSize = 64 << 20
)

// MarkerName returns the name of the restore marker of copyset
// (pool, copyset): "pool-1/copyset-3/restore-marker.pb".
func MarkerName(pool, copyset uint32) string {
	return CopysetPrefix(pool, copyset) + MarkerFile
}

// EncodeMarker encodes m.
func EncodeMarker(m *syncpb.RestoreMarker) ([]byte, error) {
	return encodeFramed("restore marker", MarkerMagic, MaxMarkerSize, m)
}

// DecodeMarker decodes a restore marker, checking its magic, version,
// checksum and next point.
func DecodeMarker(b []byte) (*syncpb.RestoreMarker, error) {
	m := &syncpb.RestoreMarker{}
	if err := decodeFramed("restore marker", MarkerMagic, MaxMarkerSize, b, m); err != nil {
		return nil, err
	}
	if m.FormatVersion != Version {
		return nil, fmt.Errorf("exportfmt: decode restore marker: it says format version %d, the prefix %d", m.FormatVersion, Version)
	}
	if _, err := ParsePoint(m.NextPoint); err != nil {
		return nil, fmt.Errorf("exportfmt: decode restore marker: next_point: %w", err)
	}
	return m, nil
}
