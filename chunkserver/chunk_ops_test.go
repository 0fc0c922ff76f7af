package chunkserver

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

	"github.com/chunkraft/chunkraft/chunkserver/datastore"
	"github.com/chunkraft/chunkraft/internal/objstore"
	"github.com/chunkraft/chunkraft/internal/testwait"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	commonpb "github.com/chunkraft/chunkraft/proto/curve/common"
	"google.golang.org/protobuf/proto"
)

func block(b byte) []byte { return bytes.Repeat([]byte{b}, 4096) }

func (c *testCluster) write(t *testing.T, chunk uint64, sn uint64, off uint32, data []byte, want pb.CHUNK_OP_STATUS) {
	t.Helper()
	req := writeReq(chunk, off, data)
	req.Sn = proto.Uint64(sn)
	c.do(t, want, func(cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		return cl.WriteChunk(context.Background(), req)
	})
}

func (c *testCluster) read(t *testing.T, chunk uint64, off, size uint32) []byte {
	t.Helper()
	return c.do(t, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, func(cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		return cl.ReadChunk(context.Background(), readReq(chunk, off, size))
	}).GetData()
}

// do sends a request to the current leader (retrying while leadership
// moves) and checks its final status.
func (c *testCluster) do(t *testing.T, want pb.CHUNK_OP_STATUS, call func(pb.ChunkServiceClient) (*pb.ChunkResponse, error)) *pb.ChunkResponse {
	t.Helper()
	var resp *pb.ChunkResponse
	var err error
	testwait.Until(t, 10*time.Second, func() error {
		l := c.leader(t)
		if resp, err = call(c.chunk(l)); err == nil && resp.GetStatus() == pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_REDIRECTED {
			return fmt.Errorf("server %d redirects to %q", l, resp.GetRedirect())
		}
		return nil
	})
	return mustStatus(t, resp, err, want)
}

func (c *testCluster) info(t *testing.T, chunk uint64) []uint64 {
	t.Helper()
	resp, err := pb.NewChunkServiceClient(c.conns[c.leader(t)]).GetChunkInfo(context.Background(), &pb.GetChunkInfoRequest{
		LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(chunk)})
	if err != nil || resp.GetStatus() != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
		t.Fatalf("chunk info: %v %v", resp.GetStatus(), err)
	}
	return resp.GetChunkSn()
}

// hash returns server i's GetChunkHash over the whole chunk.
func (c *testCluster) hash(t *testing.T, i int, chunk uint64) string {
	t.Helper()
	resp, err := c.chunk(i).GetChunkHash(context.Background(), &pb.GetChunkHashRequest{
		LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(chunk),
		Offset: proto.Uint32(0), Length: proto.Uint32(16 << 20)})
	if err != nil || resp.GetStatus() != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
		t.Fatalf("hash of chunk %d on server %d: %v %v", chunk, i, resp.GetStatus(), err)
	}
	return resp.GetHash()
}

// waitSame waits until every running replica has applied the leader's
// commit index and hashes every chunk alike.
func (c *testCluster) waitSame(t *testing.T, chunks []uint64) {
	t.Helper()
	testwait.Until(t, 20*time.Second, func() error {
		leader := c.servers[c.leader(t)].Copysets().Get(c.group).Status()
		for i, srv := range c.servers {
			if c.cancels[i] == nil {
				continue
			}
			n := srv.Copysets().Get(c.group)
			if n == nil {
				return fmt.Errorf("replicas did not catch up: server %d hosts no replica", i)
			}
			if applied := n.Status().AppliedIndex; applied < leader.CommittedIndex {
				return fmt.Errorf("replicas did not catch up: server %d applied %d, the leader committed %d", i, applied, leader.CommittedIndex)
			}
		}
		return nil
	})
	for _, ch := range chunks {
		want := c.hash(t, c.leader(t), ch)
		for i := range c.servers {
			if c.cancels[i] != nil {
				if got := c.hash(t, i, ch); got != want {
					t.Fatalf("chunk %d: server %d hash %s, leader %s", ch, i, got, want)
				}
			}
		}
	}
}

