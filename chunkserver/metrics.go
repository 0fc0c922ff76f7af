package chunkserver

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the server's Prometheus collectors, on their own registry:
// the process's and the copysets' here, each tenant's its Collectors.
type metrics struct {
	reg *prometheus.Registry
}

func newMetrics(copysets func() (hosted, leading float64)) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.reg.MustRegister(
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "chunkraft_copysets",
			Help: "Copyset replicas hosted by this server.",
		}, func() float64 { h, _ := copysets(); return h }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "chunkraft_copyset_leaders",
			Help: "Copyset replicas on this server that are raft leaders.",
		}, func() float64 { _, l := copysets(); return l }),
	)
	return m
}

// descMaker returns a constructor of descriptions named prefix+name with
// the variable labels given (the scrape-time collectors' metrics).
func descMaker(prefix string, labels ...string) func(name, help string) *prometheus.Desc {
	return func(name, help string) *prometheus.Desc { return prometheus.NewDesc(prefix+name, help, labels, nil) }
}

// describe sends every description to ch (a Collector's Describe).
func describe(ch chan<- *prometheus.Desc, ds ...*prometheus.Desc) {
	for _, d := range ds {
		ch <- d
	}
}
