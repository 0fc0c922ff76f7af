package chunkserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chunkraft/chunkraft/copyset"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	commonpb "github.com/chunkraft/chunkraft/proto/curve/common"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// cliService2 implements curve.chunkserver.CliService2. Errors are gRPC
// statuses (upstream uses brpc controller failures): Unavailable while the
// server is still loading its copysets, NotFound when it does not host the
// copyset, Unavailable when no leader is known,
// FailedPrecondition when an operation that needs the leader reaches a
// follower (and for a peer to add that hosts no replica of the copyset),
// InvalidArgument for an unparsable peer or an unusable peer set,
// Unavailable when another server that must be asked first cannot be (the
// peer to add, the transferee) or a transferee is still loading, Aborted
// when raft refused or lost a change (retry).
//
// The methods in lower case are the one implementation behind both wire
// adapters: CliService2 here and CliService v1 (cli_service_v1.go). They take
// peers as strings ("ip:port:0" or "ip:port") exactly as either wire carries
// them. The leader a request names (leader / leader_id) is only checked for
// syntax: the request works on this server's replica, which must be the
// leader for AddPeer, RemovePeer, ChangePeers and TransferLeader; there is
// no redirect (as upstream).
type cliService2 struct {
	pb.UnimplementedCliService2Server
	copysets *copyset.Manager
	ready    *atomic.Bool // copysets loaded; before that a missing copyset may still come

	// Probes of other servers; nil means over gRPC (tests replace them).
	// hosts reports whether the server at addr has a replica of g;
	// loadFinished its ChunkServerStatus.copysetLoadFin.
	hosts        func(ctx context.Context, addr string, g copyset.GroupID) (bool, error)
	loadFinished func(ctx context.Context, addr string) (bool, error)
	// conns are the server's connections to the other chunkservers (probes).
	conns *connCache
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

// parsePeerArg parses one peer of a request; what names the field.
func parsePeerArg(what, s string) (copyset.PeerID, error) {
	id, _, err := copyset.ParsePeer(s)
	if err != nil {
		return "", grpcstatus.Errorf(codes.InvalidArgument, "%s: %v", what, err)
	}
	return id, nil
}

// parseOptionalPeer is parsePeerArg for a field that may be empty.
func parseOptionalPeer(what, s string) (copyset.PeerID, error) {
	if s == "" {
		return "", nil
	}
	return parsePeerArg(what, s)
}

func parsePeerArgs(what string, in []string) ([]copyset.PeerID, error) {
	out := make([]copyset.PeerID, 0, len(in))
	for _, s := range in {
		id, err := parsePeerArg(what, s)
		if err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, nil
}

// cliError maps a copyset error of operation op to a gRPC status;
// fallback is the code for anything not recognised.
func cliError(op string, err error, fallback codes.Code) error {
	var (
		nl *copyset.NotLeaderError
		ou *copyset.OutcomeUnknownError
	)
	code := fallback
	switch {
	case errors.As(err, &nl), errors.As(err, &ou):
		code = codes.FailedPrecondition
	case errors.Is(err, copyset.ErrInvalidPeers):
		code = codes.InvalidArgument
	case errors.Is(err, copyset.ErrNotHosted):
		code = codes.NotFound
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	}
	return grpcstatus.Errorf(code, "%s: %v", op, err)
}

// membershipResult is the peers before and after a membership change.
type membershipResult struct{ old, cur []copyset.PeerID }

// onePeer validates a request naming a leader and one peer (what says
// which) and finds the replica it is for.
func (s *cliService2) onePeer(pool, cs uint32, leader, what, peer string) (*copyset.Node, copyset.PeerID, error) {
	if _, err := parseOptionalPeer("leader", leader); err != nil {
		return nil, "", err
	}
	p, err := parsePeerArg(what, peer)
	if err != nil {
		return nil, "", err
	}
	n, err := s.node(pool, cs)
	return n, p, err
}

// addPeer adds peer to the copyset on its leader (this server) once the
// peer is found to host a replica (an empty one made by CreateCopysetNode
// with the current peers); it answers after the change commits.
func (s *cliService2) addPeer(ctx context.Context, pool, cs uint32, leader, peer string) (membershipResult, error) {
	n, p, err := s.onePeer(pool, cs, leader, "peer to add", peer)
	if err != nil {
		return membershipResult{}, err
	}
	if err := s.checkJoinable(ctx, n, []copyset.PeerID{p}); err != nil {
		return membershipResult{}, err
	}
	old, cur, err := n.AddPeer(ctx, p)
	if err != nil {
		return membershipResult{}, cliError("add peer", err, codes.Aborted)
	}
	return membershipResult{old, cur}, nil
}

// removePeer removes peer from the copyset on its leader (this server) and
// answers after the change commits; the removed server drops its replica
// into its trash.
func (s *cliService2) removePeer(ctx context.Context, pool, cs uint32, leader, peer string) (membershipResult, error) {
	n, p, err := s.onePeer(pool, cs, leader, "peer to remove", peer)
	if err != nil {
		return membershipResult{}, err
	}
	old, cur, err := n.RemovePeer(ctx, p)
	if err != nil {
		return membershipResult{}, cliError("remove peer", err, codes.Aborted)
	}
	return membershipResult{old, cur}, nil
}

// changePeers makes peers the copyset's configuration (adds first, then
// removes, one committed change at a time) and answers after the last one
// commits, with the peers before and after.
func (s *cliService2) changePeers(ctx context.Context, pool, cs uint32, leader string, peers []string) (membershipResult, error) {
	if _, err := parseOptionalPeer("leader", leader); err != nil {
		return membershipResult{}, err
	}
	ids, err := parsePeerArgs("new peers", peers)
	if err != nil {
		return membershipResult{}, err
	}
	if len(ids) == 0 {
		return membershipResult{}, grpcstatus.Error(codes.InvalidArgument, "change peers: new peers are empty")
	}
	n, err := s.node(pool, cs)
	if err != nil {
		return membershipResult{}, err
	}
	if cur, err := n.Peers(); err == nil {
		var adds []copyset.PeerID
		for _, p := range ids {
			if !slices.Contains(cur, p) {
				adds = append(adds, p)
			}
		}
		if err := s.checkJoinable(ctx, n, adds); err != nil {
			return membershipResult{}, err
		}
	}
	old, cur, err := n.ChangePeers(ctx, ids)
	if err != nil {
		return membershipResult{}, cliError("change peers", err, codes.Aborted)
	}
	return membershipResult{old, cur}, nil
}

// checkJoinable refuses to add a peer that has no replica of the copyset:
// as a voter it would count in every quorum while unable to store anything.
// The check runs only on the leader (a follower refuses the change anyway).
func (s *cliService2) checkJoinable(ctx context.Context, n *copyset.Node, adds []copyset.PeerID) error {
	if !n.IsLeader() {
		return nil
	}
	peers, err := n.Peers()
	if err != nil {
		return grpcstatus.Errorf(codes.Aborted, "add peer: %v", err)
	}
	for _, p := range adds {
		if slices.Contains(peers, p) || p == s.copysets.Local() {
			continue
		}
		ok, err := s.peerHosts(ctx, p.Addr(), n.Group())
		if err != nil {
			return grpcstatus.Errorf(codes.Unavailable, "add peer: cannot ask %s whether it hosts copyset %d/%d: %v",
				p, n.Group().Pool(), n.Group().Copyset(), err)
		}
		if !ok {
			return grpcstatus.Errorf(codes.FailedPrecondition,
				"add peer: %s does not host a replica of copyset %d/%d: create an empty one there first "+
					"(CreateCopysetNode with the current peers)", p, n.Group().Pool(), n.Group().Copyset())
		}
	}
	return nil
}

// probeTimeoutCli bounds one probe of another server.
const probeTimeoutCli = 3 * time.Second

// probePeer runs call on the server's connection to the chunkserver at
// addr (conns), within probeTimeoutCli.
func probePeer(ctx context.Context, conns *connCache, addr string, call func(context.Context, *grpc.ClientConn) error) error {
	return conns.call(ctx, addr, probeTimeoutCli, call)
}

// peerHosts is hosts, or probeHosts unless a test set hosts.
func (s *cliService2) peerHosts(ctx context.Context, addr string, g copyset.GroupID) (bool, error) {
	if s.hosts != nil {
		return s.hosts(ctx, addr, g)
	}
	return s.probeHosts(ctx, addr, g)
}

// probeHosts asks the server at addr (GetCopysetStatus) whether it has a
// replica of g.
func (s *cliService2) probeHosts(ctx context.Context, addr string, g copyset.GroupID) (bool, error) {
	var hosts bool
	err := probePeer(ctx, s.conns, addr, func(ctx context.Context, cc *grpc.ClientConn) error {
		resp, err := pb.NewCopysetServiceClient(cc).GetCopysetStatus(ctx, &pb.CopysetStatusRequest{
			LogicPoolId: proto.Uint32(g.Pool()), CopysetId: proto.Uint32(g.Copyset()),
			Peer: &commonpb.Peer{Address: proto.String(addr + ":0")}, QueryHash: proto.Bool(false),
		})
		hosts = resp.GetStatus() != pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_COPYSET_NOTEXIST
		return err
	})
	return hosts, err
}

// probeLoadFinished asks the server at addr for ChunkServerStatus. A server
// without that RPC (Unimplemented) counts as loaded.
func (s *cliService2) probeLoadFinished(ctx context.Context, addr string) (bool, error) {
	var fin bool
	err := probePeer(ctx, s.conns, addr, func(ctx context.Context, cc *grpc.ClientConn) error {
		resp, err := pb.NewChunkServerServiceClient(cc).ChunkServerStatus(ctx, &pb.ChunkServerStatusRequest{})
		if grpcstatus.Code(err) == codes.Unimplemented {
			fin, err = true, nil
		} else {
			fin = resp.GetCopysetLoadFin()
		}
		return err
	})
	return fin, err
}

// leaderOf returns the leader this replica knows.
func (s *cliService2) leaderOf(pool, cs uint32) (copyset.PeerID, error) {
	n, err := s.node(pool, cs)
	if err != nil {
		return "", err
	}
	leader := n.Leader()
	if leader == "" {
		return "", grpcstatus.Errorf(codes.Unavailable, "copyset %d/%d: unknown leader", pool, cs)
	}
	return leader, nil
}

// transferLeader moves leadership to the transferee ("" = the most
// up-to-date follower, raft's choice) and returns once the transfer
// finished. It must reach the current leader. A named transferee must be a
// peer and must have finished loading its copysets (its ChunkServerStatus
// copysetLoadFin; a server that does not implement ChunkServerStatus counts
// as loaded), else Unavailable: ask again later; it must host a replica of
// the copyset, else InvalidArgument (a member without one cannot lead).
func (s *cliService2) transferLeader(ctx context.Context, pool, cs uint32, leader, transferee string) error {
	if _, err := parseOptionalPeer("leader", leader); err != nil {
		return err
	}
	to, err := parseOptionalPeer("transferee", transferee)
	if err != nil {
		return err
	}
	n, err := s.node(pool, cs)
	if err != nil {
		return err
	}
	if to == "" {
		if err := n.TransferLeaderAny(ctx); err != nil {
			return cliError("transfer leader", err, codes.Aborted)
		}
		return nil
	}
	peers, err := n.Peers()
	if err != nil {
		return grpcstatus.Errorf(codes.Internal, "transfer leader: %v", err)
	}
	if !slices.Contains(peers, to) {
		return grpcstatus.Errorf(codes.InvalidArgument, "transfer leader: %s is not a peer of copyset %d/%d (peers %v)",
			to, pool, cs, peers)
	}
	if !n.IsLeader() {
		return cliError("transfer leader", &copyset.NotLeaderError{Leader: n.Leader()}, codes.Aborted)
	}
	if to != s.copysets.Local() {
		loaded := s.loadFinished
		if loaded == nil {
			loaded = s.probeLoadFinished
		}
		fin, err := loaded(ctx, to.Addr())
		if err != nil {
			return grpcstatus.Errorf(codes.Unavailable, "transfer leader: cannot ask %s for its status: %v", to, err)
		}
		if !fin {
			return grpcstatus.Errorf(codes.Unavailable, "transfer leader: %s has not finished loading its copysets", to)
		}
		ok, err := s.peerHosts(ctx, to.Addr(), n.Group())
		if err != nil {
			return grpcstatus.Errorf(codes.Unavailable, "transfer leader: cannot ask %s whether it hosts copyset %d/%d: %v", to, pool, cs, err)
		}
		if !ok {
			return grpcstatus.Errorf(codes.InvalidArgument,
				"transfer leader: %s is a member of copyset %d/%d without a replica: re-create its replica first (peer add --peer %s)",
				to, pool, cs, to.Addr())
		}
	}
	if err := n.TransferLeader(ctx, to); err != nil {
		return cliError("transfer leader", err, codes.Aborted)
	}
	return nil
}

// resetPeer forcibly resets this server's replica to newPeers (disaster
// recovery, raft.RecoverCluster semantics: local, no quorum). requestPeer
// must name this server and newPeers must include it. Allowed on a
// follower or a leader; old peers in the request are ignored (as upstream).
func (s *cliService2) resetPeer(ctx context.Context, pool, cs uint32, requestPeer string, newPeers []string) error {
	req, err := parsePeerArg("request peer", requestPeer)
	if err != nil {
		return err
	}
	ids, err := parsePeerArgs("new peers", newPeers)
	if err != nil {
		return err
	}
	local := s.copysets.Local()
	if req != local {
		return grpcstatus.Errorf(codes.InvalidArgument, "reset peer: request peer %s is not this server (%s)", req, local)
	}
	if !slices.Contains(ids, local) {
		return grpcstatus.Errorf(codes.InvalidArgument, "reset peer: new peers %v do not include this server %s", ids, local)
	}
	if _, err := s.node(pool, cs); err != nil {
		return err
	}
	if err := s.copysets.ResetPeers(ctx, copyset.NewGroupID(pool, cs), ids); err != nil {
		return cliError("reset peer", err, codes.Internal)
	}
	return nil
}

// snapshot takes a raft snapshot of this server's replica and answers when
// it is done; nothing new since the last one is success. A peer named in
// the request must be this server.
func (s *cliService2) snapshot(ctx context.Context, pool, cs uint32, peer string) error {
	p, err := parseOptionalPeer("peer", peer)
	if err != nil {
		return err
	}
	if p != "" && p != s.copysets.Local() {
		return grpcstatus.Errorf(codes.InvalidArgument, "snapshot: peer %s is not this server (%s)", p, s.copysets.Local())
	}
	n, err := s.node(pool, cs)
	if err != nil {
		return err
	}
	return snapshotNode(ctx, n)
}

// snapshotNode snapshots one replica; a broken one cannot.
func snapshotNode(ctx context.Context, n *copyset.Node) error {
	g := n.Group()
	if b := n.Broken(); b != nil {
		return grpcstatus.Errorf(codes.FailedPrecondition, "snapshot copyset %d/%d: replica is broken: %v", g.Pool(), g.Copyset(), b)
	}
	err := n.Snapshot(ctx)
	if err == nil || errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return nil
	}
	return cliError(fmt.Sprintf("snapshot copyset %d/%d", g.Pool(), g.Copyset()), err, codes.Internal)
}

// snapshotAll snapshots every replica on this server (a few at a time,
// broken ones skipped) and answers when all are done.
func (s *cliService2) snapshotAll(ctx context.Context) error {
	if !s.ready.Load() {
		return grpcstatus.Error(codes.Unavailable, "chunkserver is loading its copysets")
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, 4)
	)
	for _, n := range s.copysets.List() {
		if n.Broken() != nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := snapshotNode(ctx, n); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return grpcstatus.Errorf(codes.Internal, "snapshot all: %d copysets failed: %v", len(errs), errors.Join(errs...))
	}
	return nil
}

