package exportfmt

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
)

// chainPoints is a whole export: start, snapshot, switch, binlog.
var chainPoints = []Point{StartPoint(), SnapshotPoint(7, 0), SnapshotPoint(9, 8192), BinlogPoint(41), BinlogPoint(45), BinlogPoint(45), BinlogPoint(50)}

func TestChain(t *testing.T) {
	c := NewChain(1, 3)
	if _, ok := c.Start(); ok {
		t.Error("empty chain has a start")
	}
	for i := 0; i+1 < len(chainPoints); i++ {
		start, next := chainPoints[i], chainPoints[i+1]
		if start == next {
			continue // a heartbeat shares its name with the packet after it
		}
		if err := c.Add(PacketName(1, 3, start), start, next); err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
	}
	if s, _ := c.Start(); s != StartPoint() {
		t.Errorf("Start = %v", s)
	}
	if n, _ := c.Next(); n != BinlogPoint(50) || c.Len() != 5 || c.Last() != PacketName(1, 3, BinlogPoint(45)) {
		t.Errorf("Next = %v, Len %d, Last %s", n, c.Len(), c.Last())
	}

	// The first gap is reported with both packets.
	gap := NewChain(1, 3)
	must(t, gap.Add(PacketName(1, 3, BinlogPoint(10)), BinlogPoint(10), BinlogPoint(20)))
	err := gap.Add(PacketName(1, 3, BinlogPoint(21)), BinlogPoint(21), BinlogPoint(30))
	var ge *GapError
	if !errors.As(err, &ge) || ge.PrevEnd != BinlogPoint(20) || ge.NextStart != BinlogPoint(21) ||
		!strings.Contains(err.Error(), "gap: packet pool-1/copyset-3/2-binlog-00000000000000000010.pkt ends at binlog index 20 but the next packet pool-1/copyset-3/2-binlog-00000000000000000021.pkt starts at binlog index 21") {
		t.Errorf("gap: %v", err)
	}
	// The chain is unchanged after an error.
	if n, _ := gap.Next(); n != BinlogPoint(20) || gap.Len() != 1 {
		t.Errorf("after the gap: next %v, len %d", n, gap.Len())
	}
	must(t, gap.Add(PacketName(1, 3, BinlogPoint(20)), BinlogPoint(20), BinlogPoint(30)))

	// An overlap (a packet ending past the next one's start).
	ov := NewChain(1, 3)
	must(t, ov.Add(PacketName(1, 3, BinlogPoint(10)), BinlogPoint(10), BinlogPoint(20)))
	if err := ov.Add(PacketName(1, 3, BinlogPoint(15)), BinlogPoint(15), BinlogPoint(30)); !errors.As(err, &ge) || !strings.Contains(err.Error(), "overlap") {
		t.Errorf("overlap: %v", err)
	}
	// A snapshot phase that stops before its switch to the binlog.
	sw := NewChain(1, 3)
	must(t, sw.Add(PacketName(1, 3, StartPoint()), StartPoint(), SnapshotPoint(9, 0)))
	if err := sw.Add(PacketName(1, 3, BinlogPoint(41)), BinlogPoint(41), BinlogPoint(45)); !errors.As(err, &ge) {
		t.Errorf("missing snapshot tail: %v", err)
	}

	var bp *BadPacketError
	for _, c := range []struct {
		name        string
		start, next Point
		want        string
	}{
		{"pool-1/copyset-3/manifest.pb", BinlogPoint(20), BinlogPoint(30), "not a packet name"},
		{PacketName(1, 4, BinlogPoint(20)), BinlogPoint(20), BinlogPoint(30), "belongs to copyset 1/4"},
		{PacketName(1, 3, BinlogPoint(20)), BinlogPoint(21), BinlogPoint(30), "its name says it starts at binlog index 20, its header binlog index 21"},
		{PacketName(1, 3, BinlogPoint(20)), BinlogPoint(20), BinlogPoint(19), "ends (binlog index 19) before it starts"},
		{PacketName(1, 3, BinlogPoint(5)), BinlogPoint(5), BinlogPoint(30), "out of name order"},
	} {
		ch := NewChain(1, 3)
		must(t, ch.Add(PacketName(1, 3, BinlogPoint(10)), BinlogPoint(10), BinlogPoint(20)))
		if err := ch.Add(c.name, c.start, c.next); !errors.As(err, &bp) || bp.Name != c.name || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Add(%s, %v, %v) = %v; want a bad packet error containing %q", c.name, c.start, c.next, err, c.want)
		}
	}
}

// A decoded packet's header must name the chain's copyset.
func TestChainAddPacket(t *testing.T) {
	s := samplePackets()[2]
	p, err := Decode(mustEncode(t, s.h, s.records))
	if err != nil {
		t.Fatal(err)
	}
	if err := NewChain(1, 3).AddPacket(PacketName(1, 3, p.Start), p); err != nil {
		t.Error(err)
	}
	if err := NewChain(1, 4).AddPacket(PacketName(1, 4, p.Start), p); err == nil || !strings.Contains(err.Error(), "header names copyset 1/3") {
		t.Errorf("AddPacket of another copyset's packet = %v", err)
	}
}

