package restore

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/chunkstore/datastore"
	"github.com/chunkraft/chunkraft/datasync/dest"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/internal/objstore"
	"github.com/chunkraft/chunkraft/internal/objstore/fakes3"
	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
)

// restoreInto restores the export of e into a new empty store of copyset
// (pool 2, e.cs) and returns it. The target's writes are jittered, so that
// a rebuild's writes in flight at once (Options.WriteDepth) apply in
// varying orders.
func restoreInto(t *testing.T, e *export, o Options) (*datastore.Store, *Summary, error) {
	t.Helper()
	d, _ := writeExport(t, e.packets(t))
	tg := newStoreTarget(t)
	tg.jitter = true
	st := tg.store(2, e.cs)
	o.Source, o.Pool, o.ToPool, o.Target, o.Geometry = d, e.pool, 2, tg, testGeometry
	o.MaxWrite = 8 << 10 // runs split into several writes
	sum, err := Restore(context.Background(), o)
	return st, sum, err
}

// Every chunk state the chunk store can reach by sequence numbers, corrected
// sns and COW snapshots (with blocks copied, copied zero blocks, a corrected
// sn above, at and below the chunk's sn and the snapshot's) is rebuilt
// exactly: sn, corrected sn, snapshot sn, data and snapshot data.
func TestRebuildSnapshotPhaseChunksExactly(t *testing.T) {
	src := newSource(t)
	// 1: one write.
	src.write(1, 1, 0, block(1))
	// 2: a snapshot at sn 1, blocks 0 and 2 copied (2 was zero), sn 3.
	src.write(2, 1, 0, append(block(2), block(3)...))
	src.write(2, 3, 0, block(4))
	src.write(2, 3, 8<<10, block(5))
	// 3: corrected sn 5 above sn 2.
	src.write(3, 2, 4<<10, block(6))
	src.correct(3, 5)
	// 4: corrected sn 4 below sn 6, no snapshot.
	src.write(4, 1, 0, block(7))
	src.correct(4, 4)
	src.write(4, 4, 0, block(8))
	src.write(4, 6, 4<<10, block(9))
	src.correct(4, 6)
	// 5: a snapshot at sn 1 with corrected sn 5 between it and sn 6.
	src.write(5, 1, 0, block(10))
	src.correct(5, 5)
	src.write(5, 6, 0, block(11))
	// 6: a snapshot at sn 3 with corrected sn 2 below it, sn 5.
	src.write(6, 1, 0, block(12))
	src.correct(6, 2)
	src.write(6, 2, 4<<10, block(13))
	src.write(6, 3, 8<<10, block(14))
	src.correct(6, 3)
	src.write(6, 5, 0, block(15))
	src.write(6, 5, 12<<10, block(16))
	// 7: all zero.
	src.write(7, 1, 0, block(0))
	// 8: a snapshot with corrected sn equal to its sn (3), sn 4.
	src.write(8, 2, 0, block(17))
	src.correct(8, 3)
	src.write(8, 3, 4<<10, block(18))
	src.write(8, 4, 4<<10, block(19))
	// 9: chunk 4's states with no data in block 0 (its block 0 is written
	// as zeros for the corrected sn).
	src.write(9, 1, 8<<10, block(20))
	src.correct(9, 4)
	src.write(9, 4, 8<<10, block(21))
	src.write(9, 6, 12<<10, block(22))
	src.correct(9, 6)

	e := &export{pool: 1, cs: 3, full: true, start: src.index + 1}
	for _, id := range src.s.ListChunks() {
		e.chunks = append(e.chunks, src.snapshot(id))
	}
	for _, id := range []uint64{2, 4, 5, 6, 8, 9} { // the states are the ones meant
		info, _ := src.s.GetChunkInfo(id)
		t.Logf("chunk %d: sn %d corrected %d snapshot %d", id, info.Sn, info.CorrectedSn, info.SnapSn)
	}
	for _, depth := range []int{1, 8} { // one write at a time, and several
		got, sum, err := restoreInto(t, e, Options{WriteDepth: depth})
		if err != nil {
			t.Fatal(err)
		}
		sameChunks(t, src.s, got)
		if sum.Chunks != 9 || len(sum.Copysets) != 1 || sum.Copysets[0].UntilIndex != src.index {
			t.Errorf("write depth %d: summary %+v", depth, sum)
		}
	}
}

