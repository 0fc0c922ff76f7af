// GroupTransport, the raft.Transport of one copyset's raft group: its outbound
// calls (AppendEntries, votes, TimeoutNow, InstallSnapshot, pipelines) on the
// connections of the TransportManager (transport.go). Inbound calls reach it
// through transport_server.go.

package copyset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/chunkraft/chunkraft/proto/chunkraft/raftpb"
)

// GroupTransport is the raft.Transport of one copyset's raft group.
type GroupTransport struct {
	m     *TransportManager
	group uint64

	// consumeCh carries inbound RPCs to raft; never nil, never closed.
	consumeCh   chan raft.RPC
	heartbeatFn atomic.Pointer[func(raft.RPC)]
	// beats, once set, lets the peers' batchers repeat this group's
	// heartbeats while it leads (transport_beat.go).
	beats atomic.Pointer[beatHooks]
	// verifying counts the VerifyLeader rounds of this group in progress:
	// their heartbeats go out without waiting for the batch window.
	verifying atomic.Int32
	// votesAfter (unix nanoseconds) is when this group starts answering
	// vote requests (see holdVotes).
	votesAfter atomic.Int64

	// ctx is cancelled by Close: it aborts this group's outbound calls and
	// pipelines and releases inbound handlers waiting on raft.
	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	closed    bool
	pipelines sync.WaitGroup // receive goroutines of open pipelines

	// peers holds per-peer state (raft.ServerAddress -> *groupPeer).
	peers sync.Map
	// lastPeer is the address DecodePeer decoded last.
	lastPeer atomic.Pointer[raft.ServerAddress]
}

// groupPeer is what a group's transport knows about one of its peers.
type groupPeer struct {
	// following is the term of the group's last heartbeat to the peer if
	// the peer answered it with a success in that term (it is up and
	// follows this leader), else 0. Pipelines hold back idle repeats of
	// that term only.
	following atomic.Uint64
	// hb is the manager's heartbeat batcher for the peer, once looked up.
	hb atomic.Pointer[heartbeatBatcher]
	// stats are the manager's counters of the peer.
	stats *peerCounters
}

func (g *GroupTransport) peer(target raft.ServerAddress) *groupPeer {
	if p, ok := g.peers.Load(target); ok {
		return p.(*groupPeer)
	}
	p, _ := g.peers.LoadOrStore(target, &groupPeer{stats: g.m.stats.peer(target)})
	return p.(*groupPeer)
}

var (
	_ raft.Transport   = (*GroupTransport)(nil)
	_ raft.WithPreVote = (*GroupTransport)(nil)
	_ raft.WithClose   = (*GroupTransport)(nil)
)

// Group returns the raft group id.
func (g *GroupTransport) Group() uint64 { return g.group }

// holdVotes makes the group refuse inbound vote and pre-vote requests for
// d from now, as a follower that kept hearing from its leader would: a
// replica that restarted has forgotten its leader and must not help elect
// another one while the old leader may still hold a read lease (lease.go).
func (g *GroupTransport) holdVotes(d time.Duration) {
	g.votesAfter.Store(time.Now().Add(d).UnixNano())
}

// Consumer implements raft.Transport.
func (g *GroupTransport) Consumer() <-chan raft.RPC { return g.consumeCh }

// LocalAddr implements raft.Transport.
func (g *GroupTransport) LocalAddr() raft.ServerAddress { return g.m.local }

// SetHeartbeatHandler implements raft.Transport.
func (g *GroupTransport) SetHeartbeatHandler(cb func(rpc raft.RPC)) {
	if cb == nil {
		g.heartbeatFn.Store(nil)
		return
	}
	g.heartbeatFn.Store(&cb)
}

// EncodePeer implements raft.Transport. Raft encodes the local address
// into every request it sends (the header's Addr, Leader): that is the
// manager's one copy, which raft and the transport only read.
func (g *GroupTransport) EncodePeer(_ raft.ServerID, addr raft.ServerAddress) []byte {
	if addr == g.m.local {
		return g.m.localBytes
	}
	return []byte(addr)
}

// DecodePeer implements raft.Transport. Raft decodes the sender's address
// from every AppendEntries it takes, nearly always its leader's: an
// address equal to the last one decoded is returned as that string.
func (g *GroupTransport) DecodePeer(buf []byte) raft.ServerAddress {
	if last := g.lastPeer.Load(); last != nil && string(*last) == string(buf) {
		return *last
	}
	addr := raft.ServerAddress(buf)
	g.lastPeer.Store(&addr)
	return addr
}

