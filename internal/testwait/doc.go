// Package testwait is how tests wait for an event: Until polls a
// condition until it holds and fails the test, at the caller's line and
// with the condition's last error, when it does not within a timeout; For
// does the same but returns that error, for a goroutine (which must not
// call t.Fatal) or a caller that goes on. A test that waits with them
// takes as long as the event takes, not a fixed sleep that a slow machine
// outruns. Only test code imports it; it imports nothing of ours.
//
// Must not import: github.com/chunkraft/chunkraft/...
package testwait