// The binlog after the snapshot phase is replayed, except what a chunk's
// image already reflects (the ops before its as_of place; the op at it is
// applied again, harmlessly): a fuzzy snapshot
// (chunk 1 read after ops 3 and 5 on it) restores the source's end state.
// Refusals the source met (BACKWARD, a write needing a snapshot while one
// exists) are expected, deletes and corrected sns replay.
func TestReplayBinlogSkipsWhatImagesReflect(t *testing.T) {
	src := newSource(t)
	src.write(1, 1, 0, block(1))
	src.write(2, 1, 0, block(2))
	start := src.index + 1           // the binlog phase starts here: 3
	src.write(1, 2, 0, block(3))     // 3: snapshot at 1; in chunk 1's image
	src.write(2, 2, 4<<10, block(4)) // 4: snapshot of chunk 2
	snap2 := src.snapshot(2)         // as of 4
	src.write(1, 2, 4<<10, block(5)) // 5: in chunk 1's image
	snap1 := src.snapshot(1)         // as of 5
	src.write(1, 3, 0, block(6))     // 6: refused: needs a snapshot, one exists
	src.write(1, 1, 0, block(7))     // 7: BACKWARD
	src.correct(1, 3)                // 8: snapshot gone, corrected sn 3
	src.write(1, 3, 0, block(8))     // 9: applied, no snapshot (sn <= corrected sn)
	src.write(3, 1, 0, block(9))     // 10: a new chunk
	src.remove(2, 1)                 // 11: BACKWARD (sn 1 < 2)
	src.write(4, 1, 0, block(10))    // 12
	src.remove(4, 0)                 // 13: gone
	e := &export{pool: 1, cs: 1, full: true, start: start, binlog: src.binlog[start-1:], chunks: [][]*syncpb.Record{snap1, snap2}}
	got, sum, err := restoreInto(t, e, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sameChunks(t, src.s, got)
	// Skipped: op 3 (chunk 1, before 5); ops 5 and 4, at their chunks'
	// images, apply again.
	if sum.Skipped != 1 || sum.Refused != 3 {
		t.Errorf("skipped %d refused %d, want 1 and 3", sum.Skipped, sum.Refused)
	}
}

// --until-index restores the state at that index; before the largest
// as_of_index it fails naming the earliest index it can restore; past the
// export's end it fails too; --until-time picks the last record appended by
// then.
func TestUntilIndexBounds(t *testing.T) {
	src := newSource(t)
	src.write(1, 1, 0, block(1)) // 1
	start := src.index + 1
	src.write(1, 1, 4<<10, block(2)) // 2
	snap := src.snapshot(1)          // as of 2
	src.write(2, 1, 0, block(3))     // 3
	mid := newSource(t)              // the state at 3
	mid.write(1, 1, 0, block(1))
	mid.write(1, 1, 4<<10, block(2))
	mid.write(2, 1, 0, block(3))
	src.write(2, 1, 4<<10, block(4)) // 4
	src.remove(1, 0)                 // 5
	e := &export{pool: 1, cs: 1, full: true, start: start, chunks: [][]*syncpb.Record{snap}, binlog: src.binlog[start-1:], per: 1}

	got, sum, err := restoreInto(t, e, Options{UntilIndex: 3, HasUntilIndex: true})
	if err != nil {
		t.Fatal(err)
	}
	sameChunks(t, mid.s, got)
	if sum.Copysets[0].UntilIndex != 3 {
		t.Errorf("until %d", sum.Copysets[0].UntilIndex)
	}

	_, _, err = restoreInto(t, e, Options{UntilIndex: 1, HasUntilIndex: true})
	if err == nil || !strings.Contains(err.Error(), "earliest index it can restore is 2") || !strings.Contains(err.Error(), "chunk 1 as of index 2") {
		t.Errorf("until 1: %v", err)
	}
	_, _, err = restoreInto(t, e, Options{UntilIndex: 6, HasUntilIndex: true})
	if err == nil || !strings.Contains(err.Error(), "past the end of the export, raft index 5") {
		t.Errorf("until 6: %v", err)
	}

	// Appended at 1000 ms per index: 3999 ms is index 3.
	got, _, err = restoreInto(t, e, Options{UntilTimeMs: 3999, HasUntilTime: true})
	if err != nil {
		t.Fatal(err)
	}
	sameChunks(t, mid.s, got)
	// The export does not say when its starting state was taken: the
	// earliest time is that of its first record at or after the latest
	// image, 2.
	_, _, err = restoreInto(t, e, Options{UntilTimeMs: 1500, HasUntilTime: true})
	if err == nil || !strings.Contains(err.Error(), "earliest time it can restore is 1970-01-01T00:00:02.000Z (Unix ms 2000)") {
		t.Errorf("until time 1500: %v", err)
	}
	_, _, err = restoreInto(t, e, Options{UntilTimeMs: 1, HasUntilTime: true, UntilIndex: 3, HasUntilIndex: true})
	if err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("both: %v", err)
	}
}

