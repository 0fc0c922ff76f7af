package chunkserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/chunkserver/datastore"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/testwait"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	commonpb "github.com/chunkraft/chunkraft/proto/curve/common"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// testCluster is n in-process chunkservers on loopback with one copyset;
// a server can be stopped and started again on its address and data dir.
type testCluster struct {
	t       *testing.T
	cfgs    []Config
	fs      []*datastore.FaultFS
	servers []*Server
	cancels []context.CancelFunc
	dones   []chan struct{}
	conns   []*grpc.ClientConn
	group   copyset.GroupID
}

// clusterOpts adjust the servers' configuration before they start.
type clusterOpts func(*Config)

func startTestCluster(t *testing.T, n int, opts ...clusterOpts) *testCluster {
	t.Helper()
	c := &testCluster{t: t, group: copyset.NewGroupID(1, 1)}
	var peers []copyset.PeerID
	for i := 0; i < n; i++ {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig()
		cfg.Listen, cfg.MetricsListen = lis.Addr().String(), ""
		cfg.DataDir = filepath.Join(t.TempDir(), "data")
		cfg.ChunkFilePool = 0
		// Short enough that elections are quick, long enough that a loaded
		// 2-core CI machine (two test binaries, a cluster each) seldom
		// stalls a leader past its lease.
		cfg.Raft.HeartbeatTimeout, cfg.Raft.ElectionTimeout = 500*time.Millisecond, 500*time.Millisecond
		cfg.Raft.LeaderLeaseTimeout = 250 * time.Millisecond
		cfg.Sync.SendInterval = time.Second // tests wait for exports to catch up
		for _, o := range opts {
			o(&cfg)
		}
		conn, err := grpc.NewClient(cfg.Listen, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
		if err != nil {
			t.Fatal(err)
		}
		c.cfgs, c.conns = append(c.cfgs, cfg), append(c.conns, conn)
		c.fs = append(c.fs, datastore.NewFaultFS(nil))
		c.servers = append(c.servers, nil)
		c.cancels = append(c.cancels, nil)
		c.dones = append(c.dones, nil)
		c.start(i, lis)
		peers = append(peers, c.servers[i].Local())
	}
	t.Cleanup(func() {
		for i := range c.servers {
			c.stop(i)
		}
		for _, conn := range c.conns {
			conn.Close()
		}
	})
	for _, srv := range c.servers {
		if _, err := srv.Copysets().Create(context.Background(), c.group, peers); err != nil {
			t.Fatal(err)
		}
	}
	c.leader(t)
	return c
}

// start runs server i (listening on lis, or on its address again).
func (c *testCluster) start(i int, lis net.Listener) {
	c.t.Helper()
	if lis == nil {
		// The address is free once the stopped server's socket is closed.
		testwait.Until(c.t, 2*time.Second, func() (err error) {
			lis, err = net.Listen("tcp", c.cfgs[i].Listen)
			return err
		})
	}
	srv, err := newServer(c.cfgs[i], slog.New(slog.NewTextHandler(io.Discard, nil)),
		seams{raftLog: io.Discard, fs: c.fs[i]})
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ctx, lis) }()
	c.servers[i], c.cancels[i], c.dones[i] = srv, cancel, done
	testwait.Until(c.t, time.Minute, func() error {
		select {
		case <-done:
			c.t.Fatalf("server %d stopped before it was ready", i)
		default:
		}
		if !srv.ready.Load() {
			return fmt.Errorf("server %d is not ready", i)
		}
		return nil
	})
}

// stop shuts server i down cleanly.
func (c *testCluster) stop(i int) {
	if c.cancels[i] != nil {
		c.cancels[i]()
		<-c.dones[i]
		c.cancels[i] = nil
	}
}

// leader returns the index of the copyset's leader.
func (c *testCluster) leader(t *testing.T) int {
	t.Helper()
	leader := -1
	testwait.Until(t, 10*time.Second, func() error {
		for i, srv := range c.servers {
			if c.cancels[i] == nil {
				continue
			}
			if n := srv.Copysets().Get(c.group); n != nil && n.IsLeader() {
				leader = i
				return nil
			}
		}
		return errors.New("no leader")
	})
	return leader
}

func (c *testCluster) chunk(i int) pb.ChunkServiceClient { return pb.NewChunkServiceClient(c.conns[i]) }

func writeReq(chunk uint64, off uint32, data []byte) *pb.ChunkRequest {
	return &pb.ChunkRequest{
		OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE.Enum(), LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1),
		ChunkId: proto.Uint64(chunk), Offset: proto.Uint32(off), Size: proto.Uint32(uint32(len(data))),
		Sn: proto.Uint64(1), Data: data,
	}
}

func readReq(chunk uint64, off, size uint32) *pb.ChunkRequest {
	return &pb.ChunkRequest{
		OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_READ.Enum(), LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1),
		ChunkId: proto.Uint64(chunk), Offset: proto.Uint32(off), Size: proto.Uint32(size),
	}
}

func mustStatus(t *testing.T, resp *pb.ChunkResponse, err error, want pb.CHUNK_OP_STATUS) *pb.ChunkResponse {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetStatus() != want {
		t.Fatalf("status %v, want %v", resp.GetStatus(), want)
	}
	return resp
}

// TestEpochFencing: after UpdateEpoch(5, 2) a write carrying file 5 with
// epoch 1 is refused and changes nothing; epoch 2 passes; lowering fails.
func TestEpochFencing(t *testing.T) {
	c := startTestCluster(t, 3)
	ctx := context.Background()
	l := c.leader(t)
	cl := c.chunk(l)
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
	l := c.leader(t)
	cl := c.chunk(l)
	data := bytes.Repeat([]byte{7}, 4096)
	resp, err := cl.WriteChunk(ctx, writeReq(1, 0, data))
	mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)

	admit := c.servers[l].admit
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
	st, err := pb.NewCopysetServiceClient(c.conns[l]).GetCopysetStatus(ctx, &pb.CopysetStatusRequest{
		LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1), QueryHash: proto.Bool(false),
		Peer: &commonpb.Peer{Address: proto.String(string(c.servers[l].Local()))}})
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