// The packets a chain adds with AddPacket are of one export: the first
// one's export_id, the empty id (an export written before ids) included;
// a packet of another is refused, naming it and both ids, and the chain
// is unchanged.
func TestChainExportIDs(t *testing.T) {
	pkt := func(start, next Point, id string) (string, *Packet) {
		p, err := Decode(mustEncode(t, &syncpb.PacketHeader{LogicPoolId: 1, CopysetId: 3, StartPoint: start.Proto(), NextPoint: next.Proto(), ExportId: id}, nil))
		if err != nil {
			t.Fatal(err)
		}
		return PacketName(1, 3, start), p
	}
	a, b := strings.Repeat("a", 32), strings.Repeat("b", 32)
	for _, c := range []struct{ first, then string }{{a, b}, {"", a}, {a, ""}} {
		ch := NewChain(1, 3)
		n1, p1 := pkt(BinlogPoint(10), BinlogPoint(20), c.first)
		must(t, ch.AddPacket(n1, p1))
		n2, p2 := pkt(BinlogPoint(20), BinlogPoint(30), c.first)
		must(t, ch.AddPacket(n2, p2))
		n3, p3 := pkt(BinlogPoint(30), BinlogPoint(40), c.then)
		err := ch.AddPacket(n3, p3)
		var bad *BadPacketError
		want := "bad packet " + n3 + ": it is of export " + ExportIDString(c.then) + ", the packets before it (from " + n1 + " on) of export " +
			ExportIDString(c.first) + ": the copyset holds packets of two exports"
		if !errors.As(err, &bad) || bad.Name != n3 || err.Error() != want {
			t.Errorf("%q then %q: %v, want %q", c.first, c.then, err, want)
		}
		if next, _ := ch.Next(); next != BinlogPoint(30) || ch.Len() != 2 || ch.ExportID() != c.first {
			t.Errorf("after the refusal: next %v, len %d, export %q", next, ch.Len(), ch.ExportID())
		}
		n3, p3 = pkt(BinlogPoint(30), BinlogPoint(40), c.first)
		must(t, ch.AddPacket(n3, p3))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestManifest(t *testing.T) {
	m := NewManifest(1, 3)
	var entries []*syncpb.ManifestEntry
	for _, s := range samplePackets() {
		b := mustEncode(t, s.h, s.records)
		p, err := Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		e := p.Entry(PacketName(1, 3, p.Start))
		if e.Size != uint64(len(b)) || e.BodyCrc32C != p.Header.BodyCrc32C || e.RecordCount != uint64(len(s.records)) {
			t.Errorf("entry %v", e)
		}
		must(t, Append(m, e))
		entries = append(entries, e)
	}
	// The heartbeat at 45 was replaced by the packet [45, 48) of the same name.
	if len(m.Packets) != 4 || !proto.Equal(m.Packets[3], entries[4]) {
		t.Fatalf("manifest has %d packets: %v", len(m.Packets), m.Packets)
	}
	// A resent last packet (same start, a different end) replaces itself.
	resent := proto.CloneOf(entries[4])
	resent.NextPoint = BinlogPoint(47).Proto()
	must(t, Append(m, resent))
	if len(m.Packets) != 4 || !proto.Equal(m.Packets[3], resent) {
		t.Fatalf("after the resend: %v", m.Packets)
	}
	before := proto.CloneOf(m)
	for _, c := range []struct {
		name string
		e    *syncpb.ManifestEntry
		want string
	}{
		{"gap", &syncpb.ManifestEntry{Name: PacketName(1, 3, BinlogPoint(48)), StartPoint: BinlogPoint(48).Proto(), NextPoint: BinlogPoint(50).Proto()}, "gap"},
		{"earlier packet", entries[1], "out of name order"},
		{"other copyset", &syncpb.ManifestEntry{Name: PacketName(1, 4, BinlogPoint(47)), StartPoint: BinlogPoint(47).Proto(), NextPoint: BinlogPoint(50).Proto()}, "belongs to copyset 1/4"},
		{"bad point", &syncpb.ManifestEntry{Name: PacketName(1, 3, BinlogPoint(47)), StartPoint: BinlogPoint(47).Proto()}, "next_point: no sync point"},
	} {
		if err := Append(m, c.e); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Append = %v; want an error containing %q", c.name, err, c.want)
		}
		if !proto.Equal(m, before) {
			t.Fatalf("%s: a refused Append changed the manifest", c.name)
		}
	}
	if c, err := CheckManifest(m); err != nil || c.Len() != 4 {
		t.Errorf("CheckManifest = %v", err)
	}

	b, err := EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeManifest(b)
	if err != nil || !proto.Equal(got, m) {
		t.Fatalf("DecodeManifest = %v, %v", got, err)
	}
	for n := range len(b) {
		if _, err := DecodeManifest(b[:n]); err == nil {
			t.Fatalf("DecodeManifest of %d of %d bytes succeeded", n, len(b))
		}
	}
	for off := range len(b) {
		c := bytes.Clone(b)
		c[off] ^= 0x20
		if _, err := DecodeManifest(c); err == nil {
			t.Fatalf("DecodeManifest with byte %d flipped succeeded", off)
		}
	}

	// A manifest with a gap in it fails CheckManifest, naming the entry.
	broken := proto.CloneOf(m)
	broken.Packets = append(broken.Packets[:1], broken.Packets[2:]...)
	if _, err := CheckManifest(broken); err == nil || !strings.Contains(err.Error(), "entry 1: gap") {
		t.Errorf("CheckManifest of a broken manifest = %v", err)
	}
}