// The CliService2 wire adapter.

func peerAddrs(peers []*commonpb.Peer) []string {
	out := make([]string, len(peers))
	for i, p := range peers {
		out[i] = p.GetAddress()
	}
	return out
}

func pbPeers(ids []copyset.PeerID) []*commonpb.Peer {
	out := make([]*commonpb.Peer, len(ids))
	for i, id := range ids {
		out[i] = &commonpb.Peer{Address: proto.String(string(id))}
	}
	return out
}

// AddPeer adds addPeer as a voter and answers after the change commits,
// with the peers before and after (adding a member changes nothing). The
// new server must host a replica of the copyset, normally an empty one
// made by CreateCopysetNode with the current peers, else FailedPrecondition.
func (s *cliService2) AddPeer(ctx context.Context, req *pb.AddPeerRequest2) (*pb.AddPeerResponse2, error) {
	r, err := s.addPeer(ctx, req.GetLogicPoolId(), req.GetCopysetId(), req.GetLeader().GetAddress(), req.GetAddPeer().GetAddress())
	if err != nil {
		return nil, err
	}
	return &pb.AddPeerResponse2{OldPeers: pbPeers(r.old), NewPeers: pbPeers(r.cur)}, nil
}

// RemovePeer removes removePeer and answers after the change commits, with
// the peers before and after; the removed server moves its replica to its
// trash. Removing a non-member changes nothing; a leader that removes
// itself steps down.
func (s *cliService2) RemovePeer(ctx context.Context, req *pb.RemovePeerRequest2) (*pb.RemovePeerResponse2, error) {
	r, err := s.removePeer(ctx, req.GetLogicPoolId(), req.GetCopysetId(), req.GetLeader().GetAddress(), req.GetRemovePeer().GetAddress())
	if err != nil {
		return nil, err
	}
	return &pb.RemovePeerResponse2{OldPeers: pbPeers(r.old), NewPeers: pbPeers(r.cur)}, nil
}

