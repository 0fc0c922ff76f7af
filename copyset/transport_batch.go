package copyset

import (
	"runtime"
	"sync"
)

// sendBatcher sends values in batches on a stream that takes one sender
// at a time, without a goroutine or a timer of its own: whoever adds a
// value while no send is in progress becomes the sender. It yields the
// processor once first, so that the goroutines woken with it (by one
// group commit of the shared log) add theirs, then sends everything
// queued as one batch, again and again until the queue is empty; values
// added meanwhile ride in the next batch. A lone value goes out at once.
// After a send fails, what is added is dropped: the stream is broken and
// its receiving side reports why.
type sendBatcher[T any] struct {
	send func(batch []T) error // called by one goroutine at a time

	mu      sync.Mutex
	out     []T // queued, not sent
	spare   []T // the last batch's slice, for reuse
	sending bool
	err     error // the first send error
}

// add queues v and, unless another goroutine is sending, sends the queue
// until it is empty.
func (b *sendBatcher[T]) add(v T) {
	b.mu.Lock()
	if b.err != nil {
		b.mu.Unlock()
		return
	}
	b.out = append(b.out, v)
	if b.sending {
		b.mu.Unlock()
		return
	}
	b.sending = true
	b.mu.Unlock()
	runtime.Gosched()
	b.mu.Lock()
	for {
		batch := b.out
		b.out, b.spare = b.spare[:0], nil
		b.mu.Unlock()
		err := b.send(batch) // encodes batch before it returns
		clear(batch)
		b.mu.Lock()
		b.spare = batch[:0]
		if err != nil && b.err == nil {
			b.err = err
		}
		if b.err != nil || len(b.out) == 0 {
			b.sending = false
			b.mu.Unlock()
			return
		}
	}
}
