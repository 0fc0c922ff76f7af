package servertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/testwait"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	"google.golang.org/protobuf/proto"
)

// Block is a 4 KiB block of b.
func Block(b byte) []byte { return bytes.Repeat([]byte{b}, 4096) }

// WriteReq writes data at off of chunk in copyset 1 of pool 1, with sn 1.
func WriteReq(chunk uint64, off uint32, data []byte) *pb.ChunkRequest {
	return &pb.ChunkRequest{
		OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE.Enum(), LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1),
		ChunkId: proto.Uint64(chunk), Offset: proto.Uint32(off), Size: proto.Uint32(uint32(len(data))),
		Sn: proto.Uint64(1), Data: data,
	}
}

// ReadReq reads size bytes at off of chunk in copyset 1 of pool 1.
func ReadReq(chunk uint64, off, size uint32) *pb.ChunkRequest {
	return &pb.ChunkRequest{
		OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_READ.Enum(), LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1),
		ChunkId: proto.Uint64(chunk), Offset: proto.Uint32(off), Size: proto.Uint32(size),
	}
}

// CloneReq creates chunk in copyset 1 of pool 1 as a 16 MiB clone of
// location, with sn 1.
func CloneReq(chunk uint64, location string) *pb.ChunkRequest {
	return &pb.ChunkRequest{
		OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_CREATE_CLONE.Enum(), LogicPoolId: proto.Uint32(1),
		CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(chunk), Sn: proto.Uint64(1),
		Size: proto.Uint32(16 << 20), Location: proto.String(location),
	}
}

// MustStatus fails t unless the call returned resp with status want, and
// returns resp.
func MustStatus(t testing.TB, resp *pb.ChunkResponse, err error, want pb.CHUNK_OP_STATUS) *pb.ChunkResponse {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetStatus() != want {
		t.Fatalf("status %v, want %v", resp.GetStatus(), want)
	}
	return resp
}

// Chunk is the ChunkService client of server i.
func (c *Cluster[C, S]) Chunk(i int) pb.ChunkServiceClient {
	return pb.NewChunkServiceClient(c.Conns[i])
}

// Node is server i's replica of the copyset (nil if it has none).
func (c *Cluster[C, S]) Node(i int) *copyset.Node { return c.Servers[i].Copysets().Get(c.Group) }

// Write writes data at off of chunk with sn through the leader and checks
// the status.
func (c *Cluster[C, S]) Write(t testing.TB, chunk uint64, sn uint64, off uint32, data []byte, want pb.CHUNK_OP_STATUS) {
	t.Helper()
	req := WriteReq(chunk, off, data)
	req.Sn = proto.Uint64(sn)
	c.Do(t, want, func(cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		return cl.WriteChunk(context.Background(), req)
	})
}

// Read reads size bytes at off of chunk through the leader.
func (c *Cluster[C, S]) Read(t testing.TB, chunk uint64, off, size uint32) []byte {
	t.Helper()
	return c.Do(t, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, func(cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		return cl.ReadChunk(context.Background(), ReadReq(chunk, off, size))
	}).GetData()
}

// Do sends a request to the current leader (retrying while leadership
// moves) and checks its final status.
func (c *Cluster[C, S]) Do(t testing.TB, want pb.CHUNK_OP_STATUS, call func(pb.ChunkServiceClient) (*pb.ChunkResponse, error)) *pb.ChunkResponse {
	t.Helper()
	var resp *pb.ChunkResponse
	var err error
	testwait.Until(t, 10*time.Second, func() error {
		l := c.Leader(t)
		if resp, err = call(c.Chunk(l)); err == nil && resp.GetStatus() == pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_REDIRECTED {
			return fmt.Errorf("server %d redirects to %q", l, resp.GetRedirect())
		}
		return nil
	})
	return MustStatus(t, resp, err, want)
}

// Info is the chunk's sn list (GetChunkInfo through the leader).
func (c *Cluster[C, S]) Info(t testing.TB, chunk uint64) []uint64 {
	t.Helper()
	resp, err := pb.NewChunkServiceClient(c.Conns[c.Leader(t)]).GetChunkInfo(context.Background(), &pb.GetChunkInfoRequest{
		LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(chunk)})
	if err != nil || resp.GetStatus() != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
		t.Fatalf("chunk info: %v %v", resp.GetStatus(), err)
	}
	return resp.GetChunkSn()
}

// Hash returns server i's GetChunkHash over the whole chunk.
func (c *Cluster[C, S]) Hash(t testing.TB, i int, chunk uint64) string {
	t.Helper()
	resp, err := c.Chunk(i).GetChunkHash(context.Background(), &pb.GetChunkHashRequest{
		LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(chunk),
		Offset: proto.Uint32(0), Length: proto.Uint32(16 << 20)})
	if err != nil || resp.GetStatus() != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
		t.Fatalf("hash of chunk %d on server %d: %v %v", chunk, i, resp.GetStatus(), err)
	}
	return resp.GetHash()
}

// WaitSame waits until every running replica has applied the leader's
// commit index and hashes every chunk alike.
func (c *Cluster[C, S]) WaitSame(t testing.TB, chunks []uint64) {
	t.Helper()
	testwait.Until(t, 20*time.Second, func() error {
		leader := c.Servers[c.Leader(t)].Copysets().Get(c.Group).Status()
		for i, srv := range c.Servers {
			if !c.Running(i) {
				continue
			}
			n := srv.Copysets().Get(c.Group)
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
		want := c.Hash(t, c.Leader(t), ch)
		for i := range c.Servers {
			if c.Running(i) {
				if got := c.Hash(t, i, ch); got != want {
					t.Fatalf("chunk %d: server %d hash %s, leader %s", ch, i, got, want)
				}
			}
		}
	}
}

// ChunkPath is the file of chunk in server i's replica of the copyset.
func (c *Cluster[C, S]) ChunkPath(i int, chunk uint64) string {
	return filepath.Join(c.dataDirs[i], "copysets", c.Group.String(), "data", fmt.Sprintf("chunk_%d", chunk))
}

// WaitInstalled fails t unless server i installs a snapshot from its
// leader within 10 s.
func (c *Cluster[C, S]) WaitInstalled(t testing.TB, i int) {
	t.Helper()
	testwait.Until(t, 10*time.Second, func() error {
		if c.Servers[i].Copysets().Get(c.Group).Status().SnapshotsInstalled == 0 {
			return errors.New("the stopped follower caught up without a snapshot install")
		}
		return nil
	})
}
