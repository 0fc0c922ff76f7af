// Package slack is a timer with slack: After(d) returns a channel closed
// at least d from now and at most d plus a slack from now, and every wait
// that falls due in the same slack-sized slot shares one channel and one
// runtime timer. It is for the periodic looks of per-copyset workers (a
// leader's lease, collector, share or job check every second): hundreds of
// copysets then wake the process a few times a second, each time for many
// of them together, instead of hundreds of times at scattered instants.
//
// Invariants: a channel is closed once, at or after its slot's time, and
// never before the d it was asked for; a slot's entry leaves the table when
// its channel closes, so the table holds only slots still due; no
// goroutine outlives its slot (time.AfterFunc's).
//
// Must not import: github.com/chunkraft/chunkraft/...
package slack
