package chunkserver

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the server's Prometheus collectors, on their own registry.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec   // chunkraft_chunk_requests_total{op,status}
	latency  *prometheus.HistogramVec // chunkraft_chunk_request_seconds{op}
	bytes    *prometheus.CounterVec   // chunkraft_chunk_bytes_total{op}
}

// serverStats are the gauges the server computes on scrape.
type serverStats struct {
	copysets    func() (hosted, leading float64)
	crcFailures func() float64                 // block checksum failures, all copysets
	pool        func() (ready, target float64) // chunk file pool
}

func newMetrics(st serverStats) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chunkraft_chunk_requests_total",
			Help: "ChunkService requests by operation and returned status.",
		}, []string{"op", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "chunkraft_chunk_request_seconds",
			Help:    "ChunkService request latency by operation.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16),
		}, []string{"op"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chunkraft_chunk_bytes_total",
			Help: "Payload bytes written or read by successful ChunkService requests.",
		}, []string{"op"}),
	}
	m.reg.MustRegister(m.requests, m.latency, m.bytes,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "chunkraft_copysets",
			Help: "Copyset replicas hosted by this server.",
		}, func() float64 { h, _ := st.copysets(); return h }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "chunkraft_copyset_leaders",
			Help: "Copyset replicas on this server that are raft leaders.",
		}, func() float64 { _, l := st.copysets(); return l }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "chunkraft_chunk_crc_failures_total",
			Help: "Block reads whose crc32c did not match (corrupt data on disk), since the copysets opened.",
		}, st.crcFailures),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "chunkraft_chunkfilepool_ready",
			Help: "Preallocated chunk files ready in the chunk file pool.",
		}, func() float64 { r, _ := st.pool(); return r }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "chunkraft_chunkfilepool_target",
			Help: "Chunk files the pool keeps formatted (chunk_file_pool).",
		}, func() float64 { _, t := st.pool(); return t }),
	)
	return m
}

// observe records one finished chunk request.
func (m *metrics) observe(op string, status string, start time.Time, n int) {
	m.requests.WithLabelValues(op, status).Inc()
	m.latency.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if n > 0 {
		m.bytes.WithLabelValues(op).Add(float64(n))
	}
}
