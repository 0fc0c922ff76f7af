package exportfmt

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/klauspost/crc32"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
)

// The packet layout (docs/sync-format.md):
//
//	offset  size  field
//	0       6     magic "CRSYNC"
//	6       1     format version (Version)
//	7       4     header length H, uint32 little-endian
//	11      H     PacketHeader, protobuf
//	11+H    L     Body, protobuf; L = header.body_length
//
// and the packet is exactly 11+H+L bytes.
const (
	// Magic starts every packet.
	Magic = "CRSYNC"
	// Version is the packet format version this package writes and reads.
	Version = 1
	// PrefixSize is the size of the fixed prefix before the header.
	PrefixSize = len(Magic) + 1 + 4

	// MaxPacketSize bounds a whole packet: Encode refuses to make a bigger
	// one and Decode to read one. It holds one 16 MiB chunk's data several
	// times over and stays far below the server's gRPC message limit.
	MaxPacketSize = 64 << 20
	// MaxHeaderSize bounds the encoded PacketHeader.
	MaxHeaderSize = 64 << 10
)

// castagnoli is the CRC-32C table (klauspost/crc32 uses the CPU's
// instructions for it where present).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC-32C (Castagnoli) of b, the checksum of a packet
// body and of a manifest.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

var marshal = proto.MarshalOptions{Deterministic: true}

// Packet is a decoded packet.
type Packet struct {
	// Header is the packet's header as decoded.
	Header *syncpb.PacketHeader
	// Start and Next are the header's points, parsed.
	Start, Next Point
	// Records are the body's records, in order.
	Records []*syncpb.Record
	// Size is the encoded size in bytes.
	Size int
}

// Encode encodes a packet of the copyset, points and finished flag of h
// holding records. It fills in the header's format_version, record_count,
// body_crc32c, body_length and the binlog records' appended_at range (h
// itself is not modified). It checks what Decode checks: a packet Encode
// returns decodes.
func Encode(h *syncpb.PacketHeader, records []*syncpb.Record) ([]byte, error) {
	p, _, err := EncodeInto(nil, h, records)
	return p, err
}

// EncodeInto is Encode building the packet in scratch when it has the
// capacity (else in a new buffer): packet aliases buf, the buffer it used
// (scratch or the new one), which the caller may hand to the next
// EncodeInto once it is done with packet. A sender that encodes packet
// after packet so reuses one buffer instead of faulting in a fresh one of
// up to MaxPacketSize for each.
func EncodeInto(scratch []byte, h *syncpb.PacketHeader, records []*syncpb.Record) (packet, buf []byte, err error) {
	if h == nil {
		return nil, nil, errors.New("exportfmt: encode: no header")
	}
	start, next, err := checkPoints(h)
	if err != nil {
		return nil, nil, fmt.Errorf("exportfmt: encode: %w", err)
	}
	if err := checkRecords(start, next, records, nil); err != nil {
		return nil, nil, fmt.Errorf("exportfmt: encode: %w", err)
	}
	// The body is marshalled once, into the packet itself, after room
	// for the prefix and a header (which needs the body's length and crc
	// first); the header then goes right before it.
	bd := &syncpb.Body{Records: records}
	bodySize := marshal.Size(bd)
	if cap(scratch) >= headRoom+bodySize {
		buf = scratch[:headRoom]
	} else {
		buf = make([]byte, headRoom, headRoom+bodySize)
	}
	buf, err = marshal.MarshalAppend(buf, bd)
	if err != nil {
		return nil, nil, fmt.Errorf("exportfmt: encode body: %w", err)
	}
	body := buf[headRoom:]
	hdr := proto.CloneOf(h)
	hdr.FormatVersion = Version
	hdr.RecordCount = uint64(len(records))
	hdr.BodyCrc32C = Checksum(body)
	hdr.BodyLength = uint64(len(body))
	hdr.FirstAppendedAtMs, hdr.LastAppendedAtMs = appendedRange(records)
	hb, err := marshal.Marshal(hdr)
	if err != nil {
		return nil, nil, fmt.Errorf("exportfmt: encode header: %w", err)
	}
	if len(hb) > MaxHeaderSize {
		return nil, nil, fmt.Errorf("exportfmt: encode: header is %d bytes, more than %d", len(hb), MaxHeaderSize)
	}
	size := PrefixSize + len(hb) + len(body)
	if size > MaxPacketSize {
		return nil, nil, fmt.Errorf("exportfmt: encode: packet would be %d bytes, more than the %d-byte limit", size, MaxPacketSize)
	}
	if PrefixSize+len(hb) > headRoom { // a header bigger than the room: one copy more
		out := make([]byte, 0, size)
		return append(appendPrefix(out, hb), body...), buf, nil
	}
	at := headRoom - PrefixSize - len(hb)
	appendPrefix(buf[at:at], hb)
	return buf[at:], buf, nil
}

