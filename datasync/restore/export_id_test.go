package restore

import (
	"context"
	"maps"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
)

const (
	exportA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	exportB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// ofExport is packet b with export id id.
func ofExport(t *testing.T, b []byte, id string) []byte {
	t.Helper()
	p, err := exportfmt.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	h := proto.CloneOf(p.Header)
	h.ExportId = id
	out, err := exportfmt.Encode(h, p.Records)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// An export's packets carry its id: such an export restores exactly, as
// does one written before export ids (none); a copyset whose chain mixes
// two exports (a packet of another export among them, or of none among an
// export's, or the other way round) is refused naming the packet, and so
// is a manifest of another export; nothing is written.
func TestRestoreChecksExportIDs(t *testing.T) {
	src, start, snap := twoChunks(t)
	for _, id := range []string{exportA, ""} {
		e := &export{pool: 1, cs: 1, full: true, start: start, chunks: [][]*syncpb.Record{snap}, binlog: src.binlog[start-1:], per: 2, exportID: id}
		got, _, err := restoreInto(t, e, Options{})
		if err != nil {
			t.Fatalf("export %q: %v", id, err)
		}
		sameChunks(t, src.s, got)
	}

	binlog := func(i uint64) string { return exportfmt.PacketName(1, 1, exportfmt.BinlogPoint(start+i)) }
	first := exportfmt.PacketName(1, 1, exportfmt.StartPoint())
	for _, c := range []struct {
		what     string
		of, into string // the export's id, the spoilt packet's
	}{
		{"another export's packet", exportA, exportB},
		{"a packet of none among an export's", exportA, ""},
		{"an export's packet among packets of none", "", exportA},
	} {
		e := &export{pool: 1, cs: 1, full: true, start: start, chunks: [][]*syncpb.Record{snap}, binlog: src.binlog[start-1:], per: 2, exportID: c.of}
		pkts := e.packets(t)
		pkts[binlog(2)] = ofExport(t, pkts[binlog(2)], c.into)
		want := "copyset 1/1: bad packet " + binlog(2) + ": it is of export " + exportfmt.ExportIDString(c.into) +
			", the packets before it (from " + first + " on) of export " + exportfmt.ExportIDString(c.of) + ": the copyset holds packets of two exports"
		restoreChanged(t, c.what, pkts, nil, want)
	}

	e := &export{pool: 1, cs: 1, full: true, start: start, chunks: [][]*syncpb.Record{snap}, binlog: src.binlog[start-1:], per: 2, exportID: exportA}
	pkts := e.packets(t)
	withManifest := maps.Clone(pkts)
	withManifest[exportfmt.ManifestName(1, 1)] = manifestOf(t, pkts, len(pkts))
	restoreChanged(t, "a manifest of the export", withManifest, nil, "")
	other := maps.Clone(pkts)
	for name, b := range other {
		other[name] = ofExport(t, b, exportB)
	}
	withManifest[exportfmt.ManifestName(1, 1)] = manifestOf(t, other, len(other))
	restoreChanged(t, "a manifest of another export", withManifest, nil,
		"manifest "+exportfmt.ManifestName(1, 1)+" is of export "+exportB+", the packets of export "+exportA)

	// Every check comes before the first write: the restore of a whole
	// pool stops at the mixed copyset.
	pkts[binlog(2)] = ofExport(t, pkts[binlog(2)], exportB)
	d, _ := writeExport(t, pkts)
	tg := newStoreTarget(t)
	st := tg.store(1, 1)
	if _, err := Restore(context.Background(), Options{Source: d, Pool: 1, Target: tg, Geometry: testGeometry}); err == nil ||
		!strings.Contains(err.Error(), binlog(2)) || len(st.ListChunks()) != 0 || tg.ops.Load() != 0 {
		t.Fatalf("mixed export: %v, %d chunks, %d ops", err, len(st.ListChunks()), tg.ops.Load())
	}
}
