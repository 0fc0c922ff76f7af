package chunkserver

import (
	"context"
	"errors"
	"log/slog"

	"github.com/chunkraft/chunkraft/copyset"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	commonpb "github.com/chunkraft/chunkraft/proto/curve/common"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// copysetService implements curve.chunkserver.CopysetService.
type copysetService struct {
	pb.UnimplementedCopysetServiceServer
	copysets *copyset.Manager
	admit    *admission
	log      *slog.Logger
}

func copysetStatus(s pb.COPYSET_OP_STATUS) *pb.COPYSET_OP_STATUS { return &s }

// parsePeers parses peer strings ("ip:port" or "ip:port:0").
func parsePeers(in []string) ([]copyset.PeerID, error) {
	out := make([]copyset.PeerID, 0, len(in))
	for _, s := range in {
		id, _, err := copyset.ParsePeer(s)
		if err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, nil
}

// create makes one copyset and maps the outcome to a status.
func (s *copysetService) create(ctx context.Context, pool, cs uint32, peers []copyset.PeerID) pb.COPYSET_OP_STATUS {
	g := copyset.NewGroupID(pool, cs)
	_, err := s.copysets.Create(ctx, g, peers)
	switch {
	case err == nil:
		s.log.Info("copyset created", "pool", pool, "copyset", cs, "peers", peers)
		return pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_SUCCESS
	case errors.Is(err, copyset.ErrExist):
		return pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_EXIST
	default:
		s.log.Error("create copyset", "pool", pool, "copyset", cs, "err", err)
		return pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_FAILURE_UNKNOWN
	}
}

// CreateCopysetNode creates a replica of one copyset on this server with
// the given initial configuration. An unparsable peer is InvalidArgument.
func (s *copysetService) CreateCopysetNode(ctx context.Context, req *pb.CopysetRequest) (*pb.CopysetResponse, error) {
	peers, err := parsePeers(req.GetPeerid())
	if err != nil {
		return nil, grpcstatus.Errorf(codes.InvalidArgument, "create copyset: %v", err)
	}
	if len(peers) == 0 {
		return nil, grpcstatus.Error(codes.InvalidArgument, "create copyset: peerid is empty")
	}
	st := s.create(ctx, req.GetLogicPoolId(), req.GetCopysetId(), peers)
	return &pb.CopysetResponse{Status: copysetStatus(st)}, nil
}

// CreateCopysetNode2 creates a batch; it stops at the first copyset that
// exists (EXIST) or fails, leaving the earlier ones created.
func (s *copysetService) CreateCopysetNode2(ctx context.Context, req *pb.CopysetRequest2) (*pb.CopysetResponse2, error) {
	type item struct {
		pool, cs uint32
		peers    []copyset.PeerID
	}
	items := make([]item, 0, len(req.GetCopysets()))
	for _, c := range req.GetCopysets() {
		var addrs []string
		for _, p := range c.GetPeers() {
			addrs = append(addrs, p.GetAddress())
		}
		peers, err := parsePeers(addrs)
		if err != nil {
			return nil, grpcstatus.Errorf(codes.InvalidArgument, "create copyset %d/%d: %v", c.GetLogicPoolId(), c.GetCopysetId(), err)
		}
		if len(peers) == 0 {
			return nil, grpcstatus.Errorf(codes.InvalidArgument, "create copyset %d/%d: no peers", c.GetLogicPoolId(), c.GetCopysetId())
		}
		items = append(items, item{c.GetLogicPoolId(), c.GetCopysetId(), peers})
	}
	for _, it := range items {
		if st := s.create(ctx, it.pool, it.cs, it.peers); st != pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_SUCCESS {
			return &pb.CopysetResponse2{Status: copysetStatus(st)}, nil
		}
	}
	return &pb.CopysetResponse2{Status: copysetStatus(pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_SUCCESS)}, nil
}

// Copyset state numbers on the wire follow braft's State enum, as upstream
// Curve reports them.
const (
	braftLeader    = 1
	braftCandidate = 3
	braftFollower  = 4
	braftError     = 5
	braftShutdown  = 8
)

func braftState(st copyset.Status) uint32 {
	if st.Broken != nil {
		return braftError
	}
	switch st.State {
	case raft.Leader:
		return braftLeader
	case raft.Candidate:
		return braftCandidate
	case raft.Follower:
		return braftFollower
	default:
		return braftShutdown
	}
}

// GetCopysetStatus reports this replica's raft status.
func (s *copysetService) GetCopysetStatus(ctx context.Context, req *pb.CopysetStatusRequest) (*pb.CopysetStatusResponse, error) {
	n := s.copysets.Get(copyset.NewGroupID(req.GetLogicPoolId(), req.GetCopysetId()))
	if n == nil {
		return &pb.CopysetStatusResponse{Status: copysetStatus(pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_COPYSET_NOTEXIST)}, nil
	}
	if req.GetQueryHash() {
		return nil, grpcstatus.Error(codes.Unimplemented, "copyset status: queryHash is not implemented in this version")
	}
	st := n.Status()
	resp := &pb.CopysetStatusResponse{
		Status:            copysetStatus(pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_SUCCESS),
		State:             proto.Uint32(braftState(st)),
		Peer:              &commonpb.Peer{Address: proto.String(string(st.Peer))},
		ReadOnly:          proto.Bool(s.admit.readOnly() || st.Broken != nil),
		Term:              proto.Int64(int64(st.Term)),
		CommittedIndex:    proto.Int64(int64(st.CommittedIndex)),
		KnownAppliedIndex: proto.Int64(int64(st.AppliedIndex)),
		FirstIndex:        proto.Int64(int64(st.FirstIndex)),
		LastIndex:         proto.Int64(int64(st.LastIndex)),
		Epoch:             proto.Uint64(st.Epoch),
	}
	if st.Leader != "" {
		resp.Leader = &commonpb.Peer{Address: proto.String(string(st.Leader))}
	}
	return resp, nil
}
