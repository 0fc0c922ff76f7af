package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/cli"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/internal/atomicfile"
	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// syncBlock is a 4 KiB block of b.
func syncBlock(b byte) []byte { return bytes.Repeat([]byte{b}, cli.BlockSize) }

func binlogRec(index uint64, op pb.CHUNK_OP_TYPE, chunk, sn uint64, off uint32, data []byte) *syncpb.Record {
	req := &pb.ChunkRequest{OpType: op.Enum(), LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1),
		ChunkId: proto.Uint64(chunk), Sn: proto.Uint64(sn), Offset: proto.Uint32(off), Size: proto.Uint32(uint32(len(data)))}
	return &syncpb.Record{Kind: &syncpb.Record_Binlog{Binlog: &syncpb.BinlogRecord{
		Index: index, Term: 1, AppendedAtMs: 1_700_000_000_000 + int64(index), Op: req, Data: data}}}
}

func snapRec(chunk, sn, corrected, asOf uint64, off uint32, data []byte, zero uint32) *syncpb.Record {
	return &syncpb.Record{Kind: &syncpb.Record_Snapshot{Snapshot: &syncpb.SnapshotRecord{
		ChunkId: chunk, Sn: sn, CorrectedSn: corrected, Offset: off, Data: data, AsOfIndex: asOf, ZeroLength: zero}}}
}

