package bufpool

import (
	"fmt"
	"math/bits"
	"sync"
)

// Pool hands out buffers from size classes 1<<minShift .. 1<<maxShift. A
// request larger than the largest class is allocated and never pooled; one
// smaller than the smallest class gets a smallest-class buffer. The zero
// value is not usable; build one with New.
type Pool struct {
	minShift, maxShift uint8
	classes            []sync.Pool // classes[i] holds buffers of cap 1<<(minShift+i)
}

// New returns a pool with classes 1<<minShift .. 1<<maxShift. It panics when
// minShift > maxShift or maxShift > 40: the classes are fixed by the
// program, not by input.
func New(minShift, maxShift uint8) *Pool {
	if minShift > maxShift || maxShift > 40 {
		panic(fmt.Sprintf("bufpool: bad classes 1<<%d..1<<%d", minShift, maxShift))
	}
	return &Pool{minShift: minShift, maxShift: maxShift, classes: make([]sync.Pool, maxShift-minShift+1)}
}

// class returns the index of the class whose buffers hold n bytes, or -1
// when n is larger than every class.
func (p *Pool) class(n int) int {
	s := uint8(bits.Len(uint(max(n, 1) - 1)))
	if s > p.maxShift {
		return -1
	}
	return int(max(s, p.minShift) - p.minShift)
}

// Get returns a buffer of length n whose contents are undefined.
func (p *Pool) Get(n int) *[]byte {
	c := p.class(n)
	if c < 0 {
		b := make([]byte, n)
		return &b
	}
	if b, ok := p.classes[c].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<(int(p.minShift)+c))
	return &b
}

// Put recycles b, a buffer from Get (or a prefix of one). Buffers whose
// capacity is not exactly a class size are dropped.
func (p *Pool) Put(b *[]byte) {
	n := cap(*b)
	c := p.class(n)
	if c < 0 || n != 1<<(int(p.minShift)+c) {
		return
	}
	*b = (*b)[:0]
	p.classes[c].Put(b)
}
