package restore

import (
	"context"
	"testing"

	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
)

// A restore's marker names the first record after the until point: inside
// a packet (its record), at the start of the next packet, or, at the end
// of the export, the point its next packet will start at; the last record
// replayed; and the clone chunks still clones. It round-trips through
// WriteMarker and ReadMarker.
func TestRestoreMarker(t *testing.T) {
	src := newSource(t)
	src.write(1, 1, 0, block(1)) // 1
	start := src.index + 1
	src.write(1, 1, 4<<10, block(2)) // 2
	snap := src.snapshot(1)          // as of 2
	live := make([]byte, testGeometry.ChunkSize)
	copy(live, block(7))
	src.clone(3, 1, 0, live)     // 3
	src.write(2, 1, 0, block(3)) // 4
	src.write(2, 1, 4<<10, block(4))
	src.write(3, 1, 4<<10, block(5)) // 6: a block of the clone chunk
	e := &export{pool: 1, cs: 1, full: true, start: start, chunks: [][]*syncpb.Record{snap}, binlog: src.binlog[start-1:], per: 2, exportID: "0123456789abcdef0123456789abcdef"}

	for _, c := range []struct {
		until      uint64
		next       exportfmt.Point
		record     uint32
		last       uint64
		cloneBlock bool // block 1 of chunk 3 written
	}{
		{2, exportfmt.BinlogPoint(2), 1, 2, false}, // packet [2,4): records 2 and 3
		{3, exportfmt.BinlogPoint(4), 0, 3, false},
		{5, exportfmt.BinlogPoint(6), 0, 5, false},
		{6, exportfmt.BinlogPoint(7), 0, 6, true}, // the end of the export
	} {
		_, sum, err := restoreInto(t, e, Options{UntilIndex: c.until, HasUntilIndex: true})
		if err != nil {
			t.Fatalf("until %d: %v", c.until, err)
		}
		m := sum.Copysets[0].Marker
		if next, _ := exportfmt.ParsePoint(m.GetNextPoint()); next != c.next || m.GetNextRecord() != c.record || m.GetLastIndex() != c.last ||
			m.GetUntilIndex() != c.until || m.GetExportId() != e.exportID || m.GetToPool() != 2 {
			t.Errorf("until %d: marker %v; want next %s record %d, last %d", c.until, m, c.next, c.record, c.last)
		}
		var clones []uint64
		for _, cl := range m.GetClones() {
			clones = append(clones, cl.GetChunkId())
			if written := cl.GetWritten()[0]&2 != 0; written != c.cloneBlock {
				t.Errorf("until %d: clone %d written %08b", c.until, cl.GetChunkId(), cl.GetWritten()[0])
			}
		}
		if want := c.until >= 3; (len(clones) == 1 && clones[0] == 3) != want {
			t.Errorf("until %d: clones %v", c.until, clones)
		}
	}

	d, _ := writeExport(t, nil)
	m := &syncpb.RestoreMarker{FormatVersion: exportfmt.Version, LogicPoolId: 1, CopysetId: 4, NextPoint: exportfmt.BinlogPoint(9).Proto(), Digest: "d"}
	if err := WriteMarker(context.Background(), d, m); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadMarker(context.Background(), d, 1, 4); err != nil || got.GetDigest() != "d" {
		t.Errorf("read back: %v %v", got, err)
	}
	if _, err := ReadMarker(context.Background(), d, 1, 5); err == nil {
		t.Error("a marker that is not there was read")
	}
}
