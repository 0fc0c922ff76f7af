package chunkstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/internal/testwait"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// TestNewLeaderLearnsFences: a fence that one member alone holds (in its
// epochs.json, never committed to the copyset: a server fenced before
// fences were replicated) is learned by a new leader before it accepts a
// write, and committed, so the old leader holds it too.
func TestNewLeaderLearnsFences(t *testing.T) {
	c := startTestCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l := c.Leader(t)
	resp, err := c.Chunk(l).WriteChunk(ctx, writeReq(9, 0, block(1)))
	mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	knows, next := (l+1)%3, (l+2)%3
	if err := c.Servers[knows].Chunks().RaiseLocalFence(9, 4); err != nil {
		t.Fatal(err)
	}
	end, _ := ctx.Deadline()
	testwait.Until(t, time.Until(end), func() error {
		if c.Servers[next].Copysets().Get(c.Group).IsLeader() {
			return nil
		}
		if cur := c.Leader(t); cur != next {
			if err := c.Servers[cur].Copysets().Get(c.Group).TransferLeader(ctx, c.Servers[next].Local()); err != nil {
				t.Logf("transfer leader: %v", err)
			}
		}
		return errors.New("leadership did not move")
	})
	stale := writeReq(9, 0, block(2))
	stale.FileId, stale.Epoch = proto.Uint64(9), proto.Uint64(3)
	resp, err = c.Chunk(next).WriteChunk(ctx, stale)
	mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_EPOCH_TOO_OLD)
	testwait.Until(t, time.Until(end), func() error {
		if c.Servers[l].Chunks().EpochAllowed(9, 3) {
			return errors.New("the new leader's fence op never reached the old leader")
		}
		return nil
	})
}

// TestUpdateEpochOnFollower: UpdateEpoch sent to a follower only answers
// SUCCESS once the fence is committed in the copyset's log (forwarded to
// the leader), so a leader that prepared its term before the fence existed
// refuses the stale write at once.
func TestUpdateEpochOnFollower(t *testing.T) {
	c := startTestCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l := c.Leader(t)
	resp, err := c.Chunk(l).WriteChunk(ctx, writeReq(9, 0, block(1))) // the leader is prepared
	mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	f := (l + 1) % 3
	up, err := c.Chunk(f).UpdateEpoch(ctx, &pb.UpdateEpochRequest{FileId: proto.Uint64(5), Epoch: proto.Uint64(2)})
	if err != nil || up.GetStatus() != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
		t.Fatalf("UpdateEpoch on a follower: %v %v", up.GetStatus(), err)
	}
	stale := writeReq(9, 0, block(2))
	stale.FileId, stale.Epoch = proto.Uint64(5), proto.Uint64(1)
	resp, err = c.Chunk(c.Leader(t)).WriteChunk(ctx, stale)
	mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_EPOCH_TOO_OLD)
}
