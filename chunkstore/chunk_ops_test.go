package chunkstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/chunkserver"
	"github.com/chunkraft/chunkraft/chunkserver/servertest"
	"github.com/chunkraft/chunkraft/chunkstore/datastore"
	"github.com/chunkraft/chunkraft/internal/objstore"
	"github.com/chunkraft/chunkraft/internal/testwait"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	commonpb "github.com/chunkraft/chunkraft/proto/curve/common"
	"google.golang.org/protobuf/proto"
)

func TestCOWSnapshotsInCluster(t *testing.T) {
	c := startTestCluster(t, 3)
	c.Write(t, 5, 1, 0, block(1), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	c.Write(t, 5, 2, 0, block(2), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	if got := c.Info(t, 5); fmt.Sprint(got) != "[2 1]" {
		t.Fatalf("info %v, want [2 1]", got)
	}
	snap := c.Do(t, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, func(cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		r := readReq(5, 0, 4096)
		r.OpType, r.Sn = pb.CHUNK_OP_TYPE_CHUNK_OP_READ_SNAP.Enum(), proto.Uint64(1)
		return cl.ReadChunkSnapshot(context.Background(), r)
	})
	if !bytes.Equal(snap.GetData(), block(1)) {
		t.Fatal("snapshot read did not return the old bytes")
	}
	if !bytes.Equal(c.Read(t, 5, 0, 4096), block(2)) {
		t.Fatal("live read did not return the new bytes")
	}
	c.Write(t, 5, 1, 4096, block(3), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_BACKWARD)
	c.Do(t, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST, func(cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		return cl.DeleteChunkSnapshotOrCorrectSn(context.Background(), &pb.ChunkRequest{
			OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE_SNAP.Enum(), LogicPoolId: proto.Uint32(1),
			CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(5)})
	})
	c.Do(t, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, func(cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		return cl.DeleteChunkSnapshotOrCorrectSn(context.Background(), &pb.ChunkRequest{
			OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE_SNAP.Enum(), LogicPoolId: proto.Uint32(1),
			CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(5), CorrectedSn: proto.Uint64(2)})
	})
	if got := c.Info(t, 5); fmt.Sprint(got) != "[2]" {
		t.Fatalf("info after delete-snapshot %v, want [2]", got)
	}
	c.WaitSame(t, []uint64{5})
}

func TestCloneChunksInCluster(t *testing.T) {
	c := startTestCluster(t, 3)
	ctx := context.Background()
	src := append(block(9), block(8)...)
	c.Write(t, 9, 1, 0, src, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)

	// A clone of a chunk of this cluster reads the source before any write.
	create := func(chunk uint64, loc string, want pb.CHUNK_OP_STATUS) {
		t.Helper()
		c.Do(t, want, func(cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
			return cl.CreateCloneChunk(ctx, cloneReq(chunk, loc))
		})
	}
	create(10, "1/1/9:0@cs", pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	create(10, "1/1/9:0@cs", pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS) // idempotent
	create(10, "1/1/8:0@cs", pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_CHUNK_EXIST)
	create(11, "1/1/9:100@cs", pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST)
	if got := c.Read(t, 10, 0, 8192); !bytes.Equal(got, src) {
		t.Fatal("clone read did not return the source bytes")
	}
	// A written block wins over the source; unwritten ones still come from it.
	c.Write(t, 10, 1, 4096, block(7), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	if got := c.Read(t, 10, 0, 12288); !bytes.Equal(got, append(append(block(9), block(7)...), make([]byte, 4096)...)) {
		t.Fatal("merged clone read wrong")
	}
	// Recover pastes the source into unwritten blocks only; afterwards the
	// clone no longer needs its source.
	c.Do(t, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, func(cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		r := readReq(10, 0, 16<<20)
		r.OpType = pb.CHUNK_OP_TYPE_CHUNK_OP_RECOVER.Enum()
		return cl.RecoverChunk(ctx, r)
	})
	c.Do(t, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, func(cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		return cl.DeleteChunk(ctx, &pb.ChunkRequest{OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE.Enum(),
			LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(9)})
	})
	if got := c.Read(t, 10, 0, 8192); !bytes.Equal(got, append(block(9), block(7)...)) {
		t.Fatal("recovered clone lost data after its source was deleted")
	}
	info, _, err := chunksOf(t, c, c.Leader(t)).ChunkMeta(10)
	if err != nil || info.Location != "" {
		t.Fatalf("fully recovered clone still has a location: %+v %v", info, err)
	}

	// An object of the object store (each server's local store here).
	obj := bytes.Repeat([]byte("s3"), 4096)
	for _, cfg := range c.Cfgs {
		store, err := objstore.NewLocal(filepath.Join(cfg.DataDir, objstore.DefaultLocalDir))
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Put(ctx, "vol1/chunk-0", bytes.NewReader(obj), int64(len(obj))); err != nil {
			t.Fatal(err)
		}
		store.Close()
	}
	var resp *pb.CreateS3CloneChunkResponse
	for try := 0; try < 20; try++ {
		resp, err = pb.NewChunkServiceClient(c.Conns[c.Leader(t)]).CreateS3CloneChunk(ctx, &pb.CreateS3CloneChunkRequest{
			LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(12),
			ChunkLocationInfo: proto.String("vol1/chunk-0")})
		if err != nil || resp.GetStatus() != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_REDIRECTED {
			break
		}
	}
	if err != nil || resp.GetStatus() != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
		t.Fatalf("CreateS3CloneChunk: %v %v", resp.GetStatus(), err)
	}
	if got := c.Read(t, 12, 0, 12288); !bytes.Equal(got, append(obj, make([]byte, 12288-len(obj))...)) {
		t.Fatal("S3 clone read did not return the object bytes")
	}
	c.WaitSame(t, []uint64{10, 12})
}

// chunkPath is chunk id's file on server i.
func TestCorruptBlockReadsCRCFail(t *testing.T) {
	c := startTestCluster(t, 3)
	c.Write(t, 3, 1, 8192, block(5), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	l := c.Leader(t)
	f, err := os.OpenFile(c.ChunkPath(l, 3), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0x55}, 4096+8192+100); err != nil {
		t.Fatal(err)
	}
	f.Close()
	resp, err := c.Chunk(l).ReadChunk(context.Background(), readReq(3, 8192, 4096))
	mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_CRC_FAIL)
	if len(resp.GetData()) != 0 {
		t.Fatal("CRC_FAIL response carries data")
	}
	if n := servertest.Scrape(t, c.Servers[l].Gatherer())["chunkraft_chunk_crc_failures_total"][""]; n < 1 {
		t.Fatalf("crc failures counted %v", n)
	}
}

func TestApplyIOErrorStopsOnlyThatCopyset(t *testing.T) {
	c := startTestCluster(t, 3)
	c.Write(t, 1, 1, 0, block(1), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	l := c.Leader(t)
	f := (l + 1) % 3
	c.FS[f].Inject(datastore.FaultRule{Ops: datastore.FaultWrite, Path: datastore.PathContains("chunk_1"), Err: syscall.EIO})
	c.Write(t, 1, 1, 4096, block(2), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	node := c.Servers[f].Copysets().Get(c.Group)
	testwait.Until(t, 10*time.Second, func() error {
		if node.Broken() == nil {
			return errors.New("follower with a failing disk did not stop its copyset")
		}
		return nil
	})
	st, err := pb.NewCopysetServiceClient(c.Conns[f]).GetCopysetStatus(context.Background(), &pb.CopysetStatusRequest{
		LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1), QueryHash: proto.Bool(false),
		Peer: &commonpb.Peer{Address: proto.String(string(c.Servers[f].Local()))}})
	if err != nil || st.GetState() != braftStateError {
		t.Fatalf("broken replica state %d (%v), want %d", st.GetState(), err, braftStateError)
	}
	// The process serves on; the healthy replicas agree and keep writing.
	c.Write(t, 1, 1, 8192, block(3), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	healthy := []int{l, 3 - l - f}
	testwait.Until(t, 10*time.Second, func() error {
		if a, b := c.Hash(t, healthy[0], 1), c.Hash(t, healthy[1], 1); a != b {
			return fmt.Errorf("healthy replicas differ: %s vs %s", a, b)
		}
		return nil
	})
	resp, err := c.Chunk(f).ReadChunk(context.Background(), readReq(1, 0, 4096))
	mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_DISK_FAIL)
}

// TestSnapshotInstallChunkData: a follower stopped while more than the
// trailing logs are written catches up via InstallSnapshot and ends
// byte-identical, clone and COW snapshot included, and knowing the epoch
// fence raised while it was down (the snapshot carries the copyset's fence
// table); every server restarted after snapshot + truncation serves all
// data.
func TestSnapshotInstallChunkData(t *testing.T) {
	c := startTestCluster(t, 3, func(cfg *chunkserver.Config) {
		cfg.Raft.SnapshotThreshold, cfg.Raft.TrailingLogs = 32, 8
		cfg.Raft.SnapshotInterval = 200 * time.Millisecond
	})
	c.Write(t, 1, 1, 0, block(1), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	l := c.Leader(t)
	f := (l + 1) % 3
	c.Stop(f)
	eresp, err := c.Chunk(l).UpdateEpoch(context.Background(), &pb.UpdateEpochRequest{FileId: proto.Uint64(5), Epoch: proto.Uint64(2)})
	if err != nil || eresp.GetStatus() != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
		t.Fatalf("UpdateEpoch on the leader: %v %v", eresp.GetStatus(), err)
	}
	for i := range 100 {
		c.Write(t, uint64(1+i%3), 1, uint32(i)*4096, block(byte(i)), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	}
	c.Write(t, 1, 2, 0, block(0xee), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS) // COW snapshot of chunk 1
	c.Do(t, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, func(cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		return cl.CreateCloneChunk(context.Background(), cloneReq(7, "1/1/2:0@cs"))
	})
	c.Write(t, 7, 1, 0, block(0x77), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	// Both live replicas snapshot and truncate, so whichever leads when the
	// follower returns can only catch it up with a snapshot install.
	for i, srv := range c.Servers {
		if i == f {
			continue
		}
		n := srv.Copysets().Get(c.Group)
		if err := n.Snapshot(context.Background()); err != nil && !strings.Contains(err.Error(), "nothing new") {
			t.Fatal(err)
		}
		if first := n.Status().FirstIndex; first <= 8 {
			t.Fatalf("server %d log not truncated: first index %d", i, first)
		}
	}
	c.Start(f, nil)
	chunks := []uint64{1, 2, 3, 7}
	c.WaitSame(t, chunks)
	// The install is counted when the swap finishes, which may be just
	// after the data is visible: poll for it.
	c.WaitInstalled(t, f)
	if c.Servers[f].Chunks().EpochAllowed(5, 1) {
		t.Fatal("the follower installed a snapshot without the copyset's fence of file 5")
	}
	// Every server restarted after snapshot + truncation serves all data.
	for i := range c.Servers {
		c.Stop(i)
	}
	for i := range c.Servers {
		c.Start(i, nil)
	}
	c.WaitSame(t, chunks)
	if got := c.Read(t, 7, 0, 8192); !bytes.Equal(got, append(block(0x77), block(1)...)) {
		t.Fatal("clone chunk wrong after snapshot install and restart")
	}
	snap := c.Do(t, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, func(cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		r := readReq(1, 0, 4096)
		r.OpType, r.Sn = pb.CHUNK_OP_TYPE_CHUNK_OP_READ_SNAP.Enum(), proto.Uint64(1)
		return cl.ReadChunkSnapshot(context.Background(), r)
	})
	if !bytes.Equal(snap.GetData(), block(0)) {
		t.Fatal("COW snapshot wrong after snapshot install and restart")
	}
}
