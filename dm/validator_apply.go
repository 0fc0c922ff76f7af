package dm

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	dmpb "github.com/chunkraft/chunkraft/proto/dm/pb"
)

// rowID is the id of row number n of the share on target copyset cs:
// unique in the task.
func rowID(cs uint32, n uint64) uint64 { return uint64(cs)<<32 | n&0xffffffff }

// applyValidator applies a validator op to share s: a row (numbered here,
// so every replica numbers it alike; refused while a New or Ignored row
// of its chunk is there), rows' state, rows cleared, the cutover point or
// the checkpoint.
func applyValidator(s *pb.SubTask, index uint64, op *pb.ValidatorOp) (Result, bool) {
	name := s.GetConfig().GetName()
	if s.Validation == nil {
		s.Validation = &pb.Validation{}
	}
	v := s.Validation
	// pick returns the positions of the rows op names, or an error naming
	// an id that is not there.
	pick := func(r *pb.RowState) ([]int, error) {
		if r.GetAll() {
			out := make([]int, len(v.Rows))
			for i := range out {
				out[i] = i
			}
			return out, nil
		}
		var out []int
		for _, id := range r.GetIds() {
			i := slices.IndexFunc(v.Rows, func(row *pb.ValidationRow) bool { return row.GetId() == id })
			if i < 0 {
				return nil, fmt.Errorf("%w: %s has no validation error %d", ErrValidator, name, id)
			}
			out = append(out, i)
		}
		return out, nil
	}
	switch o := op.GetOp().(type) {
	case *pb.ValidatorOp_Add:
		row := o.Add
		for _, r := range v.GetRows() {
			if r.GetChunk() == row.GetChunk() && (r.GetState() == dmpb.ValidateErrorState_NewErr || r.GetState() == dmpb.ValidateErrorState_IgnoredErr) {
				return refuse(s, fmt.Errorf("%w: %s has a validation error for chunk %d already (%d)", ErrValidator, name, row.GetChunk(), r.GetId()))
			}
		}
		n := proto.CloneOf(row)
		v.NextRow++
		n.Id, n.State, n.TimeMs = rowID(s.GetCopyset(), v.NextRow), dmpb.ValidateErrorState_NewErr, op.GetNowMs()
		v.Rows = append(v.Rows, n)
	case *pb.ValidatorOp_Set:
		at, err := pick(o.Set)
		if err != nil {
			return refuse(s, err)
		}
		for _, i := range at {
			v.Rows[i].State = o.Set.GetState()
		}
	case *pb.ValidatorOp_Clear:
		at, err := pick(o.Clear)
		if err != nil {
			return refuse(s, err)
		}
		drop := map[int]bool{}
		for _, i := range at {
			drop[i] = true
		}
		kept := v.Rows[:0]
		for i, r := range v.Rows {
			if !drop[i] {
				kept = append(kept, r)
			}
		}
		v.Rows = kept
	case *pb.ValidatorOp_Cutover:
		v.Cutover, v.CutoverReached = o.Cutover, false
	case *pb.ValidatorOp_Checkpoint:
		if o.Checkpoint.GetIndex() < v.GetValidatedIndex() {
			return same(s)
		}
		v.ValidatedIndex, v.ValidatedMs = o.Checkpoint.GetIndex(), op.GetNowMs()
		v.CutoverReached = v.GetCutoverReached() || o.Checkpoint.GetCutoverReached()
	}
	return changed(s, index, op.GetNowMs())
}