func TestCOWSnapshotsInCluster(t *testing.T) {
	c := startTestCluster(t, 3)
	c.write(t, 5, 1, 0, block(1), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	c.write(t, 5, 2, 0, block(2), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	if got := c.info(t, 5); fmt.Sprint(got) != "[2 1]" {
		t.Fatalf("info %v, want [2 1]", got)
	}
	snap := c.do(t, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, func(cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		r := readReq(5, 0, 4096)
		r.OpType, r.Sn = pb.CHUNK_OP_TYPE_CHUNK_OP_READ_SNAP.Enum(), proto.Uint64(1)
		return cl.ReadChunkSnapshot(context.Background(), r)
	})
	if !bytes.Equal(snap.GetData(), block(1)) {
		t.Fatal("snapshot read did not return the old bytes")
	}
	if !bytes.Equal(c.read(t, 5, 0, 4096), block(2)) {
		t.Fatal("live read did not return the new bytes")
	}
	c.write(t, 5, 1, 4096, block(3), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_BACKWARD)
	c.do(t, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST, func(cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		return cl.DeleteChunkSnapshotOrCorrectSn(context.Background(), &pb.ChunkRequest{
			OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE_SNAP.Enum(), LogicPoolId: proto.Uint32(1),
			CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(5)})
	})
	c.do(t, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, func(cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		return cl.DeleteChunkSnapshotOrCorrectSn(context.Background(), &pb.ChunkRequest{
			OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE_SNAP.Enum(), LogicPoolId: proto.Uint32(1),
			CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(5), CorrectedSn: proto.Uint64(2)})
	})
	if got := c.info(t, 5); fmt.Sprint(got) != "[2]" {
		t.Fatalf("info after delete-snapshot %v, want [2]", got)
	}
	c.waitSame(t, []uint64{5})
}

func cloneReq(chunk uint64, location string) *pb.ChunkRequest {
	return &pb.ChunkRequest{
		OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_CREATE_CLONE.Enum(), LogicPoolId: proto.Uint32(1),
		CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(chunk), Sn: proto.Uint64(1),
		Size: proto.Uint32(16 << 20), Location: proto.String(location),
	}
}

func TestCloneChunksInCluster(t *testing.T) {
	c := startTestCluster(t, 3)
	ctx := context.Background()
	src := append(block(9), block(8)...)
	c.write(t, 9, 1, 0, src, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)

	// A clone of a chunk of this cluster reads the source before any write.
	create := func(chunk uint64, loc string, want pb.CHUNK_OP_STATUS) {
		t.Helper()
		c.do(t, want, func(cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
			return cl.CreateCloneChunk(ctx, cloneReq(chunk, loc))
		})
	}
	create(10, "1/1/9:0@cs", pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	create(10, "1/1/9:0@cs", pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS) // idempotent
	create(10, "1/1/8:0@cs", pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_CHUNK_EXIST)
	create(11, "1/1/9:100@cs", pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST)
	if got := c.read(t, 10, 0, 8192); !bytes.Equal(got, src) {
		t.Fatal("clone read did not return the source bytes")
	}
	// A written block wins over the source; unwritten ones still come from it.
	c.write(t, 10, 1, 4096, block(7), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	if got := c.read(t, 10, 0, 12288); !bytes.Equal(got, append(append(block(9), block(7)...), make([]byte, 4096)...)) {
		t.Fatal("merged clone read wrong")
	}
	// Recover pastes the source into unwritten blocks only; afterwards the
	// clone no longer needs its source.
	c.do(t, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, func(cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		r := readReq(10, 0, 16<<20)
		r.OpType = pb.CHUNK_OP_TYPE_CHUNK_OP_RECOVER.Enum()
		return cl.RecoverChunk(ctx, r)
	})
	c.do(t, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, func(cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		return cl.DeleteChunk(ctx, &pb.ChunkRequest{OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE.Enum(),
			LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(9)})
	})
	if got := c.read(t, 10, 0, 8192); !bytes.Equal(got, append(block(9), block(7)...)) {
		t.Fatal("recovered clone lost data after its source was deleted")
	}
	info, err := mustChunkStore(t, c.servers[c.leader(t)].Copysets().Get(c.group)).GetChunkInfo(10)
	if err != nil || info.Location != "" {
		t.Fatalf("fully recovered clone still has a location: %+v %v", info, err)
	}

	// An object of the object store (each server's local store here).
	obj := bytes.Repeat([]byte("s3"), 4096)
	for _, cfg := range c.cfgs {
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
		resp, err = pb.NewChunkServiceClient(c.conns[c.leader(t)]).CreateS3CloneChunk(ctx, &pb.CreateS3CloneChunkRequest{
			LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(12),
			ChunkLocationInfo: proto.String("vol1/chunk-0")})
		if err != nil || resp.GetStatus() != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_REDIRECTED {
			break
		}
	}
	if err != nil || resp.GetStatus() != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
		t.Fatalf("CreateS3CloneChunk: %v %v", resp.GetStatus(), err)
	}
	if got := c.read(t, 12, 0, 12288); !bytes.Equal(got, append(obj, make([]byte, 12288-len(obj))...)) {
		t.Fatal("S3 clone read did not return the object bytes")
	}
	c.waitSame(t, []uint64{10, 12})
}

// chunkPath is chunk id's file on server i.
func (c *testCluster) chunkPath(i int, chunk uint64) string {
	return filepath.Join(c.cfgs[i].DataDir, "copysets", c.group.String(), "data", fmt.Sprintf("chunk_%d", chunk))
}

func TestCorruptBlockReadsCRCFail(t *testing.T) {
	c := startTestCluster(t, 3)
	c.write(t, 3, 1, 8192, block(5), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	l := c.leader(t)
	f, err := os.OpenFile(c.chunkPath(l, 3), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0x55}, 4096+8192+100); err != nil {
		t.Fatal(err)
	}
	f.Close()
	resp, err := c.chunk(l).ReadChunk(context.Background(), readReq(3, 8192, 4096))
	mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_CRC_FAIL)
	if len(resp.GetData()) != 0 {
		t.Fatal("CRC_FAIL response carries data")
	}
	if n := c.servers[l].crcFailures(); n < 1 {
		t.Fatalf("crc failures counted %v", n)
	}
}

func TestApplyIOErrorStopsOnlyThatCopyset(t *testing.T) {
	c := startTestCluster(t, 3)
	c.write(t, 1, 1, 0, block(1), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	l := c.leader(t)
	f := (l + 1) % 3
	c.fs[f].Inject(datastore.FaultRule{Ops: datastore.FaultWrite, Path: datastore.PathContains("chunk_1"), Err: syscall.EIO})
	c.write(t, 1, 1, 4096, block(2), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	node := c.servers[f].Copysets().Get(c.group)
	testwait.Until(t, 10*time.Second, func() error {
		if node.Broken() == nil {
			return errors.New("follower with a failing disk did not stop its copyset")
		}
		return nil
	})
	st, err := pb.NewCopysetServiceClient(c.conns[f]).GetCopysetStatus(context.Background(), &pb.CopysetStatusRequest{
		LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1), QueryHash: proto.Bool(false),
		Peer: &commonpb.Peer{Address: proto.String(string(c.servers[f].Local()))}})
	if err != nil || st.GetState() != braftError {
		t.Fatalf("broken replica state %d (%v), want %d", st.GetState(), err, braftError)
	}
	// The process serves on; the healthy replicas agree and keep writing.
	c.write(t, 1, 1, 8192, block(3), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	healthy := []int{l, 3 - l - f}
	testwait.Until(t, 10*time.Second, func() error {
		if a, b := c.hash(t, healthy[0], 1), c.hash(t, healthy[1], 1); a != b {
			return fmt.Errorf("healthy replicas differ: %s vs %s", a, b)
		}
		return nil
	})
	resp, err := c.chunk(f).ReadChunk(context.Background(), readReq(1, 0, 4096))
	mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_DISK_FAIL)
}

// TestSnapshotInstallChunkData: a follower stopped while more than the
// trailing logs are written catches up via InstallSnapshot and ends
// byte-identical, clone and COW snapshot included, and knowing the epoch
// fence raised while it was down (the snapshot carries the copyset's fence
// table); every server restarted after snapshot + truncation serves all
// data.
func TestSnapshotInstallChunkData(t *testing.T) {
	c := startTestCluster(t, 3, func(cfg *Config) {
		cfg.Raft.SnapshotThreshold, cfg.Raft.TrailingLogs = 32, 8
		cfg.Raft.SnapshotInterval = 200 * time.Millisecond
	})
	c.write(t, 1, 1, 0, block(1), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	l := c.leader(t)
	f := (l + 1) % 3
	c.stop(f)
	eresp, err := c.chunk(l).UpdateEpoch(context.Background(), &pb.UpdateEpochRequest{FileId: proto.Uint64(5), Epoch: proto.Uint64(2)})
	if err != nil || eresp.GetStatus() != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
		t.Fatalf("UpdateEpoch on the leader: %v %v", eresp.GetStatus(), err)
	}
	for i := range 100 {
		c.write(t, uint64(1+i%3), 1, uint32(i)*4096, block(byte(i)), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	}
	c.write(t, 1, 2, 0, block(0xee), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS) // COW snapshot of chunk 1
	c.do(t, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, func(cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		return cl.CreateCloneChunk(context.Background(), cloneReq(7, "1/1/2:0@cs"))
	})
	c.write(t, 7, 1, 0, block(0x77), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	// Both live replicas snapshot and truncate, so whichever leads when the
	// follower returns can only catch it up with a snapshot install.
	for i, srv := range c.servers {
		if i == f {
			continue
		}
		n := srv.Copysets().Get(c.group)
		if err := n.Snapshot(context.Background()); err != nil && !strings.Contains(err.Error(), "nothing new") {
			t.Fatal(err)
		}
		if first := n.Status().FirstIndex; first <= 8 {
			t.Fatalf("server %d log not truncated: first index %d", i, first)
		}
	}
	c.start(f, nil)
	chunks := []uint64{1, 2, 3, 7}
	c.waitSame(t, chunks)
	// The install is counted when the swap finishes, which may be just
	// after the data is visible: poll for it.
	waitInstalled(t, c, f)
	if c.servers[f].fences.epochs.allowed(5, 1) {
		t.Fatal("the follower installed a snapshot without the copyset's fence of file 5")
	}
	// Every server restarted after snapshot + truncation serves all data.
	for i := range c.servers {
		c.stop(i)
	}
	for i := range c.servers {
		c.start(i, nil)
	}
	c.waitSame(t, chunks)
	if got := c.read(t, 7, 0, 8192); !bytes.Equal(got, append(block(0x77), block(1)...)) {
		t.Fatal("clone chunk wrong after snapshot install and restart")
	}
	snap := c.do(t, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, func(cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		r := readReq(1, 0, 4096)
		r.OpType, r.Sn = pb.CHUNK_OP_TYPE_CHUNK_OP_READ_SNAP.Enum(), proto.Uint64(1)
		return cl.ReadChunkSnapshot(context.Background(), r)
	})
	if !bytes.Equal(snap.GetData(), block(0)) {
		t.Fatal("COW snapshot wrong after snapshot install and restart")
	}
}

// waitInstalled fails t unless server i installs a snapshot from its leader
// within 10 s.
func waitInstalled(t *testing.T, c *testCluster, i int) {
	t.Helper()
	testwait.Until(t, 10*time.Second, func() error {
		if c.servers[i].Copysets().Get(c.group).Status().SnapshotsInstalled == 0 {
			return errors.New("the stopped follower caught up without a snapshot install")
		}
		return nil
	})
}
