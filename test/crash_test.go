package test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/cli"
	"github.com/chunkraft/chunkraft/internal/testwait"
)

// crashBlock is one 4 KiB block owned by a single writer: the value of its
// last acknowledged write, and the values of writes that failed (their
// outcome is unknown, so the block may hold any of them instead).
type crashBlock struct {
	id    cli.ChunkID
	off   uint32
	acked []byte
	// failed holds every write to this block that returned an error. A
	// failed write may still be applied later (a proposal in flight on a
	// leader that lost its client), so it stays acceptable for good, the
	// same rule chunkbench --verify uses.
	failed [][]byte
}

// accepts reports whether got is a value the block may hold.
func (b *crashBlock) accepts(got []byte) bool {
	if bytes.Equal(got, b.acked) {
		return true
	}
	for _, f := range b.failed {
		if bytes.Equal(got, f) {
			return true
		}
	}
	return false
}

const (
	crashWriters         = 4
	crashBlocksPerWriter = 32
	crashChunks          = 2       // chunks 1..crashChunks in every copyset
	crashSpan            = 1 << 20 // blocks live in the first MiB of a chunk
	chunkSize            = 16 << 20
)

// TestCrashConsistency: 3 processes, 4 copysets, 4 writers overwriting
// their own 4 KiB blocks with random data while every ~3 s a random server
// is killed with SIGKILL and restarted on the same data dir (one round also
// pauses a server with SIGSTOP first). At the end every block reads back as
// its last acknowledged write (or a write that failed: indeterminate), and
// the three replicas of every copyset hash every written chunk the same.
func TestCrashConsistency(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process crash test")
	}
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 2))
	c := startCluster(t, 3)
	copysets := c.createCopysets(t, 4)

	// Distinct places for every writer.
	seen := map[string]bool{}
	owned := make([][]*crashBlock, crashWriters)
	var all []*crashBlock
	for w := range owned {
		for len(owned[w]) < crashBlocksPerWriter {
			b := &crashBlock{
				id:  cli.ChunkID{CopysetID: copysets[rng.IntN(len(copysets))], Chunk: uint64(1 + rng.IntN(crashChunks))},
				off: uint32(rng.IntN(crashSpan/4096)) * 4096,
			}
			key := fmt.Sprint(b.id, b.off)
			if seen[key] {
				continue
			}
			seen[key] = true
			owned[w] = append(owned[w], b)
			all = append(all, b)
		}
	}
	randomBlock := func(r *rand.Rand) []byte {
		d := make([]byte, 4096)
		for i := 0; i < len(d); i += 8 {
			v := r.Uint64()
			for j := 0; j < 8; j++ {
				d[i+j] = byte(v >> (8 * j))
			}
		}
		return d
	}

	// Every block gets a first, acknowledged value before the faults.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, b := range all {
		d := randomBlock(rng)
		if err := c.client.WriteChunk(ctx, b.id, b.off, d, 1); err != nil {
			t.Fatalf("initial write %v offset %d: %v", b.id, b.off, err)
		}
		b.acked = d
	}

	var (
		stop              atomic.Bool
		acked, failed     atomic.Int64
		wg                sync.WaitGroup
		writerSeeds       = make([]uint64, crashWriters)
		writeTimeout      = 20 * time.Second
		rounds            = 3 + rng.IntN(3)
		kills, pauses     int
		faultStart        = time.Now()
		lastFailureMu     sync.Mutex
		lastFailureReport error
	)
	for w := range writerSeeds {
		writerSeeds[w] = rng.Uint64()
	}
	for w := 0; w < crashWriters; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(writerSeeds[w], uint64(w)))
			for !stop.Load() {
				b := owned[w][r.IntN(len(owned[w]))]
				d := randomBlock(r)
				wctx, wcancel := context.WithTimeout(context.Background(), writeTimeout)
				err := c.client.WriteChunk(wctx, b.id, b.off, d, 1)
				wcancel()
				if err != nil {
					b.failed = append(b.failed, d)
					failed.Add(1)
					lastFailureMu.Lock()
					lastFailureReport = err
					lastFailureMu.Unlock()
					continue
				}
				b.acked = d
				acked.Add(1)
			}
		}(w)
	}

	for round := 0; round < rounds; round++ {
		time.Sleep(time.Duration(2500+rng.IntN(1000)) * time.Millisecond)
		if round == 1 {
			// Exercise SIGSTOP/SIGCONT: a server that stops answering
			// without closing its connections.
			p := c.procs[rng.IntN(len(c.procs))]
			t.Logf("round %d: SIGSTOP %s for 1s", round+1, p.Addr)
			if err := p.Pause(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
			if err := p.Resume(); err != nil {
				t.Fatal(err)
			}
			pauses++
		}
		p := c.procs[rng.IntN(len(c.procs))]
		t.Logf("round %d: kill -9 %s and restart (%d writes acknowledged so far)", round+1, p.Addr, acked.Load())
		rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := p.Restart(rctx)
		rcancel()
		if err != nil {
			stop.Store(true)
			wg.Wait()
			t.Fatalf("restart %s: %v", p.Addr, err)
		}
		kills++
	}
	time.Sleep(time.Second) // some writes after the last restart
	stop.Store(true)
	wg.Wait()
	faultTime := time.Since(faultStart)

	// Every block holds its last acknowledged value (or a failed write's).
	ctx2, cancel2 := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel2()
	var lost int
	for _, b := range all {
		got, err := c.client.ReadChunk(ctx2, b.id, b.off, 4096)
		if err != nil {
			t.Fatalf("read back %v offset %d: %v", b.id, b.off, err)
		}
		if !b.accepts(got) {
			lost++
			t.Errorf("%v offset %d: holds neither the last acknowledged write nor a failed one", b.id, b.off)
		}
	}

	// The replicas of every copyset converge on the same chunk contents.
	written := map[cli.ChunkID]bool{}
	for _, b := range all {
		written[b.id] = true
	}
	hashDeadline := time.Now().Add(60 * time.Second)
	for id := range written {
		testwait.Until(t, time.Until(hashDeadline), func() error {
			hctx, hcancel := context.WithTimeout(context.Background(), 10*time.Second)
			rows, _ := c.client.ChunkHashes(hctx, id, 0, chunkSize)
			hcancel()
			if !replicasEqual(rows, len(c.procs)) {
				return fmt.Errorf("%v: replicas did not converge: %+v", id, rows)
			}
			return nil
		})
	}

	lastFailureMu.Lock()
	lastErr := lastFailureReport
	lastFailureMu.Unlock()
	t.Logf("seed %d: rounds %d, kills %d, pauses %d, faults over %s; writes acknowledged %d, failed (indeterminate) %d, blocks %d, chunks hashed equal %d, writes lost %d",
		seed, rounds, kills, pauses, faultTime.Round(time.Millisecond), acked.Load(), failed.Load(), len(all), len(written), lost)
	if lastErr != nil {
		t.Logf("last write error: %v", lastErr)
	}
	if acked.Load() == 0 {
		t.Fatal("no write was acknowledged during the faults")
	}
}

// replicasEqual reports whether all n servers answered with the same hash.
func replicasEqual(rows []cli.ReplicaHash, n int) bool {
	var hash string
	count := 0
	for _, r := range rows {
		if !r.Hosted || r.Err != nil {
			return false
		}
		if count > 0 && r.Hash != hash {
			return false
		}
		hash = r.Hash
		count++
	}
	return count == n
}
