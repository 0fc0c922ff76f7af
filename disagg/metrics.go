package disagg

import (
	"github.com/prometheus/client_golang/prometheus"

	dpb "github.com/chunkraft/chunkraft/proto/kvproto/disaggregated"
)

// The label values of chunkraft_disagg_requests_total.
var (
	metricOps     = []string{"lock", "mark_delete", "release", "lock_clone", "release_clone", "gc"}
	metricResults = []string{"success", "conflict", "not_owner", "error"}
)

// newRequestsMetric is chunkraft_disagg_requests_total, every series at 0.
func newRequestsMetric() *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chunkraft_disagg_requests_total",
		Help: "Lock service requests this server answered, by op (lock, mark_delete, release, lock_clone, release_clone, gc) and result (success, conflict, not_owner, error)."},
		[]string{"op", "result"})
	for _, op := range metricOps {
		for _, r := range metricResults {
			v.WithLabelValues(op, r)
		}
	}
	return v
}

// countLock records one tryAddLock or tryMarkDelete answer.
func (s *Service) countLock(op string, r *dpb.S3LockResult, err error) {
	result := "not_owner"
	switch {
	case err != nil:
		result = "error"
	case r.GetSuccess() != nil:
		result = "success"
	case r.GetConflict() != nil:
		result = "conflict"
	}
	s.requests.WithLabelValues(op, result).Inc()
}

// Collectors returns the service's metrics, for the server's registry.
func (s *Service) Collectors() []prometheus.Collector {
	pending := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "chunkraft_disagg_pending_decisions",
		Help: "Lock and mark decisions in flight in this server's replica of the lock copyset (0 where it hosts none)."},
		func() float64 {
			if s.copysets == nil {
				return 0
			}
			n := s.copysets.Get(s.group)
			if n == nil {
				return 0
			}
			m, ok := MachineOf(n)
			if !ok {
				return 0
			}
			state := m.RLock()
			defer m.RUnlock()
			return float64(len(state.Pending))
		})
	return []prometheus.Collector{s.requests, s.viewRequests, pending, s.orphans}
}

// newOrphansMetric is chunkraft_disagg_orphans_completed_total.
func newOrphansMetric() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: "chunkraft_disagg_orphans_completed_total",
		Help: "Lock and mark decisions this server's settler completed because no request of its own was finishing them (left by a previous owner, or by a request that gave up)."})
}

// countInternal records one DisaggInternal answer.
func (s *Service) countInternal(op string, notOwner, conflict bool, err error) {
	result := "success"
	switch {
	case err != nil:
		result = "error"
	case notOwner:
		result = "not_owner"
	case conflict:
		result = "conflict"
	}
	s.requests.WithLabelValues(op, result).Inc()
}
