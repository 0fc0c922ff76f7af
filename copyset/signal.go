package copyset

import "sync"

// signal is a broadcast: wait returns a channel closed by the next fire.
// The channel is made only when someone waits, so a fire nobody waits for
// costs a lock and no allocation (fsm.setApplied fires at every apply).
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// fire wakes every waiter; it never blocks (it runs on raft's goroutine).
func (s *signal) fire() {
	s.mu.Lock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
	s.mu.Unlock()
}
