package datastore

import "math/bits"

// bitmap is a set of block indexes in Curve's encoding (src/common/bitmap.h):
// bit i lives in byte i/8 under mask 1<<(i%8), least significant bit first.
// Its length is ceil(n/8) bytes for n blocks; the padding bits of the last
// byte are always zero. It is the on-disk form in meta pages as well as the
// in-memory one.
type bitmap []byte

// newBitmap returns an empty bitmap for n blocks.
func newBitmap(n uint32) bitmap { return make(bitmap, bitmapLen(n)) }

// bitmapLen is the number of bytes of a bitmap of n blocks.
func bitmapLen(n uint32) int { return int((uint64(n) + 7) / 8) }

// test reports whether block i is in b.
func (b bitmap) test(i uint32) bool { return b[i/8]&(1<<(i%8)) != 0 }

// set adds block i to b.
func (b bitmap) set(i uint32) { b[i/8] |= 1 << (i % 8) }

// setRange adds blocks [lo, hi) to b.
func (b bitmap) setRange(lo, hi uint32) {
	for i := lo; i < hi; i++ {
		b.set(i)
	}
}

// count returns the number of blocks in b.
func (b bitmap) count() int {
	n := 0
	for _, x := range b {
		n += bits.OnesCount8(x)
	}
	return n
}

// all reports whether [lo, hi) are all in b.
func (b bitmap) all(lo, hi uint32) bool {
	for i := lo; i < hi; i++ {
		if !b.test(i) {
			return false
		}
	}
	return true
}

// any reports whether any of [lo, hi) is in b.
func (b bitmap) any(lo, hi uint32) bool {
	for i := lo; i < hi; i++ {
		if b.test(i) {
			return true
		}
	}
	return false
}

// runs calls fn for every maximal run [lo, hi) within [from, to) whose blocks
// all have membership want, in ascending order, stopping at the first error.
func (b bitmap) runs(from, to uint32, want bool, fn func(lo, hi uint32) error) error {
	for i := from; i < to; {
		if b.test(i) != want {
			i++
			continue
		}
		j := i + 1
		for j < to && b.test(j) == want {
			j++
		}
		if err := fn(i, j); err != nil {
			return err
		}
		i = j
	}
	return nil
}

// validPadding reports whether the bits of b past n blocks are all zero.
func (b bitmap) validPadding(n uint32) bool {
	if len(b) != bitmapLen(n) {
		return false
	}
	if r := n % 8; r != 0 {
		return b[len(b)-1]>>r == 0
	}
	return true
}

// countIn returns the number of set bits in [lo, hi).
func (b bitmap) countIn(lo, hi uint32) int {
	n := 0
	for i := lo; i < hi; i++ {
		if b.test(i) {
			n++
		}
	}
	return n
}
