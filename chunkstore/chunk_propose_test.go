package chunkstore

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/chunkraft/chunkraft/copyset"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// A leader that lost the leadership after appending a chunk op answers
// REDIRECTED with the leader hint, as a follower does: the client retries on
// the new leader.
func TestRedirectOrOutcomeUnknown(t *testing.T) {
	for _, err := range []error{
		&copyset.NotLeaderError{Leader: "10.0.0.2:8200:0"},
		&copyset.OutcomeUnknownError{Leader: "10.0.0.2:8200:0"},
		fmt.Errorf("propose: %w", &copyset.OutcomeUnknownError{Leader: "10.0.0.2:8200:0"}),
	} {
		st, leader := redirectOr(err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_FAILURE_UNKNOWN)
		if st != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_REDIRECTED || leader != "10.0.0.2:8200:0" {
			t.Errorf("%v: got %v, %q; want REDIRECTED to 10.0.0.2:8200:0", err, st, leader)
		}
	}
	if st, _ := redirectOr(errors.New("raft shut down"), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_FAILURE_UNKNOWN); st != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_FAILURE_UNKNOWN {
		t.Errorf("another error: got %v, want the fallback", st)
	}
}

// An op that committed but did not apply to a chunkResult on the leader:
// the store's status of a FatalError, else DISK_FAIL.
func TestApplyErrStatus(t *testing.T) {
	for _, c := range []struct {
		err  error
		want pb.CHUNK_OP_STATUS
	}{
		{fmt.Errorf("copyset 1/1: op at index 3: %w", &copyset.FatalError{Err: syscall.ENOSPC}), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_NOSPACE},
		{fmt.Errorf("copyset 1/1: op at index 3: %w", &copyset.FatalError{Err: errors.New("eio")}), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_DISK_FAIL},
		{fmt.Errorf("copyset 1/1: op at index 3: %w", copyset.ErrBroken), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_DISK_FAIL},
		{errors.New("copyset 1/1: op at index 3: apply result is a string"), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_DISK_FAIL},
	} {
		if got := applyErrStatus(c.err); got != c.want {
			t.Errorf("%v: got %v, want %v", c.err, got, c.want)
		}
	}
}
