package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/cli"
	chunkserverpb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

func TestRunOps(t *testing.T) {
	f := newFakeIO()
	cfg := testConfig(RandWrite, 4<<10, 1<<20)
	cfg.Ops, cfg.IODepth = 1000, 8
	res, err := Run(context.Background(), f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Total.Ops != 1000 || res.Total.Errors != 0 || f.writes.Load() != 1000 || f.reads.Load() != 0 {
		t.Fatalf("ops %d errors %d; fake saw %d writes %d reads", res.Total.Ops, res.Total.Errors, f.writes.Load(), f.reads.Load())
	}
	if res.Write.Ops != 1000 || res.Read.Ops != 0 || res.Histogram.TotalCount() != 1000 {
		t.Fatalf("per-op stats: %+v %+v", res.Write, res.Read)
	}
	if res.Total.IOPS <= 0 || res.Total.MBPerS <= 0 || res.Elapsed <= 0 {
		t.Fatalf("rates: %+v elapsed %s", res.Total, res.Elapsed)
	}
}

// --rate: operation k starts no earlier than k/rate into the run, so a run
// of 0.5 s at 200/s starts at most 100 (the first at once), however many
// workers and however fast the device.
func TestRunRate(t *testing.T) {
	f := newFakeIO()
	cfg := testConfig(RandWrite, 4<<10, 1<<20)
	cfg.Ops, cfg.Runtime, cfg.IODepth, cfg.Rate = 0, 500*time.Millisecond, 8, 200
	res, err := Run(context.Background(), f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Total.Ops > 100 || res.Total.Ops < 20 || res.Total.Errors != 0 {
		t.Fatalf("ops %d errors %d at 200/s for 0.5 s: want at most 100", res.Total.Ops, res.Total.Errors)
	}
	cfg.Rate = -1
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "rate -1") {
		t.Fatalf("rate -1: %v", err)
	}
}

func TestRunRuntime(t *testing.T) {
	f := newFakeIO()
	f.latency = time.Millisecond
	cfg := testConfig(RandRW, 4<<10, 1<<20)
	cfg.Ops, cfg.Runtime, cfg.IODepth, cfg.Prefill = 0, 300*time.Millisecond, 4, true
	var progress bytes.Buffer
	var mu sync.Mutex
	cfg.Progress = writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return progress.Write(p) })
	cfg.ProgressInterval = 50 * time.Millisecond
	res, err := Run(context.Background(), f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Elapsed < 300*time.Millisecond || res.Elapsed > 2*time.Second {
		t.Fatalf("elapsed %s for a 300ms run", res.Elapsed)
	}
	// 4 workers at >= 1ms per op for 0.3s: at most ~1200 ops, and surely > 50.
	if res.Total.Ops < 50 || res.Total.Ops > 1300 || res.Total.Errors != 0 {
		t.Fatalf("ops %d errors %d", res.Total.Ops, res.Total.Errors)
	}
	if res.Read.Ops == 0 || res.Write.Ops == 0 || res.Read.Ops < res.Write.Ops {
		t.Fatalf("70/30 mix: %d reads %d writes", res.Read.Ops, res.Write.Ops)
	}
	if res.Prefill == nil || res.Prefill.Bytes != 3<<20 {
		t.Fatalf("prefill %+v", res.Prefill)
	}
	if res.Total.Lat.P50 < 1000 {
		t.Fatalf("p50 %dus with 1ms of latency per op", res.Total.Lat.P50)
	}
	mu.Lock()
	lines := strings.Count(progress.String(), "ops/s")
	mu.Unlock()
	if lines < 3 {
		t.Fatalf("%d progress lines in 300ms at 50ms:\n%s", lines, progress.String())
	}
}

type writerFunc func([]byte) (int, error)

func (w writerFunc) Write(p []byte) (int, error) { return w(p) }

