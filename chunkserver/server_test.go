package chunkserver

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/chunkraft/chunkraft/chunkserver/datastore"
	"github.com/chunkraft/chunkraft/chunkserver/servertest"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	commonpb "github.com/chunkraft/chunkraft/proto/curve/common"
	"google.golang.org/protobuf/proto"
)

// testCluster is n in-process chunkservers on loopback with one copyset
// (servertest.Cluster bound to this package's servers).
type testCluster struct {
	*servertest.Cluster[Config, *Server]
}

// clusterOpts adjust the servers' configuration before they start.
type clusterOpts = func(*Config)

// testBinding builds the test clusters' servers (LoopbackConfig, NewQuiet).
var testBinding = servertest.Binding[Config, *Server]{
	Config: LoopbackConfig,
	New:    func(cfg Config, fs *datastore.FaultFS) (*Server, error) { return NewQuiet(cfg, fs) },
}

func startTestCluster(t *testing.T, n int, opts ...clusterOpts) *testCluster {
	t.Helper()
	return &testCluster{servertest.Start(t, n, testBinding, opts...)}
}

var (
	block      = servertest.Block
	writeReq   = servertest.WriteReq
	readReq    = servertest.ReadReq
	cloneReq   = servertest.CloneReq
	mustStatus = servertest.MustStatus
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

	admit := c.Servers[l].admit
	admit.maxInflight = 0
	resp, err = cl.WriteChunk(ctx, writeReq(1, 0, data))
	mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_OVERLOAD)
	resp, err = cl.ReadChunk(ctx, readReq(1, 0, 4096))
	mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_OVERLOAD)
	admit.maxInflight = 5000

	var full sync.Mutex
	free := uint64(0)
	admit.diskFree = func(string) (uint64, error) { full.Lock(); defer full.Unlock(); return free, nil }
	admit.recheck()
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
	admit.recheck()
	resp, err = cl.WriteChunk(ctx, writeReq(1, 4096, data))
	mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
}
