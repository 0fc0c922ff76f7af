package exportfmt

import (
	"fmt"

	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
)

const (
	// PurgeMagic starts every purge record (a framed object, see
	// framed.go).
	PurgeMagic = "CRPURG"
	// PurgeFile is the last element of a copyset's purge record name.
	PurgeFile = "purged.pb"
	// MaxPurgeSize bounds an encoded purge record.
	MaxPurgeSize = 64 << 10
)

// PurgeName returns the name of the purge record of copyset (pool,
// copyset): "pool-1/copyset-3/purged.pb".
func PurgeName(pool, copyset uint32) string {
	return CopysetPrefix(pool, copyset) + PurgeFile
}

// EncodePurge encodes r.
func EncodePurge(r *syncpb.PurgeRecord) ([]byte, error) {
	return encodeFramed("purge record", PurgeMagic, MaxPurgeSize, r)
}

// DecodePurge decodes a purge record, checking its magic, version,
// checksum and first kept point.
func DecodePurge(b []byte) (*syncpb.PurgeRecord, error) {
	r := &syncpb.PurgeRecord{}
	if err := decodeFramed("purge record", PurgeMagic, MaxPurgeSize, b, r); err != nil {
		return nil, err
	}
	if r.FormatVersion != Version {
		return nil, fmt.Errorf("exportfmt: decode purge record: it says format version %d, the prefix %d", r.FormatVersion, Version)
	}
	if _, err := ParsePoint(r.FirstKept); err != nil {
		return nil, fmt.Errorf("exportfmt: decode purge record: first_kept: %w", err)
	}
	return r, nil
}
