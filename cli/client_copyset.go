package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	chunkserverpb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	commonpb "github.com/chunkraft/chunkraft/proto/curve/common"
)

// createParallelism bounds how many copysets CreateCopysets creates at once.
const createParallelism = 8

// PeerResult is the outcome of creating a copyset on one peer.
type PeerResult struct {
	Peer    string // peer id "ip:port:0"
	Existed bool   // the peer already had the copyset (COPYSET_OP_STATUS_EXIST)
	Err     error
}

// CreateResult is the outcome of creating one copyset on all its peers.
type CreateResult struct {
	Copyset CopysetID
	Peers   []PeerResult
	Err     error // nil when every peer has the copyset now
}

// Counts returns how many peers created the copyset now, already had it, and
// failed.
func (r CreateResult) Counts() (created, existed, failed int) {
	for _, p := range r.Peers {
		switch {
		case p.Err != nil:
			failed++
		case p.Existed:
			existed++
		default:
			created++
		}
	}
	return created, existed, failed
}

// resolvePeers turns user peer strings into wire peer ids.
func resolvePeers(ctx context.Context, peers []string) ([]string, error) {
	if len(peers) == 0 {
		return nil, errors.New("no peers given")
	}
	ids := make([]string, len(peers))
	seen := map[string]bool{}
	for i, p := range peers {
		id, err := ResolvePeerID(ctx, p)
		if err != nil {
			return nil, err
		}
		if seen[id] {
			return nil, fmt.Errorf("peer %s listed twice", id)
		}
		seen[id] = true
		ids[i] = id
	}
	return ids, nil
}

// CreateCopyset creates copyset cs with the given peers by sending
// CreateCopysetNode to every peer (each bootstraps its replica with that
// configuration). A peer that already has the copyset counts as success, so
// the call can be repeated. Unreachable peers are retried until the timeout.
func (c *Client) CreateCopyset(ctx context.Context, cs CopysetID, peers []string) (CreateResult, error) {
	ids, err := resolvePeers(ctx, peers)
	if err != nil {
		return CreateResult{Copyset: cs}, fmt.Errorf("create %s: %w", cs, err)
	}
	r := c.createCopyset(ctx, cs, ids)
	return r, r.Err
}

// CreateCopysets creates several copysets with the same peers, a few at a
// time. Every copyset gets a result; the error summarises the failures.
func (c *Client) CreateCopysets(ctx context.Context, copysets []CopysetID, peers []string) ([]CreateResult, error) {
	ids, err := resolvePeers(ctx, peers)
	if err != nil {
		return nil, fmt.Errorf("create copysets: %w", err)
	}
	results := make([]CreateResult, len(copysets))
	forEach(len(copysets), createParallelism, func(i int) {
		results[i] = c.createCopyset(ctx, copysets[i], ids)
	})
	var first error
	failed := 0
	for _, r := range results {
		if r.Err != nil {
			failed++
			if first == nil {
				first = r.Err
			}
		}
	}
	if failed > 0 {
		return results, fmt.Errorf("%d of %d copysets not created; first failure: %w", failed, len(copysets), first)
	}
	return results, nil
}

func (c *Client) createCopyset(ctx context.Context, cs CopysetID, ids []string) CreateResult {
	dctx, cancel := c.withDeadline(ctx)
	defer cancel()
	r := CreateResult{Copyset: cs, Peers: make([]PeerResult, len(ids))}
	forEach(len(ids), len(ids), func(i int) {
		existed, err := c.createOn(dctx, ctx, cs, ids[i], ids)
		r.Peers[i] = PeerResult{Peer: ids[i], Existed: existed, Err: err}
	})
	var errs []error
	for _, p := range r.Peers {
		if p.Err != nil {
			errs = append(errs, p.Err)
		}
	}
	if len(errs) > 0 {
		r.Err = fmt.Errorf("create %s: %w", cs, joinErrors(errs))
	}
	return r
}

