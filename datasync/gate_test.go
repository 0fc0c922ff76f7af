package datasync

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/internal/chunkread"
	"github.com/chunkraft/chunkraft/internal/testwait"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
)

// bufSource is a fakeSource whose images lie in the buffers the export
// hands in, counting the buffers it had to fill anew.
type bufSource struct {
	*fakeSource
	mu    sync.Mutex
	fresh int
}

func (s *bufSource) ChunkImage(id uint64, buf *chunkread.ImageBuffers) (chunkread.Image, error) {
	img, err := s.fakeSource.ChunkImage(id, buf)
	if err != nil {
		return img, err
	}
	if buf.Data == nil {
		s.mu.Lock()
		s.fresh++
		s.mu.Unlock()
		buf.Data = make([]byte, 0, 1<<10)
	}
	buf.Data = append(buf.Data[:0], img.Data...)
	img.Data = buf.Data
	return img, nil
}

func (s *bufSource) freshBuffers() int { s.mu.Lock(); defer s.mu.Unlock(); return s.fresh }

// TestExportGate: with a gate of one slot, a second snapshot phase waits
// while the first runs, heartbeating at its point without holding the log;
// then it runs on the first one's buffers (none filled anew), and the
// gate keeps no buffers once nobody waits, collecting the heap then.
func TestExportGate(t *testing.T) {
	g := NewSnapshotGate(1)
	collections := 0
	g.collect = func() { collections++ }
	a, b := &bufSource{fakeSource: fixture(t)}, &bufSource{fakeSource: fixture(t)}
	opts := ExportOptions{Mode: dspb.SyncMode_kFull, PacketBytes: 1500, Idle: 10 * time.Millisecond, Gate: g}

	var ca, cb collector
	hold, held := make(chan struct{}), make(chan struct{})
	var once sync.Once
	ca.onSend = func(Packet) error {
		once.Do(func() { close(held); <-hold }) // A's first packet waits for B to heartbeat
		return nil
	}
	beats := make(chan Packet, 100)
	cb.onSend = func(p Packet) error {
		if p.Data == nil {
			beats <- p
		}
		return nil
	}
	ctx := context.Background()
	doneA, doneB := make(chan error, 1), make(chan error, 1)
	go func() { doneA <- Export(ctx, a, startPoint(), 0, opts, ca.send) }()
	<-held
	go func() { doneB <- Export(ctx, b, startPoint(), 0, opts, cb.send) }()
	for range 3 {
		select {
		case p := <-beats:
			if !proto.Equal(p.Start, startPoint()) || !proto.Equal(p.Next, startPoint()) || p.Count != 0 {
				t.Fatalf("waiting export sent %v; want a heartbeat at the start", p)
			}
		case err := <-doneB:
			t.Fatalf("second export ended while the first held the gate: %v", err)
		case <-time.After(5 * time.Second):
			t.Fatal("no heartbeat from the waiting export in 5 s")
		}
	}
	// Between two waits the exporter is sending a heartbeat: poll.
	testwait.Until(t, 5*time.Second, func() error {
		if n := g.waitingNow(); n != 1 {
			return fmt.Errorf("gate: %d waiting; want 1", n)
		}
		return nil
	})
	if r := g.running(); r != 1 {
		t.Fatalf("gate: %d running; want 1", r)
	}
	if n := b.livePins(); n != 0 {
		t.Fatalf("the waiting export holds %d log pins; want none", n)
	}
	close(hold)
	for _, done := range []chan error{doneA, doneB} {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if n := a.freshBuffers(); n == 0 {
		t.Fatal("the first export filled no buffers")
	}
	if n := b.freshBuffers(); n != 0 {
		t.Fatalf("the second export filled %d buffers anew; want the first one's reused", n)
	}
	for _, c := range []*collector{&ca, &cb} {
		if out := decodeChain(t, c.all()); len(out) < 3 || !out[len(out)-1].Header.Finished {
			t.Fatalf("%d packets, want the whole export, finished", len(out))
		}
	}
	if collections != 1 {
		t.Fatalf("%d collections; want one, when the gate went idle", collections)
	}
	slot := <-g.slots
	if len(slot.spare) != 0 || slot.scratch != nil {
		t.Fatalf("idle gate keeps %d buffers and %d bytes of scratch; want none", len(slot.spare), cap(slot.scratch))
	}
}

// TestExportGateCancel: an export waiting at the gate ends with its
// context and leaves the slot to the holder.
func TestExportGateCancel(t *testing.T) {
	g := NewSnapshotGate(1)
	held, _ := g.acquire(context.Background(), time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	var c collector
	done := make(chan error, 1)
	go func() {
		done <- Export(ctx, fixture(t), startPoint(), 0, ExportOptions{Mode: dspb.SyncMode_kFull, Idle: 10 * time.Millisecond, Gate: g}, c.send)
	}()
	testwait.Until(t, 5*time.Second, func() error { // it waits at the gate
		if n := g.waitingNow(); n != 1 {
			return fmt.Errorf("gate: %d waiting; want 1", n)
		}
		return nil
	})
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("export returned %v, want context.Canceled", err)
	}
	for _, p := range c.all() {
		if p.Data != nil {
			t.Fatalf("export sent a packet [%v, %v) without the gate", p.Start, p.Next)
		}
	}
	g.release(held)
	if b, _ := g.acquire(context.Background(), time.Second); b == nil {
		t.Fatal("the slot did not come back")
	}
}
