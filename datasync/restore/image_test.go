package restore

import (
	"bytes"
	"testing"

	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
)

func snapRec(off uint32, data []byte) *syncpb.Record {
	return &syncpb.Record{Kind: &syncpb.Record_Snapshot{Snapshot: &syncpb.SnapshotRecord{ChunkId: 1, Sn: 2, Offset: off, Data: data, AsOfIndex: 5}}}
}

// A chunk without a snapshot whose records come in order without
// overlapping is given as pieces aliasing the records (nothing copied);
// records out of order or overlapping are assembled into the whole image,
// a later record over an earlier one, as before.
func TestBuildPiecesOrWholeImage(t *testing.T) {
	bs := testGeometry.BlockSize
	a, b := block(1), append(block(2), block(3)...)
	ib := NewImageBuilder(testGeometry)
	im, err := ib.Build(1, []*syncpb.Record{snapRec(bs, a), snapRec(4*bs, b)})
	if err != nil {
		t.Fatal(err)
	}
	if im.Live != nil || len(im.Pieces) != 2 || &im.Pieces[0].Data[0] != &a[0] || im.Pieces[1].Offset != 4*bs || &im.Pieces[1].Data[0] != &b[0] {
		t.Fatalf("in-order records: live %v, pieces %+v", im.Live != nil, im.Pieces)
	}
	if z := block0(im.Pieces, bs); !bytes.Equal(z, make([]byte, bs)) {
		t.Fatal("block 0 of pieces that start at block 1 is not zeros")
	}

	// Block 4 is given twice: the later record's wins.
	im, err = ib.Build(1, []*syncpb.Record{snapRec(4*bs, b), snapRec(4*bs, block(9)), snapRec(0, a)})
	if err != nil {
		t.Fatal(err)
	}
	if im.Pieces != nil || len(im.Live) != int(testGeometry.ChunkSize) {
		t.Fatalf("overlapping records: pieces %+v, live %d bytes", im.Pieces, len(im.Live))
	}
	want := make([]byte, testGeometry.ChunkSize)
	copy(want, a)
	copy(want[4*bs:], b)
	copy(want[4*bs:], block(9))
	if !bytes.Equal(im.Live, want) {
		t.Fatal("overlapping records: the image is not the records applied in order")
	}
	if z := block0(im.data(), bs); !bytes.Equal(z, a) {
		t.Fatal("block 0 of the whole image is not its first block")
	}
}