func TestRunSequentialWriteCoversSpanOnce(t *testing.T) {
	f := newFakeIO()
	cfg := testConfig(SeqWrite, 64<<10, 2<<20) // 32 blocks per copyset, 96 in all
	cfg.IODepth = 6
	cfg.Ops = 96
	res, err := Run(context.Background(), f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Total.Ops != 96 || len(f.written) != 96 {
		t.Fatalf("%d ops, %d distinct blocks written", res.Total.Ops, len(f.written))
	}
	for k, n := range f.written {
		if n != 1 || k.off%(64<<10) != 0 {
			t.Fatalf("block %v at %d written %d times", k.id, k.off, n)
		}
	}
}

func TestRunVerifyClean(t *testing.T) {
	for _, m := range []Mode{RandRW, SeqRead, RandRead} {
		f := newFakeIO()
		cfg := testConfig(m, 8<<10, 256<<10)
		cfg.Ops, cfg.IODepth, cfg.Verify, cfg.Prefill = 3000, 16, true, true
		cfg.RWMixRead = 50
		res, err := Run(context.Background(), f, cfg)
		if err != nil {
			t.Fatal(err)
		}
		v := res.Verify
		if v == nil || v.Mismatches != 0 || v.Checked != res.Read.Ops || v.Unwritten != 0 || res.Total.Errors != 0 {
			t.Fatalf("%s: verify %+v, %d reads, %d errors", m, v, res.Read.Ops, res.Total.Errors)
		}
	}
}

// TestRunVerifyDetectsCorruptBlock corrupts one block on the "disk" after
// the prefill and checks that a verifying sequential read finds it.
func TestRunVerifyDetectsCorruptBlock(t *testing.T) {
	f := newFakeIO()
	cfg := testConfig(SeqRead, 4<<10, 128<<10) // 32 blocks per copyset
	cfg.IODepth, cfg.Verify, cfg.Prefill = 4, true, true
	cfg.Ops = 96 // every block exactly once
	victim := cli.ChunkID{CopysetID: cli.CopysetID{Pool: 1, Copyset: 2}, Chunk: 1}
	cfg.BeforeMeasure = func() { f.corrupt(victim, 40<<10, 1000) }
	var log bytes.Buffer
	cfg.Log = &log
	res, err := Run(context.Background(), f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	v := res.Verify
	if v.Mismatches != 1 || len(v.Details) != 1 {
		t.Fatalf("verify %+v", v)
	}
	d := v.Details[0]
	if d.Block.Copyset != 2 || d.Block.Chunk != 1 || d.Block.Offset != 40<<10 || !strings.Contains(d.Got, "checksum mismatch") {
		t.Fatalf("mismatch %s", d)
	}
	if !strings.Contains(log.String(), "MISMATCH") {
		t.Fatalf("mismatch not printed as found:\n%s", log.String())
	}
	var text bytes.Buffer
	if err := res.WriteText(&text, cfg); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "1 mismatches") || !strings.Contains(text.String(), "copyset 2 chunk 1 offset 40960") {
		t.Fatalf("report:\n%s", text.String())
	}
}

// TestRunVerifyDetectsLostWrite acknowledges writes without storing them:
// the block then holds older data, which a read before the next write to
// it must reject (every 5th write is lost, so some surely are read).
func TestRunVerifyDetectsLostWrite(t *testing.T) {
	f := newFakeIO()
	cfg := testConfig(RandRW, 4<<10, 64<<10, 1) // 16 blocks
	cfg.IODepth, cfg.Verify, cfg.Prefill, cfg.Ops, cfg.RWMixRead = 1, true, true, 400, 50
	var measuring atomic.Bool
	var writes, dropped atomic.Int64
	cfg.BeforeMeasure = func() { measuring.Store(true) }
	f.beforeWrite = func(id cli.ChunkID, off uint32, n int) error {
		if measuring.Load() && writes.Add(1)%5 == 0 {
			dropped.Add(1)
			return errDropWrite
		}
		return nil
	}
	res, err := Run(context.Background(), f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if dropped.Load() < 10 || res.Verify.Mismatches == 0 {
		t.Fatalf("lost write not detected: %+v", res.Verify)
	}
	if d := res.Verify.Details[0]; d.Problem != "stale or unknown sequence" {
		t.Fatalf("mismatch %s", d)
	}
}

func TestRunCountsErrorsByKind(t *testing.T) {
	f := newFakeIO()
	var n atomic.Int64
	f.beforeWrite = func(cli.ChunkID, uint32, int) error {
		switch n.Add(1) % 10 {
		case 1:
			return fmt.Errorf("write x: %w", &cli.GaveUpError{After: time.Second, Last: errors.New("127.0.0.1:8200: CHUNK_OP_STATUS_OVERLOAD")})
		case 2:
			return fmt.Errorf("write x: %w", &cli.ChunkStatusError{Status: chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_DISK_FAIL})
		}
		return nil
	}
	cfg := testConfig(RandWrite, 4<<10, 1<<20)
	cfg.Ops, cfg.IODepth = 100, 1
	res, err := Run(context.Background(), f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"CHUNK_OP_STATUS_OVERLOAD": 10, "CHUNK_OP_STATUS_DISK_FAIL": 10}
	if fmt.Sprint(res.ErrorKinds) != fmt.Sprint(want) || res.Total.Errors != 20 || res.Total.Ops != 80 {
		t.Fatalf("kinds %v, %d errors, %d ops", res.ErrorKinds, res.Total.Errors, res.Total.Ops)
	}
	if !strings.Contains(res.ErrorExamples["CHUNK_OP_STATUS_DISK_FAIL"], "write x") {
		t.Fatalf("examples %v", res.ErrorExamples)
	}
	if j := res.JSON(); j.Errors != 20 || j.Ops != 80 {
		t.Fatalf("json %+v", j)
	}
	// Reads without a prefill hit chunks nobody wrote, and say so.
	cfg.Mode = RandRead
	res, err = Run(context.Background(), newFakeIO(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	_ = res.WriteText(&text, cfg)
	if res.ErrorKinds["CHUNK_OP_STATUS_CHUNK_NOTEXIST"] != 100 || !strings.Contains(text.String(), "--prefill") {
		t.Fatalf("kinds %v\n%s", res.ErrorKinds, text.String())
	}
}

func TestRunInterrupted(t *testing.T) {
	f := newFakeIO()
	f.latency = 200 * time.Millisecond
	cfg := testConfig(RandWrite, 4<<10, 1<<20)
	cfg.Ops, cfg.Runtime, cfg.IODepth = 0, time.Minute, 8
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Stop the run once the first ops have finished and later ones have
	// started: those are in flight (200 ms each) when it stops. (A fixed
	// deadline that is a multiple of the latency raced the ops' timers.)
	go func() {
		for f.writes.Load() <= int64(cfg.IODepth) && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	start := time.Now()
	res, err := Run(ctx, f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("stop took %s", time.Since(start))
	}
	if res.Total.Errors != 0 || res.Interrupted == 0 || res.Total.Ops == 0 {
		t.Fatalf("ops %d errors %d interrupted %d", res.Total.Ops, res.Total.Errors, res.Interrupted)
	}
}

func TestRunPrefillFailure(t *testing.T) {
	f := newFakeIO()
	f.beforeWrite = func(cli.ChunkID, uint32, int) error {
		return &cli.ChunkStatusError{Status: chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_NOSPACE}
	}
	cfg := testConfig(RandRead, 4<<10, 1<<20)
	cfg.Prefill = true
	if _, err := Run(context.Background(), f, cfg); err == nil || !strings.Contains(err.Error(), "NOSPACE") {
		t.Fatalf("err %v", err)
	}
}
