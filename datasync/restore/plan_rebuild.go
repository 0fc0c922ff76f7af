package restore

import "bytes"

// OpKind is the kind of a chunk op a rebuild sends.
type OpKind int

const (
	// OpWrite is WriteChunk(Offset, Data) at sequence number Sn.
	OpWrite OpKind = iota
	// OpCorrect is DeleteChunkSnapshotOrCorrectSn(Sn).
	OpCorrect
	// OpDelete is DeleteChunk(Sn) (0: no sn check).
	OpDelete
)

// Op is one ChunkService op of a replay.
type Op struct {
	Kind   OpKind
	Offset uint32
	Data   []byte // aliases the image's data
	Sn     uint64 // the write's or delete's sn, or the corrected sn
}

// Plan is the ops that rebuild one chunk, in steps: each step starts once
// the one before is applied; the ops of a step are writes at one sn to
// disjoint blocks of the chunk, and such writes commute: whichever applies
// first finds the chunk as the steps before left it and makes the same
// change of sn (creating the chunk, or taking its COW snapshot with the sn
// it had), the others find the chunk at that sn and change nothing but
// their own blocks, each copying only the blocks it overwrites into the
// snapshot. In any order the chunk ends with the same sn, data, snapshot
// and copied blocks. A plan is a pure function of the image, the geometry
// and the write bound, so a replay that stopped inside one can compute it
// again and go on at the op it reached.
type Plan [][]Op

// Ops is the plan's ops in order, step after step.
func (p Plan) Ops() []Op {
	var out []Op
	for _, step := range p {
		out = append(out, step...)
	}
	return out
}

// PlanRebuild returns the ops that make a chunk on an empty target exactly
// im (see docs/sync-format.md, Restore), ChunkService ops only. With base
// the sn of the data written first (the snapshot's sn with a snapshot, else
// the chunk's) and V the data at base (the snapshot's view, else Live):
//
//  1. corrected sn cs > base: write V at base; DeleteChunkSnapshotOrCorrectSn(cs)
//     (cs is above the chunk's sn: it becomes the corrected sn);
//     2 <= cs <= base: write V's block 0 at cs-1; DeleteChunkSnapshotOrCorrectSn(cs);
//     write V at base, and if base > cs that write took a snapshot at
//     cs-1: DeleteChunkSnapshotOrCorrectSn(base) removes it (base is not above
//     the chunk's sn, so the corrected sn stays);
//     otherwise (no corrected sn; 1, which is never above a chunk's sn and so
//     cannot be set, and changes nothing a client can see): write V at base.
//  2. with a snapshot: write Live's copied blocks at Sn (or, when none is
//     copied, block 0): the first write takes the snapshot at base and each
//     written block is copied into it (its V content) before it is
//     overwritten. A snapshot copy of block 0 equal to the live block reads
//     the same and behaves the same under later writes as an uncopied one.
//
// "Write V" writes its non-zero blocks in runs of at most maxWrite bytes
// (unwritten blocks read as zeros), a step per piece of V, or block 0 if V
// is all zero, so that the chunk exists with that sn.
func PlanRebuild(im *Image, g Geometry, maxWrite uint32) Plan {
	p := &planner{bs: g.BlockSize, per: max(maxWrite/g.BlockSize, 1)}
	base, v := im.Sn, im.data()
	if im.SnapSn != 0 {
		base, v = im.SnapSn, []Piece{{0, im.View}}
	}
	bs := g.BlockSize
	switch cs := im.CorrectedSn; {
	case cs > base:
		p.image(v, base)
		p.one(Op{Kind: OpCorrect, Sn: cs})
	case cs >= 2:
		p.one(Op{Kind: OpWrite, Data: block0(v, bs), Sn: cs - 1})
		p.one(Op{Kind: OpCorrect, Sn: cs})
		p.image(v, base)
		if base > cs {
			p.one(Op{Kind: OpCorrect, Sn: base})
		}
	default:
		p.image(v, base)
	}
	if im.SnapSn == 0 {
		return p.plan
	}
	if !p.runs(0, im.Live, im.Copied, im.Sn) {
		p.one(Op{Kind: OpWrite, Data: im.Live[:bs], Sn: im.Sn})
	}
	return p.plan
}

type planner struct {
	bs, per uint32
	plan    Plan
}

// one adds a step of op alone.
func (p *planner) one(op Op) { p.plan = append(p.plan, []Op{op}) }

// image adds the writes of a chunk's data v (pieces in order; the rest
// reads as zeros) at sn: a step per piece with non-zero blocks, or block 0
// when there are none.
func (p *planner) image(v []Piece, sn uint64) {
	zero := make([]byte, p.bs)
	some := false
	for _, pc := range v {
		nonzero := make([]bool, uint32(len(pc.Data))/p.bs)
		for i := range nonzero {
			nonzero[i] = !bytes.Equal(pc.Data[uint32(i)*p.bs:uint32(i+1)*p.bs], zero)
		}
		if p.runs(pc.Offset, pc.Data, nonzero, sn) {
			some = true
		}
	}
	if !some {
		p.one(Op{Kind: OpWrite, Data: zero, Sn: sn})
	}
}

// runs adds a step writing data's marked blocks at sn (data starts at byte
// off of the chunk), in runs of at most per blocks; it reports whether any
// block was marked.
func (p *planner) runs(off uint32, data []byte, marked []bool, sn uint64) bool {
	var step []Op
	n := uint32(len(marked))
	for a := uint32(0); a < n; {
		if !marked[a] {
			a++
			continue
		}
		b := a
		for b < n && marked[b] && b-a < p.per {
			b++
		}
		step = append(step, Op{Kind: OpWrite, Offset: off + a*p.bs, Data: data[a*p.bs : b*p.bs], Sn: sn})
		a = b
	}
	if len(step) > 0 {
		p.plan = append(p.plan, step)
	}
	return len(step) > 0
}
