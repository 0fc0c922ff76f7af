package datasync

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chunkraft/chunkraft/internal/chunkread"
)

// DefaultSnapshotExports is Deps.SnapshotExports when unset.
const DefaultSnapshotExports = 2

// SnapshotGate bounds the snapshot phases a server exports at once and
// hands their buffers from one to the next.
//
// A snapshot phase keeps a few chunk-sized buffers live (the images of
// the packet being built and of the next chunk, the encoded packet):
// ~50-80 MB with 16 MiB chunks, counting the packet on its way through
// SendData. A server leading many copysets that all export at once keeps
// that many times over live, and the Go collector then lets the heap grow
// to twice that before it collects again: the chunk path's garbage then
// lands in freshly faulted pages for seconds after the phase ended
// (docs/benchmarks.md, "The restore is CPU-bound; its client builds no
// chunk images; where a continuous task's cost goes"). Through the gate a
// server holds at most n phases' buffers, reused from phase to phase and
// dropped when no phase wants them. Waiting at the gate is not silence:
// the exporter sends heartbeats meanwhile, so that the SyncTool does not
// reassign it.
type SnapshotGate struct {
	slots chan *snapshotBuffers

	waiting atomic.Int32 // exporters in acquire

	collect func() // collectTwice; a test counts the calls
}

// snapshotBuffers are a snapshot phase's reusable buffers (exporter's
// images, spare and scratch).
type snapshotBuffers struct {
	spare   []*chunkread.ImageBuffers
	scratch []byte
}

// NewSnapshotGate returns a gate letting n snapshot phases through at
// once (at least 1).
func NewSnapshotGate(n int) *SnapshotGate {
	n = max(n, 1)
	g := &SnapshotGate{slots: make(chan *snapshotBuffers, n), collect: collectTwice}
	for range n {
		g.slots <- &snapshotBuffers{}
	}
	return g
}

// acquire waits up to wait for a slot: its buffers, or nil when wait
// passed first; an error only when ctx ended.
func (g *SnapshotGate) acquire(ctx context.Context, wait time.Duration) (*snapshotBuffers, error) {
	select {
	case b := <-g.slots:
		return b, nil
	default:
	}
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case b := <-g.slots:
		return b, nil
	case <-t.C:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// release gives the slot back: its buffers pass to the next phase, or
// go when no exporter waits (an idle server keeps none). The last slot
// back with nobody waiting collects the heap at once (collect): the
// phases' buffers were most of what was live when the collector last set
// its goal, twice that, and the chunk path's garbage would otherwise grow
// the heap up to it, into pages the runtime had given back, before the
// next collection (docs/benchmarks.md, "At most two snapshot phases per
// server, and a collection when they end"). Twice: the packets went
// through gRPC's message buffers (internal/grpcbuf), a sync.Pool,
// whose contents the first collection only moves to its victim cache;
// the second frees those not taken again since, the 16-32 MiB ones of
// the packets (the chunk path's are smaller).
func (g *SnapshotGate) release(b *snapshotBuffers) {
	idle := g.waiting.Load() == 0
	if idle {
		*b = snapshotBuffers{}
	}
	g.slots <- b
	if idle && len(g.slots) == cap(g.slots) {
		g.collect()
	}
}

// running is the number of phases holding a slot.
func (g *SnapshotGate) running() int { return cap(g.slots) - len(g.slots) }

// waitingNow is the number of exporters waiting for a slot.
func (g *SnapshotGate) waitingNow() int { return int(g.waiting.Load()) }

// collectTwice runs two collections (SnapshotGate.release).
func collectTwice() {
	runtime.GC()
	runtime.GC()
}

// HoldSnapshotSlot takes one of the server's snapshot-phase slots, as a
// phase would, until release is called: its collectors' snapshot phases
// wait meanwhile (tests make them wait with it). The error is ctx's.
func (s *Service) HoldSnapshotSlot(ctx context.Context) (release func(), err error) {
	for {
		b, err := s.gate.acquire(ctx, time.Minute)
		if err != nil {
			return nil, err
		}
		if b != nil {
			var once sync.Once
			return func() { once.Do(func() { s.gate.release(b) }) }, nil
		}
	}
}
