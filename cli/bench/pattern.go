package bench

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"
)

// Sector format of the verification pattern (all integers little-endian):
//
//	[0,8)       magic "CRBENCH1"
//	[8,16)      run id
//	[16,20)     pool
//	[20,24)     copyset
//	[24,32)     chunk
//	[32,36)     offset of this sector in the chunk
//	[36,40)     length of the write that carried it
//	[40,48)     sequence number of that write
//	[48,4088)   pseudo-random body derived from run, offset and sequence
//	[4088,4092) index of the sector in its write
//	[4092,4096) CRC-32C (Castagnoli) of bytes [0,4092)
const (
	patternMagic = "CRBENCH1"
	bodyStart    = 48
	bodyEnd      = SectorSize - 8
	crcOffset    = SectorSize - 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Stamp identifies the content of a written block.
type Stamp struct {
	Run     uint64
	Pool    uint32
	Copyset uint32
	Chunk   uint64
	Offset  uint32 // offset of the block (its first sector) in the chunk
	Seq     uint64
}

func (s Stamp) String() string {
	return fmt.Sprintf("run %016x pool %d copyset %d chunk %d offset %d seq %d", s.Run, s.Pool, s.Copyset, s.Chunk, s.Offset, s.Seq)
}

// splitmix64 is the SplitMix64 step: a fast, well-mixed 64-bit sequence.
func splitmix64(x *uint64) uint64 {
	*x += 0x9e3779b97f4a7c15
	z := *x
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// EncodeBlock fills buf (a whole number of sectors) with the pattern of s:
// sector i is stamped with offset s.Offset+i*SectorSize.
func EncodeBlock(buf []byte, s Stamp) {
	if len(buf)%SectorSize != 0 {
		panic(fmt.Sprintf("bench: EncodeBlock of %d bytes, not a multiple of %d", len(buf), SectorSize))
	}
	n := len(buf) / SectorSize
	for i := range n {
		sec := buf[i*SectorSize : (i+1)*SectorSize]
		off := s.Offset + uint32(i*SectorSize)
		copy(sec[0:8], patternMagic)
		binary.LittleEndian.PutUint64(sec[8:], s.Run)
		binary.LittleEndian.PutUint32(sec[16:], s.Pool)
		binary.LittleEndian.PutUint32(sec[20:], s.Copyset)
		binary.LittleEndian.PutUint64(sec[24:], s.Chunk)
		binary.LittleEndian.PutUint32(sec[32:], off)
		binary.LittleEndian.PutUint32(sec[36:], uint32(len(buf)))
		binary.LittleEndian.PutUint64(sec[40:], s.Seq)
		x := s.Run ^ s.Seq*0x9e3779b97f4a7c15 ^ uint64(off)<<20 ^ s.Chunk<<52 ^ uint64(s.Copyset)<<32
		for j := bodyStart; j < bodyEnd; j += 8 {
			binary.LittleEndian.PutUint64(sec[j:], splitmix64(&x))
		}
		binary.LittleEndian.PutUint32(sec[bodyEnd:], uint32(i))
		binary.LittleEndian.PutUint32(sec[crcOffset:], crc32.Checksum(sec[:crcOffset], castagnoli))
	}
}

// ContentKind says what a block read back turned out to hold.
type ContentKind int

const (
	// Zeros: every byte is 0 (never written, or zeroed).
	Zeros ContentKind = iota
	// Foreign: no sector carries the pattern's magic (someone else's data).
	Foreign
	// Pattern: every sector is a valid pattern sector of this block.
	Pattern
	// Bad: some sector carries the magic but is damaged, misplaced or
	// mixed with sectors that do not.
	Bad
)

func (k ContentKind) String() string {
	switch k {
	case Zeros:
		return "zeros"
	case Foreign:
		return "foreign data"
	case Pattern:
		return "pattern"
	case Bad:
		return "bad"
	}
	return fmt.Sprintf("ContentKind(%d)", int(k))
}

// Version is the run and sequence number a sector was written with.
type Version struct {
	Run uint64
	Seq uint64
}

// Content is the decoded content of a block.
type Content struct {
	Kind ContentKind
	// Versions are the distinct versions of the block's sectors in sector
	// order (Kind Pattern only); more than one means the block is torn.
	Versions []Version
	// Problem describes what is wrong with a Bad block.
	Problem string
}

// Torn reports whether the sectors of a Pattern block come from different writes.
func (c Content) Torn() bool { return len(c.Versions) > 1 }

func (c Content) String() string {
	switch c.Kind {
	case Pattern:
		parts := make([]string, len(c.Versions))
		for i, v := range c.Versions {
			parts[i] = fmt.Sprintf("run %016x seq %d", v.Run, v.Seq)
		}
		if c.Torn() {
			return "torn: " + strings.Join(parts, ", ")
		}
		return parts[0]
	case Bad:
		return c.Problem
	}
	return c.Kind.String()
}

// DecodeBlock decodes buf, read from offset of chunk id (given as a Stamp
// without Run and Seq), checking every sector's magic, checksum and identity.
func DecodeBlock(buf []byte, where Stamp) Content {
	if len(buf) == 0 || len(buf)%SectorSize != 0 {
		return Content{Kind: Bad, Problem: fmt.Sprintf("%d bytes read, not a whole number of sectors", len(buf))}
	}
	n := len(buf) / SectorSize
	magic, zero := 0, 0
	for i := range n {
		sec := buf[i*SectorSize : (i+1)*SectorSize]
		switch {
		case string(sec[:8]) == patternMagic:
			magic++
		case allZero(sec):
			zero++
		}
	}
	switch {
	case zero == n:
		return Content{Kind: Zeros}
	case magic == 0:
		return Content{Kind: Foreign}
	}
	var c Content
	for i := range n {
		sec := buf[i*SectorSize : (i+1)*SectorSize]
		off := where.Offset + uint32(i*SectorSize)
		v, problem := decodeSector(sec, where, off)
		if problem != "" {
			return Content{Kind: Bad, Problem: fmt.Sprintf("sector %d (chunk offset %d): %s", i, off, problem)}
		}
		if len(c.Versions) == 0 || c.Versions[len(c.Versions)-1] != v {
			c.Versions = append(c.Versions, v)
		}
	}
	c.Kind = Pattern
	return c
}

// decodeSector checks one sector that should be at chunk offset off of where.
func decodeSector(sec []byte, where Stamp, off uint32) (Version, string) {
	if string(sec[:8]) != patternMagic {
		if allZero(sec) {
			return Version{}, "zeros among pattern sectors"
		}
		return Version{}, "no pattern among pattern sectors"
	}
	if got, want := binary.LittleEndian.Uint32(sec[crcOffset:]), crc32.Checksum(sec[:crcOffset], castagnoli); got != want {
		return Version{}, fmt.Sprintf("checksum mismatch (stored %08x, computed %08x)", got, want)
	}
	pool := binary.LittleEndian.Uint32(sec[16:])
	cs := binary.LittleEndian.Uint32(sec[20:])
	chunk := binary.LittleEndian.Uint64(sec[24:])
	soff := binary.LittleEndian.Uint32(sec[32:])
	if pool != where.Pool || cs != where.Copyset || chunk != where.Chunk || soff != off {
		return Version{}, fmt.Sprintf("misplaced: holds data of pool %d copyset %d chunk %d offset %d", pool, cs, chunk, soff)
	}
	return Version{Run: binary.LittleEndian.Uint64(sec[8:]), Seq: binary.LittleEndian.Uint64(sec[40:])}, ""
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}
