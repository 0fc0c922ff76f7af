package copyset

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/internal/testwait"
)

// kindGroup is a test kind whose spec says Group (like a checkpoint
// machine stamping the index alone).
const kindGroup Kind = 3

func opOf(kind Kind, payload string) []byte {
	op := make([]byte, OpHeaderLen, OpHeaderLen+len(payload))
	PutOpHeader(op, kind)
	return append(op, payload...)
}

// posMachine is a Batch machine that records each op as
// "index.position:payload".
type posMachine struct {
	mu      sync.Mutex
	applied []string
}

func (m *posMachine) Apply(index uint64, payload []byte) any { return m.ApplyOp(index, 0, payload) }
func (m *posMachine) ApplyOp(index uint64, pos int, payload []byte) any {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.applied = append(m.applied, fmt.Sprintf("%d.%d:%s", index, pos, payload))
	return "ok " + string(payload)
}
func (m *posMachine) Sync() error              { return nil }
func (m *posMachine) Files() ([]string, error) { return nil, nil }
func (m *posMachine) Close() error             { return nil }

func (m *posMachine) log() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.applied...)
}

func TestGroupRules(t *testing.T) {
	open := func(MachineEnv, Machines) (StateMachine, error) { return &recordMachine{}, nil }
	reg, err := newRegistry([]MachineSpec{
		{Kind: kindBatch, Name: "batch", Batch: true, Open: open},
		{Kind: kindSolo, Name: "solo", Open: open},
		{Kind: kindGroup, Name: "checkpoint", Group: true, Open: open},
	})
	if err != nil {
		t.Fatal(err)
	}
	many := func(n int, op []byte) [][]byte {
		out := make([][]byte, n)
		for i := range out {
			out[i] = op
		}
		return out
	}
	big := opOf(kindBatch, strings.Repeat("x", MaxGroupBytes/2))
	for _, tc := range []struct {
		name string
		ops  [][]byte
		want string // "" for a valid group, else a substring of the error
	}{
		{"one batch op", [][]byte{opOf(kindBatch, "a")}, ""},
		{"one group op", [][]byte{opOf(kindGroup, "c")}, ""},
		{"batch ops and a checkpoint", [][]byte{opOf(kindBatch, "a"), opOf(kindGroup, "c"), opOf(kindBatch, "b")}, ""},
		{"a full entry", append(many(MaxOpsPerEntry-1, opOf(kindBatch, "a")), opOf(kindGroup, "c")), ""},
		{"no op", nil, "0 ops"},
		{"too many ops", many(MaxOpsPerEntry+1, opOf(kindBatch, "a")), "257 ops"},
		{"too many bytes", [][]byte{big, big, opOf(kindGroup, "c")}, "bytes of ops"},
		{"bad header", [][]byte{opOf(kindBatch, "a"), {9, byte(kindBatch)}}, "op 1: decode op"},
		{"short op", [][]byte{{1}}, "op 0: decode op"},
		{"unregistered kind", [][]byte{opOf(kindBatch, "a"), opOf(77, "z")}, "kind 77"},
		{"a solo machine", [][]byte{opOf(kindBatch, "a"), opOf(kindSolo, "s")}, "solo (kind 2) is neither Batch nor Group"},
		{"a group machine twice", [][]byte{opOf(kindGroup, "c"), opOf(kindBatch, "a"), opOf(kindGroup, "d")}, "op 2: a second op of machine checkpoint"},
	} {
		whole := make([][][]byte, len(tc.ops))
		for i := range tc.ops {
			whole[i] = tc.ops[i : i+1]
		}
		err := reg.checkGroup(whole)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (!errors.Is(err, ErrInvalidGroup) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want ErrInvalidGroup mentioning %q", tc.name, err, tc.want)
		}
	}
	// An op in parts: its header must be in its first part, its size is
	// all of them.
	a := opOf(kindBatch, "abc")
	half := strings.Repeat("x", MaxGroupBytes/2)
	for _, tc := range []struct {
		name string
		ops  [][][]byte
		want string
	}{
		{"an op in parts", [][][]byte{{a[:OpHeaderLen], a[OpHeaderLen:]}, {opOf(kindGroup, "c")}}, ""},
		{"a header split over parts", [][][]byte{{a[:1], a[1:]}}, "op 0: decode op"},
		{"an op of no parts", [][][]byte{{opOf(kindGroup, "c")}, nil}, "op 1: empty"},
		{"too many bytes in parts", [][][]byte{{opOf(kindBatch, half), []byte(half), []byte("y")}}, "bytes of ops"},
	} {
		err := reg.checkGroup(tc.ops)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (!errors.Is(err, ErrInvalidGroup) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want ErrInvalidGroup mentioning %q", tc.name, err, tc.want)
		}
	}
}

// groupSpecs registers m as the Batch machine and c as the Group machine.
func groupSpecs(m *posMachine, c *recordMachine) []MachineSpec {
	return []MachineSpec{
		{Kind: kindBatch, Name: "batch", Batch: true, Open: func(MachineEnv, Machines) (StateMachine, error) { return m, nil }},
		{Kind: kindGroup, Name: "checkpoint", Group: true, Open: func(MachineEnv, Machines) (StateMachine, error) { return c, nil }},
	}
}

