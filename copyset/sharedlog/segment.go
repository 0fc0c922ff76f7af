package sharedlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
)

// Segment file header (little endian):
//
//	[0:4)   magic "CRSL"
//	[4:8)   uint32 format version (1)
//	[8:12)  uint32 shard number
//	[12:16) uint32 segment id
//	[16:20) reserved, zero
//	[20:24) uint32 crc32c of [0:20)
//
// followed by records until the end of the file.
const (
	segHeaderSize = 24
	segVersion    = 1
	segSuffix     = ".seg"
)

var segMagic = [4]byte{'C', 'R', 'S', 'L'}

var errBadSegHeader = errors.New("sharedlog: bad segment header")

// segment is one open segment file of a shard.
type segment struct {
	id   uint32
	path string
	f    *os.File
	size atomic.Int64 // bytes of valid data; advanced by the writer only
}

func segName(id uint32) string { return fmt.Sprintf("%010d%s", id, segSuffix) }

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

func appendSegHeader(b []byte, shard int, id uint32) []byte {
	var h [segHeaderSize]byte
	copy(h[0:4], segMagic[:])
	binary.LittleEndian.PutUint32(h[4:8], segVersion)
	binary.LittleEndian.PutUint32(h[8:12], uint32(shard))
	binary.LittleEndian.PutUint32(h[12:16], id)
	binary.LittleEndian.PutUint32(h[20:24], recordCRC(h[0:20], nil))
	return append(b, h[:]...)
}

func checkSegHeader(h []byte, shard int, id uint32) error {
	if len(h) < segHeaderSize || [4]byte(h[0:4]) != segMagic ||
		binary.LittleEndian.Uint32(h[20:24]) != recordCRC(h[0:20], nil) {
		return errBadSegHeader
	}
	if v := binary.LittleEndian.Uint32(h[4:8]); v != segVersion {
		return fmt.Errorf("sharedlog: unsupported segment version %d", v)
	}
	if sh, sid := binary.LittleEndian.Uint32(h[8:12]), binary.LittleEndian.Uint32(h[12:16]); int(sh) != shard || sid != id {
		return fmt.Errorf("sharedlog: segment header says shard %d segment %d, expected shard %d segment %d", sh, sid, shard, id)
	}
	return nil
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
