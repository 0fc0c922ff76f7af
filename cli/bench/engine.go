package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Run runs one benchmark against dev: the prefill (if configured), then the
// measured phase. It returns an error only when the run could not be made
// (bad config, failed prefill); failed operations of the measured phase are
// counted in the Result. When ctx ends, no new operations start, and those
// cut short are counted as Interrupted.
func Run(ctx context.Context, dev IO, cfg Config) (*Result, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := newLayout(cfg)
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64()
	}
	var tr *tracker
	if cfg.Verify {
		if l.total > maxVerifyBlocks {
			return nil, fmt.Errorf("--verify tracks at most %d blocks; %d copysets x span %d / bs %d is %d", maxVerifyBlocks, len(cfg.Copysets), cfg.Span, cfg.BS, l.total)
		}
		tr = newTracker(rand.Uint64()|1, l)
	}
	var pre *PrefillStats
	if cfg.Prefill {
		var err error
		if pre, err = prefill(ctx, dev, cfg, l, tr); err != nil {
			return nil, err
		}
	}
	if cfg.BeforeMeasure != nil {
		cfg.BeforeMeasure()
	}
	res := measure(ctx, dev, cfg, l, tr)
	res.Prefill = pre
	if tr != nil {
		res.Verify = tr.stats()
	}
	return res, nil
}

// prefill writes every block once, in writes of about 1 MiB (or BS), a few
// in flight, in order.
func prefill(ctx context.Context, dev IO, cfg Config, l layout, tr *tracker) (*PrefillStats, error) {
	runs := l.prefillRuns(max(prefillUnit, uint64(cfg.BS)))
	logf(cfg.Log, "prefill: writing %d copysets x %s in %d writes", len(cfg.Copysets), sizeString(l.blocksPerCopyset*uint64(cfg.BS)), len(runs))
	start := time.Now()
	var (
		next    atomic.Int64
		written atomic.Uint64
		mu      sync.Mutex
		first   error
		wg      sync.WaitGroup
	)
	failed := func() bool { mu.Lock(); defer mu.Unlock(); return first != nil }
	for range min(prefillDepth, len(runs)) {
		wg.Go(func() {
			buf := make([]byte, max(prefillUnit, uint64(cfg.BS)))
			fillRandom(buf)
			for ctx.Err() == nil && !failed() {
				i := next.Add(1) - 1
				if i >= int64(len(runs)) {
					return
				}
				r := runs[i]
				a := l.addr(r.first)
				data := buf[:r.count*uint64(cfg.BS)]
				var seq uint64
				if tr != nil {
					seq = tr.beginWriteRun(r.first, r.count)
					encodeAt(data, tr.run, a, seq)
				}
				err := dev.WriteChunk(ctx, a.id, a.offset, data, cfg.Sn)
				if tr != nil {
					tr.endWriteRun(r.first, r.count, seq, err == nil)
				}
				if err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("prefill: %w", err)
					}
					mu.Unlock()
					return
				}
				written.Add(uint64(len(data)))
			}
		})
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("prefill: %w", err)
	}
	st := &PrefillStats{Bytes: written.Load(), Writes: int64(len(runs)), Elapsed: time.Since(start)}
	logf(cfg.Log, "prefill: wrote %s in %s (%.1f MB/s)", sizeString(st.Bytes), st.Elapsed.Round(time.Millisecond), float64(st.Bytes)/1e6/st.Elapsed.Seconds())
	return st, nil
}

// encodeAt stamps data, to be written at a, with the pattern of write seq.
func encodeAt(data []byte, run uint64, a blockAddr, seq uint64) {
	EncodeBlock(data, Stamp{Run: run, Pool: a.id.Pool, Copyset: a.id.Copyset, Chunk: a.id.Chunk, Offset: a.offset, Seq: seq})
}