// A gap in the chain, a packet with a bad crc or a packet missing at the
// start stops the restore naming the packet, and nothing is written.
func TestBadExportWritesNothing(t *testing.T) {
	src, start, snap := twoChunks(t)
	e := &export{pool: 1, cs: 1, full: true, start: start, chunks: [][]*syncpb.Record{snap}, binlog: src.binlog[start-1:], per: 2}
	pkts := e.packets(t)
	third := exportfmt.PacketName(1, 1, exportfmt.BinlogPoint(start+4))
	if _, ok := pkts[third]; !ok {
		t.Fatalf("no packet %s", third)
	}
	cases := map[string]func(d string){
		"gap: packet " + exportfmt.PacketName(1, 1, exportfmt.BinlogPoint(start)) + " ends at binlog index 4 but the next packet " + third + " starts at binlog index 6": func(d string) {
			os.Remove(filepath.Join(d, exportfmt.PacketName(1, 1, exportfmt.BinlogPoint(start+2))))
		},
		"bad packet " + third + ": exportfmt: decode packet: body crc32c": func(d string) {
			p := filepath.Join(d, third)
			b, _ := os.ReadFile(p)
			b[len(b)-1] ^= 0xff
			os.WriteFile(p, b, 0o644)
		},
		"bad packet " + exportfmt.PacketName(1, 1, exportfmt.SnapshotPoint(1, 16<<10)) + ": chunk 1 has snapshot records in packet " +
			exportfmt.PacketName(1, 1, exportfmt.SnapshotPoint(1, 0)) + " too": func(d string) {
			// Chunk 1 split over two packets.
			for i, span := range [][2]exportfmt.Point{
				{exportfmt.SnapshotPoint(1, 0), exportfmt.SnapshotPoint(1, 16<<10)},
				{exportfmt.SnapshotPoint(1, 16<<10), exportfmt.SnapshotPoint(2, 0)},
			} {
				recs := snap[:1]
				if i == 1 {
					recs = snap[1:]
				}
				b, err := exportfmt.Encode(&syncpb.PacketHeader{LogicPoolId: 1, CopysetId: 1, StartPoint: span[0].Proto(), NextPoint: span[1].Proto()}, recs)
				if err != nil {
					t.Fatal(err)
				}
				os.WriteFile(filepath.Join(d, exportfmt.PacketName(1, 1, span[0])), b, 0o644)
			}
		},
		"not at the start: its first packets are missing": func(d string) {
			os.Remove(filepath.Join(d, exportfmt.PacketName(1, 1, exportfmt.StartPoint())))
		},
		"ends in its snapshot phase": func(d string) {
			os.RemoveAll(filepath.Join(d, "pool-1", "copyset-1"))
			for name, b := range pkts {
				if strings.Contains(name, "-snap-") || strings.Contains(name, "0-start") {
					os.MkdirAll(filepath.Join(d, "pool-1", "copyset-1"), 0o755)
					os.WriteFile(filepath.Join(d, name), b, 0o644)
				}
			}
			os.Remove(filepath.Join(d, exportfmt.PacketName(1, 1, exportfmt.SnapshotPoint(2, 0))))
		},
	}
	for want, spoil := range cases {
		d, dir := writeExport(t, pkts)
		spoil(dir)
		tg := newStoreTarget(t)
		st := tg.store(1, 1)
		_, err := Restore(context.Background(), Options{Source: d, Pool: 1, Target: tg, Geometry: testGeometry})
		if err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "copyset 1/1: ") {
			t.Errorf("want %q, got %v", want, err)
		}
		if n := len(st.ListChunks()); n != 0 || tg.ops.Load() != 0 {
			t.Errorf("%s: %d chunks, %d ops on the target", want, n, tg.ops.Load())
		}
	}
}