// Close implements raft.WithClose: the group is unregistered (inbound RPCs
// for it fail at once), in-flight outbound calls and pipelines are aborted
// and later ones return raft.ErrTransportShutdown. Close waits for the
// group's pipeline goroutines to exit. It is idempotent.
func (g *GroupTransport) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	g.mu.Unlock()

	g.m.groupMu.Lock()
	if g.m.groups[g.group] == g {
		delete(g.m.groups, g.group)
	}
	g.m.groupMu.Unlock()

	g.cancel()
	g.pipelines.Wait()
	return nil
}

func (g *GroupTransport) isClosed() bool { return g.ctx.Err() != nil }

// client returns the RPC client for target, or ErrTransportShutdown.
func (g *GroupTransport) client(target raft.ServerAddress) (raftpb.RaftTransportClient, error) {
	if g.isClosed() {
		return nil, raft.ErrTransportShutdown
	}
	return g.m.client(target)
}

// lightClient is client for the connection of small calls.
func (g *GroupTransport) lightClient(target raft.ServerAddress) (raftpb.RaftTransportClient, error) {
	if g.isClosed() {
		return nil, raft.ErrTransportShutdown
	}
	return g.m.lightClient(target)
}

// outErr maps an outbound failure: anything after Close is
// ErrTransportShutdown, the rest is annotated with the call.
func (g *GroupTransport) outErr(op string, target raft.ServerAddress, err error) error {
	if g.isClosed() {
		return raft.ErrTransportShutdown
	}
	return fmt.Errorf("raft transport: %s to %s (group %d): %w", op, target, g.group, err)
}

// AppendEntries implements raft.Transport. Heartbeats go in batches over
// the peer's Heartbeats stream (see heartbeatBatcher), or, without it, as
// single calls bounded by HeartbeatTimeout on the connection for small calls.
func (g *GroupTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	heartbeat := isRaftHeartbeat(args)
	if heartbeat {
		err := g.heartbeat(id, target, args, resp)
		var term uint64 // the term in which the peer follows us, if it does
		if err == nil && resp.Success && resp.Term == args.Term {
			term = args.Term
		}
		if p := g.peer(target); p.following.Load() != term {
			p.following.Store(term)
		}
		return err
	}
	return g.appendEntries(target, args, resp, false)
}

func (g *GroupTransport) heartbeat(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if !g.m.opts.NoHeartbeatBatching {
		if sent, err := g.batchedHeartbeat(id, target, args, resp); sent {
			return err
		}
	}
	return g.appendEntries(target, args, resp, true)
}

// appendEntries sends one AppendEntries call.
func (g *GroupTransport) appendEntries(target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse, heartbeat bool) error {
	var c raftpb.RaftTransportClient
	var err error
	timeout := g.m.opts.RPCTimeout
	if heartbeat {
		timeout = g.m.opts.HeartbeatTimeout
		c, err = g.lightClient(target)
	} else {
		c, err = g.client(target)
	}
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(g.ctx, timeout)
	defer cancel()
	g.peer(target).stats.sent.message(heartbeat, len(args.Entries))
	out, err := c.AppendEntries(ctx, appendEntriesRequestToProto(g.group, args))
	if err != nil {
		return g.outErr("AppendEntries", target, err)
	}
	appendEntriesResponseFromProto(out, resp)
	if out.Error != "" {
		return errors.New(out.Error)
	}
	return nil
}

// RequestVote implements raft.Transport.
func (g *GroupTransport) RequestVote(_ raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	c, err := g.lightClient(target)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(g.ctx, g.m.opts.RPCTimeout)
	defer cancel()
	out, err := c.RequestVote(ctx, requestVoteRequestToProto(g.group, args))
	if err != nil {
		return g.outErr("RequestVote", target, err)
	}
	requestVoteResponseFromProto(out, resp)
	return nil
}

// RequestPreVote implements raft.WithPreVote.
func (g *GroupTransport) RequestPreVote(_ raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	c, err := g.lightClient(target)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(g.ctx, g.m.opts.RPCTimeout)
	defer cancel()
	out, err := c.RequestPreVote(ctx, requestPreVoteRequestToProto(g.group, args))
	if err != nil {
		return g.outErr("RequestPreVote", target, err)
	}
	requestPreVoteResponseFromProto(out, resp)
	return nil
}

// TimeoutNow implements raft.Transport.
func (g *GroupTransport) TimeoutNow(_ raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	c, err := g.lightClient(target)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(g.ctx, g.m.opts.RPCTimeout)
	defer cancel()
	out, err := c.TimeoutNow(ctx, timeoutNowRequestToProto(g.group, args))
	if err != nil {
		return g.outErr("TimeoutNow", target, err)
	}
	timeoutNowResponseFromProto(out, resp)
	return nil
}

