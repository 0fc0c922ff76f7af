package test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/cli"
	"github.com/chunkraft/chunkraft/datasync/dest"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/datasync/restore"
	"github.com/chunkraft/chunkraft/internal/objstore"
	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	datasyncpb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
)

// purgeExport deletes copyset 1/1's packets of dir before the one at keep
// and writes the purge record saying so, as dm purge-relay does.
func purgeExport(t *testing.T, dir string, keep exportfmt.Point) {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "pool-1", "copyset-1"))
	if err != nil {
		t.Fatal(err)
	}
	first := filepath.Base(exportfmt.PacketName(1, 1, keep))
	n := 0
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), exportfmt.PacketSuffix) && e.Name() < first {
			if err := os.Remove(filepath.Join(dir, "pool-1", "copyset-1", e.Name())); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	rec, err := exportfmt.EncodePurge(&syncpb.PurgeRecord{FormatVersion: exportfmt.Version, LogicPoolId: 1, CopysetId: 1,
		FirstKept: keep.Proto(), Packets: uint64(n), PurgedAtMs: 1_700_000_000_000, By: "dm task mig"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, exportfmt.PurgeName(1, 1)), rec, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSyncRestoreResumePurged: an export whose first packets were purged
// restores the range it kept by going on from a restore made before the
// purge. The hand-built export of pool 1 copyset 1 (snapshot phase, then
// writes, a refused write, a clone chunk and a paste, a delete) is
// restored up to index 16 into pool 2 with --marker; the export goes on
// and its first three packets are purged. A restore from the start is
// refused, naming the purge and --resume-from; `sync restore
// --resume-from` replays the kept range up to index 19 (mid-packet), then,
// once the export has gone on again, to its end: pool 2 then equals a
// restore of the unpurged export (pool 4), clone chunk included. Resuming
// is refused, changing nothing, when the marker's packet was purged too,
// when the target copyset changed since the restore, with --until-time,
// before the marker's index, and without a marker.
func TestSyncRestoreResumePurged(t *testing.T) {
	c := startCluster(t, 1)
	srv := c.addrs()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	createCopysetOnes(ctx, t, c, 2, 3, 4)
	whole := t.TempDir()
	markerExport(t, whole)
	markers, markers3 := "file://"+t.TempDir(), "file://"+t.TempDir()
	restoreTo := func(pool string, args ...string) []string {
		return append([]string{"sync", "restore", "--pool", "1", "--to-pool", pool, "--progress", "never"}, args...)
	}
	mustCtl(t, srv, nil, restoreTo("2", "--from", "file://"+whole, "--until-index", "16", "--marker", markers)...)
	mustCtl(t, srv, nil, restoreTo("3", "--from", "file://"+whole, "--until-index", "16", "--marker", markers3)...)
	markerExportMore(t, whole)

	// The kept range starts at the packet of the marker's next record
	// (index 15); another copy purged past it.
	purged, past := t.TempDir(), t.TempDir()
	copyDirFiles(t, whole, purged)
	copyDirFiles(t, whole, past)
	purgeExport(t, purged, exportfmt.BinlogPoint(15))
	purgeExport(t, past, exportfmt.BinlogPoint(18))

	// Pool 3 written to after its restore.
	block := filepath.Join(t.TempDir(), "block")
	if err := os.WriteFile(block, syncBlock(9), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCtl(t, srv, nil, "chunk", "write", "--pool", "3", "--copyset", "1", "--chunk", "5", "--sn", "3", "--in", block)

	pool2 := func() map[uint64]string {
		t.Helper()
		out := map[uint64]string{}
		for _, id := range []uint64{5, 7, 8, 9} {
			s, err := chunkState(ctx, c.client, cli.ChunkID{CopysetID: cli.CopysetID{Pool: 2, Copyset: 1}, Chunk: id})
			if err != nil {
				t.Fatal(err)
			}
			out[id] = s
		}
		return out
	}
	before := pool2()
	for _, bad := range []struct {
		args []string
		want string
	}{
		{restoreTo("4", "--from", "file://"+purged), "the export's first 3 packets, every one before pool-1/copyset-1/2-binlog-00000000000000000015.pkt, were purged (by dm task mig at 2023-11-14T22:13:20Z): a restore replays a copyset from its start, so this export cannot be restored from it; restore from an export that holds them, or go on from the restore marker of a restore made before the purge (--resume-from)"},
		{restoreTo("2", "--from", "file://"+past, "--resume-from", markers), "the export's first 4 packets, every one before pool-1/copyset-1/2-binlog-00000000000000000018.pkt, were purged (by dm task mig at 2023-11-14T22:13:20Z): the export no longer holds packet pool-1/copyset-1/2-binlog-00000000000000000015.pkt, where the restore marker's next record is (the restore stopped at index 16), so it cannot go on from that restore"},
		{restoreTo("3", "--from", "file://"+purged, "--resume-from", markers3), "target copyset 3/1 has digest"},
		{restoreTo("2", "--from", "file://"+purged, "--resume-from", markers, "--until-time", "1700000000019"), "--until-time cannot go with --resume-from"},
		{restoreTo("2", "--from", "file://"+purged, "--resume-from", markers, "--until-index", "15"), "index 15 cannot be restored by going on from the restore marker: its restore left the copyset at index 16"},
		{restoreTo("2", "--from", "file://"+purged, "--resume-from", "file://"+t.TempDir()), "no restore marker of copyset 1/1"},
		{restoreTo("4", "--from", "file://"+purged, "--resume-from", markers), "the restore marker at"},
	} {
		out, code := ctl(t, srv, bad.args...)
		if code == 0 || !strings.Contains(out, bad.want) {
			t.Errorf("chunkctl %s: exit %d, want %q in\n%s", strings.Join(bad.args, " "), code, bad.want, out)
		}
	}
	if got := pool2(); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Fatalf("refused restores changed pool 2:\n%v\nwas\n%v", got, before)
	}
	if h, err := c.client.CopysetHashes(ctx, cli.CopysetID{Pool: 4, Copyset: 1}); err != nil || len(h) == 0 || h[0].Err != nil || h[0].Hash != "0" {
		t.Fatalf("refused restores wrote to pool 4: %+v %v", h, err)
	}

	// The kept range, up to index 19: the write to chunk 8 at index 19
	// lands, the one to chunk 5 at index 20 not yet.
	out := mustCtl(t, srv, nil, restoreTo("2", "--from", "file://"+purged, "--resume-from", markers, "--marker", markers, "--until-index", "19")...)
	if !strings.Contains(out, "restored 1 copysets of pool 1 into pool 2") || !strings.Contains(out, "restore markers of the 1 copysets written to "+markers) {
		t.Fatalf("sync restore --resume-from:\n%s", out)
	}
	m := readMarker(ctx, t, markers, 1)
	if m.GetUntilIndex() != 19 || exportfmt.PacketName(1, 1, mustPoint(t, m.GetNextPoint())) != exportfmt.PacketName(1, 1, exportfmt.BinlogPoint(18)) || m.GetNextRecord() != 2 || len(m.GetClones()) != 1 {
		t.Fatalf("the marker after resuming to index 19: %v", m)
	}
	if got := pool2(); got[5] != before[5] || got[8] == before[8] {
		t.Fatalf("after resuming to index 19, chunk 5 %.100s (was %.100s), chunk 8 %.100s (was %.100s)", got[5], before[5], got[8], before[8])
	}

	// The export goes on (in both copies); resumed again to its end, pool
	// 2 equals a restore of the whole unpurged export.
	for _, dir := range []string{whole, purged} {
		writePacket(t, dir, 1, exportfmt.BinlogPoint(21), exportfmt.BinlogPoint(22),
			binlogRec(21, pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, 9, 1, 0, syncBlock('A')))
	}
	mustCtl(t, srv, nil, restoreTo("2", "--from", "file://"+purged, "--resume-from", markers, "--marker", markers)...)
	mustCtl(t, srv, nil, restoreTo("4", "--from", "file://"+whole)...)
	got := pool2()
	for _, id := range []uint64{5, 7, 8, 9} {
		want, err := chunkState(ctx, c.client, cli.ChunkID{CopysetID: cli.CopysetID{Pool: 4, Copyset: 1}, Chunk: id})
		if err != nil {
			t.Fatal(err)
		}
		if got[id] != want {
			t.Errorf("chunk %d: pool 2 has %.200s, the restore of the whole export %.200s", id, got[id], want)
		}
	}
	// Nothing more to replay: resuming again changes nothing and keeps
	// the marker where it is.
	mustCtl(t, srv, nil, restoreTo("2", "--from", "file://"+purged, "--resume-from", markers, "--marker", markers)...)
	if m := readMarker(ctx, t, markers, 1); m.GetUntilIndex() != 21 || m.GetNextRecord() != 0 || m.GetLastIndex() != 21 ||
		exportfmt.PacketName(1, 1, mustPoint(t, m.GetNextPoint())) != exportfmt.PacketName(1, 1, exportfmt.BinlogPoint(22)) {
		t.Fatalf("the marker after a resume with nothing to replay: %v", m)
	}
	if got2 := pool2(); fmt.Sprint(got2) != fmt.Sprint(got) {
		t.Fatalf("a resume with nothing to replay changed pool 2")
	}
}

// readMarker reads copyset 1/cs's restore marker at loc.
func readMarker(ctx context.Context, t *testing.T, loc string, cs uint32) *syncpb.RestoreMarker {
	t.Helper()
	u, err := dest.Parse(loc)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dest.Open(ctx, u, objstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	m, err := restore.ReadMarker(ctx, d, 1, cs)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// mustPoint parses sp.
func mustPoint(t *testing.T, sp *datasyncpb.SyncPoint) exportfmt.Point {
	t.Helper()
	p, err := exportfmt.ParsePoint(sp)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
