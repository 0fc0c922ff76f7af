package chunkstore

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chunkraft/chunkraft/chunkstore/datastore"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// metrics are the chunk requests' collectors.
type metrics struct {
	requests *prometheus.CounterVec   // chunkraft_chunk_requests_total{op,status}
	latency  *prometheus.HistogramVec // chunkraft_chunk_request_seconds{op}
	bytes    *prometheus.CounterVec   // chunkraft_chunk_bytes_total{op}
}

// chunkOps are the op labels chunk_service.go passes to mutate and read,
// and a tenant's groups' (group.go);
// their series exist from start-up.
var chunkOps = []string{"write", "delete", "delete_snapshot", "create_clone", "create_s3_clone", "recover", "read", "read_snapshot", "info", groupOp}

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

func newMetrics() *metrics {
	m := &metrics{
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

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.latency, m.bytes}
}

// observe records one finished chunk request.
func (m *metrics) observe(op string, status string, start time.Time, n int) {
	m.requests.WithLabelValues(op, status).Inc()
	m.latency.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if n > 0 {
		m.bytes.WithLabelValues(op).Add(float64(n))
	}
}

// statsCollectors are the figures read at scrape time: block checksum
// failures of every copyset, the chunk file pool, the admission state,
// the copysets' write fences.
func (s *Store) statsCollectors() []prometheus.Collector {
	pool := func() datastore.PoolStats {
		if s.pool == nil {
			return datastore.PoolStats{}
		}
		return s.pool.Stats()
	}
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "chunkraft_chunk_crc_failures_total",
			Help: "Block reads whose crc32c did not match (corrupt data on disk), since the copysets opened.",
		}, s.crcFailures),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "chunkraft_chunkfilepool_ready",
			Help: "Preallocated chunk files ready in the chunk file pool.",
		}, func() float64 { return float64(pool().Ready) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "chunkraft_chunkfilepool_target",
			Help: "Chunk files the pool keeps formatted (chunk_file_pool).",
		}, func() float64 { return float64(pool().Target) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "chunkraft_chunkfilepool_zeroed_files_total",
			Help: "Files the chunk file pool wrote full of zeros (formatted new or re-zeroed recycled).",
		}, func() float64 { p := pool(); return float64(p.Formatted + p.Rezeroed) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "chunkraft_chunkfilepool_pauses_total",
			Help: "Times the pool paused zeroing a file because a chunk was created meanwhile.",
		}, func() float64 { return float64(pool().Paused) }),
		newAdmissionCollector(s.admit),
		&writeFenceCollector{s: s, fenced: prometheus.NewDesc("chunkraft_copyset_write_fenced",
			"1 if a write fence is in force on this replica's copyset as it applied it (chunk writes of all but the fence's owner get EPOCH_TOO_OLD), else 0.",
			[]string{"pool", "copyset"}, nil)},
	}
}

// writeFenceCollector exports, for every hosted replica, whether its
// copyset's write fence is in force as the replica applied it
// (write_fence.go): one atomic load per copyset at scrape time.
type writeFenceCollector struct {
	s      *Store
	fenced *prometheus.Desc
}

func (c *writeFenceCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.fenced }

func (c *writeFenceCollector) Collect(ch chan<- prometheus.Metric) {
	if c.s.copysets == nil {
		return
	}
	for _, n := range c.s.copysets.List() {
		m, err := chunkMachineOf(n)
		if err != nil {
			continue
		}
		v := 0.0
		if m.gate.Load().blocks("") {
			v = 1
		}
		g := n.Group()
		ch <- prometheus.MustNewConstMetric(c.fenced, prometheus.GaugeValue, v,
			strconv.FormatUint(uint64(g.Pool()), 10), strconv.FormatUint(uint64(g.Copyset()), 10))
	}
}

// crcFailures is the block checksum failures of every hosted copyset.
func (s *Store) crcFailures() float64 {
	var n uint64
	if s.copysets == nil {
		return 0
	}
	for _, node := range s.copysets.List() {
		if m, err := chunkMachineOf(node); err == nil {
			n += m.store.Stats().CRCFailures
		}
	}
	return float64(n)
}

// admissionCollector exports the admission state (admission.go) at scrape
// time: requests in flight and their limit, free space on the data dir and
// the floor below which the server is read-only.
type admissionCollector struct {
	a                                      *Admission
	inflight, maxInflight, free, floor, ro *prometheus.Desc
}

func newAdmissionCollector(a *Admission) *admissionCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc("chunkraft_"+name, help, nil, nil) }
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
	for _, d := range []*prometheus.Desc{c.inflight, c.maxInflight, c.free, c.floor, c.ro} {
		ch <- d
	}
}

func (c *admissionCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	inflight, limit := c.a.Load()
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
