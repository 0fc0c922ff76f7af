package restore

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
)

// Image is a chunk's state to rebuild: what GetChunkInfo, ReadChunk and
// ReadChunkSnapshot show of it, and its corrected sn.
type Image struct {
	ID uint64
	// Sn and CorrectedSn are the chunk's sequence numbers.
	Sn, CorrectedSn uint64
	// AsOf and AsOfOp place the image in the log: it is the chunk's state
	// right after the op at position AsOfOp of entry AsOf (t_c).
	AsOf   uint64
	AsOfOp uint32
	// Live is the chunk's data (ChunkSize bytes), or nil when Pieces
	// holds it.
	Live []byte
	// Pieces, when Live is nil, is the chunk's data as the snapshot
	// records gave it: ranges in order, not overlapping, aliasing the
	// records' data; the rest of the chunk reads as zeros. Only for a chunk
	// without a snapshot (build makes it so when it can, to copy nothing).
	Pieces []Piece
	// SnapSn is the sn of the chunk's COW snapshot, 0 without one.
	SnapSn uint64
	// View is what ReadChunkSnapshot(SnapSn) reads: the copied blocks'
	// snapshot content, the others Live's (ChunkSize bytes; only with a
	// snapshot).
	View []byte
	// Copied marks, per block, the blocks copied into the snapshot.
	Copied []bool
}

// check reports an image the chunk store cannot hold, which no op
// sequence could rebuild: a snapshot that is not older than the chunk, or
// a corrected sn at or above the sn of a chunk with a snapshot (a write
// that takes a snapshot makes the chunk's sn the newest; only a snapshot
// removal sets the corrected sn again).
func (im *Image) check() error {
	switch {
	case im.Sn == 0:
		return fmt.Errorf("chunk %d has sn 0", im.ID)
	case im.SnapSn != 0 && im.SnapSn >= im.Sn:
		return fmt.Errorf("chunk %d has sn %d and a COW snapshot with sn %d, not older", im.ID, im.Sn, im.SnapSn)
	case im.SnapSn != 0 && im.CorrectedSn >= im.Sn:
		return fmt.Errorf("chunk %d has a COW snapshot and corrected sn %d, not below its sn %d", im.ID, im.CorrectedSn, im.Sn)
	}
	return nil
}

// Piece is a range of a chunk's data: Data at byte Offset.
type Piece struct {
	Offset uint32
	Data   []byte
}

// data is the chunk's data as pieces (Live whole, or Pieces).
func (im *Image) data() []Piece {
	if im.Live == nil {
		return im.Pieces
	}
	return []Piece{{0, im.Live}}
}

// ImageBuilder collects the snapshot-phase records of one chunk into an
// Image. Its buffers are reused from chunk to chunk.
type ImageBuilder struct {
	g          Geometry
	live, view []byte
	copied     []bool
}

// NewImageBuilder returns an ImageBuilder of chunks of geometry g.
func NewImageBuilder(g Geometry) *ImageBuilder {
	return &ImageBuilder{g: g, live: make([]byte, g.ChunkSize), copied: make([]bool, g.blocks())}
}

