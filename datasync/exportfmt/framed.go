package exportfmt

import (
	"encoding/binary"
	"fmt"

	"google.golang.org/protobuf/proto"
)

// A framed object (a manifest, a restore marker) is one protobuf message
// behind a fixed prefix:
//
//	offset  size  field
//	0       6     magic
//	6       1     format version (Version)
//	7       4     CRC-32C of the bytes from offset 11 on, uint32 little-endian
//	11      ...   the message, protobuf

// encodeFramed encodes m as a framed object of kind what, at most max
// bytes.
func encodeFramed(what, magic string, max int, m proto.Message) ([]byte, error) {
	b, err := marshal.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("exportfmt: encode %s: %w", what, err)
	}
	if len(b)+PrefixSize > max {
		return nil, fmt.Errorf("exportfmt: encode %s: %d bytes, more than %d", what, len(b)+PrefixSize, max)
	}
	out := make([]byte, 0, PrefixSize+len(b))
	out = append(out, magic...)
	out = append(out, Version)
	out = binary.LittleEndian.AppendUint32(out, Checksum(b))
	return append(out, b...), nil
}

// decodeFramed decodes the framed object b of kind what into m, checking
// its size, magic, version and checksum.
func decodeFramed(what, magic string, max int, b []byte, m proto.Message) error {
	switch {
	case len(b) > max:
		return fmt.Errorf("exportfmt: decode %s: %d bytes, more than %d", what, len(b), max)
	case len(b) < PrefixSize:
		return fmt.Errorf("exportfmt: decode %s: truncated: %d bytes, shorter than the %d-byte prefix", what, len(b), PrefixSize)
	case string(b[:len(magic)]) != magic:
		return fmt.Errorf("exportfmt: decode %s: bad magic %q (want %q)", what, b[:len(magic)], magic)
	case b[len(magic)] != Version:
		return fmt.Errorf("exportfmt: decode %s: unsupported format version %d (this reader knows %d)", what, b[len(magic)], Version)
	}
	want := binary.LittleEndian.Uint32(b[len(magic)+1:])
	if got := Checksum(b[PrefixSize:]); got != want {
		return fmt.Errorf("exportfmt: decode %s: crc32c is %08x, the prefix says %08x: the %s is corrupt or truncated", what, got, want, what)
	}
	if err := proto.Unmarshal(b[PrefixSize:], m); err != nil {
		return fmt.Errorf("exportfmt: decode %s: %w", what, err)
	}
	return nil
}
