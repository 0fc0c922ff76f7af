package copyset

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// Test kinds: ops of kindBatch may share an entry (like chunk ops), ops of
// kindSolo may not (like integrity ops).
const (
	kindBatch Kind = 1
	kindSolo  Kind = 2
)

// testRegistry registers kindBatch (batching) and kindSolo.
func testRegistry(t *testing.T) *registry {
	t.Helper()
	open := func(MachineEnv, Machines) (StateMachine, error) { return &recordMachine{}, nil }
	r, err := newRegistry([]MachineSpec{
		{Kind: kindBatch, Name: "batch", Batch: true, Open: open},
		{Kind: kindSolo, Name: "solo", Open: open},
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// fixedMachine registers m under kind on every copyset.
func fixedMachine(kind Kind, batch bool, m StateMachine) []MachineSpec {
	return []MachineSpec{{Kind: kind, Name: "fixed", Batch: batch,
		Open: func(MachineEnv, Machines) (StateMachine, error) { return m, nil }}}
}

func chunkOp(payload string) []byte {
	op := make([]byte, OpHeaderLen, OpHeaderLen+len(payload))
	PutOpHeader(op, kindBatch)
	return append(op, payload...)
}

// An op given in parts makes the envelope of the same op given whole.
func TestBatchEnvelopeParts(t *testing.T) {
	big := chunkOp(string(bytes.Repeat([]byte{5}, 200)))
	ops := [][]byte{chunkOp("a"), big, chunkOp("")}
	parts := [][][]byte{{ops[0]}, {big[:OpHeaderLen], big[OpHeaderLen : OpHeaderLen+7], nil, big[OpHeaderLen+7:]}, {ops[2]}}
	if got, want := encodeBatchParts(parts), encodeBatch(ops); !bytes.Equal(got, want) {
		t.Fatalf("envelope of parts %x, want %x", got, want)
	}
}

func TestBatchEnvelopeRoundTrip(t *testing.T) {
	ops := [][]byte{chunkOp("a"), chunkOp(""), chunkOp(string(bytes.Repeat([]byte{7}, 300)))}
	got, err := decodeBatch(encodeBatch(ops))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ops) {
		t.Fatalf("%d ops, want %d", len(got), len(ops))
	}
	for i := range ops {
		if !bytes.Equal(got[i], ops[i]) {
			t.Fatalf("op %d = %x, want %x", i, got[i], ops[i])
		}
	}
	good := encodeBatch(ops)
	for name, data := range map[string][]byte{
		"empty":          {},
		"single op":      chunkOp("x"),
		"zero ops":       {opBatchVersion, 0},
		"count too big":  {opBatchVersion, 5, 1, 0},
		"length too big": {opBatchVersion, 1, 9, 0},
		"truncated":      good[:len(good)-1],
		"trailing bytes": append(append([]byte{}, good...), 0),
	} {
		if _, err := decodeBatch(data); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

func TestBatchable(t *testing.T) {
	other := make([]byte, OpHeaderLen)
	PutOpHeader(other, kindSolo)
	reg := testRegistry(t)
	for _, tc := range []struct {
		op   []byte
		want bool
	}{{chunkOp("x"), true}, {other, false}, {nil, false}, {[]byte{opBatchVersion, byte(kindBatch)}, false}} {
		if got := reg.batchable(tc.op); got != tc.want {
			t.Errorf("batchable(%x) = %v, want %v", tc.op, got, tc.want)
		}
	}
}

// recordMachine records what it applies; ops whose payload is "fail" are
// fatal.
type recordMachine struct{ applied []string }

func (m *recordMachine) Apply(index uint64, payload []byte) any {
	if string(payload) == "fail" {
		return &FatalError{Err: errors.New("disk on fire")}
	}
	m.applied = append(m.applied, fmt.Sprintf("%d:%s", index, payload))
	return "ok " + string(payload)
}
func (m *recordMachine) Sync() error              { return nil }
func (m *recordMachine) Files() ([]string, error) { return nil, nil }
func (m *recordMachine) Close() error             { return nil }

func TestFSMAppliesEnvelope(t *testing.T) {
	m := &recordMachine{}
	f := newFSM(testRegistry(t), &machineSet{kindBatch: m}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var broken *FatalError
	f.onBroken = func(_ uint64, fe *FatalError) { broken = fe }
	out := f.ApplyBatch([]*raft.Log{
		{Index: 1, Type: raft.LogCommand, Data: chunkOp("single")},
		{Index: 2, Type: raft.LogCommand, Data: encodeBatch([][]byte{chunkOp("x"), chunkOp("y")})},
	})
	if out[0] != "ok single" {
		t.Fatalf("single op result %v", out[0])
	}
	res, ok := out[1].(batchResult)
	if !ok || len(res) != 2 || res[0] != "ok x" || res[1] != "ok y" {
		t.Fatalf("envelope result %#v", out[1])
	}
	if want := []string{"1:single", "2:x", "2:y"}; fmt.Sprint(m.applied) != fmt.Sprint(want) {
		t.Fatalf("applied %v, want %v", m.applied, want)
	}
	if f.applied.Load() != 2 {
		t.Fatalf("applied index %d", f.applied.Load())
	}

	// A fatal op in the middle: the ops before it are applied, it and the
	// rest are answered with errors, the replica stops, the index stays.
	out = f.ApplyBatch([]*raft.Log{
		{Index: 3, Type: raft.LogCommand, Data: encodeBatch([][]byte{chunkOp("z"), chunkOp("fail"), chunkOp("w")})},
		{Index: 4, Type: raft.LogCommand, Data: chunkOp("after")},
	})
	res, ok = out[0].(batchResult)
	if !ok || len(res) != 3 || res[0] != "ok z" {
		t.Fatalf("envelope result %#v", out[0])
	}
	var fe *FatalError
	if !errors.As(res[1].(error), &fe) || res[2] != ErrBroken || out[1] != ErrBroken {
		t.Fatalf("results after the fatal op: %#v, %#v", res[1:], out[1])
	}
	if broken == nil || f.broken.Load() == nil {
		t.Fatal("replica not marked broken")
	}
	if f.applied.Load() != 2 {
		t.Fatalf("applied index moved to %d past the failed entry", f.applied.Load())
	}
	if want := []string{"1:single", "2:x", "2:y", "3:z"}; fmt.Sprint(m.applied) != fmt.Sprint(want) {
		t.Fatalf("applied %v, want %v", m.applied, want)
	}
}

// gateMachine is a chunk-kind machine whose Apply of the op "hold" waits
// until gate is closed; it records each op's index.
type gateMachine struct {
	gate    chan struct{}
	holding chan struct{} // closed once Apply is waiting on gate
	mu      sync.Mutex
	index   map[string]uint64
}

func (m *gateMachine) Apply(index uint64, payload []byte) any {
	if string(payload) == "hold" {
		close(m.holding)
		<-m.gate
	}
	m.mu.Lock()
	m.index[string(payload)] = index
	m.mu.Unlock()
	return nil
}
func (m *gateMachine) Sync() error              { return nil }
func (m *gateMachine) Files() ([]string, error) { return nil, nil }
func (m *gateMachine) Close() error             { return nil }

// heldLeader starts a leader of a gateMachine (kindBatch) with an
// in-flight window of one entry, proposes "hold" and returns once its
// apply waits on the gate: proposals made meanwhile queue behind it. held
// receives the outcome of "hold".
func heldLeader(ctx context.Context, t *testing.T) (*Node, *gateMachine, <-chan error) {
	t.Helper()
	m := &gateMachine{gate: make(chan struct{}), holding: make(chan struct{}), index: map[string]uint64{}}
	opts := fastRaft()
	opts.MaxInflightEntries = 1
	n := soloLeader(t, opts, fixedMachine(kindBatch, true, m))
	held := make(chan error, 1)
	go func() { _, _, err := n.Propose(ctx, chunkOp("hold")); held <- err }()
	<-m.holding
	return n, m, held
}

// With MaxInflightEntries 1, proposals made while an entry is unapplied
// wait for it and then travel together in one entry.
func TestInflightWindowPacksWaitingProposals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, m, held := heldLeader(ctx, t)
	// submit returns once the proposal is queued, so all five wait behind
	// the held entry. They are spaced out: without the window the batcher
	// would hand each to raft on its own meanwhile.
	names := []string{"a", "b", "c", "d", "e"}
	var waits []chan proposalResult
	for i, name := range names {
		if i > 0 {
			time.Sleep(10 * time.Millisecond)
		}
		pr, err := n.props.submit(ctx, chunkOp(name))
		if err != nil {
			t.Fatal(err)
		}
		waits = append(waits, pr.done)
	}
	close(m.gate)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	for i, ch := range waits {
		if r := <-ch; r.err != nil {
			t.Fatalf("op %s: %v", names[i], r.err)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	hold := m.index["hold"]
	for _, name := range names {
		if got := m.index[name]; got != hold+1 {
			t.Errorf("op %s applied at index %d, want %d (one entry after the held one at %d)", name, got, hold+1, hold)
		}
	}
}
