package restore

import "sync"

// scratch is the memory one copyset's check or replay works in: the
// image builder's buffers and a packet buffer (readPacket).
type scratch struct {
	ib  *ImageBuilder
	pkt []byte
}

// scratchList keeps the scratch of finished checks and replays for the
// next ones: a restore allocates (and the kernel faults in) each 16 MiB
// buffer once, not once per copyset and pass. Safe for concurrent use.
type scratchList struct {
	g    Geometry
	mu   sync.Mutex
	free []*scratch
}

func (l *scratchList) get() *scratch {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.free); n > 0 {
		sc := l.free[n-1]
		l.free = l.free[:n-1]
		return sc
	}
	return &scratch{ib: NewImageBuilder(l.g)}
}

func (l *scratchList) put(sc *scratch) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.free = append(l.free, sc)
}
