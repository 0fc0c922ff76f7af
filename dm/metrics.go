package dm

import (
	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
)

// metrics are the dm service's: the shares of the copysets this server
// holds, by stage (gathered at scrape time from the machines).
type metrics struct {
	shares *prometheus.Desc
}

func newMetrics() *metrics {
	return &metrics{shares: prometheus.NewDesc("chunkraft_dm_shares",
		"dm subtask shares on this server's replicas, by stage and whether this replica leads its copyset.",
		[]string{"stage", "leader"}, nil)}
}

func (m *metrics) collectors(s *Service) []prometheus.Collector {
	return []prometheus.Collector{&shareCollector{m: m, s: s}}
}

type shareCollector struct {
	m *metrics
	s *Service
}

func (c *shareCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.m.shares }

func (c *shareCollector) Collect(ch chan<- prometheus.Metric) {
	if c.s.copysets == nil {
		return
	}
	type key struct {
		stage  string
		leader bool
	}
	counts := map[key]int{}
	for _, n := range c.s.copysets.List() {
		m, ok := MachineOf(n)
		if !ok {
			continue
		}
		leader := n.IsLeader()
		m.View(func(st *pb.State) {
			for _, s := range st.Subtasks {
				counts[key{s.GetStage().String(), leader}]++
			}
		})
	}
	for k, v := range counts {
		l := "false"
		if k.leader {
			l = "true"
		}
		ch <- prometheus.MustNewConstMetric(c.m.shares, prometheus.GaugeValue, float64(v), k.stage, l)
	}
}
