package chunkstore_test

import (
	"bytes"
	"context"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// TestEpochFencing: after UpdateEpoch(5, 2) a write carrying file 5 with
// epoch 1 is refused and changes nothing; epoch 2 passes; lowering fails.
func TestEpochFencing(t *testing.T) {
	c := startTestCluster(t, 3)
	ctx := context.Background()
	l := c.Leader(t)
	cl := c.Chunk(l)
	orig := bytes.Repeat([]byte{1}, 4096)
	resp, err := cl.WriteChunk(ctx, writeReq(9, 0, orig))
	mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)

	up := func(file, epoch uint64) pb.CHUNK_OP_STATUS {
		r, err := cl.UpdateEpoch(ctx, &pb.UpdateEpochRequest{FileId: proto.Uint64(file), Epoch: proto.Uint64(epoch)})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus()
	}
	if st := up(5, 2); st != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
		t.Fatalf("update epoch: %v", st)
	}
	if st := up(5, 1); st != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_EPOCH_TOO_OLD {
		t.Fatalf("lowering epoch: %v", st)
	}
	stale := writeReq(9, 0, bytes.Repeat([]byte{2}, 4096))
	stale.FileId, stale.Epoch = proto.Uint64(5), proto.Uint64(1)
	resp, err = cl.WriteChunk(ctx, stale)
	mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_EPOCH_TOO_OLD)
	del := &pb.ChunkRequest{OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE.Enum(), LogicPoolId: proto.Uint32(1),
		CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(9), FileId: proto.Uint64(5), Epoch: proto.Uint64(1)}
	resp, err = cl.DeleteChunk(ctx, del)
	mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_EPOCH_TOO_OLD)
	resp, err = cl.ReadChunk(ctx, readReq(9, 0, 4096))
	if mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS); !bytes.Equal(resp.GetData(), orig) {
		t.Fatal("a fenced request changed the chunk")
	}
	current := writeReq(9, 0, bytes.Repeat([]byte{3}, 4096))
	current.FileId, current.Epoch = proto.Uint64(5), proto.Uint64(2)
	resp, err = cl.WriteChunk(ctx, current)
	mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
}
