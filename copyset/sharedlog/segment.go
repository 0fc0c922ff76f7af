package sharedlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
)

// Segment file header (little endian):
//
//	[0:4)   magic "CRSL"
//	[4:8)   uint32 format version (2)
//	[8:12)  uint32 shard number
//	[12:16) uint32 segment id
//	[16:20) uint32 salt: random, different from the file's previous salt;
//	        seeds the link chain of the segment's records
//	[20:28) int64 prevEnd: where the valid records of segment id-1 end
//	        (0: no predecessor was known when this segment was started)
//	[28:32) reserved, zero
//	[32:36) uint32 crc32c of [0:32)
//
// followed by records. The header is written when the segment becomes
// active; the rest of the file (preallocated to Options.SegmentSize) holds
// records up to the end of the valid data and zeros or garbage after it.
const (
	segHeaderSize = 36
	segVersion    = 2
	segSuffix     = ".seg"
	// Spare segment files: NNNNNNNNNN.spare once ready, with ".tmp"
	// appended while being zero-filled.
	spareSuffix = ".spare"
	tmpSuffix   = ".tmp"
)

var segMagic = [4]byte{'C', 'R', 'S', 'L'}

var errBadSegHeader = errors.New("sharedlog: bad segment header")

// segment is one open segment file of a shard.
type segment struct {
	id   uint32
	path string
	f    *os.File
	size atomic.Int64 // bytes of valid data; advanced by the writer only
	// fileSize is the length of the file (>= size: preallocated or a
	// garbage tail). Written by the writer only.
	fileSize atomic.Int64
	salt     uint32
	// prealloc: the file was fully written to at least SegmentSize before
	// it became active, so appending does not change its size or extents.
	prealloc bool
	// dio is the file opened for O_DIRECT group commits (direct_linux.go),
	// opened at the first one; noDirect: they do not work here, write with
	// f. Writer only.
	dio      *os.File
	noDirect bool
}

// close closes the segment's files.
func (seg *segment) close() error {
	seg.closeDirect()
	return seg.f.Close()
}

// closeDirect closes the direct descriptor, if open: the segment is no
// longer written (or close).
func (seg *segment) closeDirect() {
	if seg.dio != nil {
		seg.dio.Close()
		seg.dio = nil
	}
}

// segHeader is the decoded variable part of a segment header.
type segHeader struct {
	salt    uint32
	prevEnd int64
}

func segName(id uint32) string { return fmt.Sprintf("%010d%s", id, segSuffix) }

func spareName(seq uint64) string { return fmt.Sprintf("%010d%s", seq, spareSuffix) }

func parseSegName(name string) (uint32, bool) {
	base, ok := strings.CutSuffix(name, segSuffix)
	if !ok || len(base) != 10 {
		return 0, false
	}
	v, err := strconv.ParseUint(base, 10, 32)
	if err != nil || v == 0 {
		return 0, false
	}
	return uint32(v), true
}

// parseSpareName recognizes NNNNNNNNNN.spare and NNNNNNNNNN.spare.tmp.
func parseSpareName(name string) (seq uint64, tmp, ok bool) {
	base, tmp := strings.CutSuffix(name, tmpSuffix)
	base, ok = strings.CutSuffix(base, spareSuffix)
	if !ok || len(base) != 10 {
		return 0, false, false
	}
	v, err := strconv.ParseUint(base, 10, 64)
	if err != nil {
		return 0, false, false
	}
	return v, tmp, true
}

func appendSegHeader(b []byte, shard int, id uint32, h segHeader) []byte {
	var buf [segHeaderSize]byte
	copy(buf[0:4], segMagic[:])
	binary.LittleEndian.PutUint32(buf[4:8], segVersion)
	binary.LittleEndian.PutUint32(buf[8:12], uint32(shard))
	binary.LittleEndian.PutUint32(buf[12:16], id)
	binary.LittleEndian.PutUint32(buf[16:20], h.salt)
	binary.LittleEndian.PutUint64(buf[20:28], uint64(h.prevEnd))
	binary.LittleEndian.PutUint32(buf[32:36], recordCRC(buf[0:32], nil))
	return append(b, buf[:]...)
}

// parseSegHeader checks the header of segment id of shard. A header that is
// not a complete, intact version 2 header (zeros, torn, garbage) is
// errBadSegHeader; an intact header of version 1, or of another shard or
// segment, is a different error.
func parseSegHeader(b []byte, shard int, id uint32) (segHeader, error) {
	if len(b) < 8 || [4]byte(b[0:4]) != segMagic {
		return segHeader{}, errBadSegHeader
	}
	// A version 1 header is 24 bytes with its crc at [20:24).
	if v := binary.LittleEndian.Uint32(b[4:8]); v == 1 && len(b) >= 24 && binary.LittleEndian.Uint32(b[20:24]) == recordCRC(b[0:20], nil) {
		return segHeader{}, fmt.Errorf("%w: segment format version 1, this version reads only %d", ErrUnsupportedFormat, segVersion)
	}
	if len(b) < segHeaderSize || binary.LittleEndian.Uint32(b[4:8]) != segVersion ||
		binary.LittleEndian.Uint32(b[32:36]) != recordCRC(b[0:32], nil) {
		return segHeader{}, errBadSegHeader
	}
	if sh, sid := binary.LittleEndian.Uint32(b[8:12]), binary.LittleEndian.Uint32(b[12:16]); int(sh) != shard || sid != id {
		return segHeader{}, fmt.Errorf("sharedlog: segment header says shard %d segment %d, expected shard %d segment %d", sh, sid, shard, id)
	}
	h := segHeader{salt: binary.LittleEndian.Uint32(b[16:20]), prevEnd: int64(binary.LittleEndian.Uint64(b[20:28]))}
	if h.prevEnd < 0 {
		return segHeader{}, errBadSegHeader
	}
	return h, nil
}

// oldSalt returns the salt in what may be a segment header (the start of a
// spare file), or 0.
func oldSalt(b []byte) uint32 {
	if len(b) < segHeaderSize || [4]byte(b[0:4]) != segMagic {
		return 0
	}
	return binary.LittleEndian.Uint32(b[16:20])
}

// newSalt returns a random non-zero salt different from old.
func newSalt(old uint32) uint32 {
	for {
		if v := rand.Uint32(); v != 0 && v != old {
			return v
		}
	}
}

// syncDir makes directory entry changes (creates, renames) durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
