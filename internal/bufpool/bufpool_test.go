package bufpool

import (
	"testing"

	"google.golang.org/grpc/mem"
)

var _ mem.BufferPool = (*Pool)(nil)

func TestGetLengthAndClass(t *testing.T) {
	p := New(8, 12)
	for _, tc := range []struct{ n, wantCap int }{
		{0, 256}, {1, 256}, {256, 256}, {257, 512}, {4096, 4096}, {4097, 4097},
	} {
		b := p.Get(tc.n)
		if len(*b) != tc.n || cap(*b) != tc.wantCap {
			t.Errorf("Get(%d): len %d cap %d, want len %d cap %d", tc.n, len(*b), cap(*b), tc.n, tc.wantCap)
		}
	}
}

func TestPutRecyclesOnlyClassBuffers(t *testing.T) {
	p := New(8, 12)
	b := p.Get(1000)
	(*b)[0] = 7
	p.Put(b)
	// A foreign buffer of a non-class capacity is dropped, not handed out.
	odd := make([]byte, 700)
	p.Put(&odd)
	for range 100 { // sync.Pool may drop entries; any hit must be a class buffer
		g := p.Get(600)
		if cap(*g) != 1024 || len(*g) != 600 {
			t.Fatalf("Get(600): len %d cap %d, want len 600 cap 1024", len(*g), cap(*g))
		}
		p.Put(g)
	}
}

func TestNewRejectsBadClasses(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("New(12, 8) did not panic")
		}
	}()
	New(12, 8)
}
