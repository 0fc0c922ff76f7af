package bench

import (
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram range: 1 us to 5 minutes, 3 significant digits. Longer
// latencies are recorded as the maximum.
const (
	histMinUs  = 1
	histMaxUs  = int64(5 * time.Minute / time.Microsecond)
	histDigits = 3
)

// newHistogram returns an empty latency histogram in microseconds.
func newHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(histMinUs, histMaxUs, histDigits)
}

// recordLatency records d, clamped to the histogram's range.
func recordLatency(h *hdrhistogram.Histogram, d time.Duration) {
	us := max(d.Microseconds(), histMinUs)
	us = min(us, histMaxUs)
	_ = h.RecordValue(us) // in range by construction
}

// Latency summarises a histogram, in microseconds.
type Latency struct {
	Mean float64 `json:"mean"`
	P50  int64   `json:"p50"`
	P99  int64   `json:"p99"`
	P999 int64   `json:"p999"`
	Max  int64   `json:"max"`
}

// LatencyOf summarises h.
func LatencyOf(h *hdrhistogram.Histogram) Latency {
	if h.TotalCount() == 0 {
		return Latency{}
	}
	return Latency{
		Mean: math.Round(h.Mean()*10) / 10,
		P50:  h.ValueAtPercentile(50),
		P99:  h.ValueAtPercentile(99),
		P999: h.ValueAtPercentile(99.9),
		Max:  h.Max(),
	}
}

// opKind indexes reads and writes.
type opKind int

const (
	opRead opKind = iota
	opWrite
	numOpKinds
)

func (k opKind) String() string {
	if k == opRead {
		return "read"
	}
	return "write"
}

// recorder collects the outcome of every operation of a phase. One mutex
// guards it: at tens of thousands of operations a second it is held for
// well under a percent of the time.
type recorder struct {
	mu       sync.Mutex
	hist     [numOpKinds]*hdrhistogram.Histogram
	all      *hdrhistogram.Histogram
	errs     [numOpKinds]int64
	kinds    map[string]int64
	examples map[string]string
	dropped  int64 // operations cut short by the run being interrupted
}

func newRecorder() *recorder {
	r := &recorder{all: newHistogram(), kinds: map[string]int64{}, examples: map[string]string{}}
	for i := range r.hist {
		r.hist[i] = newHistogram()
	}
	return r
}

func (r *recorder) ok(k opKind, d time.Duration) {
	r.mu.Lock()
	recordLatency(r.hist[k], d)
	recordLatency(r.all, d)
	r.mu.Unlock()
}

func (r *recorder) fail(k opKind, err error) {
	kind := Classify(err)
	r.mu.Lock()
	r.errs[k]++
	r.kinds[kind]++
	if _, ok := r.examples[kind]; !ok {
		r.examples[kind] = err.Error()
	}
	r.mu.Unlock()
}

func (r *recorder) drop() {
	r.mu.Lock()
	r.dropped++
	r.mu.Unlock()
}

// snapshot returns successful and failed operation counts and the p99 so far.
func (r *recorder) snapshot() (ops, errs int64, p99 int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.all.TotalCount(), r.errs[opRead] + r.errs[opWrite], r.all.ValueAtPercentile(99)
}

// OpStats describes one kind of operation of a run.
type OpStats struct {
	Ops    int64   `json:"ops"`
	Errors int64   `json:"errors"`
	IOPS   float64 `json:"iops"`
	MBPerS float64 `json:"mb_per_s"`
	Lat    Latency `json:"lat_us"`
}

// Result is the outcome of a run.
type Result struct {
	Mode    Mode
	BS      uint32
	IODepth int
	// Seed is the seed of the random offsets (to repeat a run).
	Seed uint64
	// Pool and Copysets are where the run's chunks were.
	Pool     uint32
	Copysets []uint32
	// Elapsed is the duration of the measured phase, until the last
	// operation completed.
	Elapsed time.Duration
	// Ops counts successful operations, Errors failed ones; Total sums both
	// kinds of operation.
	Total OpStats
	Read  OpStats
	Write OpStats
	// ErrorKinds counts failed operations by Classify kind; ErrorExamples
	// holds the first error message of each kind.
	ErrorKinds    map[string]int64
	ErrorExamples map[string]string
	// Interrupted counts operations cut short because the run was stopped
	// (its context ended); they are neither ops nor errors.
	Interrupted int64
	// Attempts counts failed RPC attempts by kind when the caller installed
	// an AttemptCounter (filled by the caller).
	Attempts map[string]int64
	// Prefill describes the prefill phase, if there was one.
	Prefill *PrefillStats
	// Verify holds the verification results of a verifying run.
	Verify *VerifyStats
	// Histogram is the latency histogram of all successful operations.
	Histogram *hdrhistogram.Histogram
}

// PrefillStats describe the prefill phase.
type PrefillStats struct {
	Bytes   uint64
	Writes  int64
	Elapsed time.Duration
}

func opStats(h *hdrhistogram.Histogram, errs int64, bs uint32, elapsed time.Duration) OpStats {
	s := OpStats{Ops: h.TotalCount(), Errors: errs, Lat: LatencyOf(h)}
	if secs := elapsed.Seconds(); secs > 0 {
		s.IOPS = round2(float64(s.Ops) / secs)
		s.MBPerS = round2(float64(s.Ops) * float64(bs) / 1e6 / secs)
	}
	return s
}

func round2(x float64) float64 { return math.Round(x*100) / 100 }

// result builds the Result of a finished phase.
func (r *recorder) result(cfg Config, elapsed time.Duration) *Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return &Result{
		Mode:          cfg.Mode,
		BS:            cfg.BS,
		IODepth:       cfg.IODepth,
		Seed:          cfg.Seed,
		Pool:          cfg.Pool,
		Copysets:      slices.Clone(cfg.Copysets),
		Elapsed:       elapsed,
		Total:         opStats(r.all, r.errs[opRead]+r.errs[opWrite], cfg.BS, elapsed),
		Read:          opStats(r.hist[opRead], r.errs[opRead], cfg.BS, elapsed),
		Write:         opStats(r.hist[opWrite], r.errs[opWrite], cfg.BS, elapsed),
		ErrorKinds:    maps.Clone(r.kinds),
		ErrorExamples: maps.Clone(r.examples),
		Interrupted:   r.dropped,
		Histogram:     r.all,
	}
}
