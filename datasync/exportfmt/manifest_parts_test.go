package exportfmt

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
)

// binlogManifest is the manifest of copyset 1/3's packets [i, i+1) of the
// binlog from index 1, n of them, appended one by one.
func binlogManifest(t *testing.T, n int) (*syncpb.Manifest, []*syncpb.ManifestEntry) {
	t.Helper()
	m := NewManifest(1, 3)
	var entries []*syncpb.ManifestEntry
	for i := range n {
		at := BinlogPoint(uint64(i + 1))
		e := &syncpb.ManifestEntry{Name: PacketName(1, 3, at), StartPoint: at.Proto(), NextPoint: BinlogPoint(uint64(i + 2)).Proto()}
		must(t, Append(m, e))
		entries = append(entries, e)
	}
	return m, entries
}

// Seal keeps the last entries (at least one) in the manifest and cuts the
// rest into numbered parts that JoinManifest puts back together; appends
// after a seal chain from the sealed part's last entry.
func TestSealAndJoinManifest(t *testing.T) {
	m, entries := binlogManifest(t, 10)
	parts := Seal(m, 3)
	if len(parts) != 3 || len(m.Packets) != 1 || m.SealedParts != 3 || !proto.Equal(m.Previous, entries[8]) {
		t.Fatalf("Seal: %d parts, the manifest keeps %d entries after %d parts, previous %v", len(parts), len(m.Packets), m.SealedParts, m.Previous.GetName())
	}
	for i, p := range parts {
		if p.Part != uint32(i+1) || p.SealedParts != uint32(i) || len(p.Packets) != 3 || !proto.Equal(p.Packets[0], entries[3*i]) {
			t.Fatalf("part %d: %v", i+1, p)
		}
		if _, err := CheckManifest(p); err != nil {
			t.Fatalf("part %d alone: %v", i+1, err)
		}
		b, err := EncodeManifest(p)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := DecodeManifest(b); err != nil || !proto.Equal(got, p) {
			t.Fatalf("part %d decodes to %v, %v", i+1, got, err)
		}
	}
	if len(Seal(m, 3)) != 0 {
		t.Fatal("a second Seal with nothing to cut made a part")
	}
	// The resent last packet replaces its entry in the manifest, not in a part.
	resent := proto.CloneOf(entries[9])
	resent.NextPoint = BinlogPoint(12).Proto()
	must(t, Append(m, resent))
	next := &syncpb.ManifestEntry{Name: PacketName(1, 3, BinlogPoint(12)), StartPoint: BinlogPoint(12).Proto(), NextPoint: BinlogPoint(13).Proto()}
	must(t, Append(m, next))
	if _, err := CheckManifest(m); err != nil {
		t.Fatalf("the manifest after its parts: %v", err)
	}
	all, err := JoinManifest(m, parts)
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]*syncpb.ManifestEntry(nil), entries[:9]...), resent, next)
	if len(all.Packets) != len(want) || all.SealedParts != 0 || all.Previous != nil {
		t.Fatalf("joined: %d entries after %d parts", len(all.Packets), all.SealedParts)
	}
	for i := range want {
		if !proto.Equal(all.Packets[i], want[i]) {
			t.Fatalf("joined entry %d is %s, want %s", i, all.Packets[i].GetName(), want[i].GetName())
		}
	}
	if c, err := CheckManifest(all); err != nil || c.Len() != len(want) {
		t.Fatalf("CheckManifest of the joined manifest: %v", err)
	}

	// The parts are of the manifest's export, and must stay so.
	m.ExportId = strings.Repeat("a", 32)
	for _, p := range parts {
		p.ExportId = m.ExportId
	}
	if all, err := JoinManifest(m, parts); err != nil || all.ExportId != m.ExportId {
		t.Fatalf("joined the parts of export %s: %v, %v", m.ExportId, all.GetExportId(), err)
	}
	parts[1].ExportId = strings.Repeat("b", 32)
	if _, err := JoinManifest(m, parts); err == nil || !strings.Contains(err.Error(), "manifest part 2 of copyset 1/3 is of export "+parts[1].ExportId+", the manifest of export "+m.ExportId) {
		t.Fatalf("a part of another export: %v", err)
	}
	for _, p := range parts {
		p.ExportId = ""
	}
	m.ExportId = ""

	// An empty manifest after a part (not one Seal leaves, but allowed)
	// chains its first entry from the part's last.
	e := NewManifest(1, 3)
	e.SealedParts, e.Previous = 1, entries[4]
	if err := Append(e, entries[6]); err == nil || !strings.Contains(err.Error(), "gap") {
		t.Errorf("Append of a gap after the previous entry: %v", err)
	}
	must(t, Append(e, entries[5]))

	for _, c := range []struct {
		what  string
		parts func() []*syncpb.Manifest
		m     func() *syncpb.Manifest
		want  string
	}{
		{"a part missing", func() []*syncpb.Manifest { return parts[:2] }, nil, "has 3 sealed parts, 2 given"},
		{"parts out of order", func() []*syncpb.Manifest { return []*syncpb.Manifest{parts[1], parts[0], parts[2]} }, nil, "manifest part 1 of copyset 1/3 says it is part 2 after 1"},
		{"another copyset's part", func() []*syncpb.Manifest {
			p := proto.CloneOf(parts[1])
			p.CopysetId = 4
			return []*syncpb.Manifest{parts[0], p, parts[2]}
		}, nil, "part 2 of copyset 1/3 is of copyset 1/4"},
		{"a part that does not follow", func() []*syncpb.Manifest {
			p := proto.CloneOf(parts[1])
			p.Previous = entries[0]
			return []*syncpb.Manifest{parts[0], p, parts[2]}
		}, nil, "part 2 of copyset 1/3 does not follow part 1"},
		{"an empty part", func() []*syncpb.Manifest {
			p := proto.CloneOf(parts[2])
			p.Packets = nil
			return []*syncpb.Manifest{parts[0], parts[1], p}
		}, nil, "part 3 of copyset 1/3 lists no packet"},
		{"a manifest that does not follow its parts", nil, func() *syncpb.Manifest {
			c := proto.CloneOf(m)
			c.Previous = entries[7]
			return c
		}, "does not follow its last sealed part"},
		{"a part as the manifest", nil, func() *syncpb.Manifest { return parts[2] }, "says it is sealed part 3"},
	} {
		ps, mm := parts, m
		if c.parts != nil {
			ps = c.parts()
		}
		if c.m != nil {
			mm = c.m()
		}
		if _, err := JoinManifest(mm, ps); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: JoinManifest = %v, want %q", c.what, err, c.want)
		}
	}
	bad := proto.CloneOf(m)
	bad.Previous = nil
	if _, err := CheckManifest(bad); err == nil || !strings.Contains(err.Error(), "want both or neither") {
		t.Errorf("CheckManifest of parts without a previous entry: %v", err)
	}
	if got := ManifestPartName(1, 3, 2); got != "pool-1/copyset-3/manifest-0000000002.pb" {
		t.Errorf("ManifestPartName = %q", got)
	}
}
