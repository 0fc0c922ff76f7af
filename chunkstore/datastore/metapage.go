package datastore

import (
	"encoding/binary"
	"fmt"

	"github.com/klauspost/crc32"
)

// Meta page versions. The first byte of every meta page is its version; the
// version fixes the layout of everything after it, including where the
// checksum lives. A decoder refuses versions it does not know with
// ErrIncompatible rather than guessing.
const (
	// MetaVersion1 was the layout of datastore v1 (sn, correctedSn, crc; no
	// clone fields, files without a crc table). It is not read: such
	// pages decode with ErrIncompatible.
	MetaVersion1 uint8 = 1

	// MetaVersion2 was the chunk meta page layout before MetaVersion3, all integers
	// little-endian (Curve's ChunkFileMetaPage with a 4-byte location
	// length):
	//
	//	offset    size      field
	//	     0       1      version (= 2)
	//	     1       8      sn
	//	     9       8      correctedSn
	//	    17       4      locLen L: length of the clone location, 0 for a
	//	                    normal chunk
	//	    21       L      location (bytes, no terminator)
	//	  21+L       4      bits N: blocks covered by the bitmap; 0 if and
	//	                    only if L is 0
	//	  25+L  ceil(N/8)   bitmap of written blocks (see bitmap), padding
	//	                    bits zero
	//	     E       4      crc32c (Castagnoli) of bytes [0, E)
	//	   E+4       -      zero up to the end of the page
	//
	// The bytes after the checksum are written as zero and ignored on decode.
	// Pages of this version are still read (as Seq 0); none is written.
	MetaVersion2 uint8 = 2

	// MetaVersion3 is MetaVersion2 with the chunk's op sequence stamp after
	// correctedSn (see MetaPage.Seq), all integers little-endian:
	//
	//	offset    size      field
	//	     0       1      version (= 3)
	//	     1       8      sn
	//	     9       8      correctedSn
	//	    17       8      seq
	//	    25       4      locLen L
	//	    29       L      location
	//	  29+L       4      bits N
	//	  33+L  ceil(N/8)   bitmap of written blocks
	//	     E       4      crc32c (Castagnoli) of bytes [0, E)
	//	   E+4       -      zero up to the end of the page
	MetaVersion3 uint8 = 3

	// MetaVersion is the version this code writes.
	MetaVersion = MetaVersion3

	// SnapMetaVersion1 is the snapshot meta page layout (Curve's snapshot
	// meta page with the "damaged" byte reserved), little-endian:
	//
	//	offset    size      field
	//	     0       1      version (= 1)
	//	     1       1      reserved, zero
	//	     2       8      sn: the chunk sn whose data the snapshot keeps
	//	    10       4      bits N: blocks covered by the bitmap (= blocks
	//	                    per chunk)
	//	    14  ceil(N/8)   bitmap of blocks copied into the snapshot,
	//	                    padding bits zero
	//	     E       4      crc32c (Castagnoli) of bytes [0, E)
	//	   E+4       -      zero up to the end of the page
	SnapMetaVersion1 uint8 = 1

	// SnapMetaVersion is the snapshot meta page version this code writes.
	SnapMetaVersion = SnapMetaVersion1

	// MinPageSize is the unit of Options.PageSize. It keeps chunk data
	// sector-aligned on disk.
	MinPageSize = 512

	// MaxLocationLen is the longest clone location accepted (Curve's
	// location_limit default).
	MaxLocationLen = 3000

	metaV2Fixed   = 1 + 8 + 8 + 4 + 4 + 4 // every field but location and bitmap
	metaV3Fixed   = metaV2Fixed + 8
	snapMetaFixed = 1 + 1 + 8 + 4 + 4 // every field but the bitmap
)

