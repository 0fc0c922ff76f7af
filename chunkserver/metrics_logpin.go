package chunkserver

import (
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/prometheus/client_golang/prometheus"
)

// logPinCollector exports the log retention pins (copyset/logpin.go) of
// the server's copysets, summed per server at scrape time: pins held, the
// entries and bytes the furthest-behind pin holds (what
// raft.max_pinned_entries and sync.max_retained_bytes bound), the entries
// all pins hold, the bounds, and the pins the bounds moved up.
type logPinCollector struct {
	copysets *copyset.Manager
	max      uint64
	maxBytes uint64

	pins, maxLag, maxLagBytes, pinned, bound, boundBytes, capped *prometheus.Desc
}

func newLogPinCollector(m *copyset.Manager, maxPinned, maxBytes uint64) *logPinCollector {
	d := descMaker("chunkraft_")
	return &logPinCollector{
		copysets: m, max: maxPinned, maxBytes: maxBytes,
		maxLagBytes: d("log_pin_max_lag_bytes",
			"About the bytes of log entries from the lowest pin of a copyset to its last index, the largest over the server's copysets (0 without pins); capped at sync.max_retained_bytes."),
		boundBytes: d("max_retained_bytes", "The bound sync.max_retained_bytes: about the most bytes of log a pin holds behind a copyset's last index."),
		pins:       d("log_pins", "Log retention pins held on this server's copysets (a consumer following a copyset's log holds back its truncation)."),
		maxLag: d("log_pin_max_lag_entries",
			"Entries from the lowest pin of a copyset to its last index, the largest over the server's copysets (0 without pins); capped at raft.max_pinned_entries."),
		pinned: d("log_pinned_entries", "Entries from each copyset's lowest pin to its last index, summed over the server's copysets."),
		bound:  d("max_pinned_entries", "The bound raft.max_pinned_entries: the most entries a pin holds behind a copyset's last index."),
		capped: d("log_pins_capped_total",
			"Times the bound moved a pin up (its holder missed entries and must resynchronise), summed over the copysets open now."),
	}
}

func (c *logPinCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, c.pins, c.maxLag, c.maxLagBytes, c.pinned, c.bound, c.boundBytes, c.capped)
}

func (c *logPinCollector) Collect(ch chan<- prometheus.Metric) {
	var pins, maxLag, maxLagBytes, pinned, capped uint64
	for _, n := range c.copysets.List() {
		st := n.LogPins()
		pins += uint64(st.Pins)
		maxLag = max(maxLag, st.Lag)
		maxLagBytes = max(maxLagBytes, st.LagBytes)
		pinned += st.Lag
		capped += st.CappedTotal
	}
	gauge := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	gauge(c.pins, pins)
	gauge(c.maxLag, maxLag)
	gauge(c.maxLagBytes, maxLagBytes)
	gauge(c.pinned, pinned)
	gauge(c.bound, c.max)
	gauge(c.boundBytes, c.maxBytes)
	ch <- prometheus.MustNewConstMetric(c.capped, prometheus.CounterValue, float64(capped))
}
