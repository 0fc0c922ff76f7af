package chunkstore

import (
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"testing"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/copyset/copysettest"
	"github.com/chunkraft/chunkraft/internal/chunkop"
	"github.com/chunkraft/chunkraft/internal/kinds"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// The gate answers which fence covered a chunk op's index: the held one
// after its set op, a lifted one strictly between its set and lift ops,
// and lets the covering fence's owner through.
func TestFenceGateRefuses(t *testing.T) {
	g := (&writeFenceState{
		Held:   &heldFence{Owner: "mig:c", Since: 40},
		Lifted: []liftedFence{{Owner: "mig:a", Since: 10, Until: 20}, {Owner: "mig:b", Since: 25, Until: 30}},
	}).gate()
	for _, c := range []struct {
		index  uint64
		owner  string
		refuse bool
		holder string
	}{
		{5, "", false, ""}, {10, "", false, ""}, {11, "", true, "mig:a"}, {11, "mig:a", false, "mig:a"},
		{11, "mig:b", true, "mig:a"}, {19, "", true, "mig:a"}, {20, "", false, ""}, {22, "mig:a", false, ""},
		{26, "mig:a", true, "mig:b"}, {26, "mig:b", false, "mig:b"}, {30, "", false, ""}, {35, "", false, ""},
		{40, "", false, ""}, {41, "", true, "mig:c"}, {41, "mig:c", false, "mig:c"}, {1 << 40, "mig:a", true, "mig:c"},
	} {
		holder, refused := g.refuses(c.index, c.owner)
		if refused != c.refuse || holder != c.holder {
			t.Errorf("op at %d by %q: refused %v by %q, want %v by %q", c.index, c.owner, refused, holder, c.refuse, c.holder)
		}
	}
	if !g.blocks("") || !g.blocks("mig:a") || g.blocks("mig:c") {
		t.Error("a held fence must block all but its owner")
	}
	lifted := (&writeFenceState{Lifted: []liftedFence{{Owner: "mig:a", Since: 10, Until: 20}}}).gate()
	if lifted.blocks("") {
		t.Error("a lifted fence blocks new ops")
	}
	var none *fenceGate
	if _, refused := none.refuses(3, ""); refused || none.blocks("") || (&writeFenceState{}).gate() != nil {
		t.Error("no fence must refuse nothing and be no gate")
	}
}

// The fence ops' rules: one owner at a time, a set of the owner's own
// answers its index, a lift of another's is refused, a lift of none is a
// success, an op without an owner is refused; refusals change nothing.
func TestWriteFenceApply(t *testing.T) {
	g := copyset.NewGroupID(1, 1)
	st := &writeFenceState{}
	do := func(index uint64, op, owner string) writeFenceResult {
		t.Helper()
		before, _ := json.Marshal(st)
		res, changed := st.apply(g, index, &writeFenceOp{Op: op, Owner: owner, Reason: "r"})
		after, _ := json.Marshal(st)
		if changed != (string(before) != string(after)) {
			t.Fatalf("%s by %q at %d: changed %v, state %s -> %s", op, owner, index, changed, before, after)
		}
		return res
	}
	held := func(index uint64, op, owner, holder string) {
		t.Helper()
		var he *WriteFenceHeldError
		if res := do(index, op, owner); !errors.As(res.Err, &he) || he.Holder != holder || he.Owner != owner {
			t.Fatalf("%s by %q at %d: %v, want held by %q", op, owner, index, res.Err, holder)
		}
	}
	if res := do(3, fenceLift, "mig:a"); res.Err != nil || res.Since != 0 {
		t.Fatalf("lift of no fence: %+v", res)
	}
	if res := do(4, fenceSet, "mig:a"); res.Err != nil || res.Since != 4 {
		t.Fatalf("set: %+v", res)
	}
	if res := do(6, fenceSet, "mig:a"); res.Err != nil || res.Since != 4 {
		t.Fatalf("set again by the owner: %+v, want the index 4 it was set at", res)
	}
	held(7, fenceSet, "mig:b", "mig:a")
	held(8, fenceLift, "mig:b", "mig:a")
	if res := do(9, fenceSet, ""); !errors.Is(res.Err, ErrInvalidWriteFence) {
		t.Fatalf("set without an owner: %+v", res)
	}
	if res := do(10, fenceLift, "mig:a"); res.Err != nil || res.Since != 4 {
		t.Fatalf("lift by the owner: %+v", res)
	}
	if st.Held != nil || len(st.Lifted) != 1 || st.Lifted[0] != (liftedFence{Owner: "mig:a", Since: 4, Until: 10}) {
		t.Fatalf("after the lift: %+v", st)
	}
	if res := do(11, fenceSet, "mig:b"); res.Err != nil || res.Since != 11 {
		t.Fatalf("set by another owner once lifted: %+v", res)
	}
	for i := range uint64(keepLiftedFences + 5) {
		do(20+2*i, fenceLift, "mig:b")
		do(21+2*i, fenceSet, "mig:b")
	}
	if len(st.Lifted) != keepLiftedFences || st.Lifted[len(st.Lifted)-1].Until != 20+2*(keepLiftedFences+4) {
		t.Fatalf("%d lifted fences kept, the last until %d", len(st.Lifted), st.Lifted[len(st.Lifted)-1].Until)
	}
}

// fenceOpBytes is a replicated fence op.
func fenceOpBytes(t testing.TB, op, owner string) []byte {
	t.Helper()
	b, err := encodeWriteFenceOp(&writeFenceOp{Op: op, Owner: owner, Reason: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// chunkWriteBytes is a chunk write of one block of fill at block blk of
// chunk 1, by owner.
func chunkWriteBytes(t testing.TB, blk uint32, fill byte, owner string) []byte {
	t.Helper()
	bs := conformanceLayout.BlockSize
	req := &pb.ChunkRequest{OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE.Enum(), LogicPoolId: new(uint32(1)), CopysetId: new(uint32(1)),
		ChunkId: new(uint64(1)), Sn: new(uint64(1)), Offset: new(blk * bs), Size: new(bs)}
	data := make([]byte, bs)
	for i := range data {
		data[i] = fill
	}
	b, err := chunkop.EncodeOwned(req, data, nil, owner)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// applyTo applies op at (index, pos) to ms and returns its result.
func applyTo(t testing.TB, ms copyset.Machines, index uint64, pos int, op []byte) any {
	t.Helper()
	kind, payload, err := copyset.DecodeOp(op)
	if err != nil {
		t.Fatal(err)
	}
	return copyset.ApplyOp(ms.Get(kind), index, pos, payload)
}

// A chunk op after a fence's set op is refused unless it is the owner's,
// and a replica replaying the log against a fence state newer than the op
// (a restart, whose state file holds every fence op applied) refuses the
// same ops and no other.
func TestWriteFenceRefusesAlikeOnReplay(t *testing.T) {
	dir := t.TempDir()
	specs := conformanceSpecs(t, kinds.WriteFence)
	open := func() copyset.Machines {
		ms, err := copyset.OpenMachines(specs, copyset.NewGroupID(1, 1), dir, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		return ms
	}
	log := [][]byte{
		chunkWriteBytes(t, 0, 1, ""),        // 1: no fence
		fenceOpBytes(t, fenceSet, "mig:a"),  // 2
		chunkWriteBytes(t, 1, 3, ""),        // 3: refused
		chunkWriteBytes(t, 2, 4, "mig:a"),   // 4: the owner's
		chunkWriteBytes(t, 3, 5, "mig:b"),   // 5: refused
		fenceOpBytes(t, fenceLift, "mig:a"), // 6
		chunkWriteBytes(t, 4, 7, ""),        // 7: no fence
		fenceOpBytes(t, fenceSet, "mig:b"),  // 8
		chunkWriteBytes(t, 5, 9, "mig:a"),   // 9: refused
		chunkWriteBytes(t, 6, 10, "mig:b"),  // 10: the owner's
	}
	refused := map[uint64]bool{3: true, 5: true, 9: true}
	statuses := func(ms copyset.Machines, from int) map[uint64]pb.CHUNK_OP_STATUS {
		out := map[uint64]pb.CHUNK_OP_STATUS{}
		for i := from; i < len(log); i++ {
			res := applyTo(t, ms, uint64(i+1), 0, log[i])
			if cr, ok := res.(chunkResult); ok {
				out[uint64(i+1)] = cr.status
			} else if _, ok := res.(writeFenceResult); !ok {
				t.Fatalf("index %d: result %v", i+1, res)
			}
		}
		return out
	}
	ms := open()
	first := statuses(ms, 0)
	for index, st := range first {
		want := pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS
		if refused[index] {
			want = pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_EPOCH_TOO_OLD
		}
		if st != want {
			t.Fatalf("index %d: %v, want %v", index, st, want)
		}
	}
	want, err := chunkState(ms)
	if err != nil {
		t.Fatal(err)
	}
	if err := syncAllMachines(ms, specs); err != nil {
		t.Fatal(err)
	}
	if err := copyset.CloseMachines(ms); err != nil {
		t.Fatal(err)
	}
	for from := range log {
		ms := open()
		again := statuses(ms, from)
		for index, st := range again {
			if st != first[index] {
				t.Errorf("replayed from %d: index %d %v, first applied %v", from+1, index, st, first[index])
			}
		}
		if got, err := chunkState(ms); err != nil || got != want {
			t.Errorf("replayed from %d: chunks %q (%v), want %q", from+1, got, err, want)
		}
		if err := copyset.CloseMachines(ms); err != nil {
			t.Fatal(err)
		}
	}
}

func syncAllMachines(ms copyset.Machines, specs []copyset.MachineSpec) error {
	for _, sp := range specs {
		if err := ms.Get(sp.Kind).Sync(); err != nil {
			return err
		}
	}
	return nil
}

// fenceWorkload interleaves the chunk workload's ops, as a client's or as
// one of two owners', with fence sets and lifts of the two owners, and
// follows the fence as it goes (fence ops are entries of their own, so the
// order drawn is the log's) to count what the log refuses.
type fenceWorkload struct {
	chunks                  chunkWorkload
	held                    string // the owner holding the fence, "" none
	refused, owned, fenceOp int
}

var fenceOwners = []string{"mig:a", "mig:b"}

func (w *fenceWorkload) op(rng *rand.Rand, i int) []byte {
	if rng.IntN(8) == 0 {
		op, owner := fenceSet, fenceOwners[rng.IntN(2)]
		if rng.IntN(2) == 0 {
			op = fenceLift
		}
		w.fenceOp++
		switch {
		case op == fenceSet && w.held == "":
			w.held = owner
		case op == fenceLift && w.held == owner:
			w.held = ""
		}
		return fenceOpBytes(w.chunks.t, op, owner)
	}
	req, data := w.chunks.request(rng, i)
	owner := ""
	if r := rng.IntN(3); r > 0 {
		owner = fenceOwners[r-1]
	}
	switch {
	case w.held != "" && w.held != owner:
		w.refused++
	case w.held != "":
		w.owned++
	}
	op, err := chunkop.EncodeOwned(req, data, nil, owner)
	if err != nil {
		w.chunks.t.Fatal(err)
	}
	return op
}

// writeFenceDump is the write fence machine's state, stamp included.
func writeFenceDump(ms copyset.Machines) (string, error) {
	m, ok := copyset.MachineAs[*writeFenceMachine](ms, kinds.WriteFence)
	if !ok {
		return "", errors.New("no write fence machine")
	}
	var b []byte
	var err error
	m.View(func(st *writeFenceState) { b, err = json.Marshal(st) })
	return string(b), err
}

// TestWriteFenceConforms: chunk ops of clients and of two owners among
// sets and lifts of the owners' fences keep the contract: replays from
// any index, a fuzzy copy of the fence's file with the chunk images of a
// snapshot stream, a snapshot install and restarts give the state of one
// apply, chunks and fence, so the same ops are refused everywhere.
func TestWriteFenceConforms(t *testing.T) {
	w := &fenceWorkload{chunks: chunkWorkload{t: t, del: true, cow: true}}
	copysettest.RunStateMachineConformance(t, conformanceSpecs(t, kinds.WriteFence), copysettest.Workload{
		Op: w.op,
		State: func(ms copyset.Machines) (string, error) {
			chunks, err := chunkState(ms)
			if err != nil {
				return "", err
			}
			fence, err := writeFenceDump(ms)
			return chunks + "write fence " + fence, err
		},
		Ops: 200,
	})
	t.Logf("%d fence ops; chunk ops refused: %d, passed as the owner: %d", w.fenceOp, w.refused, w.owned)
	if w.refused < 10 || w.owned < 5 || w.fenceOp < 10 {
		t.Errorf("the workload refused %d chunk ops and let %d through as the owner, in %d fence ops: too little to check", w.refused, w.owned, w.fenceOp)
	}
}
