package dm

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
)

// metrics are the dm service's: the shares of the copysets this server
// holds, by stage, and each task's lag (gathered at scrape time from the
// machines and the appliers), and what this server's appliers applied.
type metrics struct {
	shares     *prometheus.Desc
	lag        *prometheus.Desc
	appliedOps *prometheus.CounterVec
	appliedB   *prometheus.CounterVec
	packetLag  *prometheus.HistogramVec
}

func newMetrics() *metrics {
	return &metrics{
		shares: prometheus.NewDesc("chunkraft_dm_shares",
			"dm subtask shares on this server's replicas, by stage and whether this replica leads its copyset.",
			[]string{"stage", "leader"}, nil),
		lag: prometheus.NewDesc("chunkraft_dm_lag_seconds",
			"The largest lag of a task's shares whose appliers run on this server: how long ago the first op of the packet an applier applies was appended on the source (0 when it has applied every packet the source holds).",
			[]string{"task"}, nil),
		appliedOps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chunkraft_dm_applied_ops_total",
			Help: "Chunk ops this server's dm appliers proposed into target copysets, by task."}, []string{"task"}),
		appliedB: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chunkraft_dm_applied_bytes_total",
			Help: "Chunk data bytes this server's dm appliers wrote into target copysets, by task."}, []string{"task"}),
		packetLag: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "chunkraft_dm_packet_lag_seconds",
			Help:    "For each binlog packet this server's dm appliers finished applying: from when its first op was appended on the source until then (the export's send interval included), by task.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 7.5, 10, 15, 30, 60}}, []string{"task"}),
	}
}

// applied counts what a group of task applied.
func (m *metrics) applied(task string, add *pb.Counters) {
	m.appliedOps.WithLabelValues(task).Add(float64(add.GetOps()))
	m.appliedB.WithLabelValues(task).Add(float64(add.GetBytes()))
}

// packetApplied observes the lag of a binlog packet of task whose first op
// was appended at firstMs, finished applying at now.
func (m *metrics) packetApplied(task string, firstMs int64, now time.Time) {
	if firstMs > 0 {
		m.packetLag.WithLabelValues(task).Observe(max(0, float64(now.UnixMilli()-firstMs)/1000))
	}
}

func (m *metrics) collectors(s *Service) []prometheus.Collector {
	return []prometheus.Collector{&shareCollector{m: m, s: s}, m.appliedOps, m.appliedB, m.packetLag}
}

type shareCollector struct {
	m *metrics
	s *Service
}

func (c *shareCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.m.shares
	ch <- c.m.lag
}

func (c *shareCollector) Collect(ch chan<- prometheus.Metric) {
	if c.s.copysets == nil {
		return
	}
	type key struct {
		stage  string
		leader bool
	}
	counts := map[key]int{}
	lags := map[string]float64{}
	now := time.Now()
	for _, n := range c.s.copysets.List() {
		m, ok := MachineOf(n)
		if !ok {
			continue
		}
		leader := n.IsLeader()
		var names []string
		m.View(func(st *pb.State) {
			for _, s := range st.Subtasks {
				counts[key{s.GetStage().String(), leader}]++
				names = append(names, s.GetConfig().GetName())
			}
		})
		for _, name := range names {
			if p := c.s.progressOf(n.Group(), name); p != nil {
				var l pb.Located
				p.fill(&l, now)
				lags[name] = max(lags[name], float64(l.GetLagMs())/1000)
			}
		}
	}
	for k, v := range counts {
		l := "false"
		if k.leader {
			l = "true"
		}
		ch <- prometheus.MustNewConstMetric(c.m.shares, prometheus.GaugeValue, float64(v), k.stage, l)
	}
	for task, v := range lags {
		ch <- prometheus.MustNewConstMetric(c.m.lag, prometheus.GaugeValue, v, task)
	}
}
