package sync

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/chunkraft/chunkraft/internal/objstore"
	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
	"github.com/chunkraft/chunkraft/sync/dest"
	"github.com/chunkraft/chunkraft/sync/exportfmt"
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
		h := &syncpb.PacketHeader{LogicPoolId: 1, CopysetId: 1, StartPoint: points[i].Proto(), NextPoint: points[i+1].Proto(),
			Finished: i == len(points)-2}
		b, err := exportfmt.Encode(h, nil)
		if err != nil {
			t.Fatal(err)
		}
		pkt, err := exportfmt.Verify(b)
		if err != nil {
			t.Fatal(err)
		}
		name := exportfmt.PacketName(1, 1, points[i])
		if err := c.put(context.Background(), u, 1, 1, name, b, pkt); err != nil {
			t.Fatalf("put %s: %v", name, err)
		}
		names = append(names, name)
	}
	return names
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
