package sharedlog

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/raft"
)

// TestGroupCommit has 64 groups append concurrently (fsync on) while readers
// read back what was acknowledged, and checks that records were committed in
// fewer batches than records and that everything survives a reopen.
func TestGroupCommit(t *testing.T) {
	const (
		groups  = 64
		perG    = 40
		batchSz = 2
	)
	dir := t.TempDir()
	l := openLog(t, Options{Dir: dir})
	var wg sync.WaitGroup
	var acked [groups]atomic.Uint64
	stop := make(chan struct{})
	errc := make(chan error, 2*groups)
	for g := range uint64(groups) {
		gs := group(t, l, g)
		wg.Go(func() {
			for i := uint64(1); i <= perG*batchSz; i += batchSz {
				if err := gs.StoreLogs(entries(g, i, i+batchSz-1, 1)); err != nil {
					errc <- err
					return
				}
				acked[g].Store(i + batchSz - 1)
			}
		})
	}
	// Readers: what was acknowledged must be readable while writes go on.
	var rwg sync.WaitGroup
	for r := range 2 {
		rwg.Go(func() {
			for n := uint64(r); ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				g := n % groups
				last := acked[g].Load()
				if last == 0 {
					continue
				}
				gs, _ := l.Group(g)
				var got raft.Log
				if err := gs.GetLog(last, &got); err != nil || !sameLog(&got, testEntry(g, last, 1)) {
					errc <- errors.Join(errors.New("read of acknowledged entry failed"), err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	rwg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	st := l.Stats()
	t.Logf("records=%d batches=%d fsyncs=%d mean batch=%.1f bytes=%d", st.Records, st.Batches, st.Fsyncs, st.MeanBatchSize, st.Bytes)
	if st.Records != groups*perG {
		t.Fatalf("records = %d, want %d", st.Records, groups*perG)
	}
	if st.Batches >= st.Records {
		t.Fatalf("no group commit: %d batches for %d records", st.Batches, st.Records)
	}
	if st.Fsyncs < st.Batches {
		t.Fatalf("fsyncs %d < batches %d", st.Fsyncs, st.Batches)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l = openLog(t, Options{Dir: dir})
	defer l.Close()
	for g := range uint64(groups) {
		gs := group(t, l, g)
		checkBounds(t, gs, 1, perG*batchSz)
		checkEntries(t, gs, entries(g, 1, perG*batchSz, 1))
	}
}

// TestConcurrentRaftPattern mimics raft's access pattern on one group: the
// leader loop appends, the snapshot goroutine truncates prefixes and
// replication goroutines read, all at once.
func TestConcurrentRaftPattern(t *testing.T) {
	l := openLog(t, Options{Dir: t.TempDir(), SegmentSize: 2 << 10, NoSync: true})
	defer l.Close()
	const n = 600
	var last atomic.Uint64
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for g := range uint64(3) {
		gs := group(t, l, g)
		wg.Go(func() { // leader loop
			for i := uint64(1); i <= n; i++ {
				if err := gs.StoreLogs(entries(g, i, i, 1)); err != nil {
					errc <- err
					return
				}
				if g == 0 {
					last.Store(i)
				}
			}
		})
	}
	g0 := group(t, l, 0)
	wg.Go(func() { // snapshot goroutine
		for last.Load() < n {
			lst := last.Load()
			if lst > 50 {
				first, _ := g0.FirstIndex()
				if err := g0.DeleteRange(first, lst-50); err != nil {
					errc <- err
					return
				}
			}
		}
	})
	wg.Go(func() { // replication
		for last.Load() < n {
			lst := last.Load()
			if lst == 0 {
				continue
			}
			var got raft.Log
			err := g0.GetLog(lst, &got)
			if errors.Is(err, raft.ErrLogNotFound) {
				// Compacted since it was the last one, if this goroutine
				// was descheduled long enough.
				if first, _ := g0.FirstIndex(); first > lst {
					continue
				}
			}
			if err != nil || got.Index != lst {
				errc <- errors.Join(errors.New("GetLog of last entry"), err)
				return
			}
			first, _ := g0.FirstIndex()
			if err := g0.GetLog(first, &got); err != nil && !errors.Is(err, raft.ErrLogNotFound) {
				errc <- err
				return
			}
		}
	})
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}
