package slack

import (
	"sync"
	"time"
)

// maxSlack is the most a wait runs over what it asked for.
const maxSlack = 250 * time.Millisecond

// Clock hands out shared slotted timers. The zero value is ready to use.
type Clock struct {
	mu    sync.Mutex
	slots map[int64]chan struct{} // slot end (Unix ns) -> its channel
}

// process is the process-wide clock After uses, so that every caller's
// waits share slots.
var process Clock

// After returns a channel closed after d and at most Slack(d) later, on
// the process-wide clock.
func After(d time.Duration) <-chan struct{} { return process.After(d) }

// Slack is how much later than d a wait of d may end: a quarter of d, at
// most 250 ms, at least 1 ns.
func Slack(d time.Duration) time.Duration {
	return max(min(d/4, maxSlack), 1)
}

// After returns a channel closed once, at least d and at most d + Slack(d)
// from now. Waits whose end falls in the same slot get the same channel.
func (c *Clock) After(d time.Duration) <-chan struct{} {
	return c.after(time.Now(), d)
}

// after is After with the slot chosen as of now; the timer runs on the
// real clock (a slot already past fires at once).
func (c *Clock) after(now time.Time, d time.Duration) <-chan struct{} {
	q := int64(Slack(d))
	due := now.Add(max(d, 0)).UnixNano()
	end := (due + q - 1) / q * q // the slot's end: the first multiple of q at or after due
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch, ok := c.slots[end]; ok {
		return ch
	}
	if c.slots == nil {
		c.slots = make(map[int64]chan struct{})
	}
	ch := make(chan struct{})
	c.slots[end] = ch
	time.AfterFunc(time.Until(time.Unix(0, end)), func() { c.fire(end) })
	return ch
}

// fire closes the channel of the slot ending at end.
func (c *Clock) fire(end int64) {
	c.mu.Lock()
	ch := c.slots[end]
	delete(c.slots, end)
	c.mu.Unlock()
	close(ch)
}

// pending reports how many slots are still due (tests).
func (c *Clock) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.slots)
}