// twoChunks is a source of chunk 1 written once, imaged (snap, the
// snapshot phase's records, the binlog phase from start), then chunk 2
// written block by block six times.
func twoChunks(t *testing.T) (src *source, start uint64, snap []*syncpb.Record) {
	t.Helper()
	src = newSource(t)
	src.write(1, 1, 0, block(1))
	start = src.index + 1
	snap = src.snapshot(1)
	for i := range 6 {
		src.write(2, 1, uint32(i)*4<<10, block(byte(i)))
	}
	return src, start, snap
}

// A target copyset that holds a chunk or does not exist is refused before
// anything is written; so are an unknown pool and copyset of the export.
func TestRefusedTargetsAndSelections(t *testing.T) {
	src := newSource(t)
	src.write(1, 1, 0, block(1))
	e := &export{pool: 1, cs: 1, full: true, start: 2, chunks: [][]*syncpb.Record{src.snapshot(1)}}
	d, _ := writeExport(t, e.packets(t))

	tg := newStoreTarget(t)
	st := tg.store(1, 1)
	if err := st.WriteChunk(9, 1, block(9), 0); err != nil {
		t.Fatal(err)
	}
	tg.ops.Store(0)
	_, err := Restore(context.Background(), Options{Source: d, Pool: 1, Target: tg, Geometry: testGeometry})
	if err == nil || !strings.Contains(err.Error(), "holds chunks") || tg.ops.Load() != 0 {
		t.Errorf("non-empty target: %v (%d ops)", err, tg.ops.Load())
	}
	_, err = Restore(context.Background(), Options{Source: d, Pool: 1, ToPool: 7, Target: tg, Geometry: testGeometry})
	if err == nil || !strings.Contains(err.Error(), "copyset 7/1 does not exist") {
		t.Errorf("missing target: %v", err)
	}
	_, err = Restore(context.Background(), Options{Source: d, Pool: 5, Target: tg, Geometry: testGeometry})
	if err == nil || !strings.Contains(err.Error(), "has no packets of pool 5") {
		t.Errorf("unknown pool: %v", err)
	}
	_, err = Restore(context.Background(), Options{Source: d, Pool: 1, Copysets: []uint32{4}, Target: tg, Geometry: testGeometry})
	if err == nil || !strings.Contains(err.Error(), "no packets of copyset 1/4") {
		t.Errorf("unknown copyset: %v", err)
	}
	if tg.ops.Load() != 0 {
		t.Errorf("%d ops on the target", tg.ops.Load())
	}
}

// An export in an S3 bucket (the in-process S3 server over HTTP) restores
// like one in a directory.
func TestRestoreFromS3(t *testing.T) {
	src := newSource(t)
	src.write(1, 1, 0, block(1))
	src.write(1, 2, 4<<10, block(2))
	start := src.index + 1
	snap := src.snapshot(1)
	src.write(2, 1, 0, block(3))
	e := &export{pool: 1, cs: 4, full: true, start: start, chunks: [][]*syncpb.Record{snap}, binlog: src.binlog[start-1:]}

	server := objstore.S3Config{Endpoint: fakes3.Start(t, nil), AccessKey: "k", SecretKey: "s", Region: "us-east-1", BucketLookup: "path"}
	mk := server
	mk.Bucket, mk.CreateBucket = "exports", true
	s, err := objstore.NewS3(t.Context(), mk)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	u, err := dest.Parse("s3://exports/cluster-a")
	if err != nil {
		t.Fatal(err)
	}
	d, err := dest.Open(t.Context(), u, objstore.Config{S3: server})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for name, b := range e.packets(t) {
		if err := d.Put(t.Context(), name, b); err != nil {
			t.Fatal(err)
		}
	}
	tg := newStoreTarget(t)
	got := tg.store(1, 4)
	if _, err := Restore(t.Context(), Options{Source: d, Pool: 1, Target: tg, Geometry: testGeometry}); err != nil {
		t.Fatal(err)
	}
	sameChunks(t, src.s, got)
}

