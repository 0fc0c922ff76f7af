// background: the owner of a node's helper goroutines (removal notices), which
// Node.Close stops and waits for.

package copyset

import (
	"sync"
	"time"
)

// background runs a node's helper goroutines; close stops new ones, tells
// the running ones (sleep returns false) and waits for them.
type background struct {
	mu     sync.Mutex
	closed bool
	done   chan struct{}
	wg     sync.WaitGroup
}

func (b *background) do(f func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	if b.done == nil {
		b.done = make(chan struct{})
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		f()
	}()
}

// sleep waits d; false if close was called meanwhile.
func (b *background) sleep(d time.Duration) bool {
	b.mu.Lock()
	done := b.done
	b.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}

// wait waits for a value on ch; false if close was called meanwhile.
func (b *background) wait(ch <-chan struct{}) bool {
	b.mu.Lock()
	done := b.done
	b.mu.Unlock()
	select {
	case <-ch:
		return true
	case <-done:
		return false
	}
}

func (b *background) close() {
	b.mu.Lock()
	if !b.closed && b.done != nil {
		close(b.done)
	}
	b.closed = true
	b.mu.Unlock()
	b.wg.Wait()
}
