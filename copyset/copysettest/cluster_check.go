package copysettest

import (
	"fmt"
	"path/filepath"

	"github.com/chunkraft/chunkraft/copyset"
)

// checkCluster runs the log on three replicas over the real transport:
// a follower stopped while the leader writes past its trailing logs and
// snapshots catches up by a snapshot install; another is cut off under
// load and healed; then every server restarts. After each step the
// replicas' states must equal the leader's, and no replica that never
// installed a snapshot may have its log truncated past the last index its
// machines had applied at a Sync.
func (s *suite) checkCluster() {
	s.t.Helper()
	rec := &syncRecorder{}
	opts := FastRaft()
	if s.w.Raft != nil {
		s.w.Raft(&opts)
	}
	c := NewCluster(s.t, 3, rec.wrap(s.specs), opts)
	g := suiteGroup
	c.Create(g)
	// What is proposed: each op alone (the copyset batches them as it
	// will), or each group as one entry.
	var ops [][][]byte
	for _, e := range s.log {
		if s.w.Group != nil {
			ops = append(ops, e.ops)
			continue
		}
		for _, op := range e.ops {
			ops = append(ops, [][]byte{op})
		}
	}
	var proposed []uint64 // log indexes of the workload's ops
	propose := func(ops [][][]byte) {
		for _, group := range ops {
			var idx uint64
			var results []any
			if s.w.Group != nil {
				idx, results = c.ProposeGroup(g, group)
			} else {
				var res any
				idx, res = c.propose(g, group[0])
				results = []any{res}
			}
			for _, res := range results {
				if fe, ok := res.(*copyset.FatalError); ok {
					s.t.Fatalf("conformance: cluster: apply: %v", fe)
				}
			}
			proposed = append(proposed, idx)
		}
	}
	q := len(ops) / 4
	propose(ops[:q])

	// A snapshot install: the follower misses more than the trailing logs.
	leader := c.Leader(g)
	f, o := (leader+1)%3, (leader+2)%3
	c.Stop(f)
	propose(ops[q : 2*q])
	c.Snapshot(leader, g)
	s.checkSynced(c, rec, g, proposed, "after a forced snapshot")
	c.Start(f)
	c.WaitApplied(g)
	if n := c.Node(f, g); n == nil || n.Status().SnapshotsInstalled == 0 {
		s.t.Errorf("conformance: cluster: the restarted follower caught up without a snapshot install (harness)")
	}
	s.converged(c, g, "snapshot install")

	// A replica cut off under load, then healed.
	c.Cut(o)
	propose(ops[2*q : 3*q])
	c.Heal(o)
	c.WaitApplied(g)
	s.converged(c, g, "cut off and healed")

	// Every server restarts; the rest of the log follows.
	for i := range c.Servers {
		c.Restart(i)
	}
	propose(ops[3*q:])
	c.WaitApplied(g)
	s.converged(c, g, "restart of every server")
	s.checkSynced(c, rec, g, proposed, "at the end")
}

// converged checks that every running replica's state equals the leader's.
func (s *suite) converged(c *Cluster, g copyset.GroupID, what string) {
	s.t.Helper()
	leader := c.Leader(g)
	want := s.state(c.Node(leader, g).Machines())
	for i := range c.Servers {
		if n := c.Node(i, g); n != nil && i != leader {
			s.same(fmt.Sprintf("cluster, %s: replica on server %d vs the leader", what, i), s.state(n.Machines()), want)
		}
	}
}

// checkSynced checks on every running replica that never installed a
// snapshot that each workload op below its log's first index was applied
// before a Sync of every machine.
func (s *suite) checkSynced(c *Cluster, rec *syncRecorder, g copyset.GroupID, proposed []uint64, when string) {
	s.t.Helper()
	for i, srv := range c.Servers {
		n := c.Node(i, g)
		if n == nil {
			continue
		}
		r := rec.state(filepath.Join(n.Dir(), "data"))
		if r.opens > srv.starts {
			continue // installed a snapshot: its machines hold the leader's files
		}
		first := n.Status().FirstIndex
		var need uint64
		for _, idx := range proposed {
			if idx < first {
				need = max(need, idx)
			}
		}
		if need > r.synced {
			s.t.Errorf("conformance: cluster, %s: server %d truncated its log below %d, but its machines were synced only up to index %d: Sync must run before the log it covers goes", when, i, first, r.synced)
		}
	}
}
