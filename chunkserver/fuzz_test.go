package chunkserver

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/chunkserver/servertest"
	"github.com/chunkraft/chunkraft/copyset"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	commonpb "github.com/chunkraft/chunkraft/proto/curve/common"
)

// rpcFixture is one in-process chunkserver hosting copyset 1/1 alone
// (a single-node raft group that elects itself), reached over loopback
// gRPC, for the admin services' fuzz targets.
type rpcFixture struct {
	*testCluster
	srv  *Server
	conn *grpc.ClientConn
	cs   *copysetService // direct handler for the create RPCs
}

func newRPCFixture(f *testing.F) *rpcFixture {
	f.Helper()
	c := startTestCluster(f, 1)
	srv := c.Servers[0]
	return &rpcFixture{testCluster: c, srv: srv, conn: c.Conns[0],
		cs: &copysetService{copysets: srv.copysets, admit: srv.admit, log: srv.log, conns: srv.peers}}
}

var (
	marshalSeed  = servertest.MarshalSeed
	rpcCtx       = servertest.CallCtx
	inconclusive = servertest.Inconclusive
)

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
		if copyset.NewGroupID(*pool, *cs) == fx.Group {
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
			if err == nil && copyset.NewGroupID(req.GetLogicPoolId(), req.GetCopysetId()) == fx.Group &&
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
		fx.Healthy(t, 0)
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
			if err == nil && copyset.NewGroupID(req.GetLogicPoolId(), req.GetCopysetId()) == fx.Group &&
				st != pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_COPYSET_IS_HEALTHY {
				t.Fatalf("DeleteBrokenCopyset of the healthy fixture: %v", st)
			}
		case 3:
			req := &pb.CopysetStatusRequest{}
			unmarshal(req)
			var resp *pb.CopysetStatusResponse
			resp, err = cl.GetCopysetStatus(ctx, req)
			st = resp.GetStatus()
			hosted := copyset.NewGroupID(req.GetLogicPoolId(), req.GetCopysetId()) == fx.Group
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
		fx.Healthy(t, 0)
	})
}
