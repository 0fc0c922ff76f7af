package exportfmt

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

func header(start, next Point) *syncpb.PacketHeader {
	return &syncpb.PacketHeader{LogicPoolId: 1, CopysetId: 3, StartPoint: start.Proto(), NextPoint: next.Proto()}
}

func snapRecord(chunk uint64, off uint32, data []byte) *syncpb.Record {
	return &syncpb.Record{Kind: &syncpb.Record_Snapshot{Snapshot: &syncpb.SnapshotRecord{
		ChunkId: chunk, Sn: 2, CorrectedSn: 1, Offset: off, Data: data, AsOfIndex: 40,
	}}}
}

func cowRecord(chunk uint64, off uint32, data []byte) *syncpb.Record {
	return &syncpb.Record{Kind: &syncpb.Record_CowSnapshot{CowSnapshot: &syncpb.CowSnapshotRecord{
		ChunkId: chunk, SnapshotSn: 1, Offset: off, Data: data, AsOfIndex: 40,
	}}}
}

func binlogRecord(index uint64, at int64, data []byte) *syncpb.Record {
	return &syncpb.Record{Kind: &syncpb.Record_Binlog{Binlog: &syncpb.BinlogRecord{
		Index: index, Term: 3, AppendedAtMs: at, Data: data,
		Op: &pb.ChunkRequest{
			OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE.Enum(), LogicPoolId: proto.Uint32(1),
			CopysetId: proto.Uint32(3), ChunkId: proto.Uint64(9), Offset: proto.Uint32(4096),
			Size: proto.Uint32(uint32(len(data))), Sn: proto.Uint64(2),
		},
	}}}
}

func fill(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// samplePackets returns a snapshot-phase and a binlog-phase packet.
func samplePackets() []struct {
	h       *syncpb.PacketHeader
	records []*syncpb.Record
} {
	return []struct {
		h       *syncpb.PacketHeader
		records []*syncpb.Record
	}{
		{header(StartPoint(), SnapshotPoint(9, 8192)), []*syncpb.Record{
			snapRecord(7, 0, fill(1, 300)),
			{Kind: &syncpb.Record_Snapshot{Snapshot: &syncpb.SnapshotRecord{ChunkId: 8, Sn: 1, ZeroLength: 16 << 20, AsOfIndex: 40}}},
			snapRecord(9, 0, fill(2, 100)),
			cowRecord(9, 0, fill(3, 100)),
		}},
		{header(SnapshotPoint(9, 8192), BinlogPoint(41)), []*syncpb.Record{snapRecord(9, 8192, fill(4, 64))}},
		{header(BinlogPoint(41), BinlogPoint(45)), []*syncpb.Record{
			binlogRecord(41, 1700000000123, fill(5, 200)),
			binlogRecord(43, 1700000000100, fill(6, 10)),
			binlogRecord(43, 1700000000200, nil),
		}},
		{header(BinlogPoint(45), BinlogPoint(45)), nil}, // heartbeat
		{header(BinlogPoint(45), BinlogPoint(48)), nil}, // entries with no chunk op
	}
}

func mustEncode(t testing.TB, h *syncpb.PacketHeader, records []*syncpb.Record) []byte {
	t.Helper()
	b, err := Encode(h, records)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	for i, s := range samplePackets() {
		orig := proto.Clone(s.h)
		b := mustEncode(t, s.h, s.records)
		if !proto.Equal(orig, s.h) {
			t.Errorf("packet %d: Encode modified the header", i)
		}
		if again := mustEncode(t, s.h, s.records); !bytes.Equal(again, b) {
			t.Errorf("packet %d: two encodings differ", i)
		}
		p, err := Decode(b)
		if err != nil {
			t.Fatalf("packet %d: Decode: %v", i, err)
		}
		if p.Size != len(b) || p.Header.RecordCount != uint64(len(s.records)) || p.Header.FormatVersion != Version ||
			p.Header.BodyCrc32C != Checksum(b[len(b)-int(p.Header.BodyLength):]) {
			t.Errorf("packet %d: header %v, size %d of %d", i, p.Header, p.Size, len(b))
		}
		if p.Header.LogicPoolId != 1 || p.Header.CopysetId != 3 {
			t.Errorf("packet %d: copyset %d/%d", i, p.Header.LogicPoolId, p.Header.CopysetId)
		}
		if want, _ := ParsePoint(s.h.StartPoint); p.Start != want {
			t.Errorf("packet %d: start %v, want %v", i, p.Start, want)
		}
		if want, _ := ParsePoint(s.h.NextPoint); p.Next != want {
			t.Errorf("packet %d: next %v, want %v", i, p.Next, want)
		}
		if len(p.Records) != len(s.records) {
			t.Fatalf("packet %d: %d records, want %d", i, len(p.Records), len(s.records))
		}
		for j := range s.records {
			if !proto.Equal(p.Records[j], s.records[j]) {
				t.Errorf("packet %d record %d = %v, want %v", i, j, p.Records[j], s.records[j])
			}
		}
	}
	// The binlog packet's appended_at range.
	s := samplePackets()[2]
	p, err := Decode(mustEncode(t, s.h, s.records))
	if err != nil {
		t.Fatal(err)
	}
	if p.Header.FirstAppendedAtMs != 1700000000100 || p.Header.LastAppendedAtMs != 1700000000200 {
		t.Errorf("appended_at range [%d, %d]", p.Header.FirstAppendedAtMs, p.Header.LastAppendedAtMs)
	}
}

// A whole 16 MiB chunk and its COW snapshot fit in one packet.
func TestWholeChunkPacket(t *testing.T) {
	const chunkSize = 16 << 20
	records := []*syncpb.Record{snapRecord(7, 0, fill(1, chunkSize)), cowRecord(7, 0, fill(2, chunkSize))}
	b := mustEncode(t, header(SnapshotPoint(7, 0), SnapshotPoint(8, 0)), records)
	p, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p.Records[0].GetSnapshot().Data, records[0].GetSnapshot().Data) || !bytes.Equal(p.Records[1].GetCowSnapshot().Data, records[1].GetCowSnapshot().Data) {
		t.Error("the chunk's data did not round-trip")
	}
}

