package datasync

import (
	"context"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/kinds"
	cpb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// A grouped proposal's entry (copyset/group.go) mixes chunk ops with ops
// of other machines, a checkpoint first among them: the chunk ops are
// exported as any chunk op, each at its position among all the entry's
// ops (the chunk machine's stamp), and the other ops are skipped.
func TestExportGroupEntry(t *testing.T) {
	e := &exporter{src: fixture(t)}
	ent := copyset.LogEntry{Index: 12, Term: 3, AppendedAt: time.UnixMilli(12000), Type: copyset.LogEntryOps, Ops: []copyset.Op{
		{Kind: kinds.DM, Payload: []byte("checkpoint")},
		chunkOp(t, cpb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, 1, 2, fakeBlock, blocks('g')),
		{Kind: kinds.Sync, Payload: []byte{1}},
		chunkOp(t, cpb.CHUNK_OP_TYPE_CHUNK_OP_DELETE, 4, 3, 0, nil),
	}}
	recs, err := e.entryRecords(context.Background(), ent)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("%d records, want the 2 chunk ops", len(recs))
	}
	for i, want := range []struct {
		pos   uint32
		chunk uint64
		typ   cpb.CHUNK_OP_TYPE
	}{{1, 1, cpb.CHUNK_OP_TYPE_CHUNK_OP_WRITE}, {3, 4, cpb.CHUNK_OP_TYPE_CHUNK_OP_DELETE}} {
		bl := recs[i].GetBinlog()
		if bl.GetIndex() != 12 || bl.GetTerm() != 3 || bl.GetAppendedAtMs() != 12000 || bl.GetOpPosition() != want.pos ||
			bl.GetOp().GetChunkId() != want.chunk || bl.GetOp().GetOpType() != want.typ {
			t.Errorf("record %d: %v; want chunk %d's %v at index 12, position %d", i, bl, want.chunk, want.typ, want.pos)
		}
	}
	if got := recs[0].GetBinlog().GetData(); len(got) != fakeBlock || got[0] != 'g' {
		t.Errorf("write record data: %d bytes", len(got))
	}
}
