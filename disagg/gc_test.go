package disagg

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/chunkraft/chunkraft/internal/objstore"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
)

// gc marks the objects that are not data files in batches and the data
// files as tryMarkDelete does: of 600 units, one of them clone-locked,
// the 300 data file keys take a decision each (their .del objects are
// their marks) and the 300 others two MarkObjects proposals (256 + 44
// names); the locked one is kept and reported. The removal deletes the
// data files by their .del objects, with no proposal, and forgets the
// others' entries in two proposals.
func TestGcMarksInBatches(t *testing.T) {
	c, n := lockCopyset(t)
	ctx := t.Context()
	st, err := objstore.Open(ctx, objstore.Config{Kind: objstore.KindLocal, Local: objstore.LocalConfig{Root: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Deps{Config: DefaultConfig(), Objects: st, Logger: slog.New(slog.DiscardHandler)})
	s.Attach(c.Servers[0].Mgr)
	const units = 600
	name := func(i int) string {
		if i%2 == 0 {
			return fmt.Sprintf("s9/data/dat_%d_0", i) // a data file key
		}
		return fmt.Sprintf("s9/other/%04d", i)
	}
	for i := range units {
		if err := st.Put(ctx, name(i), bytes.NewReader([]byte("x")), 1); err != nil {
			t.Fatal(err)
		}
	}
	locked := name(301)
	if err := s.LockClone(ctx, locked, 1, 1, 7, nil); err != nil {
		t.Fatal(err)
	}
	gc := func(graceMs int64) (*pb.GcResponse, uint64) {
		t.Helper()
		if _, err := n.ReadBarrier(ctx); err != nil {
			t.Fatal(err)
		}
		before := n.Status().LastIndex
		resp, err := s.internal.Gc(ctx, &pb.GcRequest{Prefix: "s9/", GraceMs: graceMs})
		if err != nil || resp.GetNotOwner() {
			t.Fatalf("gc: %v %v", resp, err)
		}
		return resp, n.Status().LastIndex - before
	}
	r, proposals := gc(3600_000)
	if len(r.GetMarked()) != units-1 || len(r.GetLocked()) != 1 || r.GetLocked()[0].GetName() != locked ||
		r.GetLocked()[0].GetLockBy() != "clone:1/1/7" || proposals != units/2+2 {
		t.Fatalf("gc: %d marked, locked %v, %d proposals (want %d, [%s], %d)", len(r.GetMarked()), r.GetLocked(), proposals, units-1, locked, units/2+2)
	}
	objs, err := st.List(ctx, "s9/data/")
	if err != nil {
		t.Fatal(err)
	}
	dels := 0
	for _, o := range objs {
		if strings.HasSuffix(o.Name, DelMarkSuffix) {
			dels++
		}
	}
	if dels != units/2 {
		t.Fatalf("%d .del objects, want %d", dels, units/2)
	}
	r, proposals = gc(0)
	if len(r.GetRemoved()) != units-1 || len(r.GetLocked()) != 1 || proposals != 2 {
		t.Fatalf("second gc: %d removed, locked %v, %d proposals", len(r.GetRemoved()), r.GetLocked(), proposals)
	}
	if objs, err := st.List(ctx, "s9/"); err != nil || len(objs) != 1 || objs[0].Name != locked {
		t.Fatalf("objects at the end: %v %v", objs, err)
	}
}
