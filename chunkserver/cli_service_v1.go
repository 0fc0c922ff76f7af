package chunkserver

import (
	"context"

	"github.com/chunkraft/chunkraft/copyset"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	"google.golang.org/protobuf/proto"
)

// cliService implements curve.chunkserver.CliService, the braft-style v1
// surface (snake_case rpcs, peers as strings "ip:port:0" or "ip:port"). It
// is a wire adapter over the same implementation as CliService2 (see
// cliService2): semantics and errors are the same. Upstream implements
// only add_peer, remove_peer, get_leader and transfer_leader; all seven
// work here.
type cliService struct {
	pb.UnimplementedCliServiceServer
	core *cliService2
}

func peerStrings(ids []copyset.PeerID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = string(id)
	}
	return out
}

// AddPeer (add_peer) adds peer_id and answers after the change commits.
func (s *cliService) AddPeer(ctx context.Context, req *pb.AddPeerRequest) (*pb.AddPeerResponse, error) {
	r, err := s.core.addPeer(ctx, req.GetLogicPoolId(), req.GetCopysetId(), req.GetLeaderId(), req.GetPeerId())
	if err != nil {
		return nil, err
	}
	return &pb.AddPeerResponse{OldPeers: peerStrings(r.old), NewPeers: peerStrings(r.cur)}, nil
}

// RemovePeer (remove_peer) removes peer_id and answers after the change
// commits.
func (s *cliService) RemovePeer(ctx context.Context, req *pb.RemovePeerRequest) (*pb.RemovePeerResponse, error) {
	r, err := s.core.removePeer(ctx, req.GetLogicPoolId(), req.GetCopysetId(), req.GetLeaderId(), req.GetPeerId())
	if err != nil {
		return nil, err
	}
	return &pb.RemovePeerResponse{OldPeers: peerStrings(r.old), NewPeers: peerStrings(r.cur)}, nil
}

// ChangePeers (change_peers) makes new_peers the configuration and answers
// after the last change commits.
func (s *cliService) ChangePeers(ctx context.Context, req *pb.ChangePeersRequest) (*pb.ChangePeersResponse, error) {
	r, err := s.core.changePeers(ctx, req.GetLogicPoolId(), req.GetCopysetId(), req.GetLeaderId(), req.GetNewPeers())
	if err != nil {
		return nil, err
	}
	return &pb.ChangePeersResponse{OldPeers: peerStrings(r.old), NewPeers: peerStrings(r.cur)}, nil
}

// ResetPeer (reset_peer) forcibly resets this server's replica to
// new_peers; peer_id must name this server.
func (s *cliService) ResetPeer(ctx context.Context, req *pb.ResetPeerRequest) (*pb.ResetPeerResponse, error) {
	if err := s.core.resetPeer(ctx, req.GetLogicPoolId(), req.GetCopysetId(), req.GetPeerId(), req.GetNewPeers()); err != nil {
		return nil, err
	}
	return &pb.ResetPeerResponse{}, nil
}

// Snapshot (snapshot) takes a raft snapshot of this server's replica.
func (s *cliService) Snapshot(ctx context.Context, req *pb.SnapshotRequest) (*pb.SnapshotResponse, error) {
	if err := s.core.snapshot(ctx, req.GetLogicPoolId(), req.GetCopysetId(), req.GetPeerId()); err != nil {
		return nil, err
	}
	return &pb.SnapshotResponse{}, nil
}

// GetLeader (get_leader) returns the leader this replica knows; peer_id is
// ignored (as upstream).
func (s *cliService) GetLeader(ctx context.Context, req *pb.GetLeaderRequest) (*pb.GetLeaderResponse, error) {
	leader, err := s.core.leaderOf(req.GetLogicPoolId(), req.GetCopysetId())
	if err != nil {
		return nil, err
	}
	return &pb.GetLeaderResponse{LeaderId: proto.String(string(leader))}, nil
}

// TransferLeader (transfer_leader) moves leadership to peer_id, or without
// one to the most up-to-date follower, and returns once it finished.
func (s *cliService) TransferLeader(ctx context.Context, req *pb.TransferLeaderRequest) (*pb.TransferLeaderResponse, error) {
	if err := s.core.transferLeader(ctx, req.GetLogicPoolId(), req.GetCopysetId(), req.GetLeaderId(), req.GetPeerId()); err != nil {
		return nil, err
	}
	return &pb.TransferLeaderResponse{}, nil
}
