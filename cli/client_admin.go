package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	chunkserverpb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	commonpb "github.com/chunkraft/chunkraft/proto/curve/common"
)

// minChangeAttempt is the least time one attempt of a membership change or a
// raft snapshot gets: the server answers only once it is done.
const minChangeAttempt = 10 * time.Second

// finalError stops the retry loops of onLeaderRPC: the server answered and
// asking again (or elsewhere) cannot help.
type finalError struct{ err error }

func (e *finalError) Error() string { return e.err.Error() }
func (e *finalError) Unwrap() error { return e.err }

// notLeaderReply is a reply, in a service's own terms, saying that the server
// is not the copyset's leader (or does not host it): onLeaderRPC follows
// Leader when it names another server, else finds the leader again.
type notLeaderReply struct {
	Leader string // the leader's peer id if the server named one
	err    error
}

func (e *notLeaderReply) Error() string { return e.err.Error() }
func (e *notLeaderReply) Unwrap() error { return e.err }

// changeAttempt is the per-attempt timeout of calls that return when done.
func (c *Client) changeAttempt() time.Duration { return max(c.attemptTimeout, minChangeAttempt) }

// rpcCall is one call of any service over the connection to one server.
type rpcCall func(ctx context.Context, cc grpc.ClientConnInterface) error

// callOnce makes one attempt of call against addr, bounded by the client's
// attempt timeout. Errors do not name the server: the caller's row does.
func (c *Client) callOnce(ctx context.Context, addr string, call rpcCall) error {
	return c.callWithin(ctx, addr, c.attemptTimeout, call)
}

// callWithin is callOnce with the attempt bounded by attempt.
func (c *Client) callWithin(ctx context.Context, addr string, attempt time.Duration, call rpcCall) error {
	cc, err := c.conn(addr)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, attempt)
	defer cancel()
	if err := call(actx, cc); err != nil {
		return &serverError{Err: err}
	}
	return nil
}

// onServerRPC runs call against one server, retrying transient gRPC failures
// (unreachable, restarting, timed out) with backoff until the client's
// timeout; each attempt gets `attempt`. Errors do not name the server.
func (c *Client) onServerRPC(parent context.Context, addr string, attempt time.Duration, call rpcCall) error {
	start := time.Now()
	ctx, cancel := c.withDeadline(parent)
	defer cancel()
	cc, err := c.conn(addr)
	if err != nil {
		return err
	}
	bo := newBackoff()
	var last error
	for ctx.Err() == nil {
		actx, acancel := context.WithTimeout(ctx, attempt)
		err := call(actx, cc)
		acancel()
		if err == nil {
			return nil
		}
		last = &serverError{Err: err}
		if !retryable(err) || bo.final(last) {
			return last
		}
		bo.wait(ctx)
	}
	if err := parent.Err(); err != nil {
		return err
	}
	if last == nil {
		last = context.DeadlineExceeded
	}
	return &GaveUpError{After: time.Since(start), Last: last}
}

// leaderRPC is one call against the server believed to lead a copyset;
// leader is its peer id. Returning a *finalError ends the retries; a
// *notLeaderReply redirects them.
type leaderRPC func(ctx context.Context, cc grpc.ClientConnInterface, leader string) error

// onLeaderRPC runs call against the leader of cs (chaseLeader), for
// services that answer with gRPC errors rather than REDIRECTED:
// FailedPrecondition (a follower) and NotFound (the copyset is not, or no
// longer, there) make it find the leader again, as does a *notLeaderReply
// (following the leader it names, a few hops at most); unreachable or timed
// out servers are retried with backoff; a *finalError and any other error
// are final. Each attempt gets attempt, all within the client's timeout.
func (c *Client) onLeaderRPC(parent context.Context, op string, cs CopysetID, attempt time.Duration, call leaderRPC) error {
	return c.chaseLeader(parent, opText(op), cs, attempt, func(ctx context.Context, cc *grpc.ClientConn, addr, leader string) leaderOutcome {
		err := call(ctx, cc, leader)
		if err == nil {
			return leaderOutcome{kind: outcomeDone}
		}
		var fe *finalError
		if errors.As(err, &fe) {
			return leaderOutcome{kind: outcomeFinal, err: &serverError{Addr: addr, Err: fe.err}}
		}
		var nl *notLeaderReply
		if errors.As(err, &nl) {
			return leaderOutcome{kind: outcomeRedirect, hint: nl.Leader, err: &serverError{Addr: addr, Err: err}}
		}
		switch code := status.Code(err); {
		case code == codes.FailedPrecondition, code == codes.NotFound, retryable(err):
			return leaderOutcome{kind: outcomeRetry, err: &serverError{Addr: addr, Err: err}}
		}
		return leaderOutcome{kind: outcomeFinal, err: &serverError{Addr: addr, Err: err}}
	})
}

