package restore

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
)

// An export whose first packets were purged (its purge record says so) is
// refused with the reason, not replayed from what is left: without its
// first packet, and even whole.
func TestRestoreRefusesAPurgedExport(t *testing.T) {
	src := newSource(t)
	src.write(1, 1, 0, block(1))
	start := src.index + 1
	src.write(1, 1, 4<<10, block(2))
	snap := src.snapshot(1)
	src.write(2, 1, 0, block(3))
	src.write(2, 1, 4<<10, block(4))
	e := &export{pool: 1, cs: 1, full: true, start: start, chunks: [][]*syncpb.Record{snap}, binlog: src.binlog[start-1:], per: 1}
	pkts := e.packets(t)
	names := slices.Sorted(maps.Keys(pkts))
	first, err := exportfmt.Verify(pkts[names[0]])
	if err != nil {
		t.Fatal(err)
	}
	rec, err := exportfmt.EncodePurge(&syncpb.PurgeRecord{FormatVersion: exportfmt.Version, LogicPoolId: 1, CopysetId: 1,
		FirstKept: first.Next.Proto(), Packets: 1, PurgedAtMs: 1, By: "dm task mig"})
	if err != nil {
		t.Fatal(err)
	}
	whole := maps.Clone(pkts)
	delete(pkts, names[0])
	for _, set := range []map[string][]byte{pkts, whole} {
		set[exportfmt.PurgeName(1, 1)] = rec
		d, _ := writeExport(t, set)
		_, err := Restore(context.Background(), Options{Source: d, Pool: 1, ToPool: 2, Target: newStoreTarget(t), Geometry: testGeometry})
		want := "the export's first 1 packets, every one before " + names[1] + ", were purged (by dm task mig at 1970-01-01T00:00:00Z)"
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "cannot be restored") {
			t.Errorf("restore of a purged export: %v, want an error saying %q", err, want)
		}
	}
}