// Build makes the image of chunk id from its records (in packet order):
// the checks of header, then the data. Ranges no record covers read as
// zeros. The image aliases b's buffers until the next build, and the
// records' data: a chunk without a snapshot whose records' ranges come in
// order without overlapping (as the exporter writes them) is given as
// Pieces of the records, with nothing copied; any other is assembled in
// b's buffers (a later record overwriting an earlier one).
func (b *ImageBuilder) Build(id uint64, recs []*syncpb.Record) (*Image, error) {
	im, err := b.header(id, recs)
	if err != nil {
		return nil, err
	}
	if im.SnapSn == 0 {
		if ps, ok := pieces(recs); ok {
			im.Pieces = ps
			return im, nil
		}
	}
	clear(b.live)
	clear(b.copied)
	im.Live, im.Copied = b.live, b.copied
	for _, r := range recs {
		if s := r.GetSnapshot(); s != nil {
			copy(b.live[s.Offset:], s.Data) // a zero range is zero already
		}
	}
	if im.SnapSn != 0 { // header saw COW snapshot records (their snapshot sn is never 0)
		if b.view == nil {
			b.view = make([]byte, b.g.ChunkSize) // only chunks with a snapshot need it
		}
		copy(b.view, b.live)
		bs := b.g.BlockSize
		for _, r := range recs {
			c := r.GetCowSnapshot()
			if c == nil {
				continue
			}
			copy(b.view[c.Offset:], c.Data)
			for i := c.Offset / bs; i < (c.Offset+uint32(len(c.Data)))/bs; i++ {
				b.copied[i] = true
			}
		}
		im.View = b.view
	}
	return im, nil
}

// pieces returns the data of snapshot records recs as pieces, and false if
// their ranges are out of order or overlap.
func pieces(recs []*syncpb.Record) ([]Piece, bool) {
	out := make([]Piece, 0, len(recs))
	end := uint64(0)
	for _, r := range recs {
		s := r.GetSnapshot()
		if s == nil || len(s.Data) == 0 {
			continue
		}
		if uint64(s.Offset) < end {
			return nil, false
		}
		out = append(out, Piece{s.Offset, s.Data})
		end = uint64(s.Offset) + uint64(len(s.Data))
	}
	return out, true
}

// header checks the records of chunk id (in packet order) and returns
// its image without data (Live, View and Copied nil): every snapshot
// record must agree on sn, corrected sn and as_of_index, every COW record
// on snapshot_sn and as_of_index, ranges must be whole blocks inside the
// chunk, and the image must be one the chunk store can hold. The check
// pass calls it alone: it touches none of b's buffers.
func (b *ImageBuilder) header(id uint64, recs []*syncpb.Record) (*Image, error) {
	im := &Image{ID: id}
	seenSnap, seenCow := false, false
	var cows []*syncpb.CowSnapshotRecord
	for _, r := range recs {
		switch k := r.GetKind().(type) {
		case *syncpb.Record_Snapshot:
			s := k.Snapshot
			if !seenSnap {
				im.Sn, im.CorrectedSn, im.AsOf, im.AsOfOp, seenSnap = s.Sn, s.CorrectedSn, s.AsOfIndex, s.AsOfOp, true
			} else if s.Sn != im.Sn || s.CorrectedSn != im.CorrectedSn || s.AsOfIndex != im.AsOf || s.AsOfOp != im.AsOfOp {
				return nil, fmt.Errorf("chunk %d: snapshot records disagree: sn/corrected sn/as_of_index %d/%d/%d and %d/%d/%d",
					id, im.Sn, im.CorrectedSn, im.AsOf, s.Sn, s.CorrectedSn, s.AsOfIndex)
			}
			n := uint64(len(s.Data))
			if s.ZeroLength != 0 {
				n = uint64(s.ZeroLength)
			}
			if err := b.checkRange(id, "snapshot", s.Offset, n); err != nil {
				return nil, err
			}
		case *syncpb.Record_CowSnapshot:
			c := k.CowSnapshot
			if !seenCow {
				im.SnapSn, seenCow = c.SnapshotSn, true
			} else if c.SnapshotSn != im.SnapSn {
				return nil, fmt.Errorf("chunk %d: COW snapshot records name snapshot sn %d and %d", id, im.SnapSn, c.SnapshotSn)
			}
			if c.SnapshotSn == 0 {
				return nil, fmt.Errorf("chunk %d: COW snapshot record with snapshot sn 0", id)
			}
			if err := b.checkRange(id, "COW snapshot", c.Offset, uint64(len(c.Data))); err != nil {
				return nil, err
			}
			cows = append(cows, c)
		default:
			return nil, fmt.Errorf("chunk %d: a %T record in the snapshot phase", id, r.GetKind())
		}
	}
	if !seenSnap {
		return nil, fmt.Errorf("chunk %d: COW snapshot records without snapshot records of the chunk", id)
	}
	for _, c := range cows {
		if c.AsOfIndex != im.AsOf || c.AsOfOp != im.AsOfOp {
			return nil, fmt.Errorf("chunk %d: COW snapshot record as_of_index %d, the chunk's %d", id, c.AsOfIndex, im.AsOf)
		}
	}
	if err := im.check(); err != nil {
		return nil, err
	}
	return im, nil
}

