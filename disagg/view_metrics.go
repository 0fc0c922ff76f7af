package disagg

import "github.com/prometheus/client_golang/prometheus"

// newViewRequestsMetric is chunkraft_disagg_view_requests_total, every
// series at 0.
func newViewRequestsMetric() *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chunkraft_disagg_view_requests_total",
		Help: "Read-view requests this server answered, by op (establish, fetch, cancel) and result (success, error: an error answer or packet)."},
		[]string{"op", "result"})
	for _, op := range []string{"establish", "fetch", "cancel"} {
		for _, r := range []string{"success", "error"} {
			v.WithLabelValues(op, r)
		}
	}
	return v
}

// countView records one read-view answer.
func (s *Service) countView(op string, ok bool) {
	result := "success"
	if !ok {
		result = "error"
	}
	s.viewRequests.WithLabelValues(op, result).Inc()
}
