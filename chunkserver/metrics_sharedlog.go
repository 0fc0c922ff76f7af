package chunkserver

import (
	"strconv"

	"github.com/chunkraft/chunkraft/copyset/sharedlog"
	"github.com/prometheus/client_golang/prometheus"
)

// sharedLogCollector exports the shared raft log's counters
// (sharedlog.Log.Stats) per shard, read at scrape time.
type sharedLogCollector struct {
	log *sharedlog.Log

	fsyncs, batches, records, bytes     *prometheus.Desc
	recycled, prepared, spareMisses     *prometheus.Desc
	segments, diskBytes, segmentPinners *prometheus.Desc
	spares                              *prometheus.Desc
}

// registerSharedLogMetrics adds the shared log's metrics to reg. It does
// nothing if l is nil (raft.log_store is not "shared").
func registerSharedLogMetrics(reg prometheus.Registerer, l *sharedlog.Log) {
	if l != nil {
		reg.MustRegister(newSharedLogCollector(l))
	}
}

func newSharedLogCollector(l *sharedlog.Log) *sharedLogCollector {
	d := descMaker("chunkraft_sharedlog_", "shard")
	return &sharedLogCollector{
		log:      l,
		fsyncs:   d("fsyncs_total", "fdatasync calls of the shared raft log's writers (one per group commit and one per segment started)."),
		batches:  d("batches_total", "Group commits (one write and one fdatasync) of the shared raft log."),
		records:  d("records_total", "Records committed to the shared raft log (one per StoreLogs, DeleteRange, Set or DropGroup call)."),
		bytes:    d("bytes_total", "Bytes of records and segment headers written to the shared raft log."),
		recycled: d("segments_recycled_total", "Shared raft log segments freed by garbage collection and kept as spares for reuse."),
		prepared: d("segments_prepared_total", "Shared raft log segments zero-filled in advance because none was freed to recycle."),
		spareMisses: d("spare_misses_total",
			"Shared raft log segment rolls that found no prepared segment and started a growing one (slower commits until the next is ready)."),
		segments:       d("segments", "Segment files of the shared raft log."),
		spares:         d("spare_segments", "Spare segments of the shared raft log ready for the next rolls (at most raft.log_spare_segments)."),
		diskBytes:      d("disk_bytes", "Length of the shared raft log's segment and spare files, preallocation included."),
		segmentPinners: d("oldest_segment_pinning_groups", "Raft groups whose oldest live entry keeps the shared raft log's oldest segment from being freed."),
	}
}

func (c *sharedLogCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, c.fsyncs, c.batches, c.records, c.bytes, c.recycled, c.prepared, c.spareMisses,
		c.segments, c.diskBytes, c.segmentPinners, c.spares)
}

func (c *sharedLogCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.log.Stats().Shards {
		shard := strconv.Itoa(s.Shard)
		counter := func(d *prometheus.Desc, v uint64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), shard)
		}
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, shard)
		}
		counter(c.fsyncs, s.Fsyncs)
		counter(c.batches, s.Batches)
		counter(c.records, s.Records)
		counter(c.bytes, s.Bytes)
		counter(c.recycled, s.Recycled)
		counter(c.prepared, s.Prepared)
		counter(c.spareMisses, s.SpareMisses)
		gauge(c.segments, float64(s.Segments))
		gauge(c.spares, float64(s.Spares))
		gauge(c.diskBytes, float64(s.DiskBytes))
		gauge(c.segmentPinners, float64(len(s.PinningGroups)))
	}
}
