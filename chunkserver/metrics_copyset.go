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
	}
}

func (c *copysetCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, c.role, c.term, c.commit, c.applied, c.broken, c.leaderChanges, c.snapshotInstalls)
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
	}
}

// admissionCollector exports the admission state (admission.go) at scrape
// time: requests in flight and their limit, free space on the data dir and
// the floor below which the server is read-only.
type admissionCollector struct {
	a                                      *admission
	inflight, maxInflight, free, floor, ro *prometheus.Desc
}

func newAdmissionCollector(a *admission) *admissionCollector {
	d := descMaker("chunkraft_")
	return &admissionCollector{
		a:           a,
		inflight:    d("chunk_inflight_requests", "ChunkService requests being served now (counted against max_inflight)."),
		maxInflight: d("max_inflight", "The in-flight request limit (max_inflight); requests over it get OVERLOAD."),
		free:        d("data_dir_free_bytes", "Bytes available to the server on the data dir's filesystem (statfs at scrape time)."),
		floor:       d("min_free_bytes", "The free-space floor (min_free_bytes): below it every copyset of the server refuses mutations with NOSPACE."),
		ro:          d("read_only", "1 if free space on the data dir is below min_free_bytes (mutations get NOSPACE), else 0."),
	}
}

func (c *admissionCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, c.inflight, c.maxInflight, c.free, c.floor, c.ro)
}

func (c *admissionCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	inflight, limit := c.a.load()
	gauge(c.inflight, float64(inflight))
	gauge(c.maxInflight, float64(limit))
	free, floor, ro, err := c.a.space()
	if err == nil {
		gauge(c.free, float64(free))
	}
	gauge(c.floor, float64(floor))
	if ro {
		gauge(c.ro, 1)
	} else {
		gauge(c.ro, 0)
	}
}
