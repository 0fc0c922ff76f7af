package datastore

import (
	"encoding/binary"
	"fmt"

	"github.com/klauspost/crc32"
)

// Meta page versions. The first byte of every meta page is its version; the
// version fixes the layout of everything after it, including where the
// checksum lives. Later versions (snapshots, clone location and bitmap,
// per-block checksums) get new numbers and new layouts; a decoder refuses
// versions it does not know with ErrIncompatible rather than guessing.
const (
	// MetaVersion1 is the first layout, all integers little-endian:
	//
	//	offset  size  field
	//	     0     1  version (= 1)
	//	     1     8  sn
	//	     9     8  correctedSn
	//	    17     4  crc32c (Castagnoli) of bytes [0, 17)
	//	    21     -  zero up to the end of the page
	//
	// The bytes after the checksum are written as zero and ignored on decode.
	MetaVersion1 uint8 = 1

	// MetaVersion is the version this code writes for new chunk files.
	MetaVersion = MetaVersion1

	// MetaV1Len is the number of meaningful bytes of a version-1 meta page,
	// checksum included.
	MetaV1Len = 1 + 8 + 8 + 4

	// MinPageSize is the smallest meta page size Options accept. It leaves
	// room for later meta page versions without changing the data offset of
	// small test stores, and keeps chunk data sector-aligned on disk.
	MinPageSize = 512
)

// castagnoli is the CRC32C table; klauspost/crc32 uses the CPU's CRC32C
// instructions for it where present.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MetaPage is the decoded meta page at the start of a chunk file. Its
// encoding is versioned (see MetaVersion1); MarshalTo and Unmarshal are pure
// functions of their arguments, touch no file, and never panic on any input.
type MetaPage struct {
	// Version is the layout version to encode with, or the version that was
	// decoded. New pages use MetaVersion.
	Version uint8
	// Sn is the sequence number of the latest write applied to the chunk; a
	// request with a smaller sn is refused with ErrBackward.
	Sn uint64
	// CorrectedSn is the sequence number set when a volume snapshot was
	// deleted without the chunk having been written since (Curve's
	// DeleteChunkSnapshotOrCorrectSn). A request with a smaller sn is refused
	// with ErrBackward. It is 0 until that operation exists.
	CorrectedSn uint64
}

// EncodedLen returns the number of meaningful bytes of m's encoding, or 0 if
// m.Version is unknown.
func (m *MetaPage) EncodedLen() int {
	switch m.Version {
	case MetaVersion1:
		return MetaV1Len
	default:
		return 0
	}
}

// MarshalTo encodes m into buf and zeroes the rest of buf, so that buf can be
// written as a whole meta page. buf is usually PageSize bytes long and must be
// at least m.EncodedLen() bytes. It returns an error wrapping ErrIncompatible
// if m.Version is unknown, or ErrInvalidArg if buf is too short; buf is not
// modified on error.
func (m *MetaPage) MarshalTo(buf []byte) error {
	n := m.EncodedLen()
	if n == 0 {
		return fmt.Errorf("encode meta page: version %d: %w", m.Version, ErrIncompatible)
	}
	if len(buf) < n {
		return fmt.Errorf("encode meta page: buffer of %d bytes, need %d: %w", len(buf), n, ErrInvalidArg)
	}
	buf[0] = m.Version
	binary.LittleEndian.PutUint64(buf[1:9], m.Sn)
	binary.LittleEndian.PutUint64(buf[9:17], m.CorrectedSn)
	binary.LittleEndian.PutUint32(buf[17:21], crc32.Checksum(buf[:17], castagnoli))
	clear(buf[n:])
	return nil
}

// Unmarshal decodes a meta page from buf, which is usually the first PageSize
// bytes of a chunk file; bytes after the encoding are ignored. It returns an
// error wrapping ErrFileFormat if buf is too short for the version it names,
// ErrIncompatible if the version is unknown, or ErrCRC if the checksum does
// not match. m is modified only on success.
func (m *MetaPage) Unmarshal(buf []byte) error {
	if len(buf) < 1 {
		return fmt.Errorf("decode meta page: empty buffer: %w", ErrFileFormat)
	}
	switch v := buf[0]; v {
	case MetaVersion1:
		if len(buf) < MetaV1Len {
			return fmt.Errorf("decode meta page: %d bytes, version %d needs %d: %w",
				len(buf), v, MetaV1Len, ErrFileFormat)
		}
		stored := binary.LittleEndian.Uint32(buf[17:21])
		if got := crc32.Checksum(buf[:17], castagnoli); got != stored {
			return fmt.Errorf("decode meta page: stored crc32c %#08x, computed %#08x: %w",
				stored, got, ErrCRC)
		}
		*m = MetaPage{
			Version:     v,
			Sn:          binary.LittleEndian.Uint64(buf[1:9]),
			CorrectedSn: binary.LittleEndian.Uint64(buf[9:17]),
		}
		return nil
	default:
		return fmt.Errorf("decode meta page: version %d: %w", v, ErrIncompatible)
	}
}
