package chunkserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chunkraft/chunkraft/chunkstore"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/integrity"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	commonpb "github.com/chunkraft/chunkraft/proto/curve/common"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// copysetService implements curve.chunkserver.CopysetService.
type copysetService struct {
	pb.UnimplementedCopysetServiceServer
	copysets *copyset.Manager
	admit    *chunkstore.Admission
	log      *slog.Logger
	// conns are the server's connections to the other chunkservers
	// (probes). peerStatus asks the server at addr for its replica of g;
	// nil means over gRPC on conns (tests replace it).
	conns      *connCache
	peerStatus func(ctx context.Context, addr string, g copyset.GroupID) (peerReplica, error)
}

// peerReplica is another server's view of a copyset, as its
// GetCopysetStatus reports it.
type peerReplica struct {
	hosted  bool
	leading bool
	term    uint64
	leader  copyset.PeerID   // the leader it knows, "" if none
	conf    []copyset.PeerID // its newest configuration (PeersTrailerKey)
	// committed is its newest committed configuration, when reported
	// (hasCommitted; CommittedPeersTrailerKey).
	committed    []copyset.PeerID
	hasCommitted bool
	lastIndex    uint64 // its last log index
	// committedIndex is the log index of committed (0: not reported).
	committedIndex uint64
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

// create makes one copyset and maps the outcome to a status. peers without
// this server are the current members of a copyset this server is to join:
// the new, empty replica is created only once the copyset's leader has
// said how far its log goes (the replica's join marker, see copyset.Join).
func (s *copysetService) create(ctx context.Context, pool, cs uint32, peers []copyset.PeerID) pb.COPYSET_OP_STATUS {
	g := copyset.NewGroupID(pool, cs)
	var err error
	if slices.Contains(peers, s.copysets.Local()) || s.copysets.Get(g) != nil {
		_, err = s.copysets.Create(ctx, g, peers)
	} else {
		err = s.join(ctx, g, peers)
	}
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

// join creates an empty replica of g, whose current peers are peers, to be
// added by its leader.
func (s *copysetService) join(ctx context.Context, g copyset.GroupID, peers []copyset.PeerID) error {
	best, bestID, failures := s.findLeader(ctx, g, peers)
	if best == nil {
		msg := fmt.Sprintf("no leader found among %v", peers)
		if len(failures) > 0 {
			msg += " (" + strings.Join(failures, "; ") + ")"
		}
		return fmt.Errorf("join copyset %s: %s: a new replica needs its leader's last log index", g, msg)
	}
	// Configurations up to the leader's last index are older than the add
	// still to come, unless this server is a member already (the leader
	// lists a member whose replica was lost, being re-created): then the
	// committed configuration naming it counts.
	after := best.lastIndex
	if best.hasCommitted && best.committedIndex > 0 && slices.Contains(best.committed, s.copysets.Local()) {
		after = best.committedIndex - 1
	}
	if _, err := s.copysets.Join(ctx, g, after, peers); err != nil {
		return err
	}
	s.log.Info("empty replica created to be added", "pool", g.Pool(), "copyset", g.Copyset(), "leader", bestID, "after", after)
	return nil
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
// apply error), removed from its copyset's configuration (closed first) or
// stale, and for a copyset directory on disk that is not loaded;
// COPYSET_IS_HEALTHY for a loaded replica that is none of these;
// FAILURE_UNKNOWN when there is nothing to move, the move fails (as
// upstream) or whether the replica is stale cannot be told.
//
// Stale: a replica removed while its server was away never learns of its
// removal; it stays a candidate whose votes the members refuse. This
// server asks the peers of the configuration it knows (and the leader they
// name) for their status; the one in state leader with the highest term
// must report a committed configuration (CommittedPeersTrailerKey), and a
// newest one (PeersTrailerKey), without this server. A refusal or a failure
// to tell says why in the integrity.ErrorTrailerKey trailer.
func (s *copysetService) DeleteBrokenCopyset(ctx context.Context, req *pb.CopysetRequest) (*pb.CopysetResponse, error) {
	g := copyset.NewGroupID(req.GetLogicPoolId(), req.GetCopysetId())
	start := time.Now()
	err := s.copysets.DeleteBroken(g)
	why := ""
	if n := s.copysets.Get(g); errors.Is(err, copyset.ErrHealthy) && n != nil {
		stale, reason, verr := s.verifyStale(ctx, n)
		switch {
		case verr != nil:
			err = verr
		case stale:
			if err = s.copysets.DeleteStale(n, start); err == nil {
				s.log.Warn("stale copyset replica deleted to trash", "pool", g.Pool(), "copyset", g.Copyset(), "reason", reason)
				return &pb.CopysetResponse{Status: copysetStatus(pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_SUCCESS)}, nil
			}
		default:
			why = reason
		}
	}
	st := pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_SUCCESS
	switch {
	case err == nil:
		s.log.Warn("copyset replica deleted to trash", "pool", req.GetLogicPoolId(), "copyset", req.GetCopysetId())
	case errors.Is(err, copyset.ErrHealthy):
		st = pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_COPYSET_IS_HEALTHY
	default:
		s.log.Error("delete broken copyset", "pool", req.GetLogicPoolId(), "copyset", req.GetCopysetId(), "err", err)
		st, why = pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_FAILURE_UNKNOWN, err.Error()
	}
	if why != "" {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(integrity.ErrorTrailerKey, why))
	}
	return &pb.CopysetResponse{Status: copysetStatus(st)}, nil
}

// staleProbeHops bounds how often verifyStale follows the leaders the peers
// it asked name.
const staleProbeHops = 2

// verifyStale asks the copyset's leader whether this server's replica n is
// still a member (see DeleteBrokenCopyset). reason says what was found; err
// is non-nil when it could not be told.
func (s *copysetService) verifyStale(ctx context.Context, n *copyset.Node) (stale bool, reason string, err error) {
	local := s.copysets.Local()
	if n.IsLeader() {
		return false, fmt.Sprintf("%s leads the copyset, so it is a member", local), nil
	}
	own, ownIndex, err := n.Configuration()
	if err != nil {
		return false, "", err
	}
	namesLocal := slices.Contains(own, local)
	if len(own) == 0 && n.Leader() == "" {
		// An empty replica waiting to be added: ask the peers its copyset
		// had when it was created.
		own, _ = n.JoinPeers()
	}
	if len(own) == 0 && n.Leader() == "" {
		return false, "", errors.New("cannot tell whether this replica is a member: it knows no configuration " +
			"(an empty replica waiting to be added)")
	}
	best, bestID, failures := s.findLeader(ctx, n.Group(), append(slices.Clone(own), n.Leader()))
	switch {
	case best == nil && len(failures) > 0:
		return false, "", fmt.Errorf("cannot tell whether this replica is still a member: no leader found among %v (%s)",
			own, strings.Join(failures, "; "))
	case best == nil:
		return false, "", fmt.Errorf("cannot tell whether this replica is still a member: no leader found among %v", own)
	case !best.hasCommitted:
		return false, "", fmt.Errorf("cannot tell whether this replica is still a member: leader %s does not report a committed configuration", bestID)
	case slices.Contains(best.committed, local):
		return false, fmt.Sprintf("%s is a member of the configuration leader %s has (%v)", local, bestID, best.committed), nil
	case slices.Contains(best.conf, local):
		return false, "", fmt.Errorf("cannot tell whether this replica is still a member: leader %s is adding it back (%v, not committed yet); retry", bestID, best.conf)
	case namesLocal && ownIndex > best.lastIndex:
		// A deposed leader that has not noticed yet: this replica holds a
		// configuration naming it that the leader's log has not reached.
		return false, "", fmt.Errorf("cannot tell whether this replica is still a member: it holds a configuration naming it "+
			"at index %d, beyond the last index of leader %s (%d)", ownIndex, bestID, best.lastIndex)
	}
	return true, fmt.Sprintf("%s is not in the committed configuration leader %s has (%v)", local, bestID, best.committed), nil
}

// findLeader asks peers (and the leaders they name, up to staleProbeHops
// away) for their replica of g and returns the one in state leader with the
// highest term (nil if none) and the failures to ask.
func (s *copysetService) findLeader(ctx context.Context, g copyset.GroupID, peers []copyset.PeerID) (*peerReplica, copyset.PeerID, []string) {
	ask := peers
	asked := map[copyset.PeerID]bool{s.copysets.Local(): true, "": true}
	var best *peerReplica
	var bestID copyset.PeerID
	var failures []string
	for hop := 0; hop <= staleProbeHops && len(ask) > 0; hop++ {
		var round []copyset.PeerID
		for _, p := range ask {
			if !asked[p] {
				asked[p] = true
				round = append(round, p)
			}
		}
		ask = nil
		answers := make([]peerReplica, len(round))
		errs := make([]error, len(round))
		var wg sync.WaitGroup
		for i, p := range round {
			wg.Add(1)
			go func() {
				defer wg.Done()
				answers[i], errs[i] = s.askPeer(ctx, p.Addr(), g)
			}()
		}
		wg.Wait()
		for i, a := range answers {
			switch {
			case errs[i] != nil:
				failures = append(failures, fmt.Sprintf("%s: %v", round[i], errs[i]))
			case a.leading && (best == nil || a.term > best.term):
				best, bestID = &answers[i], round[i]
			case a.hosted:
				ask = append(ask, a.leader)
			}
		}
	}
	return best, bestID, failures
}

// askPeer is peerStatus, over gRPC unless a test replaced it.
func (s *copysetService) askPeer(ctx context.Context, addr string, g copyset.GroupID) (peerReplica, error) {
	if s.peerStatus != nil {
		return s.peerStatus(ctx, addr, g)
	}
	var r peerReplica
	err := probePeer(ctx, s.conns, addr, func(ctx context.Context, cc *grpc.ClientConn) error {
		var trailer metadata.MD
		resp, err := pb.NewCopysetServiceClient(cc).GetCopysetStatus(ctx, &pb.CopysetStatusRequest{
			LogicPoolId: proto.Uint32(g.Pool()), CopysetId: proto.Uint32(g.Copyset()),
			Peer: &commonpb.Peer{Address: proto.String(addr + ":0")}, QueryHash: proto.Bool(false),
		}, grpc.Trailer(&trailer))
		if err != nil {
			return err
		}
		switch resp.GetStatus() {
		case pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_SUCCESS:
		case pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_COPYSET_NOTEXIST:
			return nil
		default:
			return fmt.Errorf("copyset status: %v", resp.GetStatus())
		}
		r = peerReplica{hosted: true, leading: resp.GetState() == braftLeader, term: uint64(resp.GetTerm()),
			leader: copyset.PeerID(resp.GetLeader().GetAddress()), conf: splitPeers(trailer.Get(PeersTrailerKey)),
			lastIndex: uint64(resp.GetLastIndex())}
		if v := trailer.Get(CommittedPeersTrailerKey); len(v) > 0 {
			r.committed, r.hasCommitted = splitPeers(v), true
		}
		if v := trailer.Get(CommittedIndexTrailerKey); len(v) > 0 {
			r.committedIndex, _ = strconv.ParseUint(v[0], 10, 64)
		}
		return nil
	})
	return r, err
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

// Response trailers chunkraft adds to CopysetService.GetCopysetStatus and
// ChunkService.GetChunkHash. They are gRPC metadata, outside the Curve
// messages, which a Curve client reads unchanged.
const (
	// AppliedTrailerKey accompanies a hash (GetChunkHash, GetCopysetStatus
	// with queryHash): chunkstore.AppliedTrailerKey.
	AppliedTrailerKey = chunkstore.AppliedTrailerKey
	// PeersTrailerKey (GetCopysetStatus) is the newest configuration this
	// replica knows, committed or not: peer ids joined by commas.
	PeersTrailerKey = "chunkraft-peers"
	// CommittedPeersTrailerKey (GetCopysetStatus) is the newest
	// configuration this replica knows to have committed (applied here or
	// in its snapshot), when it knows one; it differs from PeersTrailerKey
	// while a change is under way.
	CommittedPeersTrailerKey = "chunkraft-committed-peers"
	// CommittedIndexTrailerKey (GetCopysetStatus, with
	// CommittedPeersTrailerKey) is the log index of that configuration.
	CommittedIndexTrailerKey = "chunkraft-committed-index"
	// WriteFenceTrailerKey (GetCopysetStatus) is the owner of the write
	// fence in force on the copyset as this replica applied it (absent: no
	// fence; chunkstore.LocalWriteFence); WriteFenceSinceTrailerKey is the
	// log index it was set at.
	WriteFenceTrailerKey      = "chunkraft-write-fence"
	WriteFenceSinceTrailerKey = "chunkraft-write-fence-since"
)

// joinPeers renders peer ids as a trailer value.
func joinPeers(peers []copyset.PeerID) string {
	ids := make([]string, len(peers))
	for i, p := range peers {
		ids[i] = string(p)
	}
	return strings.Join(ids, ",")
}

// splitPeers parses a trailer value of joinPeers.
func splitPeers(v []string) []copyset.PeerID {
	var out []copyset.PeerID
	for _, p := range strings.Split(strings.Join(v, ","), ",") {
		if p != "" {
			out = append(out, copyset.PeerID(p))
		}
	}
	return out
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
// the leader, so replicas that applied the same index hash equal; the
// leader then shares its commit index with the followers (Node.ShareCommit)
// so that they reach that index at once. AppliedTrailerKey gives the index
// the hash was taken at. A read error is FAILURE_UNKNOWN (as upstream).
//
// Every answer carries the replica's configuration (PeersTrailerKey, and
// CommittedPeersTrailerKey once it knows a committed one): the leader's is
// the copyset's membership; and, while one is in force, the copyset's
// write fence as the replica applied it (WriteFenceTrailerKey,
// WriteFenceSinceTrailerKey).
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
			chunkstore.ShareCommit(ctx, n, s.log)
		}
		h, applied, err := chunkstore.CopysetHash(ctx, n)
		if err != nil {
			return failed(err)
		}
		hash = strconv.FormatUint(uint64(h), 10)
		chunkstore.SetAppliedTrailer(ctx, applied)
	}
	if peers, err := n.Peers(); err == nil {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(PeersTrailerKey, joinPeers(peers)))
	}
	if peers, ok := n.CommittedPeers(); ok {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(CommittedPeersTrailerKey, joinPeers(peers)))
	}
	if idx, ok := n.CommittedIndex(); ok {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(CommittedIndexTrailerKey, strconv.FormatUint(idx, 10)))
	}
	if f, ok := chunkstore.LocalWriteFence(n); ok {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(WriteFenceTrailerKey, f.Owner, WriteFenceSinceTrailerKey, strconv.FormatUint(f.Since, 10)))
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
		ReadOnly:          proto.Bool(s.admit.ReadOnly() || st.Broken != nil),
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