// headRoom is the room Encode leaves before the body for the prefix and
// the header (a header is about a hundred bytes).
const headRoom = 1024

// appendPrefix appends the prefix and the encoded header hb to out.
func appendPrefix(out, hb []byte) []byte {
	out = append(out, Magic...)
	out = append(out, Version)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(hb)))
	return append(out, hb...)
}

// Decode decodes and checks a packet (see the package invariants). The
// packet does not alias b.
func Decode(b []byte) (*Packet, error) {
	p, err := decode(b, decodeCopy)
	if err != nil {
		return nil, fmt.Errorf("exportfmt: decode packet: %w", err)
	}
	return p, nil
}

// DecodeAlias is Decode whose records' data alias b instead of copying
// it: b must not change while the packet is in use. A reader of many
// packets decodes each into the same buffers so (no 16 MiB allocation and
// copy per packet).
func DecodeAlias(b []byte) (*Packet, error) {
	p, err := decode(b, decodeAlias)
	if err != nil {
		return nil, fmt.Errorf("exportfmt: decode packet: %w", err)
	}
	return p, nil
}

// Verify checks a packet exactly as Decode does but returns it without
// its records (Records is nil): their data is walked, not copied, so a
// receiver that only stores the packet (SendData) checks a 16 MiB chunk
// for the cost of its crc.
func Verify(b []byte) (*Packet, error) {
	p, err := decode(b, decodeStripped)
	if err != nil {
		return nil, fmt.Errorf("exportfmt: decode packet: %w", err)
	}
	p.Records = nil
	return p, nil
}

// HeadSize is how many leading bytes of a packet DecodeHead is given to
// find its header in, as a rule (a header is about a hundred bytes).
const HeadSize = 4 << 10

// DecodeHead decodes the prefix and header of a packet from its first
// bytes b and checks them and its points; the body is neither read nor
// checked. A header longer than b is an error naming the size needed.
func DecodeHead(b []byte) (*syncpb.PacketHeader, Point, Point, error) {
	bad := func(err error) (*syncpb.PacketHeader, Point, Point, error) {
		return nil, Point{}, Point{}, fmt.Errorf("exportfmt: decode packet header: %w", err)
	}
	hdr, _, err := decodeHeader(b)
	if err != nil {
		return bad(err)
	}
	start, next, err := checkPoints(hdr)
	if err != nil {
		return bad(err)
	}
	return hdr, start, next, nil
}

// HeadReader reads the first bytes of an object (dest.Dest does).
type HeadReader interface {
	GetHead(ctx context.Context, name string, n int) ([]byte, error)
}

// ReadHead reads and decodes the header of packet name (DecodeHead),
// reading only its first bytes: a reader that wants where a packet ends
// (its next point) does not read its body.
func ReadHead(ctx context.Context, r HeadReader, name string) (*syncpb.PacketHeader, Point, Point, error) {
	b, err := r.GetHead(ctx, name, HeadSize)
	if err != nil {
		return nil, Point{}, Point{}, err
	}
	if len(b) >= PrefixSize {
		if n := headerEnd(b); n > len(b) && n <= PrefixSize+MaxHeaderSize {
			if b, err = r.GetHead(ctx, name, n); err != nil {
				return nil, Point{}, Point{}, err
			}
		}
	}
	return DecodeHead(b)
}

