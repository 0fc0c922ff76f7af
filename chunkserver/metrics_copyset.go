package chunkserver

import (
	"strconv"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/prometheus/client_golang/prometheus"
)

// copysetCollector exports the raft figures of every hosted replica
// (copyset.Node.Status), read at scrape time: the chunk I/O path pays
// nothing, and a copyset's series go away with the replica (closed,
// deleted, moved to the trash). Labels are pool and copyset only.
type copysetCollector struct {
	copysets *copyset.Manager

	role, term, commit, applied, broken *prometheus.Desc
	leaderChanges, snapshotInstalls     *prometheus.Desc
	snapshotsByBytes, logBytes          *prometheus.Desc
}

func newCopysetCollector(m *copyset.Manager) *copysetCollector {
	d := descMaker("chunkraft_copyset_", "pool", "copyset")
	return &copysetCollector{
		copysets: m,
		role:     d("role", "Raft role of this replica: 0 follower, 1 candidate, 2 leader, 3 shutdown (stopped: broken or closing)."),
		term:     d("term", "Current raft term of this replica."),
		commit:   d("commit_index", "Highest log index this replica knows to be committed."),
		applied:  d("applied_index", "Highest log index this replica has handed to its state machines."),
		broken:   d("broken", "1 if an apply error (a disk fault) stopped this replica, else 0."),
		leaderChanges: d("leader_changes_total",
			"Times this replica learned of a new leader (itself included) since it was opened."),
		snapshotInstalls: d("snapshot_installs_total",
			"Snapshots this replica received from a leader and installed since it was opened."),
		snapshotsByBytes: d("snapshots_by_bytes_total",
			"Snapshots this replica took because the log entries since its last one held raft.snapshot_bytes, since it was opened."),
		logBytes: d("log_bytes", "About how many bytes of entry data this replica's raft log holds (counted as entries are stored since it was opened)."),
	}
}

func (c *copysetCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, c.role, c.term, c.commit, c.applied, c.broken, c.leaderChanges, c.snapshotInstalls, c.snapshotsByBytes, c.logBytes)
}

func (c *copysetCollector) Collect(ch chan<- prometheus.Metric) {
	for _, n := range c.copysets.List() {
		g := n.Group()
		pool, cs := strconv.FormatUint(uint64(g.Pool()), 10), strconv.FormatUint(uint64(g.Copyset()), 10)
		st := n.Status()
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, pool, cs)
		}
		counter := func(d *prometheus.Desc, v uint64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), pool, cs)
		}
		broken := 0.0
		if st.Broken != nil {
			broken = 1
		}
		gauge(c.role, float64(st.State))
		gauge(c.term, float64(st.Term))
		gauge(c.commit, float64(st.CommittedIndex))
		gauge(c.applied, float64(st.AppliedIndex))
		gauge(c.broken, broken)
		counter(c.leaderChanges, st.LeaderChanges)
		counter(c.snapshotInstalls, st.SnapshotsInstalled)
		counter(c.snapshotsByBytes, st.SnapshotsByBytes)
		gauge(c.logBytes, float64(st.LogBytes))
	}
}