// castagnoli is the CRC32C table; klauspost/crc32 uses the CPU's CRC32C
// instructions for it where present.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MetaPage is the decoded meta page at the start of a chunk file. Its
// encoding is versioned (see MetaVersion3); MarshalTo and Unmarshal are pure
// functions of their arguments, touch no file, and never panic on any input.
//
// A chunk is a clone chunk if and only if Location is not empty; it then has
// a bitmap of Bits blocks (Bits is the number of blocks per chunk when used
// by a Store). A normal chunk has Bits 0 and no Bitmap.
type MetaPage struct {
	// Version is the layout version to encode with, or the version that was
	// decoded. New pages use MetaVersion.
	Version uint8
	// Sn is the sequence number of the latest write applied to the chunk; a
	// request with a smaller sn is refused with ErrBackward.
	Sn uint64
	// CorrectedSn is the sequence number set by
	// DeleteChunkSnapshotOrCorrectSn when a volume snapshot was taken and
	// deleted without the chunk being written meanwhile. A request with a
	// smaller sn is refused with ErrBackward, and a write with sn up to
	// max(Sn, CorrectedSn) takes no chunk snapshot.
	CorrectedSn uint64
	// Location is the clone source of a clone chunk ("<file>:<offset>@cs" or
	// "<object>@s3"), empty for a normal chunk.
	Location string
	// Bits is the number of blocks Bitmap covers; 0 for a normal chunk.
	Bits uint32
	// Bitmap marks the blocks of a clone chunk written by a client or pasted
	// (see bitmap for the encoding); ceil(Bits/8) bytes, nil for a normal
	// chunk. Unmarshal returns a fresh slice.
	Bitmap []byte
	// Seq is the place in the raft log up to which this page describes the
	// chunk (a replicated op's sequence number, increasing in log order: the
	// chunk machine's is the entry's index << 8 | the op's position among
	// the entry's chunk ops): its sn, corrected sn, snapshot and clone
	// bitmap reflect every replicated op on the chunk up to Seq, and the
	// data of every op before Seq is durable with it. A replayed op on the
	// chunk with a smaller sequence number is skipped (see the package
	// documentation, Replay). 0 (MetaVersion2 pages, unstamped ops) stamps
	// nothing.
	Seq uint64
}

// EncodedLen returns the number of meaningful bytes of m's encoding,
// checksum included, or 0 if m.Version is unknown.
func (m *MetaPage) EncodedLen() int {
	switch m.Version {
	case MetaVersion2:
		return metaV2Fixed + len(m.Location) + len(m.Bitmap)
	case MetaVersion3:
		return metaV3Fixed + len(m.Location) + len(m.Bitmap)
	default:
		return 0
	}
}

// metaPageMax is the longest encoding (MetaVersion3) for a clone chunk of
// blocks blocks: the minimum page size Options accept.
func metaPageMax(blocks uint32) int { return metaV3Fixed + MaxLocationLen + bitmapLen(blocks) }

// MarshalTo encodes m into buf and zeroes the rest of buf, so that buf can be
// written as a whole meta page. buf is usually PageSize bytes long and must be
// at least m.EncodedLen() bytes. It returns an error wrapping ErrIncompatible
// if m.Version is unknown, or ErrInvalidArg if buf is too short or the clone
// fields are inconsistent (Location empty but Bits not 0 or vice versa, or a
// Bitmap whose length is not ceil(Bits/8)); buf is not modified on error.
func (m *MetaPage) MarshalTo(buf []byte) error {
	n := m.EncodedLen()
	switch {
	case n == 0:
		return fmt.Errorf("encode meta page: version %d: %w", m.Version, ErrIncompatible)
	case (m.Location == "") != (m.Bits == 0):
		return fmt.Errorf("encode meta page: location of %d bytes with %d bitmap bits: %w",
			len(m.Location), m.Bits, ErrInvalidArg)
	case len(m.Bitmap) != bitmapLen(m.Bits):
		return fmt.Errorf("encode meta page: bitmap of %d bytes for %d bits: %w",
			len(m.Bitmap), m.Bits, ErrInvalidArg)
	case len(buf) < n:
		return fmt.Errorf("encode meta page: buffer of %d bytes, need %d: %w", len(buf), n, ErrInvalidArg)
	}
	buf[0] = m.Version
	binary.LittleEndian.PutUint64(buf[1:], m.Sn)
	binary.LittleEndian.PutUint64(buf[9:], m.CorrectedSn)
	p := 17
	if m.Version == MetaVersion3 {
		binary.LittleEndian.PutUint64(buf[p:], m.Seq)
		p += 8
	}
	binary.LittleEndian.PutUint32(buf[p:], uint32(len(m.Location)))
	p += 4
	p += copy(buf[p:], m.Location)
	binary.LittleEndian.PutUint32(buf[p:], m.Bits)
	p += 4
	p += copy(buf[p:], m.Bitmap)
	binary.LittleEndian.PutUint32(buf[p:], crc32.Checksum(buf[:p], castagnoli))
	clear(buf[p+4:])
	return nil
}

