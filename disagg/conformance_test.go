package disagg

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/copyset/copysettest"
	"github.com/chunkraft/chunkraft/internal/kinds"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
)

// lockWorkload proposes lock and mark decisions and their settles on a
// few keys, format 0's upstream ops, and clone locks, gc marks (one by one
// and batched) and forgets on a few names, so that every answer (pending,
// joined, busy, conflict, settled) comes up; a shadow state applied with
// the machine's rules counts them.
type lockWorkload struct {
	t       *testing.T
	shadow  *pb.State
	reached map[string]int
}

func (w *lockWorkload) op(rng *rand.Rand, i int) []byte {
	key := fmt.Sprintf("s%d/data/dat_%d_0", 1+rng.IntN(2), rng.IntN(4))
	obj := fmt.Sprintf("o/%d", rng.IntN(3))
	if rng.IntN(6) == 0 {
		obj = key // a clone of a data file key keeps marks off it
	}
	var op *pb.Op
	switch x := rng.IntN(20); {
	case x < 4:
		op = pendLock(key, uint64(1+rng.IntN(2)), uint64(rng.IntN(2)))
	case x < 6:
		op = pendMark(key)
	case x < 9:
		op = settle(key, i-1) // often not pending: changes nothing
		if p := w.shadow.GetPending(); len(p) > 0 {
			q := p[rng.IntN(len(p))]
			op = settle(q.GetKey(), int(q.GetIndex()))
		}
	case x < 10:
		switch rng.IntN(3) {
		case 0:
			op = addLock(key, 1, 1)
		case 1:
			op = markDelete(key)
		default:
			op = release(1, 1)
		}
	case x < 11:
		op = lockClone(obj, uint64(rng.IntN(2)), int64(i)) // the proposer's time: the op's number
	case x < 13:
		op = releaseClone(obj, uint64(rng.IntN(2)), int64(i-rng.IntN(10)))
	case x < 15:
		op = markObject(fmt.Sprintf("o/%d", rng.IntN(3)), int64(i))
	case x < 17:
		names := []string{"o/0", "o/1", "o/2", key}
		op = markObjects(int64(i), names[rng.IntN(2):2+rng.IntN(3)]...) // ascending
	default:
		op = forget(obj, fmt.Sprintf("o/%d", rng.IntN(3)))
	}
	b, err := encodeOp(op)
	if err != nil {
		w.t.Fatalf("workload op %d: %v", i, err)
	}
	res, changed := applyOp(w.shadow, uint64(i), op)
	if changed {
		w.shadow.Applied = uint64(i)
	}
	kind := fmt.Sprintf("%T", op.GetOp())
	switch {
	case res.Busy != "":
		kind += " busy"
	case res.Conflict != "" || (len(res.Locked) > 0 && !changed):
		kind += " conflict"
	case !changed:
		kind += " unchanged"
	}
	w.reached[kind]++
	return b
}

func lockConformanceState(ms copyset.Machines) (string, error) {
	m, ok := copyset.MachineAs[*Machine](ms, kinds.Disagg)
	if !ok {
		return "", errors.New("no disagg machine")
	}
	var out string
	var err error
	m.View(func(st *pb.State) { out, err = copysettest.IndentedJSON(st) })
	return out, err
}

// The disagg machine keeps the StateMachine contract: replay from any
// index, durable Sync, fuzzy copies, snapshot install, restarts.
func TestDisaggMachineConforms(t *testing.T) {
	w := &lockWorkload{t: t, shadow: &pb.State{}, reached: map[string]int{}}
	copysettest.RunStateMachineConformance(t, []copyset.MachineSpec{Spec()},
		copysettest.Workload{Op: w.op, State: lockConformanceState, Ops: 400})
	t.Logf("answers %v; at the end %d files", w.reached, len(w.shadow.Files))
	for _, k := range []string{"*disaggpb.Op_Pend", "*disaggpb.Op_Pend busy", "*disaggpb.Op_Pend unchanged", "*disaggpb.Op_Pend conflict",
		"*disaggpb.Op_Settle", "*disaggpb.Op_Settle unchanged", "*disaggpb.Op_AddLock unchanged",
		"*disaggpb.Op_LockClone", "*disaggpb.Op_LockClone conflict", "*disaggpb.Op_ReleaseClone", "*disaggpb.Op_MarkObject",
		"*disaggpb.Op_MarkObject conflict", "*disaggpb.Op_MarkObjects", "*disaggpb.Op_Forget"} {
		if w.reached[k] == 0 {
			t.Errorf("the workload never reached %s", k)
		}
	}
}
