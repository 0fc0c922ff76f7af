package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chunkraft/chunkraft/cli"
	chunkserverpb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// sectorKey names one 4 KiB sector of a chunk.
type sectorKey struct {
	id  cli.ChunkID
	off uint32
}

// fakeIO is an in-memory chunk store with the servers' geometry rules.
// Hooks let tests inject latency, failures and corruption.
type fakeIO struct {
	latency time.Duration

	// beforeWrite may fail a write (nil: store it). If it returns
	// errDropWrite the write is acknowledged but not stored.
	beforeWrite func(id cli.ChunkID, off uint32, n int) error
	// beforeRead may fail a read.
	beforeRead func(id cli.ChunkID, off uint32, n uint32) error

	mu      sync.Mutex
	sectors map[sectorKey][]byte
	chunks  map[cli.ChunkID]bool
	written map[sectorKey]int // writes per block start (for walk tests)

	writes, reads atomic.Int64
}

var errDropWrite = fmt.Errorf("drop this write but acknowledge it")

func newFakeIO() *fakeIO {
	return &fakeIO{sectors: map[sectorKey][]byte{}, chunks: map[cli.ChunkID]bool{}, written: map[sectorKey]int{}}
}

func (f *fakeIO) check(off uint32, n uint64) error {
	if n == 0 || off%SectorSize != 0 || n%SectorSize != 0 || uint64(off)+n > ChunkSize {
		return &cli.ChunkStatusError{Status: chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST}
	}
	return nil
}

func (f *fakeIO) sleep(ctx context.Context) error {
	if f.latency <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(f.latency)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakeIO) WriteChunk(ctx context.Context, id cli.ChunkID, off uint32, data []byte, sn uint64) error {
	f.writes.Add(1)
	if err := f.check(off, uint64(len(data))); err != nil {
		return err
	}
	if sn == 0 {
		return &cli.ChunkStatusError{Status: chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST}
	}
	if err := f.sleep(ctx); err != nil {
		return err
	}
	if f.beforeWrite != nil {
		if err := f.beforeWrite(id, off, len(data)); err == errDropWrite {
			return nil
		} else if err != nil {
			return err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.chunks[id] = true
	f.written[sectorKey{id, off}]++
	for i := 0; i < len(data); i += SectorSize {
		f.sectors[sectorKey{id, off + uint32(i)}] = append([]byte(nil), data[i:i+SectorSize]...)
	}
	return nil
}

func (f *fakeIO) ReadChunk(ctx context.Context, id cli.ChunkID, off, size uint32) ([]byte, error) {
	f.reads.Add(1)
	if err := f.check(off, uint64(size)); err != nil {
		return nil, err
	}
	if err := f.sleep(ctx); err != nil {
		return nil, err
	}
	if f.beforeRead != nil {
		if err := f.beforeRead(id, off, size); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	if !f.chunks[id] {
		f.mu.Unlock()
		return nil, fmt.Errorf("read %s: %w", id, &cli.ChunkStatusError{Status: chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_CHUNK_NOTEXIST})
	}
	out := make([]byte, size)
	for i := uint32(0); i < size; i += SectorSize {
		if s, ok := f.sectors[sectorKey{id, off + i}]; ok {
			copy(out[i:], s)
		}
	}
	f.mu.Unlock()
	return out, nil
}

// corrupt flips one byte of the stored sector at off of id.
func (f *fakeIO) corrupt(id cli.ChunkID, off uint32, at int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sectors[sectorKey{id, off}]
	s[at] ^= 0x40
}
