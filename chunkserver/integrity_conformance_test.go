package chunkserver

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/copyset/copysettest"
	"github.com/chunkraft/chunkraft/internal/kinds"
)

// integrityWorkload drives the integrity machine with the chunk store it
// scans: job ops of every type (progress from the job's cursor, as the
// scan worker proposes it, tracked on a shadow state), scan ops and chunk
// writes.
type integrityWorkload struct {
	t        *testing.T
	chunks   chunkWorkload
	shadow   integrityState
	finished int // jobs the log finishes
}

func (w *integrityWorkload) op(rng *rand.Rand, i int) []byte {
	switch r := rng.IntN(10); {
	case r < 3:
		return w.chunks.op(rng, i)
	case r < 4:
		op, err := encodeScanOp(copyset.NewGroupID(1, 1), uint64(1+rng.IntN(5)), 0, conformanceLayout.BlockSize)
		if err != nil {
			w.t.Fatal(err)
		}
		return op
	}
	types := []string{opSchedule, opSchedule, opStart, opStart, opProgress, opProgress, opProgress, opPause, opResume, opCancel, opFail}
	op := &jobOp{Type: types[rng.IntN(len(types))], ID: 1 + rng.Int32N(w.shadow.NextID+1), Now: int64(1000 + i)}
	switch op.Type {
	case opSchedule:
		op.ID, op.Pool, op.Copyset, op.SchedTime = 0, 1, 1, int64(i)
	case opStart:
		op.Total = 2
	case opProgress:
		for _, j := range w.shadow.Jobs {
			if j.State == JobRunning && rng.IntN(4) > 0 {
				op.ID = j.ID // mostly a running job, so that jobs finish
			}
		}
		from := ScanCursor{}
		for _, j := range w.shadow.Jobs {
			if j.ID == op.ID {
				from = j.Cursor
			}
		}
		to := ScanCursor{Chunk: from.Chunk + 1}
		op.From, op.To, op.ChunksDone, op.RangesScanned = &from, &to, int(to.Chunk), to.Chunk
		op.Progress, op.Finished = int32(40*to.Chunk), to.Chunk >= 2
		if rng.IntN(4) == 0 {
			op.Results = []ScanMismatch{{Chunk: from.Chunk}}
		}
	case opFail:
		op.Error = "disk gone"
	}
	if _, changed, _ := w.shadow.apply(uint64(i), op); changed {
		w.shadow.Applied = uint64(i)
		if op.Finished {
			w.finished++
		}
	}
	b, err := encodeJobOp(op)
	if err != nil {
		w.t.Fatal(err)
	}
	return b
}

// integrityState is the machine's replicated state, then the chunk store's.
func integrityConformanceState(ms copyset.Machines) (string, error) {
	m, ok := copyset.MachineAs[*integrityMachine](ms, kinds.Integrity)
	if !ok {
		return "", fmt.Errorf("no integrity machine")
	}
	m.mu.RLock()
	b, err := json.MarshalIndent(&m.st, "", " ")
	m.mu.RUnlock()
	if err != nil {
		return "", err
	}
	chunks, err := chunkState(ms)
	return string(b) + "\n" + chunks, err
}

// The integrity machine, opened after the chunk store as the server opens
// it, keeps the StateMachine contract.
func TestIntegrityMachineConforms(t *testing.T) {
	w := &integrityWorkload{t: t, chunks: chunkWorkload{t: t}}
	copysettest.RunStateMachineConformance(t, conformanceSpecs(t, kinds.Integrity),
		copysettest.Workload{Op: w.op, State: integrityConformanceState})
	// The workload reached the job states worth checking.
	seen := map[JobState]bool{}
	for _, j := range w.shadow.Jobs {
		seen[j.State] = true
	}
	t.Logf("jobs at the end of the log: %d, next id %d, %d finished, states %v", len(w.shadow.Jobs), w.shadow.NextID, w.finished, seen)
	if w.shadow.NextID < 5 || w.finished == 0 {
		t.Errorf("the workload scheduled %d jobs, finished %d, reached states %v: too little to check", w.shadow.NextID, w.finished, seen)
	}
}
