// Command wakeups counts a Go execution trace's goroutine wake-ups
// (waiting to runnable) by where each goroutine had blocked and what woke
// it, per second, the most frequent first. It is how docs/performance.md
// counts what an idle chunkserver wakes for:
//
//	curl -so /tmp/idle.trace '127.0.0.1:9200/debug/pprof/trace?seconds=5'
//	cd scripts/wakeups && go run . /tmp/idle.trace
//
// A module of its own, so that its trace parser is no dependency of the
// server's.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"golang.org/x/exp/trace"
)

// frames names up to n frames of s outside the runtime and the standard
// library's synchronisation, innermost first.
func frames(s trace.Stack, n int) string {
	var out []string
	for f := range s.Frames() {
		fn := f.Func
		if strings.HasPrefix(fn, "runtime.") || strings.HasPrefix(fn, "internal/") ||
			strings.HasPrefix(fn, "sync.") || strings.HasPrefix(fn, "time.") {
			continue
		}
		out = append(out, fn)
		if len(out) >= n {
			break
		}
	}
	return strings.Join(out, " < ")
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: wakeups TRACE_FILE")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "wakeups:", err)
		os.Exit(1)
	}
}

func run(path string, w io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := trace.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	counts := map[string]int{}
	blocked := map[trace.GoID]string{}
	total := 0
	var first, last trace.Time
	for {
		ev, err := r.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if first == 0 {
			first = ev.Time()
		}
		last = ev.Time()
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		from, to := st.Goroutine()
		g := st.Resource.Goroutine()
		switch {
		case from == trace.GoRunning && to == trace.GoWaiting:
			blocked[g] = frames(st.Stack, 3)
		case from == trace.GoWaiting && to == trace.GoRunnable:
			total++
			where, ok := blocked[g]
			if !ok {
				where = "?" // blocked before the trace began
			}
			counts[where+"  <=  "+frames(ev.Stack(), 2)]++
		}
	}
	secs := float64(last-first) / 1e9
	if secs <= 0 {
		return fmt.Errorf("%s: no events", path)
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return counts[keys[i]] > counts[keys[j]] })
	fmt.Fprintf(w, "%.1f s, %d wake-ups, %.0f/s (blocked at  <=  woken by)\n", secs, total, float64(total)/secs)
	for i, k := range keys {
		if i == 40 {
			break
		}
		fmt.Fprintf(w, "%7.1f/s  %s\n", float64(counts[k])/secs, k)
	}
	return nil
}
