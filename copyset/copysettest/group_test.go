package copysettest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/chunkraft/chunkraft/copyset"
)

// The kinds of the group workload: writes stamped (index, position), and
// a checkpoint stamped with the index alone.
const (
	writesKind     = testKind
	checkpointKind = testKind + 1
)

// groupSpecs are a Batch machine counting writes and a Group machine
// counting checkpoints, both counters; byPos says whether the writes
// machine tells the ops of an entry apart.
func groupSpecs(byPos bool) []copyset.MachineSpec {
	return []copyset.MachineSpec{
		{Kind: writesKind, Name: "writes", Batch: true, Dir: "writes",
			Open: func(env copyset.MachineEnv, _ copyset.Machines) (copyset.StateMachine, error) {
				return openCounter(env.Dir, "writes/"+counterFile, byPos, false)
			}},
		{Kind: checkpointKind, Name: "checkpoint", Group: true, Dir: "checkpoint",
			Open: func(env copyset.MachineEnv, _ copyset.Machines) (copyset.StateMachine, error) {
				return openCounter(env.Dir, "checkpoint/"+counterFile, false, false)
			}},
	}
}

// groupWorkload is groups of one to five writes with one checkpoint op
// at a random place among them (a tenant applying another copyset's
// entry with its checkpoint advance). The state is both machines' counts;
// applied once, the writes count every proposed write and the checkpoint
// every group.
func groupWorkload() Workload {
	return Workload{
		Ops: 40,
		Group: func(rng *rand.Rand, i int) [][]byte {
			ops := make([][]byte, 1+rng.IntN(5))
			for j := range ops {
				ops[j] = counterOp(writesKind, rng.IntN(4))
			}
			return slices.Insert(ops, rng.IntN(len(ops)+1), counterOp(checkpointKind, 0))
		},
		State: func(ms copyset.Machines) (string, error) {
			w, ok := copyset.MachineAs[*counter](ms, writesKind)
			c, ok2 := copyset.MachineAs[*counter](ms, checkpointKind)
			if !ok || !ok2 {
				return "", fmt.Errorf("no writes or checkpoint machine")
			}
			return renderCounts(w.n, c.n), nil
		},
		Expect: func(entries [][][]byte) string {
			writes, checkpoints := map[int]int{}, map[int]int{}
			for _, ops := range entries {
				for _, op := range ops {
					kind, payload, _ := copyset.DecodeOp(op)
					var n int
					fmt.Sscanf(string(payload), "c%d", &n)
					if kind == writesKind {
						writes[n]++
					} else {
						checkpoints[n]++
					}
				}
			}
			return renderCounts(writes, checkpoints)
		},
	}
}

func renderCounts(writes, checkpoints map[int]int) string {
	total := 0
	for _, v := range writes {
		total += v
	}
	return fmt.Sprintf("writes %d %v\ncheckpoints %v\n", total, writes, checkpoints)
}

// Groups of writes and a checkpoint keep both exactly once: replayed from
// every earlier entry after a stop at any op (inside a group too), copied
// fuzzily as a snapshot streams them, and on a cluster through a snapshot
// install, a cut-off replica and restarts.
func TestGroupReplayIsIdempotent(t *testing.T) {
	RunStateMachineConformance(t, groupSpecs(true), groupWorkload())
}

// A Batch machine that stamps the index alone skips every op of a group
// after its first: the expected counts catch it.
func TestGroupConformanceCatchesIndexStampedBatch(t *testing.T) {
	rt := &recordingTB{TB: t}
	rt.run(func() { RunStateMachineConformance(rt, groupSpecs(false), groupWorkload()) })
	if !rt.Failed() || !strings.Contains(rt.report(), "expectation") {
		t.Fatalf("the suite passed a Batch machine stamping the index alone: %q", rt.report())
	}
}