func pbPeer(id string) *commonpb.Peer { return &commonpb.Peer{Address: proto.String(id)} }

func pbPeers(ids []string) []*commonpb.Peer {
	out := make([]*commonpb.Peer, len(ids))
	for i, id := range ids {
		out[i] = pbPeer(id)
	}
	return out
}

// peerIDs are the addresses of peers as the server sent them.
func peerIDs(peers []*commonpb.Peer) []string {
	out := make([]string, 0, len(peers))
	for _, p := range peers {
		out = append(out, p.GetAddress())
	}
	return out
}

// MembershipChange is a committed configuration change of a copyset.
type MembershipChange struct {
	Copyset  CopysetID
	Leader   string   // peer id of the leader that made the change
	OldPeers []string // configuration before, as the leader reports it
	NewPeers []string // configuration after
}

// missingReplicaHint recognises an AddPeer failure that says the new peer has
// no replica of the copyset: the error names the peer's address and says
// NotFound or "not exist"/"not hosted"/... It returns the error with a hint,
// or nil when err is something else.
func missingReplicaHint(err error, cs CopysetID, peer string) error {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	addr, _ := PeerAddr(peer)
	msg := strings.ToLower(st.Message())
	if addr == "" || !strings.Contains(msg, addr) {
		return nil
	}
	known := st.Code() == codes.NotFound
	for _, s := range []string{"not exist", "notexist", "not hosted", "no replica", "not found", "does not host"} {
		known = known || strings.Contains(msg, s)
	}
	if !known {
		return nil
	}
	return &hintedError{err: err, hint: fmt.Sprintf("%s has no replica of %s yet: the new server must host the copyset before it can join", peer, cs)}
}

// hintedError is a server's error with advice appended. It does not unwrap,
// so that describe renders the server's error once, as "Code: message".
type hintedError struct {
	err  error
	hint string
}

func (e *hintedError) Error() string { return describe(e.err) + " (" + e.hint + ")" }

// AddPeer adds peer ("host:port" or "ip:port:0") to the configuration of cs.
// The request goes to the copyset's leader, which answers once the change
// has committed. Adding a peer that is already a member changes nothing.
func (c *Client) AddPeer(ctx context.Context, cs CopysetID, peer string) (MembershipChange, error) {
	id, err := ResolvePeerID(ctx, peer)
	if err != nil {
		return MembershipChange{Copyset: cs}, fmt.Errorf("add peer to %s: %w", cs, err)
	}
	ch := MembershipChange{Copyset: cs}
	err = c.onLeaderRPC(ctx, fmt.Sprintf("add peer %s to %s", id, cs), cs, c.changeAttempt(),
		func(ctx context.Context, cc grpc.ClientConnInterface, leader string) error {
			resp, err := chunkserverpb.NewCliService2Client(cc).AddPeer(ctx, &chunkserverpb.AddPeerRequest2{
				LogicPoolId: proto.Uint32(cs.Pool),
				CopysetId:   proto.Uint32(cs.Copyset),
				Leader:      pbPeer(leader),
				AddPeer:     pbPeer(id),
			})
			if err != nil {
				if hinted := missingReplicaHint(err, cs, id); hinted != nil {
					return &finalError{hinted}
				}
				return err
			}
			ch.Leader, ch.OldPeers, ch.NewPeers = leader, peerIDs(resp.GetOldPeers()), peerIDs(resp.GetNewPeers())
			return nil
		})
	return ch, err
}

// NewReplica is the outcome of CreateEmptyReplica.
type NewReplica struct {
	Peer    string   // the new peer's id
	Existed bool     // it already had a replica (COPYSET_OP_STATUS_EXIST)
	Peers   []string // the current peers it was created with
}