// Flipping any byte of the body is caught by the crc.
func TestDecodeCorruptBody(t *testing.T) {
	for i, s := range samplePackets() {
		b := mustEncode(t, s.h, s.records)
		p, err := Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		bodyStart := len(b) - int(p.Header.BodyLength)
		for off := bodyStart; off < len(b); off++ {
			for _, x := range []byte{0x01, 0x80, 0xff} {
				c := bytes.Clone(b)
				c[off] ^= x
				if _, err := Decode(c); err == nil || !strings.Contains(err.Error(), "crc32c") {
					t.Fatalf("packet %d: byte %d ^ %#x: Decode = %v; want a crc32c error", i, off, x, err)
				}
			}
		}
	}
}

// Every truncation, and every trailing byte, is refused.
func TestDecodeTruncated(t *testing.T) {
	for i, s := range samplePackets() {
		b := mustEncode(t, s.h, s.records)
		for n := range len(b) {
			if _, err := Decode(b[:n]); err == nil {
				t.Fatalf("packet %d: Decode of the first %d of %d bytes succeeded", i, n, len(b))
			}
		}
		if _, err := Decode(append(bytes.Clone(b), 0)); err == nil || !strings.Contains(err.Error(), "trailing") {
			t.Errorf("packet %d: Decode with a trailing byte = %v", i, err)
		}
	}
}

// reencode rebuilds a packet from a (possibly wrong) header and body.
func reencode(h *syncpb.PacketHeader, body []byte) []byte {
	hb, _ := proto.Marshal(h)
	out := append([]byte(Magic), Version, byte(len(hb)), byte(len(hb)>>8), 0, 0)
	return append(append(out, hb...), body...)
}

