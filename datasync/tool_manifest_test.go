package datasync

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	return putChainOf(t, c, u, "", points, fresh)
}

// putChainOf is putChain of export id.
func putChainOf(t *testing.T, c *destCache, u dest.URL, id string, points []exportfmt.Point, fresh func(i int) *destCache) []string {
	t.Helper()
	var names []string
	for i := range len(points) - 1 {
		if fresh != nil {
			if f := fresh(i); f != nil {
				c = f
			}
		}
		b, pkt := emptyPacketOf(t, id, points[i], points[i+1], i == len(points)-2)
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
	return emptyPacketOf(t, "", start, next, finished)
}

// emptyPacketOf is emptyPacket of export id.
func emptyPacketOf(t testing.TB, id string, start, next exportfmt.Point, finished bool) ([]byte, *exportfmt.Packet) {
	t.Helper()
	h := &syncpb.PacketHeader{LogicPoolId: 1, CopysetId: 1, StartPoint: start.Proto(), NextPoint: next.Proto(), Finished: finished, ExportId: id}
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

// fileDest is a new file dest: its directory and URL.
func fileDest(t *testing.T) (string, dest.URL) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "export")
	u, err := dest.Parse("file://" + dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, u
}

// firstExport is the points of a short export: the start, a snapshot
// packet, two binlog indices.
var firstExport = []exportfmt.Point{exportfmt.StartPoint(), exportfmt.SnapshotPoint(1, 0), exportfmt.BinlogPoint(10), exportfmt.BinlogPoint(12)}

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
		dir, u := fileDest(t)
		c := newDestCache(objstore.Config{})
		defer c.close()
		putChain(t, c, u, firstExport, nil)

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
		dir, u := fileDest(t)
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

// TestDestHoldsOneExport: a copyset directory written by one export takes
// no packet of another (nor of none, an export from before ids), whether
// the SyncTool wrote it itself or finds it on the dest, and nothing is
// written: the error names both exports and what the directory holds. Its
// own packets go on; once the directory is emptied another export may
// take it. The manifest alone (its packets gone) still claims it.
func TestDestHoldsOneExport(t *testing.T) {
	dir, u := fileDest(t)
	c := newDestCache(objstore.Config{})
	defer c.close()
	points := firstExport
	putChainOf(t, c, u, exportA, points, nil)
	files := func() map[string]string {
		out := map[string]string{}
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				info, _ := d.Info()
				out[p] = fmt.Sprint(info.Size(), info.ModTime().UnixNano())
			}
			return err
		})
		return out
	}
	before := files()
	for _, tc := range []struct {
		what string
		c    *destCache
		id   string
		held string // the object the error names
	}{
		{"this SyncTool", c, exportB, exportfmt.ManifestName(1, 1)},
		{"another SyncTool", newDestCache(objstore.Config{}), exportB, exportfmt.ManifestName(1, 1)},
		{"an export of none", newDestCache(objstore.Config{}), "", exportfmt.ManifestName(1, 1)},
	} {
		b, pkt := emptyPacketOf(t, tc.id, exportfmt.StartPoint(), exportfmt.SnapshotPoint(5, 0), false)
		err := tc.c.put(context.Background(), u, 1, 1, exportfmt.PacketName(1, 1, exportfmt.StartPoint()), b, pkt)
		var conflict *exportConflictError
		want := fmt.Sprintf("export %s refused: file://%s holds %s of export %s", exportfmt.ExportIDString(tc.id), dir, tc.held, exportA)
		if !errors.As(err, &conflict) || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: %v, want %q", tc.what, err, want)
		}
		if now := files(); !maps.Equal(now, before) {
			t.Errorf("%s: the refused packet changed the directory: %v, was %v", tc.what, now, before)
		}
	}
	// The export's own next packet is taken.
	b, pkt := emptyPacketOf(t, exportA, exportfmt.BinlogPoint(12), exportfmt.BinlogPoint(13), false)
	if err := newDestCache(objstore.Config{}).put(context.Background(), u, 1, 1, exportfmt.PacketName(1, 1, exportfmt.BinlogPoint(12)), b, pkt); err != nil {
		t.Fatalf("the export's own packet: %v", err)
	}
	// Without the manifest, the packets claim the directory.
	if err := os.Remove(filepath.Join(dir, exportfmt.ManifestName(1, 1))); err != nil {
		t.Fatal(err)
	}
	b, pkt = emptyPacketOf(t, exportB, exportfmt.StartPoint(), exportfmt.SnapshotPoint(5, 0), false)
	if err := c.put(context.Background(), u, 1, 1, exportfmt.PacketName(1, 1, exportfmt.StartPoint()), b, pkt); err == nil ||
		!strings.Contains(err.Error(), "holds "+exportfmt.PacketName(1, 1, exportfmt.StartPoint())+" of export "+exportA) {
		t.Fatalf("packets of another export: %v", err)
	}
	// Emptied, the directory is export B's.
	if err := os.RemoveAll(filepath.Join(dir, "pool-1")); err != nil {
		t.Fatal(err)
	}
	want := putChainOf(t, c, u, exportB, points, nil)
	if got := manifestNames(t, newDestCache(objstore.Config{}), u); !slices.Equal(got, want) {
		t.Fatalf("export B's manifest lists %v, want %v", got, want)
	}
	d, err := dest.Open(context.Background(), u, objstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if m, err := restore.ReadManifest(context.Background(), d, 1, 1); err != nil || m.GetExportId() != exportB {
		t.Fatalf("export B's manifest: %v %v", m.GetExportId(), err)
	}
}
