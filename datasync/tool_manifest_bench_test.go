package datasync

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/datasync/dest"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/internal/objstore"
	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
)

// BenchmarkManifestPut: SendData's manifest work for one packet of a
// continuous export that has already written `entries` packets (a month
// at one packet per 5 s is about 500k), the manifest written with it (as
// it is every 10 s). "whole" keeps every entry in manifest.pb (parts off),
// "parts" cuts them into sealed parts (the default).
func BenchmarkManifestPut(b *testing.B) {
	for _, entries := range []int{1000, 100_000, 500_000} {
		for _, mode := range []string{"whole", "parts"} {
			b.Run(fmt.Sprintf("entries=%d/%s", entries, mode), func(b *testing.B) {
				u, err := dest.Parse("file://" + filepath.Join(b.TempDir(), "export"))
				if err != nil {
					b.Fatal(err)
				}
				c := newDestCache(objstore.Config{})
				defer c.close()
				if mode == "whole" {
					c.partEntries = 1 << 30
				}
				m := exportfmt.NewManifest(1, 1)
				for i := range entries {
					at := exportfmt.BinlogPoint(uint64(i + 1))
					m.Packets = append(m.Packets, &syncpb.ManifestEntry{Name: exportfmt.PacketName(1, 1, at), StartPoint: at.Proto(),
						NextPoint: exportfmt.BinlogPoint(uint64(i + 2)).Proto(), RecordCount: 100, BodyCrc32C: 1, Size: 4 << 20})
				}
				parts := exportfmt.Seal(m, c.partEntries)
				d, err := c.get(context.Background(), u)
				if err != nil {
					b.Fatal(err)
				}
				for _, p := range parts {
					pb, _ := exportfmt.EncodeManifest(p)
					if err := d.Put(context.Background(), exportfmt.ManifestPartName(1, 1, p.Part), pb); err != nil {
						b.Fatal(err)
					}
				}
				key := manifestKey{u.String(), 1, 1}
				c.manifests[key] = &manifestState{m: m}
				next := uint64(entries + 1)
				b.ResetTimer()
				for range b.N {
					c.manifests[key].written = time.Time{} // the manifest is written with this packet
					raw, pkt := emptyPacket(b, exportfmt.BinlogPoint(next), exportfmt.BinlogPoint(next+1), false)
					if err := c.put(context.Background(), u, 1, 1, exportfmt.PacketName(1, 1, exportfmt.BinlogPoint(next)), raw, pkt); err != nil {
						b.Fatal(err)
					}
					next++
				}
				b.StopTimer()
				enc, _ := exportfmt.EncodeManifest(c.manifests[key].m)
				b.ReportMetric(float64(len(enc)), "manifest-bytes")
			})
		}
	}
}
