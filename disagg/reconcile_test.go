package disagg

import (
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/copyset/copysettest"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
)

// lockCopyset starts a one-server cluster with the lock copyset (1/1)
// and returns it with the copyset's leader.
func lockCopyset(t *testing.T) (*copysettest.Cluster, *copyset.Node) {
	t.Helper()
	c := copysettest.NewCluster(t, 1, []copyset.MachineSpec{Spec()}, copysettest.FastRaft())
	g := copyset.NewGroupID(1, 1)
	c.Create(g)
	return c, c.Node(c.Leader(g), g)
}

// The reconciler's decision, with its clock given: a lock younger than
// the grace stays whatever its chunk (a creation may be in flight); past
// the grace, a lock whose chunk still clones the object stays and one
// whose chunk does not goes; a lock refreshed by a retried creation after
// the reconciler took its cutoff stays. A round records the copyset's
// members when the table has others (none, here).
func TestReconcileGrace(t *testing.T) {
	c, n := lockCopyset(t)
	clones := map[uint64]string{5: "o/a"} // chunk 5 clones o/a; 9 is not a clone
	cfg := DefaultConfig()
	cfg.Clones.Grace = 10 * time.Minute
	s := New(Deps{Config: cfg, Logger: slog.New(slog.DiscardHandler),
		CloneOf: func(_ *copyset.Node, chunk uint64) (string, error) { return clones[chunk], nil }})
	s.Attach(c.Servers[0].Mgr)
	ctx := t.Context()
	for _, chunk := range []uint64{5, 9} {
		if err := s.LockClone(ctx, "o/a", 1, 1, chunk, nil); err != nil {
			t.Fatal(err)
		}
	}
	m, _ := MachineOf(n)
	holders := func() []string {
		files, _ := m.List("o/a", 1, 1)
		var out []string
		for _, f := range files {
			for _, l := range f.CloneLocks {
				out = append(out, CloneHolder(l.GetPool(), l.GetCopyset(), l.GetChunk()))
			}
		}
		return out
	}
	now := time.Now()
	if released, err := s.reconcileOnce(ctx, n, now); err != nil || released != 0 || len(holders()) != 2 {
		t.Fatalf("within the grace: released %d (%v), held %v", released, err, holders())
	}
	// The locks were taken without members: the round recorded the
	// copyset's configuration with the lock of the live clone.
	if recs := m.cloneCopysets(1, 1); len(recs) != 1 || !slices.Equal(recs[0].GetMembers(), Members(n)) || len(Members(n)) != 1 {
		t.Fatalf("recorded members %v, want %v", recs, Members(n))
	}
	later := now.Add(11 * time.Minute)
	if released, err := s.reconcileOnce(ctx, n, later); err != nil || released != 1 || len(holders()) != 1 || holders()[0] != "clone:1/1/5" {
		t.Fatalf("past the grace: released %d (%v), held %v", released, err, holders())
	}
	// A lock of 9 taken 11 minutes ago, a reconciler takes its cutoff
	// (now - grace), then a retried creation of 9 refreshes the lock: the
	// release carrying that cutoff leaves it.
	old := &pb.Op{Op: &pb.Op_LockClone{LockClone: &pb.LockClone{Name: "o/a", Pool: 1, Copyset: 1, Chunk: 9, TimeMs: time.Now().Add(-11 * time.Minute).UnixMilli()}}}
	if res, _, err := s.propose(ctx, n, old); err != nil || res.Err != nil || len(holders()) != 2 {
		t.Fatalf("old lock: %+v %v", res, err)
	}
	cutoff := time.Now().Add(-cfg.Clones.Grace).UnixMilli()
	if err := s.LockClone(ctx, "o/a", 1, 1, 9, nil); err != nil {
		t.Fatal(err)
	}
	op := &pb.Op{Op: &pb.Op_ReleaseClone{ReleaseClone: &pb.ReleaseClone{Name: "o/a", Pool: 1, Copyset: 1, Chunk: 9, BeforeMs: cutoff}}}
	res, _, err := s.propose(ctx, n, op)
	if err != nil || len(res.Released) != 0 || len(holders()) != 2 {
		t.Fatalf("release after a refresh: %+v %v, held %v", res, err, holders())
	}
	// Members the table cannot record are left out; the lock is taken.
	many := make([]string, MaxCloneMembers+1)
	for i := range many {
		many[i] = fmt.Sprintf("h%02d:1:0", i)
	}
	if err := s.LockClone(ctx, "o/m", 1, 1, 3, many); err != nil {
		t.Fatalf("a lock with %d members: %v", len(many), err)
	}
	// With clone locks disabled, LockClone takes none.
	cfg.Clones.Disabled = true
	off := New(Deps{Config: cfg, Logger: slog.New(slog.DiscardHandler)})
	off.Attach(c.Servers[0].Mgr)
	err = off.LockClone(ctx, "o/b", 1, 1, 1, nil)
	if files, _ := m.List("o/b", 0, 0); err != nil || len(files) != 0 {
		t.Fatalf("disabled: %v, table %v", err, files)
	}
}