// headerEnd is where the header of a packet ends, read from the prefix at
// the start of b (at least PrefixSize bytes).
func headerEnd(b []byte) int {
	return PrefixSize + int(binary.LittleEndian.Uint32(b[len(Magic)+1:]))
}

// decodeHeader decodes and checks the prefix and the header at the start
// of b, and returns where the header ends.
func decodeHeader(b []byte) (*syncpb.PacketHeader, int, error) {
	if len(b) < PrefixSize {
		return nil, 0, fmt.Errorf("truncated: %d bytes, shorter than the %d-byte prefix", len(b), PrefixSize)
	}
	if string(b[:len(Magic)]) != Magic {
		return nil, 0, fmt.Errorf("bad magic %q (want %q): not a chunkraft sync packet", b[:len(Magic)], Magic)
	}
	if v := b[len(Magic)]; v != Version {
		return nil, 0, fmt.Errorf("unsupported format version %d (this reader knows %d)", v, Version)
	}
	end := headerEnd(b)
	if hlen := end - PrefixSize; hlen > MaxHeaderSize {
		return nil, 0, fmt.Errorf("header length %d is more than %d", hlen, MaxHeaderSize)
	}
	if len(b) < end {
		return nil, 0, fmt.Errorf("truncated: %d bytes, the header alone needs %d", len(b), end)
	}
	hdr := &syncpb.PacketHeader{}
	if err := proto.Unmarshal(b[PrefixSize:end], hdr); err != nil {
		return nil, 0, fmt.Errorf("header: %w", err)
	}
	if hdr.FormatVersion != Version {
		return nil, 0, fmt.Errorf("header says format version %d, the prefix %d", hdr.FormatVersion, Version)
	}
	return hdr, end, nil
}

// How decode decodes the records.
type decodeMode int

const (
	decodeCopy     decodeMode = iota // proto.Unmarshal: the data copied
	decodeStripped                   // without their data fields; hasData tells which had data
	decodeAlias                      // the data aliasing b (recordsStripped with alias)
)

// decode decodes b, its records as mode says.
func decode(b []byte, mode decodeMode) (*Packet, error) {
	if len(b) > MaxPacketSize {
		return nil, fmt.Errorf("packet is %d bytes, more than the %d-byte limit", len(b), MaxPacketSize)
	}
	hdr, end, err := decodeHeader(b)
	if err != nil {
		return nil, err
	}
	body := b[end:]
	if uint64(len(body)) != hdr.BodyLength {
		if uint64(len(body)) < hdr.BodyLength {
			return nil, fmt.Errorf("truncated: body is %d bytes, the header says %d", len(body), hdr.BodyLength)
		}
		return nil, fmt.Errorf("body is %d bytes, the header says %d (trailing bytes)", len(body), hdr.BodyLength)
	}
	if crc := Checksum(body); crc != hdr.BodyCrc32C {
		return nil, fmt.Errorf("body crc32c is %08x, the header says %08x: the body is corrupt", crc, hdr.BodyCrc32C)
	}
	start, next, err := checkPoints(hdr)
	if err != nil {
		return nil, err
	}
	var records []*syncpb.Record
	var hasData func(i int) bool
	switch mode {
	case decodeStripped:
		var has []bool
		if records, has, err = recordsStripped(body, false); err != nil {
			return nil, fmt.Errorf("body: %w", err)
		}
		hasData = func(i int) bool { return has[i] }
	case decodeAlias:
		if records, _, err = recordsStripped(body, true); err != nil {
			return nil, fmt.Errorf("body: %w", err)
		}
	default:
		var bd syncpb.Body
		if err := proto.Unmarshal(body, &bd); err != nil {
			return nil, fmt.Errorf("body: %w", err)
		}
		records = bd.Records // their data is there to look at: hasData stays nil
	}
	if uint64(len(records)) != hdr.RecordCount {
		return nil, fmt.Errorf("body has %d records, the header says %d", len(records), hdr.RecordCount)
	}
	if err := checkRecords(start, next, records, hasData); err != nil {
		return nil, err
	}
	first, last := appendedRange(records)
	if first != hdr.FirstAppendedAtMs || last != hdr.LastAppendedAtMs {
		return nil, fmt.Errorf("header says appended_at range [%d, %d] ms, the records [%d, %d]",
			hdr.FirstAppendedAtMs, hdr.LastAppendedAtMs, first, last)
	}
	return &Packet{Header: hdr, Start: start, Next: next, Records: records, Size: len(b)}, nil
}