// CreateEmptyReplica prepares peer to join cs: it sends CreateCopysetNode to
// peer with the copyset's current peers, which do not include peer, so the
// server creates an empty replica that the leader can then add (AddPeer).
// The current peers are the replicas found on the configured servers
// (CopysetStatus). A peer that already has a replica counts as success.
func (c *Client) CreateEmptyReplica(ctx context.Context, cs CopysetID, peer string) (NewReplica, error) {
	op := fmt.Sprintf("create an empty replica of %s on %s", cs, peer)
	id, err := ResolvePeerID(ctx, peer)
	if err != nil {
		return NewReplica{}, fmt.Errorf("%s: %w", op, err)
	}
	nr := NewReplica{Peer: id}
	rows, err := c.CopysetStatus(ctx, cs)
	if err != nil {
		return nr, fmt.Errorf("%s: %w", op, err)
	}
	var unasked []string
	for _, r := range rows {
		switch {
		case r.Err != nil:
			unasked = append(unasked, r.Server+": "+errText(r.Err))
		case r.Hosted && replicaName(r) != id:
			nr.Peers = append(nr.Peers, replicaName(r))
		}
	}
	if len(nr.Peers) == 0 {
		msg := "no server in --servers has a replica of it, so its current peers are unknown"
		if len(unasked) > 0 {
			msg += fmt.Sprintf(" (%d of %d servers could not be asked: %s)", len(unasked), len(rows), strings.Join(unasked, "; "))
		}
		return nr, fmt.Errorf("%s: %s", op, msg)
	}
	dctx, cancel := c.withDeadline(ctx)
	defer cancel()
	nr.Existed, err = c.createOn(dctx, ctx, cs, id, nr.Peers)
	if err != nil {
		return nr, fmt.Errorf("%s: %w", op, err)
	}
	return nr, nil
}

// WaitCaughtUp waits, for at most d, until peer's replica of cs (asked on
// its own server) has applied the commit index the leader has now,
// printing progress to progress.
func (c *Client) WaitCaughtUp(ctx context.Context, cs CopysetID, peer string, d time.Duration, progress io.Writer) error {
	id, err := ResolvePeerID(ctx, peer)
	if err != nil {
		return fmt.Errorf("wait for %s in %s: %w", peer, cs, err)
	}
	addr, _ := PeerAddr(id)
	leader, err := c.leaderOf(ctx, cs)
	if err != nil {
		return fmt.Errorf("wait for %s in %s: %w", id, cs, err)
	}
	leaderAddr, _ := PeerAddr(leader)
	lr := c.replicaStatus(ctx, cs, leaderAddr, false)
	if lr.Err != nil || !lr.Hosted {
		return fmt.Errorf("wait for %s in %s: the leader's commit index: %s", id, cs, cmp.Or(errText(lr.Err), leaderAddr+" has no replica"))
	}
	if err := c.waitApplied(ctx, []catchUp{{cs: cs, peer: id, server: addr, target: lr.Committed}}, d, progress); err != nil {
		return fmt.Errorf("wait for %s in %s: %w", id, cs, err)
	}
	return nil
}

// NotMemberError is the refusal to remove a peer that is not in the
// copyset's configuration.
type NotMemberError struct {
	Copyset CopysetID
	Peer    string
	Members []string // the configuration, as the leader reported it
}

func (e *NotMemberError) Error() string {
	return fmt.Sprintf("remove peer %s from %s: it is not a member; the members are %s", e.Peer, e.Copyset, strings.Join(e.Members, ","))
}

// RemovePeer removes peer from the configuration of cs through its leader,
// which answers once the change has committed; the removed server drops its
// replica. Removing the leader itself makes it step down afterwards. A
// peer that is not a member is a *NotMemberError naming the members
// (nothing changed).
func (c *Client) RemovePeer(ctx context.Context, cs CopysetID, peer string) (MembershipChange, error) {
	id, err := ResolvePeerID(ctx, peer)
	if err != nil {
		return MembershipChange{Copyset: cs}, fmt.Errorf("remove peer from %s: %w", cs, err)
	}
	ch := MembershipChange{Copyset: cs}
	err = c.onLeaderRPC(ctx, fmt.Sprintf("remove peer %s from %s", id, cs), cs, c.changeAttempt(),
		func(ctx context.Context, cc grpc.ClientConnInterface, leader string) error {
			resp, err := chunkserverpb.NewCliService2Client(cc).RemovePeer(ctx, &chunkserverpb.RemovePeerRequest2{
				LogicPoolId: proto.Uint32(cs.Pool),
				CopysetId:   proto.Uint32(cs.Copyset),
				Leader:      pbPeer(leader),
				RemovePeer:  pbPeer(id),
			})
			if err != nil {
				return err
			}
			ch.Leader, ch.OldPeers, ch.NewPeers = leader, peerIDs(resp.GetOldPeers()), peerIDs(resp.GetNewPeers())
			return nil
		})
	if err == nil && ch.Leader == id {
		c.forgetLeader(cs, id)
	}
	if err == nil && !contains(ch.OldPeers, id) {
		return ch, &NotMemberError{Copyset: cs, Peer: id, Members: ch.OldPeers}
	}
	return ch, err
}

