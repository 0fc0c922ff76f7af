package chunkstore_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/chunkraft/chunkraft/chunkserver/servertest"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

var (
	marshalSeed  = servertest.MarshalSeed
	rpcCtx       = servertest.CallCtx
	inconclusive = servertest.Inconclusive
)

// ChunkService methods, in the order of FuzzChunkService's method byte.
const (
	csWrite = iota
	csRead
	csDelete
	csReadSnap
	csDeleteSnap
	csCreateClone
	csRecover
	csS3Clone
	csChunkInfo
	csChunkHash
	csUpdateEpoch
	csMethods
)

// FuzzChunkService: every ChunkService RPC on a fuzzed request answers
// with a status (never a gRPC error, never a panic); a read or write whose
// offset and size fail validation is INVALID_REQUEST; no request breaks
// the replica (DISK_FAIL, CRC_FAIL) or reports NOSPACE on a roomy disk.
func FuzzChunkService(f *testing.F) {
	cloneLoc := &pb.ChunkRequest{OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_CREATE_CLONE.Enum(), LogicPoolId: proto.Uint32(1),
		CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(7), Sn: proto.Uint64(1), CorrectedSn: proto.Uint64(1),
		Size: proto.Uint32(16 << 20), Location: proto.String("bucket/obj@s3")}
	marshalSeed(f, csWrite, writeReq(1, 0, bytes.Repeat([]byte{1}, 4096)))
	marshalSeed(f, csWrite, writeReq(1, 1, []byte{1}))
	marshalSeed(f, csWrite, writeReq(1, 16<<20, bytes.Repeat([]byte{1}, 4096)))
	marshalSeed(f, csRead, readReq(1, 0, 4096))
	marshalSeed(f, csRead, readReq(1, 0, 0))
	marshalSeed(f, csRead, &pb.ChunkRequest{OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_READ.Enum(), ChunkId: proto.Uint64(1), LogicPoolId: proto.Uint32(9), CopysetId: proto.Uint32(9), Offset: proto.Uint32(0), Size: proto.Uint32(4096)})
	marshalSeed(f, csDelete, &pb.ChunkRequest{OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE.Enum(), LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(1), Sn: proto.Uint64(1)})
	marshalSeed(f, csReadSnap, &pb.ChunkRequest{OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_READ_SNAP.Enum(), LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(1), Sn: proto.Uint64(1), Offset: proto.Uint32(0), Size: proto.Uint32(4096)})
	marshalSeed(f, csDeleteSnap, &pb.ChunkRequest{OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE_SNAP.Enum(), LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(1), CorrectedSn: proto.Uint64(2)})
	marshalSeed(f, csCreateClone, cloneLoc)
	marshalSeed(f, csRecover, &pb.ChunkRequest{OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_RECOVER.Enum(), LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(7), Offset: proto.Uint32(0), Size: proto.Uint32(4096)})
	marshalSeed(f, csS3Clone, &pb.CreateS3CloneChunkRequest{LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(8), CorrectedSn: proto.Uint64(1), ChunkLocationInfo: proto.String("obj@s3")})
	marshalSeed(f, csChunkInfo, &pb.GetChunkInfoRequest{LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(1)})
	marshalSeed(f, csChunkHash, &pb.GetChunkHashRequest{LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(1), Offset: proto.Uint32(0), Length: proto.Uint32(4096)})
	marshalSeed(f, csUpdateEpoch, &pb.UpdateEpochRequest{FileId: proto.Uint64(5), Epoch: proto.Uint64(2)})
	f.Add(uint8(csWrite), []byte{0xff})
	c := startTestCluster(f, 1)
	cl := c.Chunk(0)
	f.Fuzz(func(t *testing.T, method uint8, msg []byte) {
		ctx, cancel := rpcCtx()
		defer cancel()
		var (
			st  pb.CHUNK_OP_STATUS
			err error
		)
		m := method % csMethods
		switch m {
		case csS3Clone:
			req := &pb.CreateS3CloneChunkRequest{}
			if proto.Unmarshal(msg, req) != nil {
				t.Skip()
			}
			var resp *pb.CreateS3CloneChunkResponse
			resp, err = cl.CreateS3CloneChunk(ctx, req)
			st = resp.GetStatus()
		case csChunkInfo:
			req := &pb.GetChunkInfoRequest{}
			if proto.Unmarshal(msg, req) != nil {
				t.Skip()
			}
			var resp *pb.GetChunkInfoResponse
			resp, err = cl.GetChunkInfo(ctx, req)
			st = resp.GetStatus()
		case csChunkHash:
			req := &pb.GetChunkHashRequest{}
			if proto.Unmarshal(msg, req) != nil {
				t.Skip()
			}
			var resp *pb.GetChunkHashResponse
			resp, err = cl.GetChunkHash(ctx, req)
			st = resp.GetStatus()
		case csUpdateEpoch:
			req := &pb.UpdateEpochRequest{}
			if proto.Unmarshal(msg, req) != nil {
				t.Skip()
			}
			var resp *pb.UpdateEpochResponse
			resp, err = cl.UpdateEpoch(ctx, req)
			st = resp.GetStatus()
		default:
			req := &pb.ChunkRequest{}
			if proto.Unmarshal(msg, req) != nil {
				t.Skip()
			}
			call := map[int]func(context.Context, *pb.ChunkRequest, ...grpc.CallOption) (*pb.ChunkResponse, error){
				csWrite: cl.WriteChunk, csRead: cl.ReadChunk, csDelete: cl.DeleteChunk, csReadSnap: cl.ReadChunkSnapshot,
				csDeleteSnap: cl.DeleteChunkSnapshotOrCorrectSn, csCreateClone: cl.CreateCloneChunk, csRecover: cl.RecoverChunk,
			}[int(m)]
			var resp *pb.ChunkResponse
			resp, err = call(ctx, req)
			st = resp.GetStatus()
			if err == nil && (m == csWrite || m == csRead) && badIO(req) &&
				st != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST {
				t.Fatalf("method %d with bad offset/size %v: status %v, want INVALID_REQUEST", m, req, st)
			}
		}
		if err != nil {
			inconclusive(t, ctx, err)
			t.Fatalf("method %d: gRPC error %v, want a status", m, err)
		}
		if _, ok := pb.CHUNK_OP_STATUS_name[int32(st)]; !ok {
			t.Fatalf("method %d: undefined status %d", m, st)
		}
		switch st {
		case pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_CRC_FAIL, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_NOSPACE:
			t.Fatalf("method %d: status %v on a healthy replica", m, st)
		case pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_DISK_FAIL:
			// A read of a clone chunk whose source cannot be read (no
			// object store here, an unreachable chunkserver) answers
			// DISK_FAIL (storeStatus of the source error); anything
			// else must not.
			if m != csRead && m != csRecover {
				t.Fatalf("method %d: status %v on a healthy replica", m, st)
			}
		}
		c.Healthy(t, 0)
	})
}

// badIO says whether a read or write's offset and size are unacceptable
// for the default geometry (4 KiB blocks, 16 MiB chunks).
func badIO(req *pb.ChunkRequest) bool {
	if req.Offset == nil || req.Size == nil {
		return true
	}
	off, size := uint64(req.GetOffset()), uint64(req.GetSize())
	return size == 0 || off%4096 != 0 || size%4096 != 0 || off+size > 16<<20
}