// writePacket encodes a packet of copyset 1/cs into the export dir.
func writePacket(t *testing.T, dir string, cs uint32, start, next exportfmt.Point, recs ...*syncpb.Record) {
	t.Helper()
	b, err := exportfmt.Encode(&syncpb.PacketHeader{LogicPoolId: 1, CopysetId: cs, StartPoint: start.Proto(), NextPoint: next.Proto()}, recs)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, exportfmt.PacketName(1, cs, start))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	// Written whole, then renamed into place, as an export writes it: a
	// reader of a running task never sees it half written.
	if err := atomicfile.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSyncRestore: a hand-built export of pool 1 (copyset 1: a full export
// with a chunk that has a COW snapshot, one with a corrected sn, and a
// binlog of writes, a refused write, a clone, a paste and a delete;
// copyset 2: an incremental export) restored by bin/chunkctl into pool 2 of
// a running server; the data is read back through the ChunkService. Bad
// input is refused with one line and changes nothing.
func TestSyncRestore(t *testing.T) {
	c := startCluster(t, 1)
	srv := c.addrs()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	targets := []cli.CopysetID{{Pool: 2, Copyset: 1}, {Pool: 2, Copyset: 2}}
	if _, err := c.client.CreateCopysets(ctx, targets, srv); err != nil {
		t.Fatal(err)
	}
	for _, id := range targets {
		if _, err := c.client.GetLeader(ctx, id); err != nil {
			t.Fatal(err)
		}
	}

	dir := t.TempDir()
	A, B, X, C, D, E, F, G, H, I := syncBlock('A'), syncBlock('B'), syncBlock('X'), syncBlock('C'), syncBlock('D'),
		syncBlock('E'), syncBlock('F'), syncBlock('G'), syncBlock('H'), syncBlock('I')
	// Copyset 1: the snapshot phase (binlog from index 11).
	writePacket(t, dir, 1, exportfmt.StartPoint(), exportfmt.SnapshotPoint(5, 0))
	writePacket(t, dir, 1, exportfmt.SnapshotPoint(5, 0), exportfmt.SnapshotPoint(6, 0),
		snapRec(5, 3, 0, 10, 0, append(bytes.Clone(A), B...), 0),
		snapRec(5, 3, 0, 10, 2*cli.BlockSize, nil, cli.ChunkSize-2*cli.BlockSize),
		&syncpb.Record{Kind: &syncpb.Record_CowSnapshot{CowSnapshot: &syncpb.CowSnapshotRecord{ChunkId: 5, SnapshotSn: 1, Offset: 0, Data: X, AsOfIndex: 10}}})
	writePacket(t, dir, 1, exportfmt.SnapshotPoint(6, 0), exportfmt.BinlogPoint(11),
		snapRec(6, 2, 4, 13, 0, C, 0))
	writePacket(t, dir, 1, exportfmt.BinlogPoint(11), exportfmt.BinlogPoint(15),
		binlogRec(11, pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, 5, 3, 2*cli.BlockSize, D), // applied
		binlogRec(12, pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, 6, 2, cli.BlockSize, E),   // before chunk 6's image (as of 13): skipped
		binlogRec(13, pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, 7, 1, 0, F),               // a new chunk
		binlogRec(14, pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, 5, 4, 0, G))               // refused: needs a snapshot
	clone := binlogRec(15, pb.CHUNK_OP_TYPE_CHUNK_OP_CREATE_CLONE, 8, 2, 0, append(bytes.Clone(H), syncBlock(0)...))
	clone.GetBinlog().Op.Location = proto.String("src@s3")
	clone.GetBinlog().Op.Size = proto.Uint32(cli.ChunkSize)
	writePacket(t, dir, 1, exportfmt.BinlogPoint(15), exportfmt.BinlogPoint(18),
		clone,
		binlogRec(16, pb.CHUNK_OP_TYPE_CHUNK_OP_PASTE, 8, 0, 0, I), // ignored
		binlogRec(17, pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE, 7, 0, 0, nil))
	// Copyset 2: incremental, from index 5.
	writePacket(t, dir, 2, exportfmt.BinlogPoint(5), exportfmt.BinlogPoint(6),
		binlogRec(5, pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, 1, 1, 0, I))
	from := "file://" + dir

	// Bad input: one line, non-zero exit, nothing written.
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--from", "file://relative/dir", "--pool", "1", "--to-pool", "2"}, "a file dest needs an absolute path"},
		{[]string{"--from", from, "--pool", "9", "--to-pool", "2"}, "has no packets of pool 9"},
		{[]string{"--from", from, "--pool", "1", "--to-pool", "3"}, "target copyset 3/1 is hosted by none of the 1 servers"},
		{[]string{"--from", from, "--pool", "1", "--to-pool", "2", "--until-index", "5", "--until-time", "2026-01-01T00:00:00Z"}, "not both"},
		{[]string{"--from", from, "--pool", "1", "--to-pool", "2", "--copysets", "1", "--until-index", "11"}, "earliest index it can restore is 13 (its snapshot phase read chunk 6 as of index 13)"},
	} {
		out, errOut, code := chunkctl(t, srv, nil, append([]string{"sync", "restore"}, bad.args...)...)
		if code == 0 || !strings.Contains(errOut, bad.want) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || out != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want one line with %q", bad.args, code, out, errOut, bad.want)
		}
	}
	for _, id := range []uint64{1, 5, 6} {
		for _, cs := range targets {
			if sns, err := c.client.GetChunkInfo(ctx, cli.ChunkID{CopysetID: cs, Chunk: id}); err != nil || len(sns) != 0 {
				t.Fatalf("after bad input: chunk %d of %v: %v %v", id, cs, sns, err)
			}
		}
	}

	out, progress, code := chunkctl(t, srv, nil, "-o", "json", "sync", "restore", "--from", from, "--pool", "1", "--to-pool", "2", "--progress", "always")
	if code != 0 {
		t.Fatalf("sync restore: exit %d\n%s%s", code, out, progress)
	}
	// One updating line (carriage returns), ended by a newline.
	if !strings.Contains(progress, "\rcheck: copyset 1/") || !strings.Contains(progress, "\rrestore: copyset 1/") ||
		!strings.Contains(progress, "copysets done 2/2") || strings.Count(progress, "\n") != 1 {
		t.Errorf("progress on stderr: %q", progress)
	}
	var sum struct {
		Copysets []struct{ Copyset, UntilIndex uint64 }
		Chunks   uint64
		Records  uint64
		Refused  uint64
		Skipped  uint64
		ToPool   uint32
	}
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("summary: %v\n%s", err, out)
	}
	if len(sum.Copysets) != 2 || sum.Copysets[0].UntilIndex != 17 || sum.Copysets[1].UntilIndex != 5 ||
		sum.Chunks != 3 || sum.Refused != 1 || sum.Skipped != 2 || sum.ToPool != 2 {
		t.Errorf("summary:\n%s", out)
	}

	chunk := func(cs uint32, id uint64) cli.ChunkID {
		return cli.ChunkID{CopysetID: cli.CopysetID{Pool: 2, Copyset: cs}, Chunk: id}
	}
	info := func(id cli.ChunkID, want string) {
		t.Helper()
		sns, err := c.client.GetChunkInfo(ctx, id)
		if err != nil || fmt.Sprint(sns) != "["+want+"]" {
			t.Errorf("%v: info %v %v, want [%s]", id, sns, err, want)
		}
	}
	read := func(id cli.ChunkID, snap uint64, off uint32, want []byte) {
		t.Helper()
		var got []byte
		var err error
		if snap != 0 {
			got, err = c.client.ReadChunkSnapshot(ctx, id, snap, off, uint32(len(want)))
		} else {
			got, err = c.client.ReadChunk(ctx, id, off, uint32(len(want)))
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%v sn %d offset %d: %v, data equal %v", id, snap, off, err, bytes.Equal(got, want))
		}
	}
	info(chunk(1, 5), "3 1")
	read(chunk(1, 5), 0, 0, append(append(bytes.Clone(A), B...), D...))
	read(chunk(1, 5), 1, 0, append(append(bytes.Clone(X), B...), make([]byte, cli.BlockSize)...))
	info(chunk(1, 6), "2")
	read(chunk(1, 6), 0, 0, append(bytes.Clone(C), make([]byte, cli.BlockSize)...))
	info(chunk(1, 7), "")
	info(chunk(1, 8), "2")
	read(chunk(1, 8), 0, 0, append(bytes.Clone(H), make([]byte, cli.BlockSize)...))
	info(chunk(2, 1), "1")
	read(chunk(2, 1), 0, 0, I)

	// Now the targets hold chunks: refused.
	_, refusal, rc := chunkctl(t, srv, nil, "sync", "restore", "--from", from, "--pool", "1", "--to-pool", "2")
	if rc == 0 || !strings.Contains(refusal, "target copyset 2/1 holds chunks") {
		t.Errorf("restore into non-empty copysets: exit %d, %s", rc, refusal)
	}
}
