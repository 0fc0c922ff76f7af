package testwait

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fakeTB records what Until reports instead of failing the test.
type fakeTB struct {
	testing.TB
	helpers int
	fatals  []string
}

func (f *fakeTB) Helper()           { f.helpers++ }
func (f *fakeTB) Fatal(args ...any) { f.fatals = append(f.fatals, fmt.Sprint(args...)) }
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatals = append(f.fatals, fmt.Sprintf(format, args...))
}

// TestUntilReturnsOnceTheConditionHolds: Until returns at the first nil
// from cond, well before the timeout, and reports nothing.
func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	tb := &fakeTB{}
	calls := 0
	start := time.Now()
	Until(tb, time.Minute, func() error {
		calls++
		if calls < 3 {
			return fmt.Errorf("call %d", calls)
		}
		return nil
	})
	if calls != 3 || len(tb.fatals) != 0 {
		t.Fatalf("cond called %d times, reports %q; want 3 calls and none", calls, tb.fatals)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("Until took %v for a condition true at the third call", took)
	}
	if tb.helpers == 0 {
		t.Fatal("Until does not mark itself a helper: a failure would name its own line")
	}
}

// TestUntilReportsTheLastError: at the timeout Until fails once, with
// cond's last error and the timeout in the message, after calling cond
// again at the deadline.
func TestUntilReportsTheLastError(t *testing.T) {
	tb := &fakeTB{}
	calls := 0
	start := time.Now()
	Until(tb, 100*time.Millisecond, func() error {
		calls++
		return fmt.Errorf("replica 2 applied %d, want 9", calls)
	})
	took := time.Since(start)
	if len(tb.fatals) != 1 {
		t.Fatalf("reports %q, want one", tb.fatals)
	}
	want := fmt.Sprintf("timed out after 100ms: replica 2 applied %d, want 9", calls)
	if tb.fatals[0] != want {
		t.Fatalf("reports %q, want %q (the last error)", tb.fatals[0], want)
	}
	if took < 100*time.Millisecond || calls < 2 {
		t.Fatalf("gave up after %v and %d calls, before the 100ms timeout", took, calls)
	}
}

// TestForReturnsTheLastError: For returns nil once cond holds, and at the
// timeout an error wrapping cond's last error.
func TestForReturnsTheLastError(t *testing.T) {
	if err := For(time.Minute, func() error { return nil }); err != nil {
		t.Fatalf("For of a true condition: %v", err)
	}
	last := errors.New("still busy")
	err := For(30*time.Millisecond, func() error { return last })
	if !errors.Is(err, last) || !strings.Contains(err.Error(), "30ms") {
		t.Fatalf("For at the timeout: %v, want it to wrap %q and name the timeout", err, last)
	}
}

// TestForPacesItsCalls: the pause between calls grows, so a condition
// that stays false for a second is called a few dozen times at most, not
// in a busy loop.
func TestForPacesItsCalls(t *testing.T) {
	calls := 0
	For(time.Second, func() error { calls++; return errors.New("no") })
	if calls < 5 || calls > 30 {
		t.Fatalf("cond called %d times in a second, want between 5 and 30", calls)
	}
}
