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

// DeleteBrokenCopyset moves this server's replica of a copyset to its trash
// (<data_dir>/trash/<groupId>.<unixmillis>, purged after copyset's trash
// max age): SUCCESS for a loaded replica that is broken (stopped by an
// apply error) or removed from its copyset's configuration (closed first),
// and for a copyset directory on disk that is not loaded; COPYSET_IS_HEALTHY
// for a loaded replica that is neither; FAILURE_UNKNOWN when there is
// nothing to move or the move fails (as upstream).
func (s *copysetService) DeleteBrokenCopyset(ctx context.Context, req *pb.CopysetRequest) (*pb.CopysetResponse, error) {
	err := s.copysets.DeleteBroken(copyset.NewGroupID(req.GetLogicPoolId(), req.GetCopysetId()))
	st := pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_SUCCESS
	switch {
	case err == nil:
		s.log.Warn("copyset replica deleted to trash", "pool", req.GetLogicPoolId(), "copyset", req.GetCopysetId())
	case errors.Is(err, copyset.ErrHealthy):
		st = pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_COPYSET_IS_HEALTHY
	default:
		s.log.Error("delete broken copyset", "pool", req.GetLogicPoolId(), "copyset", req.GetCopysetId(), "err", err)
		st = pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_FAILURE_UNKNOWN
	}
	return &pb.CopysetResponse{Status: copysetStatus(st)}, nil
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

// GetCopysetStatus reports this replica's raft status (any replica
// answers). Fields beyond braft's that need a definition here:
// pendingIndex and pendingQueueSize are, on the leader, the first log index
// not yet committed and how many entries are appended but not committed (0
// on followers, as braft's ballot box); applyingIndex is the first committed
// index the state machines have not applied yet, 0 when they are idle;
// diskIndex is lastIndex, since raft logs are fsynced before an entry is
// acknowledged; readOnly is true below min_free_bytes or when the replica is
// broken.
//
// With queryHash, hash is the decimal crc32c (Castagnoli) of the copyset's
// chunk data: the data of every chunk in ascending chunk id (ChunkSize
// bytes each, the bytes GetChunkHash hashes, unwritten ranges as zeros),
// then the data of every chunk snapshot file (chunk_<id>_snap_<sn>) in
// ascending chunk id; an empty copyset hashes to "0". Meta pages do not
// count and the per-block checksums are not verified, so a replica
// corrupted on disk reports a different hash rather than an error. The hash
// is taken while no write is being applied (retried while writes run; a
// copyset that keeps applying is FAILURE_UNKNOWN), after a read barrier on
// the leader, so replicas that applied the same index hash equal. A read
// error is FAILURE_UNKNOWN (as upstream).
func (s *copysetService) GetCopysetStatus(ctx context.Context, req *pb.CopysetStatusRequest) (*pb.CopysetStatusResponse, error) {
	n := s.copysets.Get(copyset.NewGroupID(req.GetLogicPoolId(), req.GetCopysetId()))
	if n == nil {
		return &pb.CopysetStatusResponse{Status: copysetStatus(pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_COPYSET_NOTEXIST)}, nil
	}
	var hash string
	if req.GetQueryHash() {
		failed := func(err error) (*pb.CopysetStatusResponse, error) {
			s.log.Error("copyset hash", "pool", req.GetLogicPoolId(), "copyset", req.GetCopysetId(), "err", err)
			return &pb.CopysetStatusResponse{Status: copysetStatus(pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_FAILURE_UNKNOWN)}, nil
		}
		if n.IsLeader() {
			var nl *copyset.NotLeaderError
			if _, err := n.ReadBarrier(ctx); err != nil && !errors.As(err, &nl) {
				return failed(err)
			}
		}
		h, _, err := copysetHash(ctx, n)
		if err != nil {
			return failed(err)
		}
		hash = formatHash(h)
	}
	st := n.Status()
	var pendingIndex, pendingSize, applying int64
	if st.State == raft.Leader && st.LastIndex > st.CommittedIndex {
		pendingIndex, pendingSize = int64(st.CommittedIndex)+1, int64(st.LastIndex-st.CommittedIndex)
	}
	if as, err := n.ApplyState(); err == nil {
		applying = int64(as.Applying)
	}
	resp := &pb.CopysetStatusResponse{
		Status:            copysetStatus(pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_SUCCESS),
		State:             proto.Uint32(braftState(st)),
		Peer:              &commonpb.Peer{Address: proto.String(string(st.Peer))},
		ReadOnly:          proto.Bool(s.admit.readOnly() || st.Broken != nil),
		Term:              proto.Int64(int64(st.Term)),
		CommittedIndex:    proto.Int64(int64(st.CommittedIndex)),
		KnownAppliedIndex: proto.Int64(int64(st.AppliedIndex)),
		PendingIndex:      proto.Int64(pendingIndex),
		PendingQueueSize:  proto.Int64(pendingSize),
		ApplyingIndex:     proto.Int64(applying),
		FirstIndex:        proto.Int64(int64(st.FirstIndex)),
		LastIndex:         proto.Int64(int64(st.LastIndex)),
		DiskIndex:         proto.Int64(int64(st.LastIndex)),
		Epoch:             proto.Uint64(st.Epoch),
	}
	if st.Leader != "" {
		resp.Leader = &commonpb.Peer{Address: proto.String(string(st.Leader))}
	}
	if req.GetQueryHash() {
		resp.Hash = proto.String(hash)
	}
	return resp, nil
}