// A CREATE_CLONE becomes a normal chunk of the materialised data; while the
// source's chunk is a clone (until every block is written or pasted) the
// ops a clone refuses (a write that needs a snapshot, DELETE_SNAP) are not
// sent, and afterwards the chunk takes them like any chunk.
func TestReplayCloneAsTheSourceDid(t *testing.T) {
	src := newSource(t)
	src.write(1, 1, 0, block(1)) // 1: the binlog starts after it
	start := src.index + 1
	m := bytes.Repeat([]byte{'m'}, int(testGeometry.ChunkSize))
	for i := range testGeometry.blocks() {
		m[i*testGeometry.BlockSize] = byte(i) // every block different
	}
	src.clone(9, 2, 0, m)            // 2
	src.write(9, 3, 0, block(3))     // 3: refused: a clone takes no snapshot
	src.correct(9, 5)                // 4: refused: a clone
	src.write(9, 2, 4<<10, block(4)) // 5: applied
	src.paste(9, 0, m)               // 6: every other block: a normal chunk now
	src.write(9, 3, 8<<10, block(5)) // 7: a snapshot at 2, block 2 copied
	src.clone(9, 2, 0, m)            // 8: CHUNK_EXIST
	e := &export{pool: 1, cs: 1, full: true, start: start, chunks: [][]*syncpb.Record{src.snapshot(1)}, binlog: src.binlog[start-1:]}
	if info, _ := src.s.GetChunkInfo(9); info.Sn != 3 || info.SnapSn != 2 || info.CorrectedSn != 0 {
		t.Fatalf("source chunk 9: %+v", info)
	}
	got, sum, err := restoreInto(t, e, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sameChunks(t, src.s, got)
	if sum.Refused != 3 || sum.Skipped != 1 {
		t.Errorf("refused %d skipped %d, want 3 and 1", sum.Refused, sum.Skipped)
	}
}

// A COW snapshot none of whose blocks is copied yet is a COW snapshot
// record with no data: the chunk gets the snapshot (GetChunkInfo names it)
// and reading it reads the live chunk.
func TestSnapshotWithoutCopiedBlocks(t *testing.T) {
	live := append(block(1), block(2)...)
	e := &export{pool: 1, cs: 1, full: true, start: 8, chunks: [][]*syncpb.Record{{
		{Kind: &syncpb.Record_Snapshot{Snapshot: &syncpb.SnapshotRecord{ChunkId: 3, Sn: 4, CorrectedSn: 2, Offset: 0, Data: live, AsOfIndex: 7}}},
		{Kind: &syncpb.Record_CowSnapshot{CowSnapshot: &syncpb.CowSnapshotRecord{ChunkId: 3, SnapshotSn: 3, Offset: 0, AsOfIndex: 7}}},
	}}}
	got, _, err := restoreInto(t, e, Options{})
	if err != nil {
		t.Fatal(err)
	}
	info, err := got.GetChunkInfo(3)
	if err != nil || info.Sn != 4 || info.CorrectedSn != 2 || info.SnapSn != 3 {
		t.Fatalf("chunk 3: %+v %v", info, err)
	}
	buf := make([]byte, testGeometry.ChunkSize)
	want := append(bytes.Clone(live), make([]byte, int(testGeometry.ChunkSize)-len(live))...)
	for _, sn := range []uint64{4, 3} {
		if err := got.ReadChunkSnapshot(3, sn, buf, 0); err != nil || !bytes.Equal(buf, want) {
			t.Errorf("read sn %d: %v, equal %v", sn, err, bytes.Equal(buf, want))
		}
	}
}

// failingTarget fails every write of one chunk as a transport failure.
type failingTarget struct {
	*storeTarget
	chunk uint64
}

func (f failingTarget) WriteChunk(ctx context.Context, c Chunk, off uint32, data []byte, sn uint64) (Outcome, error) {
	if c.ID == f.chunk {
		return 0, errors.New("unavailable: connection refused")
	}
	return f.storeTarget.WriteChunk(ctx, c, off, data, sn)
}

// A target failure stops the restore, naming the copyset, packet and
// binlog index; the ops of other chunks in flight are waited for.
func TestTargetFailureStops(t *testing.T) {
	src := newSource(t)
	for i := range 12 {
		src.write(uint64(1+i%4), 1, uint32(i/4)*4<<10, block(byte(i)))
	}
	e := &export{pool: 1, cs: 1, start: 1, binlog: src.binlog}
	d, _ := writeExport(t, e.packets(t))
	tg := failingTarget{newStoreTarget(t), 3}
	tg.store(1, 1)
	sum, err := Restore(context.Background(), Options{Source: d, Pool: 1, Target: tg, Geometry: testGeometry})
	want := "copyset 1/1: packet " + exportfmt.PacketName(1, 1, exportfmt.BinlogPoint(1)) + ", binlog index 3: CHUNK_OP_WRITE of chunk 3 of copyset 1/1: unavailable"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("got %v, want %s...", err, want)
	}
	if sum == nil || len(sum.Copysets) != 0 {
		t.Errorf("summary %+v: the copyset did not finish", sum)
	}
}

