package datasync

import (
	"testing"
	"time"
)

// A collector's pause before retrying sends no heartbeat, so it must stay
// well inside the reassignment timeout (2 x the check period) at the
// shortest check period the config takes (100 ms) as at the default.
func TestRetryPauseInsideReassignTimeout(t *testing.T) {
	for _, tc := range []struct{ check, want time.Duration }{
		{100 * time.Millisecond, 25 * time.Millisecond},
		{time.Second, 250 * time.Millisecond},
		{DefaultCheckPeriod, time.Second},
	} {
		got := retryPause(tc.check)
		if got != tc.want || got >= 2*tc.check {
			t.Errorf("check period %v: pause %v, want %v (under %v)", tc.check, got, tc.want, 2*tc.check)
		}
	}
}