func (b *ImageBuilder) checkRange(id uint64, what string, off uint32, n uint64) error {
	bs := uint64(b.g.BlockSize)
	if uint64(off)%bs != 0 || n%bs != 0 || uint64(off)+n > uint64(b.g.ChunkSize) {
		return fmt.Errorf("chunk %d: %s record range [%d, %d) is not whole %d-byte blocks inside the %d-byte chunk",
			id, what, off, uint64(off)+n, bs, b.g.ChunkSize)
	}
	return nil
}

// rebuilder sends the op sequence of Rebuild.
type rebuilder struct {
	t        Target
	g        Geometry
	maxWrite uint32
	// depth bounds the writes of one rebuild in flight at once (at least 1).
	depth int
	bytes atomic.Uint64 // data bytes written
	ops   atomic.Uint64
}

// DefaultMaxWrite bounds the data of one WriteChunk a rebuild sends: 1 MiB
// writes restore a 1 GiB export of 16 copysets a little faster than 4 MiB
// ones (docs/performance.md, "Restore write size").
const DefaultMaxWrite = 1 << 20

// rebuild makes chunk c on an empty target exactly im: it sends the
// ops of PlanRebuild, a step after the other, the writes of a step up to
// depth at once (they commute, see PlanRebuild). Every op must succeed.
func (r *rebuilder) rebuild(ctx context.Context, c Chunk, im *Image) error {
	for _, step := range PlanRebuild(im, r.g, r.maxWrite) {
		err := forEach(ctx, len(step), max(r.depth, 1), func(ctx context.Context, i int) error {
			return r.send(ctx, c, step[i])
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// send sends op to chunk c; it must be applied.
func (r *rebuilder) send(ctx context.Context, c Chunk, op Op) error {
	if op.Kind == OpCorrect {
		return r.correct(ctx, c, op.Sn)
	}
	return r.write(ctx, c, op.Offset, op.Data, op.Sn)
}

// block0 is block 0 of the chunk data v (pieces in order).
func block0(v []Piece, bs uint32) []byte {
	if len(v) > 0 && v[0].Offset == 0 {
		return v[0].Data[:bs]
	}
	return make([]byte, bs)
}

func (r *rebuilder) write(ctx context.Context, c Chunk, off uint32, data []byte, sn uint64) error {
	o, err := r.t.WriteChunk(ctx, c, off, data, sn)
	if err := mustApply(err, o, fmt.Sprintf("rebuild %s: write [%d, %d) at sn %d", c, off, off+uint32(len(data)), sn)); err != nil {
		return err
	}
	r.ops.Add(1)
	r.bytes.Add(uint64(len(data)))
	return nil
}

func (r *rebuilder) correct(ctx context.Context, c Chunk, cs uint64) error {
	o, err := r.t.DeleteChunkSnapshotOrCorrectSn(ctx, c, cs)
	if err := mustApply(err, o, fmt.Sprintf("rebuild %s: delete snapshot or correct sn %d", c, cs)); err != nil {
		return err
	}
	r.ops.Add(1)
	return nil
}

func mustApply(err error, o Outcome, what string) error {
	switch {
	case err != nil:
		return fmt.Errorf("%s: %w", what, err)
	case o != Applied:
		return fmt.Errorf("%s: %s: the target copyset was not empty or changed during the restore", what, o)
	}
	return nil
}