func TestDecodeErrorsNameTheProblem(t *testing.T) {
	s := samplePackets()[2]
	good := mustEncode(t, s.h, s.records)
	p, err := Decode(good)
	if err != nil {
		t.Fatal(err)
	}
	body := good[len(good)-int(p.Header.BodyLength):]
	withHeader := func(mod func(h *syncpb.PacketHeader)) []byte {
		h := proto.CloneOf(p.Header)
		mod(h)
		return reencode(h, body)
	}
	wrongBody := func(records []*syncpb.Record, mod func(h *syncpb.PacketHeader)) []byte {
		bb, _ := proto.Marshal(&syncpb.Body{Records: records})
		h := proto.CloneOf(p.Header)
		h.BodyLength, h.BodyCrc32C, h.RecordCount = uint64(len(bb)), Checksum(bb), uint64(len(records))
		mod(h)
		return reencode(h, bb)
	}
	garbage := func() []byte {
		bb := []byte{0xff, 0xff, 0xff}
		h := proto.CloneOf(p.Header)
		h.BodyLength, h.BodyCrc32C = uint64(len(bb)), Checksum(bb)
		return reencode(h, bb)
	}()
	setMagic := bytes.Clone(good)
	copy(setMagic, "XXSYNC")
	setVersion := bytes.Clone(good)
	setVersion[len(Magic)] = 2
	hugeHeader := bytes.Clone(good)
	hugeHeader[len(Magic)+3] = 1 // header length += 65536
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"magic", setMagic, "bad magic"},
		{"version", setVersion, "unsupported format version 2"},
		{"header too long", hugeHeader, "header length"},
		{"too big", make([]byte, MaxPacketSize+1), "limit"},
		{"header version", withHeader(func(h *syncpb.PacketHeader) { h.FormatVersion = 7 }), "header says format version 7"},
		{"count", withHeader(func(h *syncpb.PacketHeader) { h.RecordCount = 5 }), "body has 3 records, the header says 5"},
		{"crc", withHeader(func(h *syncpb.PacketHeader) { h.BodyCrc32C++ }), "crc32c"},
		{"no start", withHeader(func(h *syncpb.PacketHeader) { h.StartPoint = nil }), "start_point: no sync point"},
		{"next before start", withHeader(func(h *syncpb.PacketHeader) { h.NextPoint = BinlogPoint(2).Proto() }), "before start_point"},
		{"appended range", withHeader(func(h *syncpb.PacketHeader) { h.LastAppendedAtMs = 1 }), "appended_at range"},
		{"record outside", withHeader(func(h *syncpb.PacketHeader) { h.NextPoint = BinlogPoint(43).Proto() }), "outside the packet"},
		{"snapshot record in binlog packet", wrongBody([]*syncpb.Record{snapRecord(1, 0, nil)}, func(*syncpb.PacketHeader) {}), "a snapshot record in a packet starting at binlog"},
		{"empty record", wrongBody([]*syncpb.Record{{}}, func(*syncpb.PacketHeader) {}), "no record kind"},
		{"bad body", garbage, "body: "},
		{"no records, wrong range", wrongBody(nil, func(*syncpb.PacketHeader) {}), "appended_at range"},
		{"no records", wrongBody(nil, func(h *syncpb.PacketHeader) { h.FirstAppendedAtMs, h.LastAppendedAtMs = 0, 0 }), ""},
	} {
		_, err := Decode(c.b)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Decode = %v; want an error containing %q", c.name, err, c.want)
		}
	}
}