// A cancelled restore reports the cancellation, not a finished copyset.
func TestCancelledRestoreIsNotDone(t *testing.T) {
	src := newSource(t)
	src.write(1, 1, 0, block(1))
	e := &export{pool: 1, cs: 1, start: 1, binlog: src.binlog}
	d, _ := writeExport(t, e.packets(t))
	tg := newStoreTarget(t)
	tg.store(1, 1)
	ctx, cancel := context.WithCancel(context.Background())
	sum, err := Restore(ctx, Options{Source: d, Pool: 1, Target: tg, Geometry: testGeometry,
		Progress: func(p Progress) {
			if p.Phase == PhaseReplay {
				cancel()
			}
		}})
	if !errors.Is(err, context.Canceled) || sum == nil || len(sum.Copysets) != 0 {
		t.Errorf("got %v, summary %+v", err, sum)
	}
}

// threePackets is the export of six 4 KiB writes to copyset 1/1, two per
// packet: the packets at binlog 1, 3 and 5.
func threePackets(t *testing.T) map[string][]byte {
	t.Helper()
	src := newSource(t)
	for i := range 6 {
		src.write(1, 1, uint32(i)*4<<10, block(byte(i+1)))
	}
	e := &export{pool: 1, cs: 1, start: 1, binlog: src.binlog, per: 2}
	return e.packets(t)
}

// restoreChanged writes the export files, changes them (change, when not
// nil), restores copyset 1/1 from them and checks the result: success
// when wantErr is "", else an error containing it and nothing written.
func restoreChanged(t *testing.T, what string, files map[string][]byte, change func(dir string), wantErr string) {
	t.Helper()
	d, dir := writeExport(t, files)
	if change != nil {
		change(dir)
	}
	tg := newStoreTarget(t)
	tg.store(1, 1)
	_, err := Restore(context.Background(), Options{Source: d, Pool: 1, Target: tg, Geometry: testGeometry})
	switch {
	case wantErr == "" && err != nil:
		t.Errorf("%s: %v", what, err)
	case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
		t.Errorf("%s: %v, want %q", what, err, wantErr)
	case wantErr != "" && tg.ops.Load() != 0:
		t.Errorf("%s: %d ops on the target", what, tg.ops.Load())
	}
}

