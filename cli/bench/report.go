package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// JSONReport is the machine-readable report (-o json). Its field set is
// fixed: tools parse it.
type JSONReport struct {
	RW       string   `json:"rw"`
	BS       uint32   `json:"bs"` // bytes
	IODepth  int      `json:"iodepth"`
	Seed     uint64   `json:"seed"` // of the random offsets: --seed repeats the run
	Pool     uint32   `json:"pool"`
	Copysets []uint32 `json:"copysets"`
	RuntimeS float64  `json:"runtime_s"`
	Ops      int64    `json:"ops"`    // successful operations
	Errors   int64    `json:"errors"` // failed operations
	// ErrorsByKind counts the failed operations by kind (see Classify);
	// empty when none failed.
	ErrorsByKind map[string]int64 `json:"errors_by_kind"`
	IOPS         float64          `json:"iops"`
	MBPerS       float64          `json:"mb_per_s"` // 10^6 bytes per second
	Lat          Latency          `json:"lat_us"`   // successful operations, microseconds
}

// JSON returns the JSON report of r.
func (r *Result) JSON() JSONReport {
	kinds := maps.Clone(r.ErrorKinds)
	if kinds == nil {
		kinds = map[string]int64{}
	}
	return JSONReport{
		RW:           string(r.Mode),
		BS:           r.BS,
		IODepth:      r.IODepth,
		Seed:         r.Seed,
		Pool:         r.Pool,
		Copysets:     slices.Clone(r.Copysets),
		RuntimeS:     math.Round(r.Elapsed.Seconds()*1000) / 1000,
		Ops:          r.Total.Ops,
		Errors:       r.Total.Errors,
		ErrorsByKind: kinds,
		IOPS:         r.Total.IOPS,
		MBPerS:       r.Total.MBPerS,
		Lat:          r.Total.Lat,
	}
}