// ChangePeers makes newPeers the configuration: adds first, then removes,
// one committed change at a time (hashicorp/raft has no joint consensus);
// it answers after the last one commits with the peers before and after.
func (s *cliService2) ChangePeers(ctx context.Context, req *pb.ChangePeersRequest2) (*pb.ChangePeersResponse2, error) {
	r, err := s.changePeers(ctx, req.GetLogicPoolId(), req.GetCopysetId(), req.GetLeader().GetAddress(), peerAddrs(req.GetNewPeers()))
	if err != nil {
		return nil, err
	}
	return &pb.ChangePeersResponse2{OldPeers: pbPeers(r.old), NewPeers: pbPeers(r.cur)}, nil
}

// GetLeader returns the leader this replica knows.
func (s *cliService2) GetLeader(ctx context.Context, req *pb.GetLeaderRequest2) (*pb.GetLeaderResponse2, error) {
	leader, err := s.leaderOf(req.GetLogicPoolId(), req.GetCopysetId())
	if err != nil {
		return nil, err
	}
	return &pb.GetLeaderResponse2{Leader: &commonpb.Peer{Address: proto.String(string(leader))}}, nil
}

// TransferLeader moves leadership to the transferee and returns once the
// transfer finished. It must reach the current leader; a transferee that
// has not finished loading its copysets is refused (Unavailable).
func (s *cliService2) TransferLeader(ctx context.Context, req *pb.TransferLeaderRequest2) (*pb.TransferLeaderResponse2, error) {
	to := req.GetTransferee().GetAddress()
	if to == "" {
		return nil, grpcstatus.Error(codes.InvalidArgument, "transfer leader: transferee is empty")
	}
	if err := s.transferLeader(ctx, req.GetLogicPoolId(), req.GetCopysetId(), req.GetLeader().GetAddress(), to); err != nil {
		return nil, err
	}
	return &pb.TransferLeaderResponse2{}, nil
}