// createOn sends CreateCopysetNode to one peer, retrying while it is
// unreachable. parent is the caller's context, for the final error.
func (c *Client) createOn(ctx, parent context.Context, cs CopysetID, peer string, ids []string) (bool, error) {
	start := time.Now()
	addr, err := PeerAddr(peer)
	if err != nil {
		return false, err
	}
	svc, err := c.copysetService(addr)
	if err != nil {
		return false, err
	}
	req := &chunkserverpb.CopysetRequest{
		LogicPoolId: proto.Uint32(cs.Pool),
		CopysetId:   proto.Uint32(cs.Copyset),
		Peerid:      ids,
	}
	bo := newBackoff()
	var last error
	for ctx.Err() == nil {
		actx, acancel := context.WithTimeout(ctx, c.attemptTimeout)
		resp, err := svc.CreateCopysetNode(actx, req)
		acancel()
		if err != nil {
			if !retryable(err) || bo.final(&serverError{Err: err}) {
				return false, &serverError{Addr: addr, Err: err}
			}
			last = &serverError{Err: err}
			bo.wait(ctx)
			continue
		}
		switch st := resp.GetStatus(); st {
		case chunkserverpb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_SUCCESS:
			return false, nil
		case chunkserverpb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_EXIST:
			return true, nil
		default:
			return false, &serverError{Addr: addr, Err: &CopysetStatusError{Status: st}}
		}
	}
	return false, giveUp(parent, addr, start, last)
}

// ReplicaStatus is one server's view of a copyset (GetCopysetStatus).
type ReplicaStatus struct {
	Copyset CopysetID
	Server  string // the address asked
	Hosted  bool   // false: the server does not host the copyset
	Err     error  // the server could not be asked or failed

	Peer      string // the replica's peer id, as reported
	State     uint32 // replica state number (braft numbering); see StateName
	Leader    string // leader peer id as this replica knows it ("" if none)
	Term      int64
	Committed int64
	Applied   int64
	First     int64
	Last      int64
	Epoch     uint64
	ReadOnly  bool
	Hash      string // copyset data hash, when asked for (CopysetHashes)
	// HashApplied is the applied index the hash covers, when the server
	// reported it (HasHashApplied); it counts only entries that reach the
	// state machines, so it may be below Applied.
	HashApplied    int64
	HasHashApplied bool
	// Config is the newest configuration the replica knows (committed or
	// not), when the server reported it (HasConfig): the leader's is the
	// copyset's membership. Committed is the newest one it knows to have
	// committed (HasCommitted); they differ while a change is under way.
	Config          []string
	HasConfig       bool
	CommittedConfig []string
	HasCommitted    bool
	// WriteFence is the owner of the copyset's write fence as the replica
	// applied it ("" none: client writes pass), WriteFenceSince the log
	// index it was set at.
	WriteFence      string
	WriteFenceSince int64
}

