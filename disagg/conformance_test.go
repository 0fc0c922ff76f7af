package disagg

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/copyset/copysettest"
	"github.com/chunkraft/chunkraft/internal/kinds"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
	"google.golang.org/protobuf/encoding/protojson"
)

// lockWorkload proposes locks, marks and releases on a few keys, so that
// every answer (success, retry, conflict both ways, release) comes up; a
// shadow table applied with the machine's rules counts them.
type lockWorkload struct {
	t       *testing.T
	shadow  *pb.State
	reached map[string]int
}

func (w *lockWorkload) op(rng *rand.Rand, i int) []byte {
	key := fmt.Sprintf("s%d/data/dat_%d_0", 1+rng.IntN(2), rng.IntN(4))
	var op *pb.Op
	switch x := rng.IntN(10); {
	case x < 5:
		op = addLock(key, uint64(1+rng.IntN(3)), uint64(rng.IntN(6)))
	case x < 8:
		op = markDelete(key)
	default:
		op = release(uint64(1+rng.IntN(3)), uint64(rng.IntN(6)))
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
	case res.Conflict != "":
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
	m.mu.RLock()
	b, err := protojson.Marshal(m.st)
	m.mu.RUnlock()
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", " "); err != nil {
		return "", err
	}
	return out.String(), nil
}

// The disagg machine keeps the StateMachine contract: replay from any
// index, durable Sync, fuzzy copies, snapshot install, restarts.
func TestDisaggMachineConforms(t *testing.T) {
	w := &lockWorkload{t: t, shadow: &pb.State{}, reached: map[string]int{}}
	copysettest.RunStateMachineConformance(t, []copyset.MachineSpec{Spec()},
		copysettest.Workload{Op: w.op, State: lockConformanceState, Ops: 150})
	t.Logf("answers %v; at the end %d files", w.reached, len(w.shadow.Files))
	for _, k := range []string{"*disaggpb.Op_AddLock", "*disaggpb.Op_AddLock conflict", "*disaggpb.Op_AddLock unchanged",
		"*disaggpb.Op_MarkDelete", "*disaggpb.Op_MarkDelete conflict", "*disaggpb.Op_Release"} {
		if w.reached[k] == 0 {
			t.Errorf("the workload never reached %s", k)
		}
	}
}
