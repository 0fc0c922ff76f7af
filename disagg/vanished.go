package disagg

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/proto/chunkraft/clusterpb"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
)

// Vanished copysets. The reconciler (reconcile.go) runs on the copysets
// this server leads, so the clone locks of a copyset that no longer
// exists (every replica removed or lost with its disk) would never go:
// nobody leads it. The owner looks at those: in its reconciler run on the
// lock copyset, every Interval, it crawls the cluster map (Deps.Cluster)
// for the copysets holding clone locks that this server hosts no replica
// of, and releases the locks of a copyset only once it is known to be
// gone:
//
//   - the crawl was complete: not truncated, every server it knows of
//     answered, none still opening its copysets from disk or shutting down
//     (clusterpb.Server.loading). A server that did not answer may host
//     the copyset, so an unreachable server keeps every such lock;
//   - the crawl was seeded with the members each copyset last recorded
//     with its locks (State.clone_copysets: the creating leader's
//     configuration, refreshed by the copyset's reconciler when it
//     changes), so a copyset whose every replica is down is found
//     unreachable even when nothing else leads the crawl to its servers;
//   - no server reported a replica of it, and the crawl did not remember
//     it either (clusterpb.Copyset.remembered: replicas seen earlier that
//     could not be asked now);
//   - and all of that held in every complete crawl for the grace
//     (Clones.Grace), counted from the first such crawl of this owner's
//     run: a new owner, or a crawl that finds the copyset, starts it again.
//
// Then every clone lock of the copyset is released with ReleaseClone at
// the cutoff now - grace, as the reconciler releases: a lock taken since
// (a copyset of that id created again, a creation in flight) stays.
//
// What this cannot tell: a copyset whose locks predate the recorded
// members, whose servers all are down and reachable through nothing but
// its own membership, after the owner restarted (its crawl memory is
// gone). cluster_seeds naming every server closes that too.

// vanishWatch is one owner run's memory: since when each copyset holding
// clone locks has been absent from complete crawls.
type vanishWatch struct {
	since map[copyset.GroupID]time.Time
}

func newVanishWatch() *vanishWatch { return &vanishWatch{since: map[copyset.GroupID]time.Time{}} }

// Members returns n's configuration as LockClone records it: peer ids,
// sorted (nil when it cannot be read).
func Members(n *copyset.Node) []string {
	peers, err := n.Peers()
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(peers))
	for _, p := range peers {
		out = append(out, string(p))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// cloneHolders returns the copysets holding clone locks, each with its
// recorded members (nil: none recorded).
func (m *Machine) cloneHolders() map[copyset.GroupID][]string {
	state := m.RLock()
	defer m.RUnlock()
	out := map[copyset.GroupID][]string{}
	for _, f := range state.Files {
		for _, l := range f.CloneLocks {
			out[copyset.NewGroupID(l.GetPool(), l.GetCopyset())] = nil
		}
	}
	for _, c := range state.CloneCopysets {
		g := copyset.NewGroupID(c.GetPool(), c.GetCopyset())
		if _, ok := out[g]; ok {
			out[g] = slices.Clone(c.GetMembers())
		}
	}
	return out
}

// incomplete says why crawl cannot tell that a copyset is gone ("" when
// it can).
func incomplete(crawl *clusterpb.ClusterMapResponse) string {
	if crawl.GetTruncated() {
		return "the crawl was truncated (max servers)"
	}
	for _, s := range crawl.GetServers() {
		switch {
		case !s.GetReachable():
			return fmt.Sprintf("server %s did not answer: %s", s.GetAddress(), s.GetError())
		case s.GetLoading():
			return fmt.Sprintf("server %s is opening or closing its copysets", s.GetAddress())
		}
	}
	return ""
}

// releaseVanished is one look of the owner (n leads the lock copyset, m
// its table) at the copysets holding clone locks: it releases the locks
// of those gone for the grace at now (see above) and returns how many
// went.
func (s *Service) releaseVanished(ctx context.Context, n *copyset.Node, m *Machine, w *vanishWatch, now time.Time) (int, error) {
	if s.deps.Cluster == nil {
		return 0, nil
	}
	grace := s.deps.Config.Clones.Grace
	cutoff := now.Add(-grace).UnixMilli()
	if _, err := n.ReadBarrier(ctx); err != nil {
		return 0, fmt.Errorf("read barrier: %w", err)
	}
	holders := m.cloneHolders()
	for g := range holders {
		if s.copysets.Get(g) != nil {
			delete(holders, g) // a replica here: it exists
		}
	}
	maps.DeleteFunc(w.since, func(g copyset.GroupID, _ time.Time) bool { _, ok := holders[g]; return !ok })
	if len(holders) == 0 {
		return 0, nil
	}
	var seeds []string
	for _, members := range holders {
		seeds = append(seeds, members...)
	}
	slices.Sort(seeds)
	crawl, err := s.deps.Cluster(ctx, &clusterpb.ClusterMapRequest{Seeds: slices.Compact(seeds)})
	if err != nil {
		return 0, fmt.Errorf("cluster map: %w", err)
	}
	for _, c := range crawl.GetCopysets() {
		g := copyset.NewGroupID(c.GetPool(), c.GetCopyset())
		if _, ok := holders[g]; ok {
			delete(holders, g) // it exists (or may: remembered)
			delete(w.since, g)
		}
	}
	if len(holders) == 0 {
		return 0, nil
	}
	if why := incomplete(crawl); why != "" {
		s.log.Info("clone locks of copysets absent from the cluster map kept: the map may be incomplete", "copysets", groupList(holders), "why", why)
		return 0, nil
	}
	released := 0
	for g := range holders {
		first, seen := w.since[g]
		if !seen {
			w.since[g] = now
			s.log.Info("copyset holding clone locks absent from the cluster map: its locks go if it stays absent for the grace",
				"pool", g.Pool(), "copyset", g.Copyset(), "grace", grace)
			continue
		}
		if now.Sub(first) < grace {
			continue
		}
		n0 := released
		files, _ := m.List("", g.Pool(), g.Copyset())
		for _, f := range files {
			for _, l := range f.GetCloneLocks() {
				if l.GetPool() != g.Pool() || l.GetCopyset() != g.Copyset() {
					continue
				}
				op := &pb.Op{Op: &pb.Op_ReleaseClone{ReleaseClone: &pb.ReleaseClone{Name: f.GetKey(), Pool: g.Pool(), Copyset: g.Copyset(),
					Chunk: l.GetChunk(), BeforeMs: cutoff}}}
				res, ok, err := s.propose(ctx, n, op)
				what := func() string {
					return fmt.Sprintf("release %s on %s", CloneHolder(g.Pool(), g.Copyset(), l.GetChunk()), f.GetKey())
				}
				switch {
				case err != nil:
					return released, fmt.Errorf("%s: %w", what(), err)
				case !ok:
					return released, fmt.Errorf("%s: no longer the lock owner", what())
				case res.Err != nil:
					return released, fmt.Errorf("%s: %w", what(), res.Err)
				}
				released += len(res.Released)
			}
		}
		s.log.Warn("released the clone locks of a copyset gone from the cluster", "pool", g.Pool(), "copyset", g.Copyset(),
			"absent_since", first, "released", released-n0)
	}
	return released, nil
}

// groupList names the copysets of gs, sorted: "1/7 1/9".
func groupList(gs map[copyset.GroupID][]string) string {
	var out []string
	for _, g := range slices.Sorted(maps.Keys(gs)) {
		out = append(out, fmt.Sprintf("%d/%d", g.Pool(), g.Copyset()))
	}
	return strings.Join(out, " ")
}