// ResetPeer forcibly resets this server's replica to newPeers (disaster
// recovery): only when requestPeer names this server and newPeers include
// it, else InvalidArgument.
func (s *cliService2) ResetPeer(ctx context.Context, req *pb.ResetPeerRequest2) (*pb.ResetPeerResponse2, error) {
	if err := s.resetPeer(ctx, req.GetLogicPoolId(), req.GetCopysetId(), req.GetRequestPeer().GetAddress(), peerAddrs(req.GetNewPeers())); err != nil {
		return nil, err
	}
	return &pb.ResetPeerResponse2{}, nil
}

// Snapshot takes a raft snapshot of this server's replica and answers when
// it is done ("nothing new to snapshot" is success).
func (s *cliService2) Snapshot(ctx context.Context, req *pb.SnapshotRequest2) (*pb.SnapshotResponse2, error) {
	if err := s.snapshot(ctx, req.GetLogicPoolId(), req.GetCopysetId(), req.GetPeer().GetAddress()); err != nil {
		return nil, err
	}
	return &pb.SnapshotResponse2{}, nil
}

// SnapshotAll snapshots every replica on this server and answers when all
// are done (upstream answers when the first is).
func (s *cliService2) SnapshotAll(ctx context.Context, req *pb.SnapshotAllRequest) (*pb.SnapshotAllResponse, error) {
	if err := s.snapshotAll(ctx); err != nil {
		return nil, err
	}
	return &pb.SnapshotAllResponse{}, nil
}