// WriteJSON writes the JSON report of r to w, one object and a newline.
func (r *Result) WriteJSON(w io.Writer) error {
	b, err := json.Marshal(r.JSON())
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteText writes the human-readable report of r, a run of cfg, to w.
func (r *Result) WriteText(w io.Writer, cfg Config) error {
	cfg = cfg.withDefaults()
	var b strings.Builder
	mode := string(r.Mode)
	if r.Mode == RandRW {
		mode += fmt.Sprintf(" (%d%% reads)", cfg.RWMixRead)
	}
	fmt.Fprintf(&b, "%s  bs %s  iodepth %d  pool %d copysets %s  span %s/copyset\n",
		mode, sizeString(uint64(r.BS)), r.IODepth, cfg.Pool, idRanges(cfg.Copysets), sizeString(cfg.Span))
	if p := r.Prefill; p != nil {
		fmt.Fprintf(&b, "  prefill    %s in %s (%.1f MB/s)\n", sizeString(p.Bytes), p.Elapsed.Round(time.Millisecond), float64(p.Bytes)/1e6/p.Elapsed.Seconds())
	}
	fmt.Fprintf(&b, "  runtime    %.2f s (seed %d)\n", r.Elapsed.Seconds(), r.Seed)
	fmt.Fprintf(&b, "  ops        %d ok, %d errors", r.Total.Ops, r.Total.Errors)
	if r.Interrupted > 0 {
		fmt.Fprintf(&b, ", %d interrupted", r.Interrupted)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "  iops       %.1f\n", r.Total.IOPS)
	fmt.Fprintf(&b, "  bandwidth  %.1f MB/s (%.1f MiB/s)\n", r.Total.MBPerS, r.Total.MBPerS*1e6/(1<<20))
	fmt.Fprintf(&b, "  latency    %s\n", latString(r.Total.Lat))
	if r.Mode == RandRW {
		for _, x := range []struct {
			name string
			s    OpStats
		}{{"read", r.Read}, {"write", r.Write}} {
			fmt.Fprintf(&b, "  %-5s      %d ok, %d errors, %.1f iops, %.1f MB/s, %s\n", x.name, x.s.Ops, x.s.Errors, x.s.IOPS, x.s.MBPerS, latString(x.s.Lat))
		}
	}
	b.WriteString(r.errorText())
	if r.Verify != nil {
		b.WriteString(r.Verify.SummaryText())
		b.WriteString(r.Verify.detailText())
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ErrorText is the error part of the text report: failed operations and
// failed RPC attempts by kind ("" if there were none).
func (r *Result) ErrorText() string { return r.errorText() }

func (r *Result) errorText() string {
	var b strings.Builder
	if len(r.ErrorKinds) > 0 {
		b.WriteString("  errors by kind:\n")
		for _, k := range sortedKeys(r.ErrorKinds) {
			fmt.Fprintf(&b, "    %-36s %d  e.g. %s\n", k, r.ErrorKinds[k], r.ErrorExamples[k])
		}
		if r.ErrorKinds["CHUNK_OP_STATUS_CHUNK_NOTEXIST"] > 0 && r.Prefill == nil {
			b.WriteString("    (reads of chunks nobody wrote: run with --prefill)\n")
		}
		if r.ErrorKinds[KindEtcdKeyNotFound] > 0 && r.Prefill == nil {
			b.WriteString("    (reads of keys nobody wrote: run with --prefill)\n")
		}
	}
	if len(r.Attempts) > 0 {
		b.WriteString("  failed RPC attempts by kind (retried by the client, or final):\n")
		for _, k := range sortedKeys(r.Attempts) {
			fmt.Fprintf(&b, "    %-36s %d\n", k, r.Attempts[k])
		}
	}
	return b.String()
}

// SummaryText is the verify line of the text report: the reads checked
// against this run's writes, the reads of blocks this run had not written
// (checked only for damaged or misplaced sectors) and the mismatches.
func (v *VerifyStats) SummaryText() string {
	return fmt.Sprintf("  verify     %d reads checked against the writes of this run, %d reads of blocks the run did not write, %d mismatches\n",
		v.Checked, v.Unwritten, v.Mismatches)
}

// DetailText lists the mismatches kept with details ("" if none).
func (v *VerifyStats) DetailText() string { return v.detailText() }

func (v *VerifyStats) detailText() string {
	if v.Mismatches == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  MISMATCHES (%d; first %d):\n", v.Mismatches, len(v.Details))
	for _, m := range v.Details {
		fmt.Fprintf(&b, "    %s\n", m)
	}
	return b.String()
}

func sortedKeys(m map[string]int64) []string {
	return slices.Sorted(maps.Keys(m))
}

func latString(l Latency) string {
	return fmt.Sprintf("mean %s  p50 %s  p99 %s  p99.9 %s  max %s",
		usString(int64(math.Round(l.Mean))), usString(l.P50), usString(l.P99), usString(l.P999), usString(l.Max))
}

// usString renders microseconds: "850us", "12.3ms", "1.20s".
func usString(us int64) string {
	switch {
	case us < 1000:
		return strconv.FormatInt(us, 10) + "us"
	case us < 1000000:
		return strconv.FormatFloat(float64(us)/1000, 'f', 2, 64) + "ms"
	}
	return strconv.FormatFloat(float64(us)/1e6, 'f', 2, 64) + "s"
}

// sizeString renders a byte count in binary units when exact: "4KiB", "64MiB".
func sizeString(n uint64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return strconv.FormatUint(n>>u.shift, 10) + u.name
		}
	}
	return strconv.FormatUint(n, 10) + "B"
}

// idRanges renders ids compactly: 1-16, 1,3,8-10.
func idRanges(ids []uint32) string {
	var parts []string
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", ids[i], ids[j]))
		} else {
			parts = append(parts, strconv.FormatUint(uint64(ids[i]), 10))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
