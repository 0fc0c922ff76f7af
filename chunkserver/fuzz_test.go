package chunkserver

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/testwait"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	commonpb "github.com/chunkraft/chunkraft/proto/curve/common"
)

// rpcFixture is one in-process chunkserver hosting copyset 1/1 alone
// (a single-node raft group that elects itself), reached over loopback
// gRPC, for the request validation fuzz targets.
type rpcFixture struct {
	srv   *Server
	conn  *grpc.ClientConn
	group copyset.GroupID
	cs    *copysetService // direct handler for the create RPCs
}

func newRPCFixture(f *testing.F) *rpcFixture {
	f.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Listen, cfg.MetricsListen = lis.Addr().String(), ""
	cfg.DataDir = filepath.Join(f.TempDir(), "data")
	cfg.ChunkFilePool = 0
	cfg.Raft.HeartbeatTimeout, cfg.Raft.ElectionTimeout = 300*time.Millisecond, 300*time.Millisecond
	cfg.Raft.LeaderLeaseTimeout = 150 * time.Millisecond
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := NewWithSeams(cfg, log, Seams{RaftLog: io.Discard})
	if err != nil {
		f.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ctx, lis) }()
	f.Cleanup(func() { cancel(); <-done })
	testwait.Until(f, time.Minute, func() error {
		if !srv.Ready() {
			return errors.New("the server is not ready")
		}
		return nil
	})
	conn, err := grpc.NewClient(cfg.Listen, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { conn.Close() })
	fx := &rpcFixture{srv: srv, conn: conn, group: copyset.NewGroupID(1, 1),
		cs: &copysetService{copysets: srv.copysets, admit: srv.admit, log: log, conns: srv.peers}}
	if _, err := srv.Copysets().Create(context.Background(), fx.group, []copyset.PeerID{srv.Local()}); err != nil {
		f.Fatal(err)
	}
	testwait.Until(f, 10*time.Second, func() error {
		if n := srv.Copysets().Get(fx.group); n == nil || !n.IsLeader() {
			return errors.New("single-node copyset elected no leader")
		}
		return nil
	})
	return fx
}

// check fails t when the fixture copyset is gone or broken: no request
// may break a healthy replica.
func (fx *rpcFixture) check(t *testing.T) {
	t.Helper()
	n := fx.srv.Copysets().Get(fx.group)
	if n == nil {
		t.Fatal("fixture copyset is gone")
	}
	if b := n.Broken(); b != nil {
		t.Fatalf("fixture copyset broken: %v", b)
	}
}

func marshalSeed(f *testing.F, method uint8, m proto.Message) {
	f.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(method, b)
}

// rpcCtx bounds one fuzzed call: a request may wait on raft, never on
// more than this.
func rpcCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 5*time.Second)
}

// inconclusive skips an input whose call outlived its deadline (a loaded
// machine), which says nothing about validation.
func inconclusive(t *testing.T, ctx context.Context, err error) {
	t.Helper()
	if ctx.Err() != nil || grpcstatus.Code(err) == codes.DeadlineExceeded {
		t.Skipf("call outlived its deadline: %v", err)
	}
}

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
	fx := newRPCFixture(f)
	cl := pb.NewChunkServiceClient(fx.conn)
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
		fx.check(t)
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

// CliService2 and CopysetService methods, in the order of their fuzz
// targets' method byte.
const (
	cliAdd = iota
	cliRemove
	cliChange
	cliGetLeader
	cliTransfer
	cliReset
	cliSnapshot
	cliSnapshotAll
	cliMethods
)

// okCode says whether err is nil or a gRPC status with a documented code
// of the admin services.
func okCode(err error) bool {
	if err == nil {
		return true
	}
	s, ok := grpcstatus.FromError(err)
	if !ok {
		return false
	}
	switch s.Code() {
	case codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.Unavailable,
		codes.Aborted, codes.DeadlineExceeded:
		return true
	}
	return false
}