// ConfigCommitted reports whether the configuration the replica reported
// has committed as far as it knows.
func (r ReplicaStatus) ConfigCommitted() bool {
	if !r.HasConfig || !r.HasCommitted {
		return false
	}
	a, b := slices.Clone(r.Config), slices.Clone(r.CommittedConfig)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// Replica state numbers of GetCopysetStatus (braft's State enum).
const (
	StateLeader   uint32 = 1
	StateFollower uint32 = 4
	StateError    uint32 = 5
)

// StateName names a replica state number as GetCopysetStatus reports it.
// The numbers are braft's State enum, as upstream Curve puts them on the wire
// (1 leader, 3 candidate, 4 follower, 8 shutdown, ...).
func StateName(state uint32) string {
	switch state {
	case 1:
		return "Leader"
	case 2:
		return "Transferring"
	case 3:
		return "Candidate"
	case 4:
		return "Follower"
	case 5:
		return "Error"
	case 6:
		return "Uninitialized"
	case 7:
		return "ShuttingDown"
	case 8:
		return "Shutdown"
	}
	return "Unknown(" + strconv.FormatUint(uint64(state), 10) + ")"
}

// CopysetStatus asks every configured server for its replica of cs, once each
// and in parallel. It returns one row per server in server order: Hosted rows
// for replicas, Hosted=false for servers without the copyset, Err rows for
// servers that could not answer. The error is non-nil only if ctx ended.
func (c *Client) CopysetStatus(ctx context.Context, cs CopysetID) ([]ReplicaStatus, error) {
	return c.copysetStatus(ctx, cs, false)
}

// CopysetHashes is CopysetStatus with queryHash: each replica also reports
// the hash of its copyset data (Hash), equal on replicas that have applied
// the same log index. Compare rows with equal Applied only.
func (c *Client) CopysetHashes(ctx context.Context, cs CopysetID) ([]ReplicaStatus, error) {
	return c.copysetStatus(ctx, cs, true)
}

// SettledCopysetHashes is CopysetHashes repeated, for at most wait, while
// the replicas' hashes differ only between replicas at different applied
// indices (see CompareHashes), so that a follower that has not applied the
// latest write yet is not taken for a diverged one.
func (c *Client) SettledCopysetHashes(ctx context.Context, cs CopysetID, wait time.Duration) ([]ReplicaStatus, error) {
	deadline := time.Now().Add(wait)
	for {
		rows, err := c.CopysetHashes(ctx, cs)
		if err != nil || !compareCopysetHashes(rows).Unsettled || !time.Now().Before(deadline) || !sleepCtx(ctx, hashPoll) {
			return rows, err
		}
	}
}

// compareCopysetHashes compares the copyset hashes of status rows, each at
// the applied index it covers. Rows without a hash are not compared.
func compareCopysetHashes(rows []ReplicaStatus) HashCheck {
	hr := make([]ReplicaHash, len(rows))
	for i, r := range rows {
		hr[i] = ReplicaHash{Server: r.Server, Hosted: r.Err == nil && r.Hosted && r.Hash != "", Hash: r.Hash}
		if hr[i].Hosted {
			h := hashIndices([]ReplicaStatus{r})[0]
			hr[i].Applied, hr[i].HasApplied = h.applied, h.known
		}
	}
	return CompareHashes(hr)
}

func (c *Client) copysetStatus(ctx context.Context, cs CopysetID, queryHash bool) ([]ReplicaStatus, error) {
	rows := make([]ReplicaStatus, len(c.servers))
	forEach(len(c.servers), len(c.servers), func(i int) {
		rows[i] = c.replicaStatus(ctx, cs, c.servers[i], queryHash)
	})
	if err := ctx.Err(); err != nil {
		return rows, fmt.Errorf("status of %s: %w", cs, err)
	}
	return rows, nil
}

func (c *Client) replicaStatus(ctx context.Context, cs CopysetID, addr string, queryHash bool) ReplicaStatus {
	row := ReplicaStatus{Copyset: cs, Server: addr}
	actx, cancel := context.WithTimeout(ctx, c.attemptTimeout)
	defer cancel()
	self, err := ResolvePeerID(actx, addr)
	if err != nil {
		row.Err = err
		return row
	}
	svc, err := c.copysetService(addr)
	if err != nil {
		row.Err = err
		return row
	}
	var trailer metadata.MD
	resp, err := svc.GetCopysetStatus(actx, &chunkserverpb.CopysetStatusRequest{
		LogicPoolId: proto.Uint32(cs.Pool),
		CopysetId:   proto.Uint32(cs.Copyset),
		Peer:        &commonpb.Peer{Address: proto.String(self)},
		QueryHash:   proto.Bool(queryHash),
	}, grpc.Trailer(&trailer))
	if err != nil {
		row.Err = &serverError{Err: err}
		return row
	}
	switch st := resp.GetStatus(); st {
	case chunkserverpb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_SUCCESS:
	case chunkserverpb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_COPYSET_NOTEXIST:
		return row
	default:
		row.Err = &CopysetStatusError{Status: st}
		return row
	}
	row.Hosted = true
	row.Peer = resp.GetPeer().GetAddress()
	row.State = resp.GetState()
	row.Leader = resp.GetLeader().GetAddress()
	row.Term = resp.GetTerm()
	row.Committed = resp.GetCommittedIndex()
	row.Applied = resp.GetKnownAppliedIndex()
	row.First = resp.GetFirstIndex()
	row.Last = resp.GetLastIndex()
	row.Epoch = resp.GetEpoch()
	row.ReadOnly = resp.GetReadOnly()
	row.Hash = resp.GetHash()
	if queryHash {
		row.HashApplied, row.HasHashApplied = trailerInt(trailer, appliedTrailerKey)
	}
	if v := trailer.Get(peersTrailerKey); len(v) > 0 {
		row.Config, row.HasConfig = splitTrailerList(v), true
	}
	if v := trailer.Get(committedPeersTrailerKey); len(v) > 0 {
		row.CommittedConfig, row.HasCommitted = splitTrailerList(v), true
	}
	if row.WriteFence = firstValue(trailer, writeFenceTrailerKey); row.WriteFence != "" {
		row.WriteFenceSince, _ = trailerInt(trailer, writeFenceSinceKey)
	}
	return row
}

// forEach runs fn(0..n-1) with at most limit running at once and waits.
func forEach(n, limit int, fn func(i int)) {
	if limit < 1 {
		limit = 1
	}
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(i)
		}()
	}
	wg.Wait()
}