// manifestOf is the manifest of the first n packets of copyset 1/1, of
// their export.
func manifestOf(t *testing.T, pkts map[string][]byte, n int) []byte {
	t.Helper()
	var names []string
	for name := range pkts {
		names = append(names, name)
	}
	slices.Sort(names)
	m := exportfmt.NewManifest(1, 1)
	for _, name := range names[:n] {
		p, err := exportfmt.Decode(pkts[name])
		if err != nil {
			t.Fatal(err)
		}
		if err := exportfmt.Append(m, p.Entry(name)); err != nil {
			t.Fatal(err)
		}
		m.ExportId = p.Header.GetExportId()
	}
	b, err := exportfmt.EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The manifest, when there is one, must list packets the export has: the
// loss of the export's last packets (which leaves an unbroken but shorter
// chain) is found by it, as is a packet other than the one it lists. A
// manifest behind the packets, or whose last packet was resent since, is
// fine.
func TestManifestCatchesLostPackets(t *testing.T) {
	pkts := threePackets(t) // binlog 1, 3, 5
	last := exportfmt.PacketName(1, 1, exportfmt.BinlogPoint(5))
	middle := exportfmt.PacketName(1, 1, exportfmt.BinlogPoint(3))
	other := func(name string, b byte) []byte { // another packet with the same points
		p, err := exportfmt.Decode(pkts[name])
		if err != nil {
			t.Fatal(err)
		}
		recs := make([]*syncpb.Record, len(p.Records))
		for i, r := range p.Records {
			recs[i] = proto.CloneOf(r)
			recs[i].GetBinlog().Data = block(b)
		}
		out, err := exportfmt.Encode(&syncpb.PacketHeader{LogicPoolId: 1, CopysetId: 1, StartPoint: p.Header.StartPoint, NextPoint: p.Header.NextPoint}, recs)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, c := range []struct {
		what    string
		listed  int              // packets the manifest lists
		change  func(dir string) // after the export is written
		wantErr string           // "" = the restore succeeds
	}{
		{"complete", 3, nil, ""},
		{"behind", 2, nil, ""},
		{"last resent", 3, func(d string) { os.WriteFile(filepath.Join(d, last), other(last, 9), 0o644) }, ""},
		{"last lost", 3, func(d string) { os.Remove(filepath.Join(d, last)) }, "lists packet " + last + ", which the export does not have"},
		{"middle replaced", 3, func(d string) { os.WriteFile(filepath.Join(d, middle), other(middle, 9), 0o644) }, "bad packet " + middle + ": it is not the packet manifest"},
		{"corrupt", 3, func(d string) {
			p := filepath.Join(d, exportfmt.ManifestName(1, 1))
			b, _ := os.ReadFile(p)
			b[len(b)-1] ^= 1
			os.WriteFile(p, b, 0o644)
		}, "bad manifest " + exportfmt.ManifestName(1, 1)},
	} {
		withManifest := maps.Clone(pkts)
		withManifest[exportfmt.ManifestName(1, 1)] = manifestOf(t, pkts, c.listed)
		restoreChanged(t, c.what, withManifest, c.change, c.wantErr)
	}
}

// A manifest cut into sealed parts is read whole: the restore succeeds
// with every part there, and a missing or corrupt part stops it before
// it writes anything, naming the part.
func TestManifestParts(t *testing.T) {
	pkts := threePackets(t) // binlog 1, 3, 5
	m, err := exportfmt.DecodeManifest(manifestOf(t, pkts, 3))
	if err != nil {
		t.Fatal(err)
	}
	parts := exportfmt.Seal(m, 1)
	if len(parts) != 2 {
		t.Fatalf("%d parts", len(parts))
	}
	withParts := maps.Clone(pkts)
	for _, p := range append(parts, m) {
		b, err := exportfmt.EncodeManifest(p)
		if err != nil {
			t.Fatal(err)
		}
		name := exportfmt.ManifestName(1, 1)
		if p.Part > 0 {
			name = exportfmt.ManifestPartName(1, 1, p.Part)
		}
		withParts[name] = b
	}
	part2 := exportfmt.ManifestPartName(1, 1, 2)
	last := exportfmt.PacketName(1, 1, exportfmt.BinlogPoint(5))
	for _, c := range []struct {
		what    string
		change  func(dir string)
		wantErr string
	}{
		{"complete", nil, ""},
		{"a part lost", func(d string) { os.Remove(filepath.Join(d, part2)) }, "read manifest part " + part2},
		{"a part corrupt", func(d string) {
			p := filepath.Join(d, part2)
			b, _ := os.ReadFile(p)
			b[len(b)-1] ^= 1
			os.WriteFile(p, b, 0o644)
		}, "bad manifest part " + part2},
		{"last lost", func(d string) { os.Remove(filepath.Join(d, last)) }, "lists packet " + last + ", which the export does not have"},
	} {
		restoreChanged(t, c.what, withParts, c.change, c.wantErr)
	}
}

// An --until-time before the time the export's starting state was taken
// is refused naming the earliest time it can restore (in both forms the
// flag takes), whether or not a write landed during the snapshot phase,
// and nothing is written; at and after that time it restores exactly. An
// export that does not record the time (written before the field
// existed) restores only times at or after one of its binlog records.
func TestUntilTimeBeforeTheStart(t *testing.T) {
	// The source: writes at 1000 ms per index. Block 1 of chunk 1 is
	// first written at index 3, after T = 2500 ms and before the export
	// pinned the log at index 4, at 3500 ms.
	base := func() *source {
		src := newSource(t)
		src.write(1, 1, 0, block(1))     // 1
		src.write(2, 1, 0, block(2))     // 2
		src.write(1, 1, 4<<10, block(3)) // 3
		return src
	}
	at3 := base()

	// No write in the snapshot phase: its images are the state at 3.
	quiet := base()
	snap := [][]*syncpb.Record{quiet.snapshot(1), quiet.snapshot(2)} // as of 3 and 2
	quiet.write(2, 1, 4<<10, block(4))                               // 4
	quietExport := &export{pool: 1, cs: 1, full: true, start: 4, chunks: snap, binlog: quiet.binlog[3:], startMs: 3500}
	// The same export as written before exports recorded their start,
	// and such an export without a binlog record.
	old := *quietExport
	old.startMs = 0
	idle := old
	idle.binlog, idle.end = nil, 4

	// A write in the snapshot phase, at 4, before chunk 2's image.
	busy := base()
	snap1 := busy.snapshot(1) // as of 3: the log was pinned at 4
	busy.write(2, 1, 4<<10, block(4))
	at4 := base()
	at4.write(2, 1, 4<<10, block(4))
	snap = [][]*syncpb.Record{snap1, busy.snapshot(2)} // chunk 2 as of 4
	busy.write(1, 1, 8<<10, block(5))                  // 5
	busyExport := &export{pool: 1, cs: 1, full: true, start: 4, chunks: snap, binlog: busy.binlog[3:], startMs: 3500}

	// A step restores until a time: refused with an error holding want,
	// or the state of index.
	type step struct {
		untilMs int64
		want    string
		index   uint64
	}
	for _, c := range []struct {
		name   string
		e      *export
		states map[uint64]*source
		steps  []step
	}{
		{"no write in the snapshot phase", quietExport, map[uint64]*source{3: at3, 4: quiet}, []step{
			{untilMs: 2500, want: "--until-time 1970-01-01T00:00:02.500Z (Unix ms 2500) cannot be restored from this export: the earliest time it can restore is 1970-01-01T00:00:03.500Z (Unix ms 3500), when its starting state, index 3, was taken"},
			{untilMs: 3499, want: "earliest time it can restore is 1970-01-01T00:00:03.500Z (Unix ms 3500)"},
			{untilMs: 3500, index: 3}, {untilMs: 3999, index: 3}, {untilMs: 4000, index: 4},
		}},
		{"a write in the snapshot phase", busyExport, map[uint64]*source{4: at4, 5: busy}, []step{
			{untilMs: 2500, want: "--until-time 1970-01-01T00:00:02.500Z (Unix ms 2500) cannot be restored from this export: the earliest time it can restore is 1970-01-01T00:00:04.000Z (Unix ms 4000), when the binlog record at index 4 was appended (its snapshot phase read chunk 2 as of index 4)"},
			{untilMs: 3700, want: "earliest time it can restore is 1970-01-01T00:00:04.000Z (Unix ms 4000)"},
			{untilMs: 4000, index: 4}, {untilMs: 5000, index: 5},
		}},
		// A time counts from the first binlog record on.
		{"no start time recorded", &old, map[uint64]*source{4: quiet}, []step{
			{untilMs: 2500, want: "earliest time it can restore is 1970-01-01T00:00:04.000Z (Unix ms 4000), when its first binlog record, at index 4, was appended; the export does not record when its starting state was taken"},
			{untilMs: 3500, want: "earliest time it can restore is 1970-01-01T00:00:04.000Z (Unix ms 4000)"},
			{untilMs: 4000, index: 4},
		}},
		// No time at all; the whole export (until 0: none) restores.
		{"no start time and no binlog record", &idle, map[uint64]*source{3: at3}, []step{
			{untilMs: 9000, want: "it does not record when its starting state was taken (it was written before exports recorded it) and has no binlog record at or after index 3 to tell the time by; restore it without --until-time, or with --until-index"},
			{index: 3},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, s := range c.steps {
				o := Options{UntilTimeMs: s.untilMs, HasUntilTime: s.untilMs != 0}
				got, sum, err := restoreInto(t, c.e, o)
				switch {
				case s.want != "":
					if err == nil || !strings.Contains(err.Error(), s.want) {
						t.Errorf("until time %d: %v, want an error with %q", s.untilMs, err, s.want)
					}
					if ids := got.ListChunks(); len(ids) != 0 {
						t.Errorf("until time %d: the refused restore wrote chunks %v", s.untilMs, ids)
					}
				case err != nil:
					t.Fatalf("until time %d: %v", s.untilMs, err)
				default:
					sameChunks(t, c.states[s.index].s, got)
					if sum.Copysets[0].UntilIndex != s.index {
						t.Errorf("until time %d restored index %d, want %d", s.untilMs, sum.Copysets[0].UntilIndex, s.index)
					}
				}
			}
		})
	}
}
