package datasync

import "github.com/prometheus/client_golang/prometheus"

// metrics are the sync service's counters.
type metrics struct {
	packets  prometheus.Counter
	records  prometheus.Counter
	bytes    prometheus.Counter
	refused  prometheus.Counter
	reassign prometheus.Counter
	failed   prometheus.Counter
	sends    *prometheus.CounterVec // by via: sendViaLocal, sendViaGRPC
}

func newMetrics() *metrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	m := &metrics{
		packets:  c("chunkraft_sync_packets_total", "Export packets this server's SyncTool wrote to a dest and acknowledged."),
		records:  c("chunkraft_sync_records_total", "Records in the export packets this server's SyncTool acknowledged."),
		bytes:    c("chunkraft_sync_bytes_total", "Bytes of the export packets this server's SyncTool wrote."),
		refused:  c("chunkraft_sync_senddata_refused_total", "SendData calls this server's SyncTool refused (the collector was told to drop the sub-task)."),
		reassign: c("chunkraft_sync_reassigned_total", "Sync sub-tasks this server took over as leader (a new token)."),
		failed:   c("chunkraft_sync_failed_total", "Sync sub-tasks this server's collectors or SyncTool turned FAILED."),
		sends: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chunkraft_sync_senddata_calls_total",
			Help: "SendData calls this server's collectors made, by how they reached the SyncTool (in_process: this server's own; grpc: another server's)."},
			[]string{"via"}),
	}
	m.sends.WithLabelValues(sendViaLocal)
	m.sends.WithLabelValues(sendViaGRPC)
	return m
}

// Collectors returns the service's metrics, for the server's registry.
func (s *Service) Collectors() []prometheus.Collector {
	m := s.metrics
	g := s.gate
	running := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "chunkraft_sync_snapshot_phases",
		Help: "Snapshot phases this server's collectors are exporting (at most sync.snapshot_exports)."},
		func() float64 { return float64(g.running()) })
	waiting := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "chunkraft_sync_snapshot_waiting",
		Help: "Sub-tasks of this server's collectors waiting for a snapshot phase slot (sync.snapshot_exports)."},
		func() float64 { return float64(g.waitingNow()) })
	return []prometheus.Collector{m.packets, m.records, m.bytes, m.refused, m.reassign, m.failed, m.sends, running, waiting}
}