// ChangePeers replaces the configuration of cs by peers through its leader,
// which answers once the change has committed.
func (c *Client) ChangePeers(ctx context.Context, cs CopysetID, peers []string) (MembershipChange, error) {
	ids, err := resolvePeers(ctx, peers)
	if err != nil {
		return MembershipChange{Copyset: cs}, fmt.Errorf("change peers of %s: %w", cs, err)
	}
	ch := MembershipChange{Copyset: cs}
	err = c.onLeaderRPC(ctx, fmt.Sprintf("change peers of %s to %s", cs, strings.Join(ids, ",")), cs, c.changeAttempt(),
		func(ctx context.Context, cc grpc.ClientConnInterface, leader string) error {
			resp, err := chunkserverpb.NewCliService2Client(cc).ChangePeers(ctx, &chunkserverpb.ChangePeersRequest2{
				LogicPoolId: proto.Uint32(cs.Pool),
				CopysetId:   proto.Uint32(cs.Copyset),
				Leader:      pbPeer(leader),
				NewPeers:    pbPeers(ids),
			})
			if err != nil {
				return err
			}
			ch.Leader, ch.OldPeers, ch.NewPeers = leader, peerIDs(resp.GetOldPeers()), peerIDs(resp.GetNewPeers())
			return nil
		})
	if err == nil && !contains(ch.NewPeers, ch.Leader) {
		c.forgetLeader(cs, ch.Leader)
	}
	return ch, err
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// ResetPeer forcibly resets the configuration of the replica of cs on server
// to peers, without a quorum (disaster recovery when a majority is lost).
// The request goes to server only and names it as requestPeer; peers must
// include server. The other peers are not told: run it on each survivor.
func (c *Client) ResetPeer(ctx context.Context, server string, cs CopysetID, peers []string) error {
	op := fmt.Sprintf("reset peers of %s on %s", cs, server)
	self, err := ResolvePeerID(ctx, server)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	ids, err := resolvePeers(ctx, peers)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if !contains(ids, self) {
		return fmt.Errorf("%s: the new peers %s do not include the server itself (%s)", op, strings.Join(ids, ","), self)
	}
	addr, _ := PeerAddr(self)
	req := &chunkserverpb.ResetPeerRequest2{
		LogicPoolId: proto.Uint32(cs.Pool),
		CopysetId:   proto.Uint32(cs.Copyset),
		RequestPeer: pbPeer(self),
		NewPeers:    pbPeers(ids),
	}
	err = c.onServerRPC(ctx, addr, c.changeAttempt(), func(ctx context.Context, cc grpc.ClientConnInterface) error {
		_, err := chunkserverpb.NewCliService2Client(cc).ResetPeer(ctx, req)
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// ServerResult is the outcome of a call to one server.
type ServerResult struct {
	Server string // the address asked
	// Hosted is false when a per-copyset call found no replica on the server
	// (NotFound); such rows carry no error.
	Hosted bool
	Err    error
}

// SnapshotCopyset makes every configured server that hosts a replica of cs
// take a raft snapshot of it now (each answers when its snapshot is done).
// Servers are asked in parallel; unreachable ones are retried until the
// client's timeout. It returns one row per server in server order and an
// error naming the servers that failed or when no server hosts cs.
func (c *Client) SnapshotCopyset(ctx context.Context, cs CopysetID) ([]ServerResult, error) {
	rows := make([]ServerResult, len(c.servers))
	forEach(len(c.servers), len(c.servers), func(i int) {
		addr := c.servers[i]
		row := ServerResult{Server: addr, Hosted: true}
		self, err := ResolvePeerID(ctx, addr)
		if err == nil {
			req := &chunkserverpb.SnapshotRequest2{
				LogicPoolId: proto.Uint32(cs.Pool),
				CopysetId:   proto.Uint32(cs.Copyset),
				Peer:        pbPeer(self),
			}
			err = c.onServerRPC(ctx, addr, c.changeAttempt(), func(ctx context.Context, cc grpc.ClientConnInterface) error {
				_, err := chunkserverpb.NewCliService2Client(cc).Snapshot(ctx, req)
				return err
			})
		}
		if status.Code(err) == codes.NotFound {
			row.Hosted, err = false, nil
		}
		row.Err = err
		rows[i] = row
	})
	return rows, serverFailures("snapshot "+cs.String(), rows, true)
}

// SnapshotAll makes every configured server snapshot all its copysets
// (SnapshotAll). One row per server in server order; the error names the
// servers that failed.
func (c *Client) SnapshotAll(ctx context.Context) ([]ServerResult, error) {
	rows := make([]ServerResult, len(c.servers))
	forEach(len(c.servers), len(c.servers), func(i int) {
		addr := c.servers[i]
		err := c.onServerRPC(ctx, addr, c.changeAttempt(), func(ctx context.Context, cc grpc.ClientConnInterface) error {
			_, err := chunkserverpb.NewCliService2Client(cc).SnapshotAll(ctx, &chunkserverpb.SnapshotAllRequest{})
			return err
		})
		rows[i] = ServerResult{Server: addr, Hosted: true, Err: err}
	})
	return rows, serverFailures("snapshot all copysets", rows, false)
}

// serverFailures summarises the failed rows of a fan-out call; with
// needHosted, also a fan-out that found no replica anywhere.
func serverFailures(op string, rows []ServerResult, needHosted bool) error {
	var errs []error
	hosted := 0
	for _, r := range rows {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.Server, r.Err))
		}
		if r.Hosted {
			hosted++
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s: failed on %d of %d servers: %w", op, len(errs), len(rows), joinErrors(errs))
	}
	if needHosted && hosted == 0 {
		return fmt.Errorf("%s: no server in --servers hosts it", op)
	}
	return nil
}

// DeleteBrokenCopyset asks server to move its replica of cs to the trash if
// the replica is broken (failed to load or stopped by an error), removed, or
// stale (not in the committed configuration of the copyset's leader, which
// the server asks). A member is refused with COPYSET_IS_HEALTHY (a
// *CopysetStatusError), with the server's reason when it gives one.
func (c *Client) DeleteBrokenCopyset(ctx context.Context, server string, cs CopysetID) error {
	op := fmt.Sprintf("delete broken %s on %s", cs, server)
	addr, err := PeerAddr(server)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	var st chunkserverpb.COPYSET_OP_STATUS
	var reason string
	err = c.onServerRPC(ctx, addr, c.changeAttempt(), func(ctx context.Context, cc grpc.ClientConnInterface) error {
		var trailer metadata.MD
		resp, err := chunkserverpb.NewCopysetServiceClient(cc).DeleteBrokenCopyset(ctx, &chunkserverpb.CopysetRequest{
			LogicPoolId: proto.Uint32(cs.Pool),
			CopysetId:   proto.Uint32(cs.Copyset),
		}, grpc.Trailer(&trailer))
		st, reason = resp.GetStatus(), firstValue(trailer, integrityErrorKey)
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if st != chunkserverpb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_SUCCESS {
		if reason != "" {
			return fmt.Errorf("%s: %w: %s", op, &CopysetStatusError{Status: st}, reason)
		}
		return fmt.Errorf("%s: %w", op, &CopysetStatusError{Status: st})
	}
	return nil
}

// LoadFinished asks server (ChunkServerStatus, one attempt) whether it has
// loaded every local copyset and caught up with their leaders.
func (c *Client) LoadFinished(ctx context.Context, server string) (bool, error) {
	addr, err := PeerAddr(server)
	if err != nil {
		return false, err
	}
	var fin bool
	err = c.callOnce(ctx, addr, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		resp, err := chunkserverpb.NewChunkServerServiceClient(cc).ChunkServerStatus(ctx, &chunkserverpb.ChunkServerStatusRequest{})
		fin = resp.GetCopysetLoadFin()
		return err
	})
	return fin, err
}

// ServerCopysets is what one server hosts among the copysets asked about.
type ServerCopysets struct {
	Server   string
	Replicas []ReplicaStatus // the server's hosted replicas, in the order asked
	Failed   int             // copysets the server could not be asked about
	Err      error           // the first such failure
}

// Leaders are the copysets whose replica on the server is the leader.
func (s ServerCopysets) Leaders() []CopysetID {
	var out []CopysetID
	for _, r := range s.Replicas {
		if r.State == StateLeader {
			out = append(out, r.Copyset)
		}
	}
	return out
}

// Copysets are the copysets the server hosts.
func (s ServerCopysets) Copysets() []CopysetID {
	out := make([]CopysetID, len(s.Replicas))
	for i, r := range s.Replicas {
		out[i] = r.Copyset
	}
	return out
}

// HostedCopysets asks every configured server (GetCopysetStatus, one attempt
// each, a few at a time) which of copysets it hosts. One row per server in
// server order.
func (c *Client) HostedCopysets(ctx context.Context, copysets []CopysetID) []ServerCopysets {
	out := make([]ServerCopysets, len(c.servers))
	forEach(len(c.servers), len(c.servers), func(i int) {
		out[i] = c.hostedOn(ctx, c.servers[i], copysets)
	})
	return out
}

// hostedOn asks one server which of copysets it hosts.
func (c *Client) hostedOn(ctx context.Context, addr string, copysets []CopysetID) ServerCopysets {
	rows := make([]ReplicaStatus, len(copysets))
	forEach(len(copysets), statusParallelism, func(k int) {
		rows[k] = c.replicaStatus(ctx, copysets[k], addr, false)
	})
	sc := ServerCopysets{Server: addr}
	for _, r := range rows {
		switch {
		case r.Err != nil:
			sc.Failed++
			if sc.Err == nil {
				sc.Err = r.Err
			}
		case r.Hosted:
			sc.Replicas = append(sc.Replicas, r)
		}
	}
	return sc
}

// ConfigStatusError is a failing ConfigService reply; Message is the
// server's explanation (the reply's value).
type ConfigStatusError struct {
	Status  chunkserverpb.CONFIG_OP_STATUS
	Message string
}

func (e *ConfigStatusError) Error() string {
	if e.Message == "" {
		return e.Status.String()
	}
	return e.Status.String() + ": " + e.Message
}

// ConfigOp names a ConfigService method.
type ConfigOp string

// ConfigService methods.
const (
	ConfigGet  ConfigOp = "get"
	ConfigSet  ConfigOp = "set"
	ConfigDump ConfigOp = "dump"
)

// Config calls ConfigService Get, Set or Dump on server and returns the
// reply's value: the key's value (get), the value now in effect (set) or the
// whole configuration (dump, key ""). Get and Dump make one attempt; Set is
// retried while the server is unreachable, until the client's timeout.
func (c *Client) Config(ctx context.Context, op ConfigOp, server, key, value string) (string, error) {
	addr, err := PeerAddr(server)
	if err != nil {
		return "", err
	}
	req := &chunkserverpb.ConfigRequest{Key: proto.String(key)}
	if op == ConfigSet {
		req.Value = proto.String(value)
	}
	var resp *chunkserverpb.ConfigResponse
	call := func(ctx context.Context, cc grpc.ClientConnInterface) error {
		svc := chunkserverpb.NewConfigServiceClient(cc)
		var err error
		switch op {
		case ConfigGet:
			resp, err = svc.Get(ctx, req)
		case ConfigSet:
			resp, err = svc.Set(ctx, req)
		case ConfigDump:
			resp, err = svc.Dump(ctx, req)
		default:
			return fmt.Errorf("unknown config operation %q", op)
		}
		return err
	}
	if op == ConfigSet {
		err = c.onServerRPC(ctx, addr, c.attemptTimeout, call)
	} else {
		err = c.callOnce(ctx, addr, call)
	}
	if err != nil {
		return "", err
	}
	if st := resp.GetStatus(); st != chunkserverpb.CONFIG_OP_STATUS_CONFIG_OP_STATUS_SUCCESS {
		return "", &ConfigStatusError{Status: st, Message: resp.GetValue()}
	}
	return resp.GetValue(), nil
}
