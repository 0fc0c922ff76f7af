package sharedlog

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine (a shard writer, or one of
// raft's) outlives its owner.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