// Unmarshal decodes a meta page from buf, which is usually the first PageSize
// bytes of a chunk file; bytes after the encoding are ignored. It returns an
// error wrapping ErrIncompatible if the version is not MetaVersion2 or 3,
// ErrFileFormat if buf is too short for the lengths it states, ErrCRC if the
// checksum does not match, or ErrFileFormat if the checksummed fields are
// inconsistent (see MarshalTo; also non-zero bitmap padding bits). m is
// modified only on success.
func (m *MetaPage) Unmarshal(buf []byte) error {
	if len(buf) < 1 {
		return fmt.Errorf("decode meta page: empty buffer: %w", ErrFileFormat)
	}
	v := buf[0]
	fixed, locAt := metaV2Fixed, 17
	switch v {
	case MetaVersion2:
	case MetaVersion3:
		fixed, locAt = metaV3Fixed, 25
	default:
		return fmt.Errorf("decode meta page: version %d: %w", v, ErrIncompatible)
	}
	short := func(need uint64) error {
		return fmt.Errorf("decode meta page: %d bytes, need %d: %w", len(buf), need, ErrFileFormat)
	}
	if len(buf) < fixed {
		return short(uint64(fixed))
	}
	locLen := uint64(binary.LittleEndian.Uint32(buf[locAt:]))
	if need := uint64(fixed) + locLen; uint64(len(buf)) < need {
		return short(need)
	}
	p := locAt + 4 + int(locLen)
	nbits := binary.LittleEndian.Uint32(buf[p:])
	end := p + 4 + bitmapLen(nbits)
	if need := uint64(end) + 4; uint64(len(buf)) < need {
		return short(need)
	}
	stored := binary.LittleEndian.Uint32(buf[end:])
	if got := crc32.Checksum(buf[:end], castagnoli); got != stored {
		return fmt.Errorf("decode meta page: stored crc32c %#08x, computed %#08x: %w", stored, got, ErrCRC)
	}
	bm := bitmap(buf[p+4 : end])
	switch {
	case (locLen == 0) != (nbits == 0):
		return fmt.Errorf("decode meta page: location of %d bytes with %d bitmap bits: %w",
			locLen, nbits, ErrFileFormat)
	case !bm.validPadding(nbits):
		return fmt.Errorf("decode meta page: bitmap padding bits set: %w", ErrFileFormat)
	}
	d := MetaPage{
		Version:     v,
		Sn:          binary.LittleEndian.Uint64(buf[1:]),
		CorrectedSn: binary.LittleEndian.Uint64(buf[9:]),
		Location:    string(buf[locAt+4 : p]),
		Bits:        nbits,
	}
	if v == MetaVersion3 {
		d.Seq = binary.LittleEndian.Uint64(buf[17:])
	}
	if nbits > 0 {
		d.Bitmap = append([]byte(nil), bm...)
	}
	*m = d
	return nil
}

// SnapMetaPage is the decoded meta page at the start of a chunk snapshot
// file (see SnapMetaVersion1). Like MetaPage, its codec is pure and never
// panics.
type SnapMetaPage struct {
	// Version is the layout version, SnapMetaVersion for new pages.
	Version uint8
	// Sn is the chunk sequence number whose data the snapshot preserves; it
	// also appears in the file name "chunk_<id>_snap_<sn>".
	Sn uint64
	// Bits is the number of blocks Bitmap covers, the blocks per chunk.
	Bits uint32
	// Bitmap marks the blocks already copied into the snapshot file
	// (ceil(Bits/8) bytes); other blocks are read from the live chunk.
	Bitmap []byte
}

