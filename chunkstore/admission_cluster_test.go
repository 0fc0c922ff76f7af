package chunkstore_test

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	commonpb "github.com/chunkraft/chunkraft/proto/curve/common"
)

// TestOverloadAndReadOnly: over the in-flight limit a request gets
// OVERLOAD; below the free-space floor writes get NOSPACE while reads
// work, and writes succeed again once space is back.
func TestOverloadAndReadOnly(t *testing.T) {
	c := startTestCluster(t, 3)
	ctx := context.Background()
	l := c.Leader(t)
	cl := c.Chunk(l)
	data := bytes.Repeat([]byte{7}, 4096)
	resp, err := cl.WriteChunk(ctx, writeReq(1, 0, data))
	mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)

	admit := c.Servers[l].Chunks().Admission()
	admit.SetMaxInflight(0)
	resp, err = cl.WriteChunk(ctx, writeReq(1, 0, data))
	mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_OVERLOAD)
	resp, err = cl.ReadChunk(ctx, readReq(1, 0, 4096))
	mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_OVERLOAD)
	admit.SetMaxInflight(5000)

	var full sync.Mutex
	free := uint64(0)
	admit.SetDiskFree(func(string) (uint64, error) { full.Lock(); defer full.Unlock(); return free, nil })
	resp, err = cl.WriteChunk(ctx, writeReq(1, 4096, data))
	mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_NOSPACE)
	resp, err = cl.ReadChunk(ctx, readReq(1, 0, 8192))
	mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	if !bytes.Equal(resp.GetData()[:4096], data) || !bytes.Equal(resp.GetData()[4096:], make([]byte, 4096)) {
		t.Fatal("refused write changed data")
	}
	st, err := pb.NewCopysetServiceClient(c.Conns[l]).GetCopysetStatus(ctx, &pb.CopysetStatusRequest{
		LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1), QueryHash: proto.Bool(false),
		Peer: &commonpb.Peer{Address: proto.String(string(c.Servers[l].Local()))}})
	if err != nil || !st.GetReadOnly() {
		t.Fatalf("status readOnly = %v (%v), want true", st.GetReadOnly(), err)
	}
	full.Lock()
	free = 1 << 40
	full.Unlock()
	admit.Recheck()
	resp, err = cl.WriteChunk(ctx, writeReq(1, 4096, data))
	mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
}