// FuzzCliService2: every CliService2 RPC on a fuzzed request answers with
// a response or a gRPC error of a documented code, never panics, and never
// breaks the replica. Membership changes and ResetPeer aimed at the fixture
// copyset are redirected to an unhosted one (1/2), so the fixture stays a
// one-node group; their validation still runs first.
func FuzzCliService2(f *testing.F) {
	g := func(p, c uint32) (*uint32, *uint32) { return proto.Uint32(p), proto.Uint32(c) }
	peer := func(s string) *commonpb.Peer { return &commonpb.Peer{Address: proto.String(s)} }
	p, c := g(1, 1)
	marshalSeed(f, cliAdd, &pb.AddPeerRequest2{LogicPoolId: p, CopysetId: c, Leader: peer("127.0.0.1:1"), AddPeer: peer("127.0.0.1:2:0")})
	marshalSeed(f, cliAdd, &pb.AddPeerRequest2{LogicPoolId: p, CopysetId: c, Leader: peer(""), AddPeer: peer("not a peer")})
	marshalSeed(f, cliRemove, &pb.RemovePeerRequest2{LogicPoolId: p, CopysetId: c, Leader: peer(""), RemovePeer: peer("127.0.0.1:2")})
	marshalSeed(f, cliChange, &pb.ChangePeersRequest2{LogicPoolId: p, CopysetId: c, Leader: peer(""), NewPeers: []*commonpb.Peer{peer("127.0.0.1:2")}})
	marshalSeed(f, cliChange, &pb.ChangePeersRequest2{LogicPoolId: p, CopysetId: c, Leader: peer("127.0.0.1:1")})
	marshalSeed(f, cliGetLeader, &pb.GetLeaderRequest2{LogicPoolId: p, CopysetId: c})
	marshalSeed(f, cliGetLeader, &pb.GetLeaderRequest2{LogicPoolId: proto.Uint32(7), CopysetId: c})
	marshalSeed(f, cliTransfer, &pb.TransferLeaderRequest2{LogicPoolId: p, CopysetId: c, Leader: peer(""), Transferee: peer("127.0.0.1:2")})
	marshalSeed(f, cliTransfer, &pb.TransferLeaderRequest2{LogicPoolId: p, CopysetId: c, Leader: peer(""), Transferee: peer("")})
	marshalSeed(f, cliReset, &pb.ResetPeerRequest2{LogicPoolId: p, CopysetId: c, RequestPeer: peer("127.0.0.1:2"), NewPeers: []*commonpb.Peer{peer("127.0.0.1:2")}})
	marshalSeed(f, cliSnapshot, &pb.SnapshotRequest2{LogicPoolId: p, CopysetId: c})
	marshalSeed(f, cliSnapshot, &pb.SnapshotRequest2{LogicPoolId: p, CopysetId: c, Peer: peer("bad")})
	marshalSeed(f, cliSnapshotAll, &pb.SnapshotAllRequest{})
	fx := newRPCFixture(f)
	cl := pb.NewCliService2Client(fx.conn)
	// away moves a destructive request off the fixture copyset.
	away := func(pool, cs *uint32) *uint32 {
		if copyset.NewGroupID(*pool, *cs) == fx.group {
			return proto.Uint32(2)
		}
		return cs
	}
	f.Fuzz(func(t *testing.T, method uint8, msg []byte) {
		ctx, cancel := rpcCtx()
		defer cancel()
		var err error
		unmarshal := func(m proto.Message) {
			if proto.Unmarshal(msg, m) != nil {
				t.Skip()
			}
		}
		m := method % cliMethods
		switch m {
		case cliAdd:
			req := &pb.AddPeerRequest2{}
			unmarshal(req)
			req.CopysetId = away(proto.Uint32(req.GetLogicPoolId()), proto.Uint32(req.GetCopysetId()))
			_, err = cl.AddPeer(ctx, req)
		case cliRemove:
			req := &pb.RemovePeerRequest2{}
			unmarshal(req)
			req.CopysetId = away(proto.Uint32(req.GetLogicPoolId()), proto.Uint32(req.GetCopysetId()))
			_, err = cl.RemovePeer(ctx, req)
		case cliChange:
			req := &pb.ChangePeersRequest2{}
			unmarshal(req)
			req.CopysetId = away(proto.Uint32(req.GetLogicPoolId()), proto.Uint32(req.GetCopysetId()))
			_, err = cl.ChangePeers(ctx, req)
		case cliGetLeader:
			req := &pb.GetLeaderRequest2{}
			unmarshal(req)
			var resp *pb.GetLeaderResponse2
			resp, err = cl.GetLeader(ctx, req)
			if err == nil && copyset.NewGroupID(req.GetLogicPoolId(), req.GetCopysetId()) == fx.group &&
				resp.GetLeader().GetAddress() != string(fx.srv.Local()) {
				t.Fatalf("GetLeader = %v, want %s", resp.GetLeader(), fx.srv.Local())
			}
		case cliTransfer:
			req := &pb.TransferLeaderRequest2{}
			unmarshal(req)
			_, err = cl.TransferLeader(ctx, req)
		case cliReset:
			req := &pb.ResetPeerRequest2{}
			unmarshal(req)
			req.CopysetId = away(proto.Uint32(req.GetLogicPoolId()), proto.Uint32(req.GetCopysetId()))
			_, err = cl.ResetPeer(ctx, req)
		case cliSnapshot:
			req := &pb.SnapshotRequest2{}
			unmarshal(req)
			_, err = cl.Snapshot(ctx, req)
		case cliSnapshotAll:
			req := &pb.SnapshotAllRequest{}
			unmarshal(req)
			_, err = cl.SnapshotAll(ctx, req)
		}
		if !okCode(err) {
			inconclusive(t, ctx, err)
			t.Fatalf("method %d: %v", m, err)
		}
		fx.check(t)
	})
}

