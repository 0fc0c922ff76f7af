package chunkserver

import (
	"time"

	"github.com/chunkraft/chunkraft/chunkserver/datastore"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
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
	crcFailures func() float64             // block checksum failures, all copysets
	pool        func() datastore.PoolStats // chunk file pool; zero without one
	admit       *admission                 // in-flight requests, free space and its floor
}

// chunkOps are the op labels chunk_service.go passes to mutate and read;
// their series exist from start-up.
var chunkOps = []string{"write", "delete", "delete_snapshot", "create_clone", "create_s3_clone", "recover", "read", "read_snapshot", "info"}

// payloadOps are the ops that count payload bytes.
var payloadOps = []string{"write", "read", "read_snapshot"}

// zeroStatuses are the request statuses exported at 0 for every op from
// start-up, so that rate() and increase() over them (the alerts in deploy/)
// see the first event; other statuses appear when first returned.
var zeroStatuses = []pb.CHUNK_OP_STATUS{
	pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS,
	pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_OVERLOAD,
	pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_NOSPACE,
	pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_DISK_FAIL,
	pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_FAILURE_UNKNOWN,
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
		}, func() float64 { return float64(st.pool().Ready) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "chunkraft_chunkfilepool_target",
			Help: "Chunk files the pool keeps formatted (chunk_file_pool).",
		}, func() float64 { return float64(st.pool().Target) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "chunkraft_chunkfilepool_zeroed_files_total",
			Help: "Files the chunk file pool wrote full of zeros (formatted new or re-zeroed recycled).",
		}, func() float64 { s := st.pool(); return float64(s.Formatted + s.Rezeroed) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "chunkraft_chunkfilepool_pauses_total",
			Help: "Times the pool paused zeroing a file because a chunk was created meanwhile.",
		}, func() float64 { return float64(st.pool().Paused) }),
		newAdmissionCollector(st.admit),
	)
	for _, op := range chunkOps {
		for _, s := range zeroStatuses {
			m.requests.WithLabelValues(op, s.String())
		}
		m.latency.WithLabelValues(op)
	}
	for _, op := range payloadOps {
		m.bytes.WithLabelValues(op)
	}
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
