package testwait

import (
	"fmt"
	"testing"
	"time"
)

// The pause between two calls of a condition starts at firstPause and
// doubles up to maxPause: a quick event is seen at once, a slow one is
// not polled hard.
const (
	firstPause = 10 * time.Millisecond
	maxPause   = 200 * time.Millisecond
)

// For calls cond until it returns nil, and then returns nil. Once timeout
// has passed since the first call, it calls cond a last time and, if that
// fails too, returns an error that wraps cond's last error and names the
// timeout.
func For(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for pause := firstPause; ; pause = min(2*pause, maxPause) {
		err := cond()
		if err == nil {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("timed out after %v: %w", timeout, err)
		}
		time.Sleep(min(pause, left))
	}
}

// Until is For that fails tb when the timeout passes, at the caller's
// line, with cond's last error: the message says what was still not so.
// cond runs on the caller's goroutine, so it may call tb.Fatal itself
// for a failure no wait mends.
func Until(tb testing.TB, timeout time.Duration, cond func() error) {
	tb.Helper()
	if err := For(timeout, cond); err != nil {
		tb.Fatal(err)
	}
}
