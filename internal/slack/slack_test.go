package slack

import (
	"fmt"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/internal/testwait"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSlack(t *testing.T) {
	for _, c := range []struct{ d, want time.Duration }{
		{0, 1}, {2, 1}, {100 * time.Millisecond, 25 * time.Millisecond},
		{time.Second, 250 * time.Millisecond}, {time.Hour, 250 * time.Millisecond},
	} {
		if got := Slack(c.d); got != c.want {
			t.Errorf("Slack(%v) = %v, want %v", c.d, got, c.want)
		}
	}
}

// Waits that end in one slot share a channel; the next slot gets its own.
func TestAfterSharesSlots(t *testing.T) {
	var c Clock
	now := time.Unix(1000, 0) // on a slot boundary: slots end at 1000 + k*250ms
	a := c.after(now, 10*time.Second+time.Millisecond)
	b := c.after(now.Add(200*time.Millisecond), 10*time.Second)
	if a != b {
		t.Fatal("two waits ending in the slot at 10.25 s got different channels")
	}
	if o := c.after(now.Add(300*time.Millisecond), 10*time.Second); o == a {
		t.Fatal("a wait ending in the next slot got the same channel")
	}
	if got := c.pending(); got != 2 {
		t.Fatalf("pending slots = %d, want 2", got)
	}
	// The slots lie in the past of the real clock: they fire at once.
	<-a
	testwait.Until(t, 10*time.Second, func() error {
		if n := c.pending(); n != 0 {
			return fmt.Errorf("%d slots pending", n)
		}
		return nil
	})
}

// A wait never ends before the duration it asked for, and the table is
// empty once every slot fired.
func TestAfterNeverEarly(t *testing.T) {
	var c Clock
	start := time.Now()
	chans := make([]<-chan struct{}, 0, 20)
	ds := make([]time.Duration, 0, 20)
	for i := range 20 {
		d := time.Duration(i+1) * 3 * time.Millisecond
		chans = append(chans, c.After(d))
		ds = append(ds, d)
	}
	for i, ch := range chans {
		<-ch
		if el := time.Since(start); el < ds[i] {
			t.Errorf("wait of %v ended after %v", ds[i], el)
		}
	}
	testwait.Until(t, 10*time.Second, func() error {
		if n := c.pending(); n != 0 {
			return fmt.Errorf("%d slots pending", n)
		}
		return nil
	})
}