// checkPoints parses the header's points and checks next >= start.
func checkPoints(h *syncpb.PacketHeader) (start, next Point, err error) {
	if start, err = ParsePoint(h.StartPoint); err != nil {
		return Point{}, Point{}, fmt.Errorf("start_point: %w", err)
	}
	if next, err = ParsePoint(h.NextPoint); err != nil {
		return Point{}, Point{}, fmt.Errorf("next_point: %w", err)
	}
	if next.Compare(start) < 0 {
		return Point{}, Point{}, fmt.Errorf("next_point (%v) is before start_point (%v)", next, start)
	}
	return start, next, nil
}

// checkRecords checks the records of a packet covering [start, next);
// hasData(i) tells whether snapshot record i has data (nil: look at it).
func checkRecords(start, next Point, records []*syncpb.Record, hasData func(i int) bool) error {
	if start == next && len(records) > 0 {
		return fmt.Errorf("packet with next_point = start_point (%v) holds %d records; it may hold none", start, len(records))
	}
	binlog := start.Phase == PhaseBinlog
	var lastIndex uint64
	for i, r := range records {
		var at Point
		switch k := r.GetKind().(type) {
		case *syncpb.Record_Snapshot:
			s := k.Snapshot
			if s == nil {
				return fmt.Errorf("record %d: empty snapshot record", i)
			}
			if s.ZeroLength != 0 && (len(s.Data) != 0 || hasData != nil && hasData(i)) {
				return fmt.Errorf("record %d: snapshot record of chunk %d has both data and zero_length", i, s.ChunkId)
			}
			at = SnapshotPoint(s.ChunkId, s.Offset)
		case *syncpb.Record_CowSnapshot:
			c := k.CowSnapshot
			if c == nil {
				return fmt.Errorf("record %d: empty COW snapshot record", i)
			}
			at = SnapshotPoint(c.ChunkId, c.Offset)
		case *syncpb.Record_Binlog:
			bl := k.Binlog
			if bl == nil || bl.Op == nil {
				return fmt.Errorf("record %d: binlog record without an op", i)
			}
			if len(bl.Op.Data) != 0 {
				return fmt.Errorf("record %d: binlog record's op carries data; the payload goes in the record's data", i)
			}
			if bl.Index < lastIndex {
				return fmt.Errorf("record %d: binlog index %d after index %d", i, bl.Index, lastIndex)
			}
			lastIndex = bl.Index
			at = BinlogPoint(bl.Index)
		default:
			return fmt.Errorf("record %d: no record kind set", i)
		}
		if (at.Phase == PhaseBinlog) != binlog {
			return fmt.Errorf("record %d: a %s record in a packet starting at %v", i, at.Phase, start)
		}
		if at.Compare(start) < 0 || at.Compare(next) >= 0 {
			return fmt.Errorf("record %d at %v is outside the packet's [%v, %v)", i, at, start, next)
		}
	}
	return nil
}

// appendedRange returns the smallest and largest appended_at_ms of the
// binlog records (0, 0 when there are none).
func appendedRange(records []*syncpb.Record) (first, last int64) {
	seen := false
	for _, r := range records {
		bl := r.GetBinlog()
		if bl == nil {
			continue
		}
		t := bl.AppendedAtMs
		if !seen || t < first {
			first = t
		}
		if !seen || t > last {
			last = t
		}
		seen = true
	}
	return first, last
}