// FuzzCopysetService: every CopysetService RPC on a fuzzed request answers
// with a defined status or InvalidArgument, never panics, and never breaks
// the replica. The create RPCs run with a canceled context (their
// validation runs, no raft group is made: a fuzzer would otherwise start
// thousands); DeleteBrokenCopyset on the healthy fixture must be
// COPYSET_IS_HEALTHY.
func FuzzCopysetService(f *testing.F) {
	p, c := proto.Uint32(1), proto.Uint32(1)
	marshalSeed(f, 0, &pb.CopysetRequest{LogicPoolId: p, CopysetId: proto.Uint32(3), Peerid: []string{"127.0.0.1:2:0"}})
	marshalSeed(f, 0, &pb.CopysetRequest{LogicPoolId: p, CopysetId: c, Peerid: []string{"bad"}})
	marshalSeed(f, 0, &pb.CopysetRequest{LogicPoolId: p, CopysetId: c})
	marshalSeed(f, 1, &pb.CopysetRequest2{Copysets: []*pb.Copyset{{LogicPoolId: p, CopysetId: c,
		Peers: []*commonpb.Peer{{Address: proto.String("127.0.0.1:2:0")}}}}})
	marshalSeed(f, 1, &pb.CopysetRequest2{Copysets: []*pb.Copyset{{LogicPoolId: p, CopysetId: c}}})
	marshalSeed(f, 2, &pb.CopysetRequest{LogicPoolId: p, CopysetId: c})
	marshalSeed(f, 2, &pb.CopysetRequest{LogicPoolId: p, CopysetId: proto.Uint32(5)})
	marshalSeed(f, 3, &pb.CopysetStatusRequest{LogicPoolId: p, CopysetId: c, Peer: &commonpb.Peer{}, QueryHash: proto.Bool(true)})
	marshalSeed(f, 3, &pb.CopysetStatusRequest{LogicPoolId: p, CopysetId: proto.Uint32(5), Peer: &commonpb.Peer{}, QueryHash: proto.Bool(false)})
	fx := newRPCFixture(f)
	cl := pb.NewCopysetServiceClient(fx.conn)
	canceled, cancelAll := context.WithCancel(context.Background())
	cancelAll()
	f.Fuzz(func(t *testing.T, method uint8, msg []byte) {
		ctx, cancel := rpcCtx()
		defer cancel()
		unmarshal := func(m proto.Message) {
			if proto.Unmarshal(msg, m) != nil {
				t.Skip()
			}
		}
		var (
			st  pb.COPYSET_OP_STATUS
			err error
		)
		m := method % 4
		switch m {
		case 0:
			req := &pb.CopysetRequest{}
			unmarshal(req)
			var resp *pb.CopysetResponse
			resp, err = fx.cs.CreateCopysetNode(canceled, req)
			st = resp.GetStatus()
		case 1:
			req := &pb.CopysetRequest2{}
			unmarshal(req)
			var resp *pb.CopysetResponse2
			resp, err = fx.cs.CreateCopysetNode2(canceled, req)
			st = resp.GetStatus()
		case 2:
			req := &pb.CopysetRequest{}
			unmarshal(req)
			var resp *pb.CopysetResponse
			resp, err = cl.DeleteBrokenCopyset(ctx, req)
			st = resp.GetStatus()
			if err == nil && copyset.NewGroupID(req.GetLogicPoolId(), req.GetCopysetId()) == fx.group &&
				st != pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_COPYSET_IS_HEALTHY {
				t.Fatalf("DeleteBrokenCopyset of the healthy fixture: %v", st)
			}
		case 3:
			req := &pb.CopysetStatusRequest{}
			unmarshal(req)
			var resp *pb.CopysetStatusResponse
			resp, err = cl.GetCopysetStatus(ctx, req)
			st = resp.GetStatus()
			hosted := copyset.NewGroupID(req.GetLogicPoolId(), req.GetCopysetId()) == fx.group
			if err == nil && hosted != (st == pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_SUCCESS) {
				t.Fatalf("GetCopysetStatus(%d/%d): %v", req.GetLogicPoolId(), req.GetCopysetId(), st)
			}
		}
		if err != nil {
			if s, ok := grpcstatus.FromError(err); !ok || s.Code() != codes.InvalidArgument {
				inconclusive(t, ctx, err)
				t.Fatalf("method %d: %v", m, err)
			}
		} else if _, ok := pb.COPYSET_OP_STATUS_name[int32(st)]; !ok {
			t.Fatalf("method %d: undefined status %d", m, st)
		}
		if n := len(fx.srv.Copysets().List()); n != 1 {
			t.Fatalf("method %d: %d copysets hosted, want the fixture alone", m, n)
		}
		fx.check(t)
	})
}
