package disagg

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/proto/chunkraft/clusterpb"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
)

// The owner's look at copysets gone from the cluster, with its clock and
// the cluster map given. Copyset 1/7 is gone, 1/8 exists elsewhere, 1/9
// is only remembered (its replicas down), 1/1 is the lock copyset here.
// 1/7's locks go only after complete crawls found it absent for the
// grace; an unreachable or loading server or a truncated crawl keeps
// them, a crawl that finds the copyset again restarts the grace, and a
// lock taken after the cutoff stays. The crawl is seeded with the
// members the locks recorded.
func TestReleaseVanished(t *testing.T) {
	c, n := lockCopyset(t)
	m, _ := MachineOf(n)
	var (
		crawl *clusterpb.ClusterMapResponse
		seeds []string
	)
	cfg := DefaultConfig()
	cfg.Clones.Grace = 10 * time.Minute
	s := New(Deps{Config: cfg, Logger: slog.New(slog.DiscardHandler),
		Cluster: func(_ context.Context, req *clusterpb.ClusterMapRequest) (*clusterpb.ClusterMapResponse, error) {
			seeds = req.GetSeeds()
			return crawl, nil
		}})
	s.Attach(c.Servers[0].Mgr)
	ctx := t.Context()
	for _, l := range []struct {
		copyset uint32
		chunk   uint64
		members []string
	}{{7, 1, []string{"h7:1:0", "h7:2:0"}}, {7, 2, nil}, {8, 1, []string{"h8:1:0"}}, {9, 1, nil}, {1, 3, nil}} {
		if err := s.LockClone(ctx, "o/a", 1, l.copyset, l.chunk, l.members); err != nil {
			t.Fatal(err)
		}
	}
	holders := func() string {
		files, _ := m.List("o/a", 0, 0)
		var out []string
		for _, f := range files {
			for _, l := range f.GetCloneLocks() {
				out = append(out, CloneHolder(l.GetPool(), l.GetCopyset(), l.GetChunk()))
			}
		}
		return strings.Join(out, " ")
	}
	const all = "clone:1/1/3 clone:1/7/1 clone:1/7/2 clone:1/8/1 clone:1/9/1"
	servers := []*clusterpb.Server{{Address: "h8:1", Reachable: true}, {Address: "h7:1", Reachable: true}, {Address: "h7:2", Reachable: true}}
	present := []*clusterpb.Copyset{{Pool: 1, Copyset: 1}, {Pool: 1, Copyset: 8, Replicas: []string{"h8:1:0"}}, {Pool: 1, Copyset: 9, Remembered: true}}
	complete := &clusterpb.ClusterMapResponse{Servers: servers, Copysets: present}
	w := newVanishWatch()
	base := time.Now()
	look := func(what string, cm *clusterpb.ClusterMapResponse, after time.Duration, want string) {
		t.Helper()
		crawl = cm
		if _, err := s.releaseVanished(ctx, n, m, w, base.Add(after)); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := holders(); got != want {
			t.Fatalf("%s: held %q, want %q", what, got, want)
		}
	}
	look("first absent", complete, 0, all)
	if want := []string{"h7:1:0", "h7:2:0", "h8:1:0"}; !slices.Equal(seeds, want) {
		t.Fatalf("crawl seeds %v, want the recorded members %v", seeds, want)
	}
	look("within the grace", complete, 9*time.Minute, all)
	unreachable := &clusterpb.ClusterMapResponse{Copysets: present,
		Servers: append(slices.Clone(servers), &clusterpb.Server{Address: "h7:3", Error: "connection refused"})}
	look("a server unreachable", unreachable, 11*time.Minute, all)
	loading := &clusterpb.ClusterMapResponse{Copysets: present,
		Servers: append(slices.Clone(servers), &clusterpb.Server{Address: "h7:3", Reachable: true, Loading: true})}
	look("a server loading", loading, 11*time.Minute, all)
	look("truncated", &clusterpb.ClusterMapResponse{Servers: servers, Copysets: present, Truncated: true}, 11*time.Minute, all)

	// Found again (remembered: its replicas went down): the grace starts
	// over from the next crawl without it.
	found := &clusterpb.ClusterMapResponse{Servers: servers, Copysets: append(slices.Clone(present), &clusterpb.Copyset{Pool: 1, Copyset: 7, Remembered: true})}
	look("found again", found, 11*time.Minute, all)
	look("absent again", complete, 12*time.Minute, all)
	look("within the new grace", complete, 21*time.Minute, all)

	// A lock of 1/7 taken after the cutoff (a copyset of that id created
	// again) stays when the grace has passed for the others.
	fresh := &pb.Op{Op: &pb.Op_LockClone{LockClone: &pb.LockClone{Name: "o/a", Pool: 1, Copyset: 7, Chunk: 4, TimeMs: base.Add(20 * time.Minute).UnixMilli()}}}
	if res, ok, err := s.propose(ctx, n, fresh); err != nil || !ok || res.Err != nil {
		t.Fatalf("fresh lock: %+v %v %v", res, ok, err)
	}
	look("past the grace", complete, 23*time.Minute, "clone:1/1/3 clone:1/7/4 clone:1/8/1 clone:1/9/1")
	if recs := m.cloneCopysets(1, 7); len(recs) != 1 {
		t.Fatalf("1/7's record went with locks left: %v", recs)
	}
	look("again: nothing more", complete, 24*time.Minute, "clone:1/1/3 clone:1/7/4 clone:1/8/1 clone:1/9/1")
	look("the fresh lock past its grace", complete, 31*time.Minute, "clone:1/1/3 clone:1/8/1 clone:1/9/1")
	if recs := m.cloneCopysets(1, 7); len(recs) != 0 {
		t.Fatalf("1/7's record stays without locks: %v", recs)
	}
}
