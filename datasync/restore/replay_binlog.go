package restore

import (
	"fmt"

	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
	chunkserverpb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// Place is an op's place in a copyset's log: its entry's index and its
// position among the entry's ops.
type Place struct {
	Index uint64
	Op    uint32
}

// Before reports whether p comes before q. A chunk image is the state
// right after the op at its place: the binlog records before it are in the
// image and skipped; the one at it is applied again, which changes nothing
// (a chunk op applied twice in a row leaves the state it left once), and
// those after it are applied. Several ops can share an entry, so the index
// alone would not do: the image may lie between two ops of one entry.
func (p Place) Before(q Place) bool {
	return p.Index < q.Index || p.Index == q.Index && p.Op < q.Op
}

// Clone follows a chunk a replay created from a CREATE_CLONE record. In
// the source it stays a clone chunk until every block has been written (by
// writes or pastes), and a clone chunk refuses a write that would need a
// COW snapshot (sn above its effective sn) and every DELETE_SNAP; the
// replayed chunk is a normal chunk, which would accept them, so the replay
// does not send them while the chunk is a clone.
type Clone struct {
	Sn, CorrectedSn uint64
	// Written marks the blocks written since the clone was created; Left
	// counts the others.
	Written []bool
	Left    int
}

// NewClone is the clone chunk a CREATE_CLONE with sn and corrected sn
// created, of blocks blocks, none written.
func NewClone(sn, cs uint64, blocks uint32) *Clone {
	return &Clone{Sn: sn, CorrectedSn: cs, Written: make([]bool, blocks), Left: int(blocks)}
}

// Bitmap is c's written blocks as a bitmap: block i in bit i % 8 of byte
// i / 8 (how a dm share and a restore marker keep them).
func (c *Clone) Bitmap() []byte {
	w := make([]byte, (len(c.Written)+7)/8)
	for i, b := range c.Written {
		if b {
			w[i/8] |= 1 << (i % 8)
		}
	}
	return w
}

// CloneFromBitmap is the clone chunk of blocks blocks with sn, corrected
// sn cs and the written blocks of bitmap (Bitmap's form).
func CloneFromBitmap(sn, cs uint64, blocks uint32, bitmap []byte) *Clone {
	c := NewClone(sn, cs, blocks)
	for i := range c.Written {
		if i/8 < len(bitmap) && bitmap[i/8]&(1<<(i%8)) != 0 {
			c.Written[i] = true
			c.Left--
		}
	}
	return c
}

// mark records that [off, off+n) was written; it reports whether every
// block is (the source's chunk is a normal chunk from then on).
func (c *Clone) mark(off, n, bs uint32) bool {
	for i := off / bs; i < (off+n)/bs && int(i) < len(c.Written); i++ {
		if !c.Written[i] {
			c.Written[i] = true
			c.Left--
		}
	}
	return c.Left == 0
}

// Replay is what a replay of one copyset's binlog records keeps between
// records: the place of each snapshot-phase chunk image (AsOf, t_c: the
// records before it are in the image) and the chunks created from a
// CREATE_CLONE that are still clone chunks in the source (Clones). Binlog
// replays the records of a chunk in log order; records of different
// chunks may go through different Replays that share AsOf (read only).
type Replay struct {
	G      Geometry
	AsOf   map[uint64]Place
	Clones map[uint64]*Clone
}

// Action is what replaying a binlog record takes.
type Action int

const (
	// Skip: nothing to send (the chunk's image holds the record, or a
	// PASTE, whose data the CREATE_CLONE carried); counted as skipped.
	Skip Action = iota
	// RefusedByClone: the source refused it (its chunk was a clone chunk);
	// nothing to send; counted as a record the target refused as well.
	RefusedByClone
	// Send: send Step.Op, then tell Done its outcome.
	Send
	// CreateClone: if the chunk does not exist, rebuild it as
	// Step.Image (PlanRebuild) and tell Cloned; if it does, the source's
	// create changed nothing (the same clone again, or CHUNK_EXIST): a
	// refused record.
	CreateClone
)

// Step is what replaying one binlog record takes.
type Step struct {
	Action Action
	// Op is the op to send (Send).
	Op Op
	// Image is the clone chunk to rebuild (CreateClone): the op's sn and
	// corrected sn, the record's data.
	Image *Image
}

// Next says what replaying bl takes. A PASTE marks its blocks of a clone
// chunk written here.
func (r *Replay) Next(bl *syncpb.BinlogRecord) (Step, error) {
	op := bl.Op
	id := op.GetChunkId()
	if tc, ok := r.AsOf[id]; ok && (Place{bl.Index, bl.OpPosition}).Before(tc) {
		return Step{Action: Skip}, nil
	}
	cl := r.Clones[id]
	switch op.GetOpType() {
	case chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_WRITE:
		if cl != nil && op.GetSn() > max(cl.Sn, cl.CorrectedSn) {
			return Step{Action: RefusedByClone}, nil
		}
		return Step{Action: Send, Op: Op{Kind: OpWrite, Offset: op.GetOffset(), Data: bl.Data, Sn: op.GetSn()}}, nil
	case chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_DELETE:
		return Step{Action: Send, Op: Op{Kind: OpDelete, Sn: op.GetSn()}}, nil
	case chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_DELETE_SNAP:
		if cl != nil {
			return Step{Action: RefusedByClone}, nil
		}
		return Step{Action: Send, Op: Op{Kind: OpCorrect, Sn: op.GetCorrectedSn()}}, nil
	case chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_CREATE_CLONE:
		live := make([]byte, r.G.ChunkSize)
		copy(live, bl.Data)
		im := &Image{ID: id, Sn: op.GetSn(), CorrectedSn: op.GetCorrectedSn(), AsOf: bl.Index, Live: live}
		return Step{Action: CreateClone, Image: im}, nil
	case chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_PASTE:
		if cl != nil && cl.mark(op.GetOffset(), uint32(len(bl.Data)), r.G.BlockSize) {
			delete(r.Clones, id)
		}
		return Step{Action: Skip}, nil
	}
	return Step{}, fmt.Errorf("op %v is not a replicated chunk op", op.GetOpType())
}

// Done follows the outcome of a sent record (Send): an applied write of a
// clone chunk raises its sn and marks its blocks; an applied delete ends
// the clone.
func (r *Replay) Done(bl *syncpb.BinlogRecord, o Outcome) {
	if o != Applied {
		return
	}
	id := bl.Op.GetChunkId()
	cl := r.Clones[id]
	if cl == nil {
		return
	}
	switch bl.Op.GetOpType() {
	case chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_WRITE:
		cl.Sn = max(cl.Sn, bl.Op.GetSn())
		if cl.mark(bl.Op.GetOffset(), uint32(len(bl.Data)), r.G.BlockSize) {
			delete(r.Clones, id)
		}
	case chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_DELETE:
		delete(r.Clones, id)
	}
}

// Cloned follows the rebuild of a CreateClone step's chunk: it is a clone
// chunk until every block is written.
func (r *Replay) Cloned(s Step) {
	r.Clones[s.Image.ID] = NewClone(s.Image.Sn, s.Image.CorrectedSn, r.G.blocks())
}