// fillRandom fills b with pseudo-random bytes (data that does not compress).
func fillRandom(b []byte) {
	x := rand.Uint64()
	for i := 0; i+8 <= len(b); i += 8 {
		v := splitmix64(&x)
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
}

// measure runs the measured phase.
func measure(ctx context.Context, dev IO, cfg Config, l layout, tr *tracker) *Result {
	rec := newRecorder()
	var issued atomic.Int64
	start := time.Now()
	if tr != nil {
		tr.start = start
	}
	var deadline time.Time
	if cfg.Runtime > 0 {
		deadline = start.Add(cfg.Runtime)
	}
	// claim reports whether worker w may start another operation. With
	// Ops, sequential workers get equal shares (so that Ops equal to the
	// number of blocks covers each block once); random ones share a pool.
	running := func() bool {
		if ctx.Err() != nil {
			return false
		}
		return deadline.IsZero() || time.Now().Before(deadline)
	}
	claim := func(w int) func() bool {
		switch {
		case cfg.Ops <= 0:
			return running
		case cfg.Mode.Sequential():
			n := cfg.Ops*int64(w+1)/int64(cfg.IODepth) - cfg.Ops*int64(w)/int64(cfg.IODepth)
			return func() bool {
				if !running() || n <= 0 {
					return false
				}
				n--
				return true
			}
		}
		return func() bool { return running() && issued.Add(1) <= cfg.Ops }
	}
	// paced adds --rate to a claim: operation k waits for its start time,
	// k/Rate seconds into the run.
	var slots atomic.Int64
	paced := func(w int) func() bool {
		c := claim(w)
		if cfg.Rate <= 0 {
			return c
		}
		return func() bool {
			if !c() {
				return false
			}
			at := start.Add(time.Duration(float64(slots.Add(1)-1) / cfg.Rate * float64(time.Second)))
			if d := time.Until(at); d > 0 {
				if !deadline.IsZero() && !at.Before(deadline) {
					return false
				}
				t := time.NewTimer(d)
				defer t.Stop()
				select {
				case <-ctx.Done():
					return false
				case <-t.C:
				}
			}
			return true
		}
	}

	done := make(chan struct{})
	var progress sync.WaitGroup
	if cfg.Progress != nil {
		progress.Go(func() { reportProgress(cfg, rec, start, done) })
	}

	var wg sync.WaitGroup
	for w := range cfg.IODepth {
		wg.Go(func() {
			runWorker(ctx, dev, cfg, l, tr, rec, w, paced(w))
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(done)
	progress.Wait()
	return rec.result(cfg, elapsed)
}

// runWorker is one of the IODepth workers: one request outstanding at a time.
func runWorker(ctx context.Context, dev IO, cfg Config, l layout, tr *tracker, rec *recorder, w int, claim func() bool) {
	pick := l.newPicker(cfg.Mode, w, cfg.IODepth, cfg.Seed)
	mix := rand.New(rand.NewPCG(cfg.Seed^0x5bd1e995, uint64(w)))
	buf := make([]byte, cfg.BS)
	if tr == nil {
		fillRandom(buf)
	}
	for claim() {
		g := pick.next()
		a := l.addr(g)
		read := cfg.Mode == RandRead || cfg.Mode == SeqRead ||
			(cfg.Mode == RandRW && mix.IntN(100) < cfg.RWMixRead)
		if read {
			var snap readSnap
			if tr != nil {
				snap = tr.beginRead(g)
			}
			t0 := time.Now()
			data, err := dev.ReadChunk(ctx, a.id, a.offset, cfg.BS)
			lat := time.Since(t0)
			switch {
			case err != nil && ctx.Err() != nil:
				rec.drop()
			case err != nil:
				rec.fail(opRead, err)
			default:
				rec.ok(opRead, lat)
				if tr != nil {
					if m := tr.endRead(g, snap, data); m != nil {
						logf(cfg.Log, "verify: MISMATCH %s", m)
					}
				}
			}
			continue
		}
		var seq uint64
		if tr != nil {
			seq = tr.beginWrite(g)
			encodeAt(buf, tr.run, a, seq)
		}
		t0 := time.Now()
		err := dev.WriteChunk(ctx, a.id, a.offset, buf, cfg.Sn)
		lat := time.Since(t0)
		if tr != nil {
			tr.endWrite(g, seq, err == nil)
		}
		switch {
		case err != nil && ctx.Err() != nil:
			rec.drop()
		case err != nil:
			rec.fail(opWrite, err)
		default:
			rec.ok(opWrite, lat)
		}
	}
}

// reportProgress writes a line every cfg.ProgressInterval until done.
func reportProgress(cfg Config, rec *recorder, start time.Time, done <-chan struct{}) {
	t := time.NewTicker(cfg.ProgressInterval)
	defer t.Stop()
	var lastOps int64
	last := start
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			ops, errs, p99 := rec.snapshot()
			secs := now.Sub(last).Seconds()
			rate := float64(ops-lastOps) / secs
			fmt.Fprintf(cfg.Progress, "[%4.0fs] %8.0f ops/s %8.1f MB/s  p99 %s  ops %d  errors %d\n",
				now.Sub(start).Seconds(), rate, rate*float64(cfg.BS)/1e6, usString(p99), ops, errs)
			lastOps, last = ops, now
		}
	}
}

func logf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}
