package kvproto

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kvdisagg "github.com/pingcap/kvproto/pkg/disaggregated"
)

// BenchmarkTiflashGcCycle puts b.N data files through TiFlash's GC cycle
// against a 3-server cluster on the in-process S3: tryAddLock, the lock
// object deleted, tryMarkDelete, the data file and its .del deleted; 8
// workers. It fails on any answer other than success, and reports the
// op rate (tryAddLock and tryMarkDelete calls per second) over the first
// and the last tenth of the files, and the size of the owner's state
// file at the end.
//
//	go test -run '^$' -bench TiflashGcCycle -benchtime 20000x ./test/kvproto
func BenchmarkTiflashGcCycle(b *testing.B) {
	ctx, cancel := context.WithTimeout(b.Context(), 30*time.Minute)
	defer cancel()
	procs, st, _, clients := s3Servers(b, ctx, 3)
	o, err := owner(ctx, clients, -1)
	if err != nil {
		b.Fatal(err)
	}
	c := clients[o]
	const workers = 8
	done := make([]time.Time, b.N)
	var next atomic.Int64
	var failed atomic.Value
	fail := func(err error) { failed.CompareAndSwap(nil, err) }
	cycle := func(i int, w uint64) error {
		key := fmt.Sprintf("s101/data/dat_%d_0", i)
		if err := st.Put(ctx, key, bytes.NewReader(nil), 0); err != nil {
			return err
		}
		lr, err := c.TryAddLock(ctx, &kvdisagg.TryAddLockRequest{DataFileKey: []byte(key), LockStoreId: w, LockSeq: uint64(i)})
		if err != nil || lr.GetResult().GetSuccess() == nil {
			return fmt.Errorf("tryAddLock %s: %v %v", key, lr, err)
		}
		if err := st.Delete(ctx, fmt.Sprintf("lock/s101/dat_%d_0.lock_s%d_%d", i, w, i)); err != nil {
			return err
		}
		mr, err := c.TryMarkDelete(ctx, &kvdisagg.TryMarkDeleteRequest{DataFileKey: []byte(key)})
		if err != nil || mr.GetResult().GetSuccess() == nil {
			return fmt.Errorf("tryMarkDelete %s: %v %v", key, mr, err)
		}
		if err := st.Delete(ctx, key); err != nil {
			return err
		}
		return st.Delete(ctx, key+".del")
	}
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < b.N && failed.Load() == nil; i = int(next.Add(1) - 1) {
				if err := cycle(i, uint64(w+1)); err != nil {
					fail(err)
					return
				}
				done[i] = time.Now()
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	if b.N < 20 {
		return // the benchmark's first, probing run
	}
	tenth := b.N / 10
	rate := func(from, to time.Time) float64 { return float64(2*tenth) / to.Sub(from).Seconds() }
	first := rate(start, done[tenth-1])
	last := rate(done[b.N-tenth-1], done[b.N-1])
	b.ReportMetric(first, "ops/s_first_tenth")
	b.ReportMetric(last, "ops/s_last_tenth")
	size := int64(-1)
	filepath.WalkDir(procs[o].DataDir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && filepath.Base(path) == "table.jsonl" && filepath.Base(filepath.Dir(path)) == "disagg" {
			if fi, err := os.Stat(path); err == nil && fi.Size() > size {
				size = fi.Size()
			}
		}
		return nil
	})
	b.ReportMetric(float64(size), "state_file_bytes")
}