// EncodedLen returns the number of meaningful bytes of m's encoding,
// checksum included, or 0 if m.Version is unknown.
func (m *SnapMetaPage) EncodedLen() int {
	if m.Version != SnapMetaVersion1 {
		return 0
	}
	return snapMetaFixed + len(m.Bitmap)
}

// MarshalTo encodes m into buf and zeroes the rest of buf. It returns an
// error wrapping ErrIncompatible if m.Version is unknown, or ErrInvalidArg if
// buf is too short or len(m.Bitmap) is not ceil(m.Bits/8); buf is not
// modified on error.
func (m *SnapMetaPage) MarshalTo(buf []byte) error {
	n := m.EncodedLen()
	switch {
	case n == 0:
		return fmt.Errorf("encode snapshot meta page: version %d: %w", m.Version, ErrIncompatible)
	case len(m.Bitmap) != bitmapLen(m.Bits):
		return fmt.Errorf("encode snapshot meta page: bitmap of %d bytes for %d bits: %w",
			len(m.Bitmap), m.Bits, ErrInvalidArg)
	case len(buf) < n:
		return fmt.Errorf("encode snapshot meta page: buffer of %d bytes, need %d: %w", len(buf), n, ErrInvalidArg)
	}
	buf[0] = m.Version
	buf[1] = 0
	binary.LittleEndian.PutUint64(buf[2:], m.Sn)
	binary.LittleEndian.PutUint32(buf[10:], m.Bits)
	p := 14 + copy(buf[14:], m.Bitmap)
	binary.LittleEndian.PutUint32(buf[p:], crc32.Checksum(buf[:p], castagnoli))
	clear(buf[p+4:])
	return nil
}

// Unmarshal decodes a snapshot meta page from buf; bytes after the encoding
// are ignored. It returns an error wrapping ErrIncompatible if the version is
// unknown, ErrFileFormat if buf is too short for the bitmap it states, ErrCRC
// if the checksum does not match, or ErrFileFormat if the reserved byte or
// the bitmap padding bits are not zero. m is modified only on success.
func (m *SnapMetaPage) Unmarshal(buf []byte) error {
	if len(buf) < 1 {
		return fmt.Errorf("decode snapshot meta page: empty buffer: %w", ErrFileFormat)
	}
	if v := buf[0]; v != SnapMetaVersion1 {
		return fmt.Errorf("decode snapshot meta page: version %d: %w", v, ErrIncompatible)
	}
	if len(buf) < snapMetaFixed {
		return fmt.Errorf("decode snapshot meta page: %d bytes, need %d: %w", len(buf), snapMetaFixed, ErrFileFormat)
	}
	nbits := binary.LittleEndian.Uint32(buf[10:])
	end := 14 + bitmapLen(nbits)
	if need := uint64(end) + 4; uint64(len(buf)) < need {
		return fmt.Errorf("decode snapshot meta page: %d bytes, need %d: %w", len(buf), need, ErrFileFormat)
	}
	stored := binary.LittleEndian.Uint32(buf[end:])
	if got := crc32.Checksum(buf[:end], castagnoli); got != stored {
		return fmt.Errorf("decode snapshot meta page: stored crc32c %#08x, computed %#08x: %w", stored, got, ErrCRC)
	}
	bm := bitmap(buf[14:end])
	switch {
	case buf[1] != 0:
		return fmt.Errorf("decode snapshot meta page: reserved byte %#x: %w", buf[1], ErrFileFormat)
	case !bm.validPadding(nbits):
		return fmt.Errorf("decode snapshot meta page: bitmap padding bits set: %w", ErrFileFormat)
	}
	*m = SnapMetaPage{
		Version: SnapMetaVersion1,
		Sn:      binary.LittleEndian.Uint64(buf[2:]),
		Bits:    nbits,
		Bitmap:  append([]byte{}, bm...),
	}
	return nil
}
