package chunkserver

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/chunkraft/chunkraft/copyset"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	commonpb "github.com/chunkraft/chunkraft/proto/curve/common"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// cliService2 implements curve.chunkserver.CliService2. Errors are gRPC
// statuses (upstream uses brpc controller failures): Unavailable while the
// server is still loading its copysets, NotFound when it does not host the
// copyset, Unavailable when no leader is known,
// FailedPrecondition when an operation that needs the leader reaches a
// follower, InvalidArgument for an unparsable peer.
type cliService2 struct {
	pb.UnimplementedCliService2Server
	copysets *copyset.Manager
	ready    *atomic.Bool // copysets loaded; before that a missing copyset may still come
}

func (s *cliService2) node(pool, cs uint32) (*copyset.Node, error) {
	if !s.ready.Load() {
		return nil, grpcstatus.Error(codes.Unavailable, "chunkserver is loading its copysets")
	}
	n := s.copysets.Get(copyset.NewGroupID(pool, cs))
	if n == nil {
		return nil, grpcstatus.Errorf(codes.NotFound, "copyset %d/%d is not hosted on this server", pool, cs)
	}
	return n, nil
}

// GetLeader returns the leader this replica knows.
func (s *cliService2) GetLeader(ctx context.Context, req *pb.GetLeaderRequest2) (*pb.GetLeaderResponse2, error) {
	n, err := s.node(req.GetLogicPoolId(), req.GetCopysetId())
	if err != nil {
		return nil, err
	}
	leader := n.Leader()
	if leader == "" {
		return nil, grpcstatus.Errorf(codes.Unavailable, "copyset %d/%d: unknown leader", req.GetLogicPoolId(), req.GetCopysetId())
	}
	return &pb.GetLeaderResponse2{Leader: &commonpb.Peer{Address: proto.String(string(leader))}}, nil
}

// TransferLeader moves leadership to the transferee and returns once the
// transfer finished. It must reach the current leader.
func (s *cliService2) TransferLeader(ctx context.Context, req *pb.TransferLeaderRequest2) (*pb.TransferLeaderResponse2, error) {
	n, err := s.node(req.GetLogicPoolId(), req.GetCopysetId())
	if err != nil {
		return nil, err
	}
	to, _, err := copyset.ParsePeer(req.GetTransferee().GetAddress())
	if err != nil {
		return nil, grpcstatus.Errorf(codes.InvalidArgument, "transfer leader: transferee: %v", err)
	}
	peers, err := n.Peers()
	if err != nil {
		return nil, grpcstatus.Errorf(codes.Internal, "transfer leader: %v", err)
	}
	member := false
	for _, p := range peers {
		member = member || p == to
	}
	if !member {
		return nil, grpcstatus.Errorf(codes.InvalidArgument, "transfer leader: %s is not a peer of copyset %d/%d (peers %v)",
			to, req.GetLogicPoolId(), req.GetCopysetId(), peers)
	}
	if err := n.TransferLeader(ctx, to); err != nil {
		var nl *copyset.NotLeaderError
		if errors.As(err, &nl) {
			return nil, grpcstatus.Errorf(codes.FailedPrecondition, "transfer leader: %v", err)
		}
		return nil, grpcstatus.Errorf(codes.Aborted, "transfer leader: %v", err)
	}
	return &pb.TransferLeaderResponse2{}, nil
}
