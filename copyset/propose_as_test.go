package copyset

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// asResult is a machine's result type, a small struct as the chunk
// machine's is.
type asResult struct {
	status int32
	n      uint32
}

func TestResultAs(t *testing.T) {
	g := NewGroupID(1, 2)
	fatal := &FatalError{Err: errors.New("disk on fire")}

	r, err := resultAs[asResult](g, 7, asResult{status: 3})
	if err != nil || r.status != 3 {
		t.Fatalf("an R: got %+v, %v", r, err)
	}

	_, err = resultAs[asResult](g, 7, fatal)
	var fe *FatalError
	if !errors.As(err, &fe) || fe != fatal {
		t.Fatalf("a FatalError result: got %v, want it wrapped", err)
	}
	if !strings.Contains(err.Error(), "index 7") || !strings.Contains(err.Error(), g.String()) {
		t.Errorf("a FatalError result: %q names neither the index nor the copyset", err)
	}

	if _, err = resultAs[asResult](g, 7, ErrBroken); !errors.Is(err, ErrBroken) {
		t.Fatalf("an ErrBroken result: got %v", err)
	}

	_, err = resultAs[asResult](g, 7, "ok")
	if err == nil || !strings.Contains(err.Error(), "string") || !strings.Contains(err.Error(), "asResult") {
		t.Fatalf("a result of another type: got %v, want an error naming both types", err)
	}

	if _, err = resultAs[asResult](g, 7, nil); err == nil {
		t.Fatal("a nil result as a struct: no error")
	}
	if e, err := resultAs[error](g, 7, nil); err != nil || e != nil {
		t.Fatalf("a nil result as an interface: got %v, %v, want its zero value", e, err)
	}
}

// The chunk write path converts a result on every op: it must not
// allocate.
func TestResultAsAllocatesNothing(t *testing.T) {
	g := NewGroupID(1, 2)
	var res any = asResult{status: 1, n: 4096}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := resultAs[asResult](g, 7, res); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("resultAs of an R allocates %v times", allocs)
	}
}

func TestProposeAs(t *testing.T) {
	n := soloLeader(t, fastRaft(), fixedMachine(kindBatch, true, &recordMachine{}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	index, got, err := ProposeAs[string](ctx, n, chunkOp("a"))
	if err != nil || got != "ok a" || index == 0 {
		t.Fatalf("ProposeAs[string]: got %d, %q, %v", index, got, err)
	}

	// The op commits and applies; only its result is not what the caller
	// expects.
	index, _, err = ProposeAs[asResult](ctx, n, chunkOp("b"))
	if err == nil || index == 0 {
		t.Fatalf("ProposeAs of the wrong type: got index %d, %v; want the op's index and an error", index, err)
	}

	// Last: a FatalError stops the replica.
	index, _, err = ProposeAs[string](ctx, n, chunkOp("fail"))
	var fe *FatalError
	if !errors.As(err, &fe) || index == 0 {
		t.Fatalf("a FatalError apply: got index %d, %v; want the op's index and the FatalError", index, err)
	}
}

// soloLeader starts a server hosting machines with raft options opts,
// creates copyset 1/1 on it alone and returns the replica once it leads.
// The server stops at the end of the test.
func soloLeader(t *testing.T, opts RaftOptions, machines []MachineSpec) *Node {
	t.Helper()
	s := startTestServerWith(t, "127.0.0.1:0", t.TempDir(), opts, machines)
	t.Cleanup(s.stop)
	g := NewGroupID(1, 1)
	if _, err := s.mgr.Create(context.Background(), g, []PeerID{s.peer()}); err != nil {
		t.Fatal(err)
	}
	return waitLeader(t, g, s)
}
