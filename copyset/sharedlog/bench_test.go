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

// runAppends has every store (one goroutine each) loop StoreLogs of one
// entry of entrySize bytes until b.N appends were made in total. Besides
// ns/op it reports appends/s and appends per CPU-second of the whole process
// (user + system time from getrusage: the kernel time of the fdatasync
// calls counts, the journal thread's does not).
//
// If l is not nil the stores are its groups, and it first appends, untimed,
// until steady(l): a new log's first segment grows with every commit until
// the first spare segment is ready, which is not what a long-running log
// does.
func runAppends(b *testing.B, l *Log, stores []raft.LogStore, entrySize int) {
	data := make([]byte, entrySize)
	for i := range data {
		data[i] = byte(i * 7)
	}
	first := make([]uint64, len(stores))
	for i := range first {
		first[i] = 1
	}
	for deadline := time.Now().Add(30 * time.Second); l != nil && !steady(l); {
		if time.Now().After(deadline) {
			b.Fatal("log did not reach a steady state")
		}
		var wg sync.WaitGroup
		for i, s := range stores {
			wg.Go(func() {
				for range 16 {
					l := &raft.Log{Index: first[i], Term: 1, Type: raft.LogCommand, Data: data, AppendedAt: time.Now()}
					if err := s.StoreLogs([]*raft.Log{l}); err != nil {
						b.Error(err)
						return
					}
					first[i]++
				}
			})
		}
		wg.Wait()
	}
	var st0 Stats
	if l != nil {
		st0 = l.Stats()
	}
	b.SetBytes(int64(entrySize))
	var ops atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, len(stores))
	b.ResetTimer()
	start := time.Now()
	cpu0 := cpuTime()
	for i, s := range stores {
		wg.Go(func() {
			for idx := first[i]; ops.Add(1) <= int64(b.N); idx++ {
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
	cpu := cpuTime() - cpu0
	close(errc)
	for err := range errc {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "appends/s")
	if cpu > 0 {
		b.ReportMetric(float64(b.N)/cpu.Seconds(), "appends/cpu-s")
	}
	if l != nil {
		// The log's group-commit counters over the timed part: records per
		// batch and fdatasync calls per record (the writers' calls; the
		// background preparation of spare segments is not counted).
		st := l.Stats()
		records, batches := st.Records-st0.Records, st.Batches-st0.Batches
		if batches > 0 {
			b.ReportMetric(float64(records)/float64(batches), "records/batch")
		}
		if records > 0 {
			b.ReportMetric(float64(st.Fsyncs-st0.Fsyncs)/float64(records), "fsyncs/record")
		}
	}
}

// BenchmarkStoreLogs: N groups (goroutines) in parallel, each looping
// StoreLogs of one 4 KiB entry, fsync on, b.N appends in total. "shared" is
// this package with default shards; "bolt" is one raft-boltdb/v2 file per
// group, what a per-copyset store would do.
func BenchmarkStoreLogs(b *testing.B) {
	const entrySize = 4 << 10
	for _, groups := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("shared/groups=%d", groups), func(b *testing.B) {
			l := openLog(b, Options{Dir: b.TempDir()})
			defer l.Close()
			stores := make([]raft.LogStore, groups)
			for g := range stores {
				stores[g] = group(b, l, uint64(g))
			}
			runAppends(b, l, stores, entrySize)
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
			runAppends(b, nil, stores, entrySize)
		})
	}
}

// BenchmarkShards compares shard counts: groups goroutines each looping
// StoreLogs of one 4 KiB entry (fsync on). The figure of merit for the
// default is appends/cpu-s at a given concurrency.
func BenchmarkShards(b *testing.B) {
	for _, groups := range []int{16, 64, 256} {
		for _, shards := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("groups=%d/shards=%d", groups, shards), func(b *testing.B) {
				l := openLog(b, Options{Dir: b.TempDir(), Shards: shards})
				defer l.Close()
				stores := make([]raft.LogStore, groups)
				for g := range stores {
					stores[g] = group(b, l, uint64(g))
				}
				runAppends(b, l, stores, 4<<10)
			})
		}
	}
}

// BenchmarkEntrySize: 8 groups (goroutines) in parallel, each looping
// StoreLogs of one entry of the given size, default shards, with and
// without fdatasync. For large entries the figure of merit is appends/cpu-s:
// what the write path costs per byte (memory copies) rather than what the
// disk does. Entries are never deleted, so a run of b.N appends keeps
// b.N*size bytes on disk: run the large sizes with a bounded -benchtime
// (e.g. 300x).
func BenchmarkEntrySize(b *testing.B) {
	for _, size := range []int{64, 4 << 10, 1 << 20} {
		for _, noSync := range []bool{false, true} {
			b.Run(fmt.Sprintf("size=%d/nosync=%v", size, noSync), func(b *testing.B) {
				l := openLog(b, Options{Dir: b.TempDir(), NoSync: noSync})
				defer l.Close()
				stores := make([]raft.LogStore, 8)
				for g := range stores {
					stores[g] = group(b, l, uint64(g))
				}
				runAppends(b, l, stores, size)
			})
		}
	}
}
