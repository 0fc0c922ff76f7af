package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/cli"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/internal/testwait"
	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// chunkState is a chunk as a client reads it: its sns, its data and the
// data of each COW snapshot, "absent" when it does not exist.
func chunkState(ctx context.Context, c *cli.Client, id cli.ChunkID) (string, error) {
	sns, err := c.GetChunkInfo(ctx, id)
	if err != nil {
		return "", err
	}
	if len(sns) == 0 {
		return "absent", nil
	}
	data, err := c.ReadChunk(ctx, id, 0, cli.ChunkSize)
	if err != nil {
		return "", err
	}
	s := fmt.Sprintf("sns %v data %x", sns, bytes.TrimRight(data, "\x00"))
	for _, sn := range sns[1:] {
		snap, err := c.ReadChunkSnapshot(ctx, id, sn, 0, cli.ChunkSize)
		if err != nil {
			return "", err
		}
		s += fmt.Sprintf(" snap %d %x", sn, bytes.TrimRight(snap, "\x00"))
	}
	return s, nil
}

// TestDMIncrementalFromRestoreMarker: a hand-built export of pool 1
// copyset 1 (a chunk with a COW snapshot, writes, a write the source
// refused, a clone chunk and a paste, a delete) is restored up to index 16
// into pool 2 by `chunkctl sync restore --until-index 16 --marker`; the
// export goes on (a write the source's clone chunk refused, a write to
// it, more writes), and a dm task in task-mode incremental from the
// marker applies the rest into pool 2. Pool 2 then equals a restore of the
// whole export (pool 3). A task from anything but what the restore left
// is refused and starts nothing: no marker, a marker of a restore into
// another pool, a source that is not the export the restore read, a
// restored copyset written to since.
func TestDMIncrementalFromRestoreMarker(t *testing.T) {
	c := startCluster(t, 1)
	srv := c.addrs()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	createCopysetOnes(ctx, t, c, 2, 3, 4)

	dir := t.TempDir()
	markerExport(t, dir)
	from := "file://" + dir
	markers := "file://" + t.TempDir()

	// The restore up to index 16, leaving a marker; and the same into
	// pool 4, with its own marker, for a copyset written to since.
	out := mustCtl(t, srv, nil, "sync", "restore", "--from", from, "--pool", "1", "--to-pool", "2", "--until-index", "16", "--marker", markers, "--progress", "never")
	if !strings.Contains(out, "restore markers of the 1 copysets written to "+markers) {
		t.Fatalf("sync restore --marker:\n%s", out)
	}
	markers4 := "file://" + t.TempDir()
	mustCtl(t, srv, nil, "sync", "restore", "--from", from, "--pool", "1", "--to-pool", "4", "--until-index", "16", "--marker", markers4, "--progress", "never")

	// The export goes on: the source's chunk 8 is a clone chunk, which
	// refused a write at sn 3 (a restore of the whole export does not send
	// it, and neither may the task, which knows from the marker).
	markerExportMore(t, dir)

	task := func(name, mode, export, from string, pool uint32) string {
		f := filepath.Join(t.TempDir(), name+".yaml")
		y := fmt.Sprintf("name: %s\ntask-mode: %s\nsource:\n  pool: 1\n  export: %s\ntarget-pool: %d\ncopysets: [1]\nincremental-from: %s\n", name, mode, export, pool, from)
		if err := os.WriteFile(f, []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	noTask := func() {
		t.Helper()
		if out, code := ctl(t, srv, "dm", "query-status"); code == 0 || !strings.Contains(out, "code=40070") {
			t.Fatalf("a task was started: exit %d\n%s", code, out)
		}
	}
	// A source with a gap where the marker's next record is.
	gap := t.TempDir()
	copyDirFiles(t, dir, gap)
	if err := os.Remove(filepath.Join(gap, exportfmt.PacketName(1, 1, exportfmt.BinlogPoint(15)))); err != nil {
		t.Fatal(err)
	}
	// Pool 4 written to after its restore.
	block := filepath.Join(t.TempDir(), "block")
	if err := os.WriteFile(block, syncBlock(9), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCtl(t, srv, nil, "chunk", "write", "--pool", "4", "--copyset", "1", "--chunk", "5", "--sn", "3", "--in", block)
	for _, bad := range []struct {
		file, want string
	}{
		{task("nomarker", "incremental", from, "file://"+t.TempDir(), 2), "no restore marker of copyset 1/1"},
		{task("otherpool", "incremental", from, markers, 3), "the restore marker is of a restore into pool 2, not target pool 3"},
		{task("gap", "incremental", "file://"+gap, markers, 2), "has no packet pool-1/copyset-1/2-binlog-00000000000000000015.pkt"},
		{task("written", "incremental", from, markers4, 4), "it changed since the restore"},
		{task("notincr", "all", from, markers, 2), "incremental-from: only with task-mode incremental"},
	} {
		for _, cmd := range []string{"check-task", "start-task"} {
			out, code := ctl(t, srv, "dm", cmd, bad.file)
			if code == 0 || !strings.Contains(out, bad.want) {
				t.Errorf("dm %s %s: exit %d, want %q in\n%s", cmd, filepath.Base(bad.file), code, bad.want, out)
			}
		}
		noTask()
	}
	// Refused starts change nothing: pool 4 is still open to writes.
	mustCtl(t, srv, nil, "chunk", "write", "--pool", "4", "--copyset", "1", "--chunk", "5", "--sn", "3", "--in", block)

	good := task("incr", "incremental", from, markers, 2)
	out = mustCtl(t, srv, nil, "dm", "check-task", good)
	if !strings.Contains(out, "from binlog index 15, record 2 step 0 (the restore left it at index 16; 1 clone chunks)") {
		t.Fatalf("dm check-task:\n%s", out)
	}
	noTask()
	mustCtl(t, srv, nil, "dm", "start-task", good)
	// One more packet once the task runs.
	writePacket(t, dir, 1, exportfmt.BinlogPoint(21), exportfmt.BinlogPoint(22),
		binlogRec(21, pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, 9, 1, 0, syncBlock('A')))

	// The reference: a restore of the whole export.
	mustCtl(t, srv, nil, "sync", "restore", "--from", from, "--pool", "1", "--to-pool", "3", "--progress", "never")
	testwait.Until(t, 60*time.Second, func() error {
		for _, id := range []uint64{5, 7, 8, 9} {
			want, err := chunkState(ctx, c.client, cli.ChunkID{CopysetID: cli.CopysetID{Pool: 3, Copyset: 1}, Chunk: id})
			if err != nil {
				return err
			}
			got, err := chunkState(ctx, c.client, cli.ChunkID{CopysetID: cli.CopysetID{Pool: 2, Copyset: 1}, Chunk: id})
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("chunk %d: pool 2 has %.200s, the whole restore %.200s", id, got, want)
			}
		}
		return nil
	})
	// The clone chunk kept sn 2 (the write at sn 3 was not sent).
	if sns, err := c.client.GetChunkInfo(ctx, cli.ChunkID{CopysetID: cli.CopysetID{Pool: 2, Copyset: 1}, Chunk: 8}); err != nil || fmt.Sprint(sns) != "[2]" {
		t.Errorf("chunk 8 of pool 2: %v %v, want [2]", sns, err)
	}
	st := dmQueryStatus(t, srv)
	if !st.Result || len(st.SubTaskStatus) != 1 || st.SubTaskStatus[0].Unit != "Sync" || st.SubTaskStatus[0].Stage != "Running" {
		t.Fatalf("dm query-status: %+v", st)
	}
	mustCtl(t, srv, nil, "dm", "stop-task", "incr")
}

// copyDirFiles copies the regular files under from to to, keeping their
// relative paths.
func copyDirFiles(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(to, filepath.Dir(rel)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
}

// markerExport writes in dir a hand-built export of pool 1 copyset 1 up
// to index 17: a chunk with a COW snapshot (5), writes, a write the
// source refused, a clone chunk (8) and a paste, a delete.
func markerExport(t *testing.T, dir string) {
	t.Helper()
	A, B, X, D, F, G, H, I := syncBlock('A'), syncBlock('B'), syncBlock('X'), syncBlock('D'), syncBlock('F'),
		syncBlock('G'), syncBlock('H'), syncBlock('I')
	writePacket(t, dir, 1, exportfmt.StartPoint(), exportfmt.SnapshotPoint(5, 0))
	writePacket(t, dir, 1, exportfmt.SnapshotPoint(5, 0), exportfmt.BinlogPoint(11),
		snapRec(5, 3, 0, 10, 0, append(bytes.Clone(A), B...), 0),
		snapRec(5, 3, 0, 10, 2*cli.BlockSize, nil, cli.ChunkSize-2*cli.BlockSize),
		&syncpb.Record{Kind: &syncpb.Record_CowSnapshot{CowSnapshot: &syncpb.CowSnapshotRecord{ChunkId: 5, SnapshotSn: 1, Offset: 0, Data: X, AsOfIndex: 10}}})
	writePacket(t, dir, 1, exportfmt.BinlogPoint(11), exportfmt.BinlogPoint(15),
		binlogRec(11, pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, 5, 3, 2*cli.BlockSize, D),
		binlogRec(13, pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, 7, 1, 0, F),
		binlogRec(14, pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, 5, 4, 0, G)) // refused: needs a second snapshot
	clone := binlogRec(15, pb.CHUNK_OP_TYPE_CHUNK_OP_CREATE_CLONE, 8, 2, 0, append(bytes.Clone(H), syncBlock(0)...))
	clone.GetBinlog().Op.Location = proto.String("src@s3")
	clone.GetBinlog().Op.Size = proto.Uint32(cli.ChunkSize)
	writePacket(t, dir, 1, exportfmt.BinlogPoint(15), exportfmt.BinlogPoint(18),
		clone,
		binlogRec(16, pb.CHUNK_OP_TYPE_CHUNK_OP_PASTE, 8, 0, 0, I), // marks block 0 of the clone chunk written
		binlogRec(17, pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE, 7, 0, 0, nil))
}

// markerExportMore writes the packet after markerExport's, indexes 18 to
// 20: a write the source's clone chunk 8 refused (it needs a snapshot), a
// write to it, a write to chunk 5.
func markerExportMore(t *testing.T, dir string) {
	t.Helper()
	J, K, L := syncBlock('J'), syncBlock('K'), syncBlock('L')
	writePacket(t, dir, 1, exportfmt.BinlogPoint(18), exportfmt.BinlogPoint(21),
		binlogRec(18, pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, 8, 3, cli.BlockSize, J),   // refused by the clone chunk
		binlogRec(19, pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, 8, 2, 2*cli.BlockSize, K), // applied
		binlogRec(20, pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, 5, 3, 3*cli.BlockSize, L))
}

// createCopysetOnes creates copyset 1 of each of pools on c's servers and
// waits for its leader.
func createCopysetOnes(ctx context.Context, t *testing.T, c *cluster, pools ...uint32) {
	t.Helper()
	for _, pool := range pools {
		id := cli.CopysetID{Pool: pool, Copyset: 1}
		if _, err := c.client.CreateCopysets(ctx, []cli.CopysetID{id}, c.addrs()); err != nil {
			t.Fatal(err)
		}
		if _, err := c.client.GetLeader(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}
