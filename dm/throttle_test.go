package dm

import (
	"testing"
	"time"
)

func TestPace(t *testing.T) {
	t0 := time.Unix(1000, 0)
	// 1 MiB at 1 MiB/s takes a second from now.
	if got := pace(time.Time{}, t0, 1<<20, 1<<20); !got.Equal(t0.Add(time.Second)) {
		t.Fatalf("pace from idle = %v", got)
	}
	// Behind: the next group waits for the one before it.
	if got := pace(t0.Add(time.Second), t0, 1<<19, 1<<20); !got.Equal(t0.Add(1500 * time.Millisecond)) {
		t.Fatalf("pace behind = %v", got)
	}
	// Idle time is not saved up.
	if got := pace(t0.Add(-time.Hour), t0, 1<<20, 1<<20); !got.Equal(t0.Add(time.Second)) {
		t.Fatalf("pace after idle = %v", got)
	}
}