func TestProposeGroup(t *testing.T) {
	m, c := &posMachine{}, &recordMachine{}
	n := soloLeader(t, fastRaft(), groupSpecs(m, c))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	index, res, err := n.ProposeGroup(ctx, [][]byte{opOf(kindBatch, "a"), opOf(kindGroup, "cp1"), opOf(kindBatch, "b")})
	if err != nil || index == 0 {
		t.Fatalf("ProposeGroup: %d, %v", index, err)
	}
	if fmt.Sprint(res) != "[ok a ok cp1 ok b]" {
		t.Fatalf("results %v", res)
	}
	want := []string{fmt.Sprintf("%d.0:a", index), fmt.Sprintf("%d.2:b", index)}
	if got := m.log(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("batch machine applied %v, want %v", got, want)
	}
	if got := fmt.Sprint(c.applied); got != fmt.Sprintf("[%d:cp1]", index) {
		t.Fatalf("group machine applied %s", got)
	}
	e, err := n.LogEntry(index)
	if err != nil || len(e.Ops) != 3 || e.Ops[1].Kind != kindGroup || string(e.Ops[2].Payload) != "b" {
		t.Fatalf("log entry %d: %+v, %v", index, e, err)
	}

	// A group of one op is an entry of its own too.
	index1, res, err := n.ProposeGroup(ctx, [][]byte{opOf(kindGroup, "cp2")})
	if err != nil || index1 <= index || len(res) != 1 || res[0] != "ok cp2" {
		t.Fatalf("group of one: %d, %v, %v", index1, res, err)
	}

	// An invalid group: an error, and nothing proposed.
	last := n.Status().LastIndex
	_, _, err = n.ProposeGroup(ctx, [][]byte{opOf(kindGroup, "x"), opOf(kindGroup, "y")})
	if !errors.Is(err, ErrInvalidGroup) {
		t.Fatalf("invalid group: %v", err)
	}
	if got := n.Status().LastIndex; got != last {
		t.Fatalf("invalid group: last index moved from %d to %d", last, got)
	}
}

// A group queued between single ops behind an unapplied entry goes as an
// entry of its own: the ops before it and after it are not merged into
// it, and those after it still share an entry.
func TestGroupIsNeverMergedWithBatches(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, m, held := heldLeader(ctx, t)
	// queued waits until k proposals wait in the queue: the batcher took
	// what came before them and waits for the in-flight slot.
	queued := func(k int) {
		testwait.Until(t, 5*time.Second, func() error {
			n.props.mu.Lock()
			defer n.props.mu.Unlock()
			if len(n.props.queue) != k {
				return fmt.Errorf("%d proposals queued, want %d", len(n.props.queue), k)
			}
			return nil
		})
	}
	var waits []chan proposalResult
	submit := func(name string) {
		pr, err := n.props.submit(ctx, chunkOp(name))
		if err != nil {
			t.Fatal(err)
		}
		waits = append(waits, pr.done)
	}
	submit("a")
	queued(0)
	grouped := make(chan error, 1)
	go func() {
		_, _, err := n.ProposeGroup(ctx, [][]byte{chunkOp("g1"), chunkOp("g2")})
		grouped <- err
	}()
	queued(1)
	submit("b")
	submit("c")
	queued(3)
	close(m.gate)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	for _, ch := range waits {
		if r := <-ch; r.err != nil {
			t.Fatal(r.err)
		}
	}
	if err := <-grouped; err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	a, b, c, g1, g2 := m.index["a"], m.index["b"], m.index["c"], m.index["g1"], m.index["g2"]
	if g1 != g2 || g1 != a+1 || b != g1+1 || c != b {
		t.Fatalf("indexes: a %d, group %d and %d, b %d, c %d: want a, the group, then b and c together", a, g1, g2, b, c)
	}
}

func TestProposeGroupAs(t *testing.T) {
	m, c := &posMachine{}, &recordMachine{}
	n := soloLeader(t, fastRaft(), groupSpecs(m, c))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	index, got, err := ProposeGroupAs[string](ctx, n, [][]byte{opOf(kindBatch, "a"), opOf(kindGroup, "cp")})
	if err != nil || index == 0 || fmt.Sprint(got) != "[ok a ok cp]" {
		t.Fatalf("ProposeGroupAs[string]: %d, %q, %v", index, got, err)
	}

	// The group commits; only its results are not what the caller expects.
	index, _, err = ProposeGroupAs[asResult](ctx, n, [][]byte{opOf(kindBatch, "b")})
	if err == nil || index == 0 || !strings.Contains(err.Error(), "op 0") {
		t.Fatalf("ProposeGroupAs of the wrong type: got index %d, %v; want the index and an error naming op 0", index, err)
	}

	// Invalid: nothing proposed, no index.
	if index, _, err = ProposeGroupAs[any](ctx, n, [][]byte{opOf(kindGroup, "x"), opOf(kindGroup, "y")}); !errors.Is(err, ErrInvalidGroup) || index != 0 {
		t.Fatalf("invalid group: %d, %v", index, err)
	}

	// Last: a FatalError in the middle stops the group and the replica.
	index, anys, err := ProposeGroupAs[any](ctx, n, [][]byte{opOf(kindBatch, "c"), opOf(kindGroup, "fail"), opOf(kindBatch, "d")})
	var fe *FatalError
	if !errors.As(err, &fe) || index == 0 || !strings.Contains(err.Error(), "op 1") {
		t.Fatalf("a FatalError apply: got index %d, %v; want the index and the FatalError of op 1", index, err)
	}
	if len(anys) != 3 || anys[0] != "ok c" || anys[1] != nil || anys[2] != nil {
		t.Fatalf("results %v: want op 0's, then zero values", anys)
	}
	if got := m.log(); strings.Contains(fmt.Sprint(got), ":d") {
		t.Fatalf("the op after the fatal one was applied: %v", got)
	}
}
