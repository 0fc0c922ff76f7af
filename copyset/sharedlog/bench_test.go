package sharedlog

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// BenchmarkStoreLogs: N groups (goroutines) in parallel, each looping
// StoreLogs of one 4 KiB entry, fsync on, b.N appends in total. "shared" is
// this package with default shards; "bolt" is one raft-boltdb/v2 file per
// group, what a per-copyset store would do.
func BenchmarkStoreLogs(b *testing.B) {
	const entrySize = 4 << 10
	data := make([]byte, entrySize)
	for i := range data {
		data[i] = byte(i * 7)
	}
	run := func(b *testing.B, stores []raft.LogStore) {
		b.SetBytes(entrySize)
		var ops atomic.Int64
		var wg sync.WaitGroup
		errc := make(chan error, len(stores))
		b.ResetTimer()
		start := time.Now()
		for _, s := range stores {
			wg.Go(func() {
				for idx := uint64(1); ops.Add(1) <= int64(b.N); idx++ {
					l := &raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: data, AppendedAt: time.Now()}
					if err := s.StoreLogs([]*raft.Log{l}); err != nil {
						errc <- err
						return
					}
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		close(errc)
		for err := range errc {
			b.Fatal(err)
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "appends/s")
	}
	for _, groups := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("shared/groups=%d", groups), func(b *testing.B) {
			l := openLog(b, Options{Dir: b.TempDir()})
			defer l.Close()
			stores := make([]raft.LogStore, groups)
			for g := range stores {
				stores[g] = group(b, l, uint64(g))
			}
			run(b, stores)
			if st := l.Stats(); st.Batches > 0 {
				b.ReportMetric(st.MeanBatchSize, "records/batch")
			}
		})
		b.Run(fmt.Sprintf("bolt/groups=%d", groups), func(b *testing.B) {
			dir := b.TempDir()
			stores := make([]raft.LogStore, groups)
			for g := range stores {
				s, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, fmt.Sprintf("g%d.db", g))})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				stores[g] = s
			}
			run(b, stores)
		})
	}
}
