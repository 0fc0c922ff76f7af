package sharedlog

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// skipNoDirect skips the test unless dir's filesystem takes O_DIRECT.
func skipNoDirect(t *testing.T, dir string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, "probe"), os.O_RDWR|os.O_CREATE|directIO, 0o644)
	if errors.Is(err, syscall.EINVAL) {
		t.Skipf("no O_DIRECT on %s", dir)
	}
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	os.Remove(f.Name())
}

// directSizes are the entry sizes the direct-write tests cycle through.
var directSizes = []int{1, 4 << 10, 1 << 20, 100, 4097, 1, 5000, 1 << 20, 4095}

// sizedEntry returns a deterministic entry of group grp with a data of
// about size bytes.
func sizedEntry(grp, idx uint64, size int) *raft.Log {
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(uint64(i)*31 + grp*7 + idx)
	}
	return &raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: data, AppendedAt: time.Unix(1700000000, int64(idx))}
}

// writeDirectRound appends n entries of mixed sizes to each group of l
// (concurrently, so that batches hold records of several groups) from
// index from on, and sets a key, recording what it wrote in want.
func writeDirectRound(t *testing.T, l *Log, groups int, from, n uint64, want map[uint64][]*raft.Log) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for g := range uint64(groups) {
		gs := group(t, l, g)
		wg.Go(func() {
			for i := from; i < from+n; i++ {
				e := sizedEntry(g, i, directSizes[int(i+g)%len(directSizes)])
				if err := gs.StoreLogs([]*raft.Log{e}); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				want[g] = append(want[g], e)
				mu.Unlock()
			}
			if err := gs.Set([]byte("k"), fmt.Appendf(nil, "v%d", from+n)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

func checkDirectLog(t *testing.T, l *Log, groups int, last uint64, want map[uint64][]*raft.Log) {
	t.Helper()
	for g := range uint64(groups) {
		gs := group(t, l, g)
		checkBounds(t, gs, 1, last)
		checkEntries(t, gs, want[g])
		v, err := gs.Get([]byte("k"))
		if err != nil || !bytes.Equal(v, fmt.Appendf(nil, "v%d", last+1)) {
			t.Fatalf("group %d: Get(k) = %q, %v", g, v, err)
		}
	}
}

// testDirectRoundTrip writes several rounds of mixed-size entries of several
// groups through a log with small segments, with a close and reopen between
// rounds (the next direct write starts in a block written before the
// reopen), and checks everything after a last reopen. hook, if not nil, is
// installed as shard 0's direct pwrite. It returns the number of direct
// writes and the log's output.
func testDirectRoundTrip(t *testing.T, hook func(fd uintptr, b []byte, off int64) (int, error)) (uint64, string) {
	dir := t.TempDir()
	skipNoDirect(t, dir)
	var out bytes.Buffer
	var outMu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &out, mu: &outMu}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	opts := Options{Dir: dir, Shards: 1, SegmentSize: 4 << 20, Logger: logger}
	const groups, per = 4, 9
	want := make(map[uint64][]*raft.Log)
	var writes uint64
	for round := range uint64(3) {
		l := openLog(t, opts)
		l.shards[0].dw.pwrite = hook
		writeDirectRound(t, l, groups, round*per+1, per, want)
		writes += l.shards[0].dw.writes
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(segFiles(t, dir, 0)); n < 2 {
		t.Fatalf("%d segments, want several", n)
	}
	l := openLog(t, opts)
	defer l.Close()
	checkDirectLog(t, l, groups, 3*per, want)
	outMu.Lock()
	defer outMu.Unlock()
	return writes, out.String()
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// TestDirectWrites: on a filesystem with O_DIRECT, group commits to
// preallocated segments are direct writes, and the log reads back and
// recovers as ever.
func TestDirectWrites(t *testing.T) {
	writes, out := testDirectRoundTrip(t, nil)
	if writes == 0 {
		t.Fatal("no direct write")
	}
	if strings.Contains(out, "O_DIRECT") {
		t.Fatalf("fell back to buffered writes:\n%s", out)
	}
	t.Logf("%d direct writes", writes)
}

// TestDirectWriteFallback: when the direct write fails with EINVAL or is
// short (here after writing part of the data), the segment is written with
// buffered writes from then on, with the same bytes, and the fallback is
// logged once.
func TestDirectWriteFallback(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	hook := func(fd uintptr, b []byte, off int64) (int, error) {
		mu.Lock()
		calls++
		c := calls
		mu.Unlock()
		if c%2 == 1 && len(b) > 4096 {
			// Short: write the first block only.
			return syscall.Pwrite(int(fd), b[:4096], off)
		}
		return 0, syscall.EINVAL
	}
	writes, out := testDirectRoundTrip(t, hook)
	if writes != 0 {
		t.Fatalf("%d direct writes, want none", writes)
	}
	if calls == 0 {
		t.Fatal("no direct write attempted")
	}
	// One message per Open (a shard logs it once).
	if n := strings.Count(out, "O_DIRECT"); n < 1 || n > 3 {
		t.Fatalf("fallback logged %d times, want once per open:\n%s", n, out)
	}
	t.Logf("%d direct write attempts", calls)
}
