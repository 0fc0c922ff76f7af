package copyset

import "sort"

// logSizes tells, without reading the log back, about how many bytes of
// entries a copyset's log holds from an index to its last index: what the
// bytes bound of the log pins (RaftOptions.MaxPinnedBytes, logpin.go)
// limits. logCache.StoreLogs adds every entry it stores (O(1), no
// allocation); a fixed ring of samples (index, running total before it)
// taken every byteStep bytes or entryStep entries answers queries by
// binary search.
//
// Precision: an answer counts from the newest sample at or below the
// index, so it may count up to one sample gap (byteStep bytes plus one
// entry, or entryStep entries) more than the exact bytes: a bound is
// crossed a little early, never late. The entries of a conflicting
// suffix that raft replaced stay counted (they are few and uncommitted).
// Entries stored before the replica opened are not seen: below the
// oldest sample the answer is extrapolated at the average entry size
// seen since. With steps of 1/256 of the bounds and room for 1024
// samples, the ring covers every index within both bounds of the last
// index (at most 257 samples each), so eviction of the oldest samples
// never changes an answer that matters (an index further behind is over
// a bound either way).
type logSizes struct {
	total uint64 // bytes of the entries stored since the replica opened
	next  uint64 // the index after the last entry stored; 0 before the first
	// byteStep and entryStep space the samples; never 0.
	byteStep, entryStep uint64
	ring                []sizeSample // fixed capacity, ascending by index from head
	head, n             int
}

// sizeSample says that total was before bytes stored before index.
type sizeSample struct{ index, before uint64 }

// logSizeSamples is the ring's capacity (16 KiB per copyset).
const logSizeSamples = 1024

func newLogSizes() *logSizes {
	return &logSizes{byteStep: 1, entryStep: 1, ring: make([]sizeSample, logSizeSamples)}
}

// setBounds spaces the samples for the bounds of the pins: 1/256 of
// each. Called before raft starts.
func (s *logSizes) setBounds(maxEntries, maxBytes uint64) {
	s.entryStep, s.byteStep = max(maxEntries/256, 1), max(maxBytes/256, 1)
}

func (s *logSizes) at(i int) *sizeSample { return &s.ring[(s.head+i)%len(s.ring)] }

func (s *logSizes) push(index uint64) {
	if s.n == len(s.ring) {
		s.head = (s.head + 1) % len(s.ring)
		s.n--
	}
	*s.at(s.n) = sizeSample{index: index, before: s.total}
	s.n++
}

// add counts an entry of size bytes stored at index.
func (s *logSizes) add(index uint64, size int) {
	switch {
	case index != s.next:
		s.jump(index)
	case s.n == 0:
		s.push(index)
	default: // a sample every byteStep bytes or entryStep entries
		if last := s.at(s.n - 1); s.total-last.before >= s.byteStep || index-last.index >= s.entryStep {
			s.push(index)
		}
	}
	s.total += uint64(size)
	s.next = index + 1
}

// jump starts counting at index, not the one after the last stored: the
// first store, a log that starts again after a snapshot install, or a
// conflicting suffix replaced from index on.
func (s *logSizes) jump(index uint64) {
	for s.n > 0 && s.at(s.n-1).index > index {
		s.n--
	}
	if s.n > 0 && s.at(s.n-1).index == index {
		s.total = s.at(s.n - 1).before // back to exactly before index
		return
	}
	s.push(index)
}

// search returns the position of the newest sample at or below index, or
// -1 when index is below the oldest.
func (s *logSizes) search(index uint64) int {
	return sort.Search(s.n, func(i int) bool { return s.at(i).index > index }) - 1
}

// avg is the average entry size since the oldest sample, and the bytes
// from the oldest sample on.
func (s *logSizes) avg() (avg, held uint64) {
	o := s.at(0)
	held = s.total - o.before
	if s.next > o.index {
		avg = held / (s.next - o.index)
	}
	return avg, held
}

// bytesFrom returns about how many bytes the entries from index to the
// last one hold (see the type's precision).
func (s *logSizes) bytesFrom(index uint64) uint64 {
	if s.n == 0 || index >= s.next {
		return 0
	}
	if i := s.search(index); i >= 0 {
		return s.total - s.at(i).before
	}
	avg, held := s.avg()
	return held + (s.at(0).index-index)*avg
}

// lowestWithin returns the lowest index from which the entries to the
// last one hold at most maxBytes (by bytesFrom); the index after the last
// when even the newest sample's span holds more. 0 when nothing was
// stored.
func (s *logSizes) lowestWithin(maxBytes uint64) uint64 {
	if s.n == 0 {
		return 0
	}
	i := sort.Search(s.n, func(i int) bool { return s.total-s.at(i).before <= maxBytes })
	switch {
	case i == s.n:
		return s.next
	case i > 0:
		return s.at(i).index
	}
	avg, held := s.avg()
	o := s.at(0).index
	if avg == 0 {
		return 0
	}
	return o - min((maxBytes-held)/avg, o)
}