func TestEncodeRefuses(t *testing.T) {
	withOpData := binlogRecord(41, 1, nil)
	withOpData.GetBinlog().Op.Data = []byte("x")
	noRequired := binlogRecord(41, 1, nil)
	noRequired.GetBinlog().Op.ChunkId = nil
	both := snapRecord(1, 0, []byte("x"))
	both.GetSnapshot().ZeroLength = 4096
	for _, c := range []struct {
		name    string
		h       *syncpb.PacketHeader
		records []*syncpb.Record
		want    string
	}{
		{"no header", nil, nil, "no header"},
		{"next before start", header(BinlogPoint(5), BinlogPoint(4)), nil, "before start_point"},
		{"heartbeat with records", header(BinlogPoint(41), BinlogPoint(41)), []*syncpb.Record{binlogRecord(41, 1, nil)}, "may hold none"},
		{"binlog before start", header(BinlogPoint(42), BinlogPoint(45)), []*syncpb.Record{binlogRecord(41, 1, nil)}, "outside"},
		{"binlog at next", header(BinlogPoint(41), BinlogPoint(45)), []*syncpb.Record{binlogRecord(45, 1, nil)}, "outside"},
		{"binlog backwards", header(BinlogPoint(41), BinlogPoint(45)), []*syncpb.Record{binlogRecord(43, 1, nil), binlogRecord(42, 1, nil)}, "after index 43"},
		{"op data", header(BinlogPoint(41), BinlogPoint(45)), []*syncpb.Record{withOpData}, "op carries data"},
		{"op incomplete", header(BinlogPoint(41), BinlogPoint(45)), []*syncpb.Record{noRequired}, "required"},
		{"binlog in snapshot packet", header(StartPoint(), BinlogPoint(45)), []*syncpb.Record{binlogRecord(41, 1, nil)}, "a binlog record in a packet starting at start"},
		{"snapshot before start", header(SnapshotPoint(5, 4096), BinlogPoint(1)), []*syncpb.Record{snapRecord(5, 0, nil)}, "outside"},
		{"snapshot at next", header(StartPoint(), SnapshotPoint(5, 0)), []*syncpb.Record{cowRecord(5, 0, nil)}, "outside"},
		{"data and zero", header(StartPoint(), BinlogPoint(1)), []*syncpb.Record{both}, "both data and zero_length"},
		{"too big", header(StartPoint(), BinlogPoint(1)), []*syncpb.Record{snapRecord(1, 0, make([]byte, MaxPacketSize))}, "limit"},
		{"ts", &syncpb.PacketHeader{StartPoint: func() *syncpb.PacketHeader {
			h := header(StartPoint(), StartPoint())
			h.StartPoint.Ts = proto.Uint64(1)
			return h
		}().StartPoint, NextPoint: StartPoint().Proto()}, nil, "ts"},
	} {
		_, err := Encode(c.h, c.records)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Encode = %v; want an error containing %q", c.name, err, c.want)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range samplePackets() {
		b := mustEncode(f, s.h, s.records)
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte(Magic))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		agree(t, "fuzz input", b)
		p, err := Decode(b)
		if err != nil {
			if p != nil {
				t.Fatal("Decode returned a packet and an error")
			}
			return
		}
		// What decodes re-encodes to a packet with the same content.
		again, err := Encode(p.Header, p.Records)
		if err != nil {
			t.Fatalf("decoded packet does not re-encode: %v", err)
		}
		q, err := Decode(again)
		if err != nil {
			t.Fatalf("re-encoded packet does not decode: %v", err)
		}
		if !proto.Equal(q.Header, p.Header) || len(q.Records) != len(p.Records) {
			t.Fatalf("re-encoded packet differs: %v vs %v", q.Header, p.Header)
		}
	})
}

// headReader serves the first bytes of one packet, counting what it read.
type headReader struct {
	b    []byte
	read int
}

func (h *headReader) GetHead(_ context.Context, _ string, n int) ([]byte, error) {
	n = min(n, len(h.b))
	h.read += n
	return h.b[:n], nil
}

// ReadHead decodes a packet's header and points from its first bytes, the
// same as Decode, without reading the body; a header cut short or a bad
// prefix is an error.
func TestReadHead(t *testing.T) {
	for i, s := range samplePackets() {
		b := mustEncode(t, s.h, s.records)
		p, err := Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		r := &headReader{b: b}
		hdr, start, next, err := ReadHead(context.Background(), r, "x")
		if err != nil || !proto.Equal(hdr, p.Header) || start != p.Start || next != p.Next {
			t.Errorf("packet %d: ReadHead %v %v %v %v; Decode %v %v %v", i, hdr, start, next, err, p.Header, p.Start, p.Next)
		}
		if r.read > HeadSize {
			t.Errorf("packet %d: ReadHead read %d bytes", i, r.read)
		}
	}
	s := samplePackets()[0]
	b := mustEncode(t, s.h, s.records)
	if _, _, _, err := DecodeHead(b[:PrefixSize+2]); err == nil || !strings.Contains(err.Error(), "the header alone needs") {
		t.Errorf("a cut header: %v", err)
	}
	bad := append([]byte("XXXXXX"), b[6:]...)
	if _, _, _, err := DecodeHead(bad); err == nil || !strings.Contains(err.Error(), "bad magic") {
		t.Errorf("a bad magic: %v", err)
	}
}