// errTransportSnapshotTimeout is reported when a snapshot chunk or reply does not
// make progress within its timeout.
var errTransportSnapshotTimeout = errors.New("snapshot transfer timed out")

// InstallSnapshot implements raft.Transport. It streams exactly args.Size
// bytes of data in SnapshotChunkSize pieces; the first message also carries
// the request. Once what is left of data is all zero padding (data has a
// Padding method saying so: a copyset snapshot's snapReader), the last
// message carries its length instead of the bytes. Each chunk must be accepted within RPCTimeout, the final reply
// must arrive within SnapshotTimeout.
func (g *GroupTransport) InstallSnapshot(_ raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	c, err := g.client(target)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(g.ctx)
	defer cancel()
	var timedOut atomic.Bool
	watchdog := time.AfterFunc(g.m.opts.RPCTimeout, func() {
		timedOut.Store(true)
		cancel()
	})
	defer watchdog.Stop()
	fail := func(err error) error {
		if timedOut.Load() && !g.isClosed() {
			err = fmt.Errorf("%w: %w", errTransportSnapshotTimeout, err)
		}
		return g.outErr("InstallSnapshot", target, err)
	}

	stream, err := c.InstallSnapshot(ctx)
	if err != nil {
		return fail(err)
	}
	req := installSnapshotRequestToProto(g.group, args)
	remaining := max(args.Size, 0)
	chunkSize := int64(g.m.opts.SnapshotChunkSize)
	padded, _ := data.(interface{ Padding() int64 })
	for first := true; first || remaining > 0; first = false {
		msg := &raftpb.InstallSnapshotChunk{}
		if padded != nil && remaining > 0 && padded.Padding() == remaining {
			msg.Pad = remaining
		} else {
			// A fresh buffer per message: gRPC may still reference a sent message.
			buf := make([]byte, min(chunkSize, remaining))
			n, err := readSnapshotPiece(data, padded, buf, remaining)
			msg.Data = buf[:n]
			if err != nil {
				// Returning cancels the stream, so the follower sees an abort,
				// never a short snapshot.
				return fmt.Errorf("raft transport: InstallSnapshot to %s (group %d): reading snapshot (%d of %d bytes left): %w",
					target, g.group, remaining, args.Size, err)
			}
		}
		if first {
			msg.Request = req
		}
		watchdog.Reset(g.m.opts.RPCTimeout)
		if err := stream.Send(msg); err != nil {
			if errors.Is(err, io.EOF) {
				// The stream ended; the status comes with the reply.
				if _, rerr := stream.CloseAndRecv(); rerr != nil {
					err = rerr
				}
			}
			return fail(err)
		}
		remaining -= int64(len(msg.Data)) + msg.Pad
	}
	watchdog.Reset(g.m.opts.SnapshotTimeout)
	out, err := stream.CloseAndRecv()
	if err != nil {
		return fail(err)
	}
	installSnapshotResponseFromProto(out, resp)
	return nil
}

// readSnapshotPiece fills buf from data, the snapshot stream with remaining
// bytes left, except that it stops early where the rest is all padding
// (padded, if not nil, says so), so that the padding goes as a count. A
// stream that ends before buf is full is an error.
func readSnapshotPiece(data io.Reader, padded interface{ Padding() int64 }, buf []byte, remaining int64) (int, error) {
	n := 0
	for n < len(buf) {
		if padded != nil && n > 0 && padded.Padding() == remaining-int64(n) {
			break
		}
		m, err := data.Read(buf[n:])
		n += m
		if err != nil && n < len(buf) {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return n, err
		}
	}
	return n, nil
}

// AppendEntriesPipeline implements raft.Transport: one bidi stream per call,
// with up to MaxPipelineInFlight requests outstanding.
func (g *GroupTransport) AppendEntriesPipeline(_ raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	inflight := g.m.opts.MaxPipelineInFlight
	if inflight < 2 {
		return nil, raft.ErrPipelineReplicationNotSupported
	}
	if g.isClosed() {
		return nil, raft.ErrTransportShutdown
	}
	st, err := g.m.appendStream(target)
	if err != nil {
		return nil, g.outErr("AppendEntriesStream", target, err)
	}
	if st != nil {
		return newSharedPipeline(g, st, target, inflight)
	}
	c, err := g.client(target)
	if err != nil {
		return nil, err
	}
	return newAppendPipeline(g, c, target, inflight)
}
