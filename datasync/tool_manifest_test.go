package datasync

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/chunkraft/chunkraft/datasync/dest"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/datasync/restore"
	"github.com/chunkraft/chunkraft/internal/objstore"
	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
)

// putChain puts the packets [points[i], points[i+1]) of copyset 1/1
// through c (the last one finished) and returns their names.
func putChain(t *testing.T, c *destCache, u dest.URL, points []exportfmt.Point, fresh func(i int) *destCache) []string {
	t.Helper()
	var names []string
	for i := range len(points) - 1 {
		if fresh != nil {
			if f := fresh(i); f != nil {
				c = f
			}
		}
		b, pkt := emptyPacket(t, points[i], points[i+1], i == len(points)-2)
		name := exportfmt.PacketName(1, 1, points[i])
		if err := c.put(context.Background(), u, 1, 1, name, b, pkt); err != nil {
			t.Fatalf("put %s: %v", name, err)
		}
		names = append(names, name)
	}
	return names
}

// emptyPacket is the encoded packet of copyset 1/1 [start, next) with no
// records, and the packet it verifies as.
func emptyPacket(t testing.TB, start, next exportfmt.Point, finished bool) ([]byte, *exportfmt.Packet) {
	t.Helper()
	h := &syncpb.PacketHeader{LogicPoolId: 1, CopysetId: 1, StartPoint: start.Proto(), NextPoint: next.Proto(), Finished: finished}
	b, err := exportfmt.Encode(h, nil)
	if err != nil {
		t.Fatal(err)
	}
	pkt, err := exportfmt.Verify(b)
	if err != nil {
		t.Fatal(err)
	}
	return b, pkt
}

// manifestNames reads the manifest of copyset 1/1 at u.
func manifestNames(t *testing.T, c *destCache, u dest.URL) []string {
	t.Helper()
	d, err := c.get(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	m, err := loadManifest(context.Background(), d, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range m.GetPackets() {
		out = append(out, e.GetName())
	}
	return out
}

// TestManifestOfASecondExport: a second export to the place an earlier
// one went (the task deleted and created again) gets a manifest of its own
// packets only, whether the SyncTool that writes it remembers the earlier
// manifest or finds it (or none, the earlier export's files removed, its
// own not written yet) on the dest after taking over mid-export.
func TestManifestOfASecondExport(t *testing.T) {
	for _, tc := range []struct{ takeover, removed bool }{{false, false}, {true, false}, {true, true}} {
		takeover := tc.takeover
		dir := filepath.Join(t.TempDir(), "export")
		u, err := dest.Parse("file://" + dir)
		if err != nil {
			t.Fatal(err)
		}
		c := newDestCache(objstore.Config{})
		defer c.close()
		putChain(t, c, u, []exportfmt.Point{exportfmt.StartPoint(), exportfmt.SnapshotPoint(1, 0), exportfmt.BinlogPoint(10), exportfmt.BinlogPoint(12)}, nil)

		if tc.removed { // the first export's files removed before the second
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
		}
		var fresh func(i int) *destCache
		if takeover {
			fresh = func(i int) *destCache {
				if i != 1 {
					return nil
				}
				n := newDestCache(objstore.Config{}) // another SyncTool, the manifest on the dest still the first export's
				t.Cleanup(n.close)
				return n
			}
		}
		want := putChain(t, c, u, []exportfmt.Point{exportfmt.StartPoint(), exportfmt.SnapshotPoint(2, 0), exportfmt.BinlogPoint(20), exportfmt.BinlogPoint(21)}, fresh)
		if got := manifestNames(t, newDestCache(objstore.Config{}), u); !slices.Equal(got, want) {
			t.Errorf("%+v: the second export's manifest lists %v, want %v", tc, got, want)
		}
	}
}

// TestManifestParts: a long export's manifest is cut into sealed parts
// (here of 3 entries) that the restore's reader joins into the whole list,
// also when another SyncTool takes over mid-export (it loads manifest.pb
// alone and goes on from its last entry); manifest.pb itself stays short.
func TestManifestParts(t *testing.T) {
	for _, takeover := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "export")
		u, err := dest.Parse("file://" + dir)
		if err != nil {
			t.Fatal(err)
		}
		small := func() *destCache {
			c := newDestCache(objstore.Config{})
			c.partEntries = 3
			t.Cleanup(c.close)
			return c
		}
		points := []exportfmt.Point{exportfmt.StartPoint(), exportfmt.SnapshotPoint(1, 0)}
		for i := range 12 {
			points = append(points, exportfmt.BinlogPoint(uint64(10+i)))
		}
		var fresh func(i int) *destCache
		if takeover {
			fresh = func(i int) *destCache {
				if i == 7 {
					return small()
				}
				return nil
			}
		}
		want := putChain(t, small(), u, points, fresh)

		d, err := dest.Open(context.Background(), u, objstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		m, err := restore.ReadManifest(context.Background(), d, 1, 1)
		if err != nil {
			t.Fatalf("takeover %v: %v", takeover, err)
		}
		var got []string
		for _, e := range m.GetPackets() {
			got = append(got, e.GetName())
		}
		if !slices.Equal(got, want) {
			t.Errorf("takeover %v: the manifest and its parts list %v, want %v", takeover, got, want)
		}
		if active := manifestNames(t, small(), u); len(active) == 0 || len(active) > 3 {
			t.Errorf("takeover %v: manifest.pb lists %d packets (parts of 3)", takeover, len(active))
		}
		for part := uint32(1); part <= 4; part++ {
			if _, err := os.Stat(filepath.Join(dir, exportfmt.ManifestPartName(1, 1, part))); err != nil {
				t.Errorf("takeover %v: part %d: %v", takeover, part, err)
			}
		}
		d.Close()
	}
}
