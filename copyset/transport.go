package copyset

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/chunkraft/chunkraft/proto/chunkraft/raftpb"
)

// Raft transport: every copyset's hashicorp/raft instance gets its own
// GroupTransport; all of them share one TransportManager per server process,
// which owns the gRPC RaftTransport service (inbound) and two ClientConns per
// peer address (outbound: bulk traffic, and small calls such as heartbeats
// and votes). Each request carries the group id, which is how the server
// side routes it to the right group's Consumer channel. Heartbeats of all
// groups to a peer travel in batches on one stream (heartbeatBatcher), and
// pipelines hold back repeats of idle AppendEntries (appendPipeline): at
// hundreds of groups per server, one gRPC message per heartbeat and per
// idle commit-index refresh was most of an idle server's CPU.

// Transport defaults.
const (
	DefaultTransportRPCTimeout       = 10 * time.Second
	DefaultTransportHeartbeatTimeout = 2 * time.Second
	DefaultTransportSnapshotTimeout  = 5 * time.Minute
	DefaultMaxPipelineInFlight       = 4
	DefaultSnapshotChunkSize         = 1 << 20
	DefaultHeartbeatBatchWindow      = 50 * time.Millisecond
	DefaultIdleAppendHold            = 5 * time.Second
	DefaultHeartbeatBatchMax         = 1024
)

// transportClientWindow is the HTTP/2 receive window of outbound raft
// connections.
const transportClientWindow = 1 << 20

// TransportOptions configures a TransportManager. Zero values select defaults.
type TransportOptions struct {
	// DialOptions are used for every peer connection. Nil means plaintext
	// (insecure credentials). They are applied after the transport's own
	// connect parameters (reconnect backoff capped at 2 s instead of gRPC's
	// 120 s, so a restarted peer is reached again quickly) and receive
	// windows (static, see transportClientWindow), which they may override.
	DialOptions []grpc.DialOption
	// Logger receives transport diagnostics; nil means slog.Default().
	Logger *slog.Logger
	// RPCTimeout bounds every outbound RPC except heartbeats: unary calls,
	// each pipelined AppendEntries (from the moment its reply is awaited) and
	// each InstallSnapshot chunk (an idle timeout, so big snapshots are fine).
	// Inbound, it bounds how long the server waits for the next snapshot chunk.
	RPCTimeout time.Duration
	// HeartbeatTimeout bounds an outbound heartbeat (an empty AppendEntries).
	HeartbeatTimeout time.Duration
	// SnapshotTimeout bounds the wait for the follower's InstallSnapshot reply
	// after all data was sent; the follower restores its FSM before replying.
	SnapshotTimeout time.Duration
	// MaxPipelineInFlight is the number of AppendEntries a pipeline keeps
	// outstanding per (group, peer). 1 disables pipelining (raft then uses
	// synchronous AppendEntries).
	MaxPipelineInFlight int
	// SnapshotChunkSize is the data size of one InstallSnapshot message.
	SnapshotChunkSize int
	// HeartbeatBatchWindow is the least time between two heartbeat batches
	// to one peer server: a heartbeat that finds the last batch older goes
	// out at once, one that finds it younger waits for the window to end
	// and goes out with every heartbeat queued meanwhile. The wait adds to
	// raft's heartbeat period (HeartbeatTimeout/10 to /5) and to a
	// VerifyLeader round, so keep it well below raft's LeaderLeaseTimeout.
	// Negative: no wait (heartbeats queued while a batch is being sent
	// still share the next one).
	HeartbeatBatchWindow time.Duration
	// HeartbeatBatchMax caps the heartbeats of one batch.
	HeartbeatBatchMax int
	// NoHeartbeatBatching sends every heartbeat as its own AppendEntries
	// call (what a peer without the Heartbeats stream gets anyway).
	NoHeartbeatBatching bool
	// IdleAppendHold bounds how long a pipeline holds back repeats of an
	// idle AppendEntries (see appendPipeline). Negative: every request is
	// sent.
	IdleAppendHold time.Duration
}

func (o TransportOptions) withDefaults() TransportOptions {
	dial := []grpc.DialOption{
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  100 * time.Millisecond,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   2 * time.Second,
			},
			MinConnectTimeout: 5 * time.Second,
		}),
		// Static receive windows: the client side of a raft connection
		// only receives small responses, and a static window turns off
		// gRPC's BDP estimation, which otherwise answers nearly every
		// message of an idle connection with a PING (and its ACK).
		grpc.WithInitialWindowSize(transportClientWindow),
		grpc.WithInitialConnWindowSize(transportClientWindow),
	}
	if o.DialOptions == nil {
		dial = append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	o.DialOptions = append(dial, o.DialOptions...)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.RPCTimeout <= 0 {
		o.RPCTimeout = DefaultTransportRPCTimeout
	}
	if o.HeartbeatTimeout <= 0 {
		o.HeartbeatTimeout = DefaultTransportHeartbeatTimeout
	}
	if o.SnapshotTimeout <= 0 {
		o.SnapshotTimeout = DefaultTransportSnapshotTimeout
	}
	if o.MaxPipelineInFlight <= 0 {
		o.MaxPipelineInFlight = DefaultMaxPipelineInFlight
	}
	if o.SnapshotChunkSize <= 0 {
		o.SnapshotChunkSize = DefaultSnapshotChunkSize
	}
	if o.HeartbeatBatchWindow == 0 {
		o.HeartbeatBatchWindow = DefaultHeartbeatBatchWindow
	}
	if o.HeartbeatBatchMax <= 0 {
		o.HeartbeatBatchMax = DefaultHeartbeatBatchMax
	}
	if o.IdleAppendHold == 0 {
		o.IdleAppendHold = DefaultIdleAppendHold
	}
	return o
}

// ErrGroupExists is returned by TransportManager.Transport for a group that
// already has a live transport.
var ErrGroupExists = errors.New("raft transport: group already registered")

// TransportManager multiplexes the raft traffic of all copysets of one server
// over its gRPC port. Create one per process, Register it on the gRPC server,
// then call Transport once per group.
type TransportManager struct {
	local raft.ServerAddress
	opts  TransportOptions
	log   *slog.Logger

	ctx    context.Context // parent of every group's context
	cancel context.CancelFunc

	groupMu sync.RWMutex
	groups  map[uint64]*GroupTransport
	closed  bool

	connMu sync.Mutex
	conns  map[raft.ServerAddress]*transportPeerConn
}

// transportPeerConn holds two connections to one peer server: cc carries
// the bulk traffic (AppendEntries with entries, pipelines, snapshots); light
// carries the small, latency-sensitive calls (heartbeats, votes, TimeoutNow)
// so that they never queue behind megabytes of payload in a TCP send buffer
// or an HTTP/2 flow-control window.
type transportPeerConn struct {
	cc     *grpc.ClientConn
	client raftpb.RaftTransportClient
	light  *grpc.ClientConn
	lightC raftpb.RaftTransportClient
	hb     *heartbeatBatcher // created by the first heartbeat to the peer
}

// NewTransportManager returns a manager whose groups report local as their
// address. local must be the address peers use to reach this server's gRPC
// port.
func NewTransportManager(local raft.ServerAddress, opts TransportOptions) *TransportManager {
	opts = opts.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &TransportManager{
		local:  local,
		opts:   opts,
		log:    opts.Logger.With("component", "raft-transport", "local", string(local)),
		ctx:    ctx,
		cancel: cancel,
		groups: make(map[uint64]*GroupTransport),
		conns:  make(map[raft.ServerAddress]*transportPeerConn),
	}
}

// Register registers the RaftTransport service on s. The server should be
// created with a grpc.MaxRecvMsgSize large enough for a full AppendEntries
// batch (raft's MaxAppendEntries times the largest entry).
func (m *TransportManager) Register(s *grpc.Server) {
	raftpb.RegisterRaftTransportServer(s, &transportServer{m: m})
}

// LocalAddr returns the address the manager was created with.
func (m *TransportManager) LocalAddr() raft.ServerAddress { return m.local }

// Transport creates the raft.Transport of group. It fails if the group
// already has one or the manager is closed. Closing the returned transport
// (raft does so on Shutdown) unregisters the group, after which Transport may
// be called again for it.
func (m *TransportManager) Transport(group uint64) (*GroupTransport, error) {
	m.groupMu.Lock()
	defer m.groupMu.Unlock()
	if m.closed {
		return nil, raft.ErrTransportShutdown
	}
	if _, ok := m.groups[group]; ok {
		return nil, fmt.Errorf("%w: %d", ErrGroupExists, group)
	}
	ctx, cancel := context.WithCancel(m.ctx)
	g := &GroupTransport{
		m:         m,
		group:     group,
		consumeCh: make(chan raft.RPC),
		ctx:       ctx,
		cancel:    cancel,
	}
	m.groups[group] = g
	return g, nil
}

// lookup returns the live transport of group, or nil.
func (m *TransportManager) lookup(group uint64) *GroupTransport {
	m.groupMu.RLock()
	g := m.groups[group]
	m.groupMu.RUnlock()
	return g
}

// Close closes every group transport and every peer connection. Inbound
// RPCs fail from now on; the gRPC server itself is the caller's to stop.
func (m *TransportManager) Close() error {
	m.groupMu.Lock()
	if m.closed {
		m.groupMu.Unlock()
		return nil
	}
	m.closed = true
	groups := make([]*GroupTransport, 0, len(m.groups))
	for _, g := range m.groups {
		groups = append(groups, g)
	}
	m.groupMu.Unlock()

	for _, g := range groups {
		_ = g.Close()
	}
	m.cancel()

	m.connMu.Lock()
	conns := m.conns
	m.conns = nil
	m.connMu.Unlock()
	var errs []error
	for addr, pc := range conns {
		if pc.hb != nil {
			<-pc.hb.done // m.ctx is cancelled: it fails its calls and exits
		}
		for _, cc := range []*grpc.ClientConn{pc.cc, pc.light} {
			if err := cc.Close(); err != nil {
				errs = append(errs, fmt.Errorf("closing connection to %s: %w", addr, err))
			}
		}
	}
	return errors.Join(errs...)
}

// client returns the (lazily created) client for target. grpc.NewClient does
// no I/O, so creating it under the lock is cheap; the connection is
// established by the first RPC.
func (m *TransportManager) client(target raft.ServerAddress) (raftpb.RaftTransportClient, error) {
	pc, err := m.peer(target)
	if err != nil {
		return nil, err
	}
	return pc.client, nil
}

// lightClient returns the client on target's connection for small calls.
func (m *TransportManager) lightClient(target raft.ServerAddress) (raftpb.RaftTransportClient, error) {
	pc, err := m.peer(target)
	if err != nil {
		return nil, err
	}
	return pc.lightC, nil
}

// peer returns the (lazily created) connections to target.
func (m *TransportManager) peer(target raft.ServerAddress) (*transportPeerConn, error) {
	m.connMu.Lock()
	defer m.connMu.Unlock()
	return m.peerLocked(target)
}

func (m *TransportManager) peerLocked(target raft.ServerAddress) (*transportPeerConn, error) {
	if m.conns == nil {
		return nil, raft.ErrTransportShutdown
	}
	if pc, ok := m.conns[target]; ok {
		return pc, nil
	}
	cc, err := grpc.NewClient(string(target), m.opts.DialOptions...)
	if err != nil {
		return nil, fmt.Errorf("raft transport: connecting to %s: %w", target, err)
	}
	light, err := grpc.NewClient(string(target), m.opts.DialOptions...)
	if err != nil {
		_ = cc.Close()
		return nil, fmt.Errorf("raft transport: connecting to %s: %w", target, err)
	}
	pc := &transportPeerConn{
		cc: cc, client: raftpb.NewRaftTransportClient(cc),
		light: light, lightC: raftpb.NewRaftTransportClient(light),
	}
	m.conns[target] = pc
	return pc, nil
}

// heartbeats returns the heartbeat batcher of target, starting it on first
// use.
func (m *TransportManager) heartbeats(target raft.ServerAddress) (*heartbeatBatcher, error) {
	m.connMu.Lock()
	defer m.connMu.Unlock()
	pc, err := m.peerLocked(target)
	if err != nil {
		return nil, err
	}
	if pc.hb == nil {
		pc.hb = newHeartbeatBatcher(m, target, pc.lightC)
	}
	return pc.hb, nil
}

// GroupTransport is the raft.Transport of one copyset's raft group.
type GroupTransport struct {
	m     *TransportManager
	group uint64

	// consumeCh carries inbound RPCs to raft; never nil, never closed.
	consumeCh   chan raft.RPC
	heartbeatFn atomic.Pointer[func(raft.RPC)]
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
}

func (g *GroupTransport) peer(target raft.ServerAddress) *groupPeer {
	if p, ok := g.peers.Load(target); ok {
		return p.(*groupPeer)
	}
	p, _ := g.peers.LoadOrStore(target, &groupPeer{})
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

// EncodePeer implements raft.Transport.
func (g *GroupTransport) EncodePeer(_ raft.ServerID, addr raft.ServerAddress) []byte {
	return []byte(addr)
}

// DecodePeer implements raft.Transport.
func (g *GroupTransport) DecodePeer(buf []byte) raft.ServerAddress {
	return raft.ServerAddress(buf)
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
func (g *GroupTransport) AppendEntries(_ raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	heartbeat := isRaftHeartbeat(args)
	if heartbeat {
		err := g.heartbeat(target, args, resp)
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

func (g *GroupTransport) heartbeat(target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if !g.m.opts.NoHeartbeatBatching {
		if sent, err := g.batchedHeartbeat(target, args, resp); sent {
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
// the request. Each chunk must be accepted within RPCTimeout, the final reply
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
	for first := true; first || remaining > 0; first = false {
		// A fresh buffer per message: gRPC may still reference a sent message.
		buf := make([]byte, min(chunkSize, remaining))
		if _, err := io.ReadFull(data, buf); err != nil {
			// Returning cancels the stream, so the follower sees an abort,
			// never a short snapshot.
			return fmt.Errorf("raft transport: InstallSnapshot to %s (group %d): reading snapshot (%d of %d bytes left): %w",
				target, g.group, remaining, args.Size, err)
		}
		msg := &raftpb.InstallSnapshotChunk{Data: buf}
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
		remaining -= int64(len(buf))
	}
	watchdog.Reset(g.m.opts.SnapshotTimeout)
	out, err := stream.CloseAndRecv()
	if err != nil {
		return fail(err)
	}
	installSnapshotResponseFromProto(out, resp)
	return nil
}

// AppendEntriesPipeline implements raft.Transport: one bidi stream per call,
// with up to MaxPipelineInFlight requests outstanding.
func (g *GroupTransport) AppendEntriesPipeline(_ raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	inflight := g.m.opts.MaxPipelineInFlight
	if inflight < 2 {
		return nil, raft.ErrPipelineReplicationNotSupported
	}
	c, err := g.client(target)
	if err != nil {
		return nil, err
	}
	return newAppendPipeline(g, c, target, inflight)
}

// appendPipeline is a client-side AppendEntries pipeline over one bidi stream.
//
// AppendEntries (called by raft's replicate goroutine only) takes an
// in-flight slot from sem, queues the future, then sends the request; the
// receive goroutine pops futures in send order, matches each with the next
// response (responses come in request order), frees the slot and delivers
// the future on doneCh. A stream error fails the future being awaited and all
// queued ones (delivered, with a zero response so raft aborts the pipeline),
// and every later AppendEntries returns the error.
//
// Idle repeats: with nothing to replicate, raft's replicate goroutine sends
// an AppendEntries without entries every CommitTimeout to CommitTimeout*2
// (1-2 s by default), to let the follower learn the commit index. Once
// one went out, its repeats (same term, previous entry and commit index)
// tell the follower nothing new, yet at hundreds of groups per server they
// were a large part of its idle CPU. So a request identical to the last one
// sent, without entries, is held back instead of sent while the group's
// last heartbeat to the peer succeeded in its term (the peer is up and
// follows this leader): its future rides on the next request sent, is
// answered with that request's response and is delivered just before it,
// as if the held request had been delayed on the network and processed by
// the follower right before the next one (it has no entries, so it changes
// nothing there). A repeat that finds the oldest held one older than
// IdleAppendHold is sent, carrying those held, so raft still gets an answer
// to each request within about IdleAppendHold plus CommitTimeout*2. Once a
// heartbeat fails or meets a newer term, repeats go out again at raft's
// pace, so raft learns of a newer term or a broken stream as soon as
// without holding. Heartbeats, which keep followers from campaigning and
// the leader informed of its quorum (and of its contact with each peer,
// which raft otherwise also takes from pipeline answers), are never held.
type appendPipeline struct {
	g       *GroupTransport
	target  raft.ServerAddress
	stream  grpc.BidiStreamingClient[raftpb.AppendEntriesRequest, raftpb.AppendEntriesResponse]
	timeout time.Duration

	ctx          context.Context // cancelled by Close (and group Close)
	cancel       context.CancelFunc
	streamCancel context.CancelFunc // cancelled also by the watchdog
	watchdog     *time.Timer
	timedOut     atomic.Bool

	sem    chan struct{}          // in-flight slots
	queue  chan *appendFuture     // sent, awaiting a response, in order
	doneCh chan raft.AppendFuture // completed futures for raft

	// Idle repeats (see the type's comment). last is used by AppendEntries
	// only; held is shared with the receive goroutine's failure path.
	hold      time.Duration
	peer      *groupPeer
	last      appendKey // of the last request sent
	heldMu    sync.Mutex
	held      []*appendFuture // repeats of last, not sent, oldest first
	heldSince time.Time

	failOnce sync.Once
	failCh   chan struct{} // closed on stream failure; err is set before
	err      error

	closeOnce sync.Once
	recvDone  chan struct{}
}

func newAppendPipeline(g *GroupTransport, c raftpb.RaftTransportClient, target raft.ServerAddress, inflight int) (*appendPipeline, error) {
	ctx, cancel := context.WithCancel(g.ctx)
	sctx, scancel := context.WithCancel(ctx)
	p := &appendPipeline{
		g:            g,
		target:       target,
		timeout:      g.m.opts.RPCTimeout,
		ctx:          ctx,
		cancel:       cancel,
		streamCancel: scancel,
		sem:          make(chan struct{}, inflight),
		queue:        make(chan *appendFuture, inflight),
		doneCh:       make(chan raft.AppendFuture, inflight),
		hold:         g.m.opts.IdleAppendHold,
		peer:         g.peer(target),
		failCh:       make(chan struct{}),
		recvDone:     make(chan struct{}),
	}
	p.watchdog = time.AfterFunc(p.timeout, func() {
		p.timedOut.Store(true)
		scancel()
	})
	// Opening the stream may wait for the connection; bound it.
	stream, err := c.AppendEntriesPipeline(sctx)
	if stopped := p.watchdog.Stop(); err == nil && !stopped {
		err = errors.New("timed out opening stream")
	}
	if err != nil {
		cancel()
		return nil, g.outErr("AppendEntriesPipeline", target, err)
	}
	p.stream = stream

	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		cancel()
		return nil, raft.ErrTransportShutdown
	}
	g.pipelines.Add(1)
	g.mu.Unlock()
	go p.receive()
	return p, nil
}

// closedErr is the error for calls after Close or group Close.
func (p *appendPipeline) closedErr() error {
	if p.g.isClosed() {
		return raft.ErrTransportShutdown
	}
	return raft.ErrPipelineShutdown
}

func (p *appendPipeline) fail(err error) {
	p.failOnce.Do(func() {
		p.err = err
		close(p.failCh)
	})
}

// AppendEntries implements raft.AppendPipeline. It blocks while
// MaxPipelineInFlight requests are outstanding (back-pressure).
func (p *appendPipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	select {
	case p.sem <- struct{}{}:
	case <-p.failCh:
		return nil, p.err
	case <-p.ctx.Done():
		return nil, p.closedErr()
	}
	select {
	case <-p.failCh:
		return nil, p.err
	case <-p.ctx.Done():
		return nil, p.closedErr()
	default:
	}
	if f, held, err := p.holdRepeat(args, resp); held || err != nil {
		<-p.sem // not sent: no slot
		return f, err
	}
	f := &appendFuture{start: time.Now(), args: args, resp: resp, done: make(chan struct{})}
	req := appendEntriesRequestToProto(p.g.group, args)
	p.heldMu.Lock()
	f.riders, p.held = p.held, nil
	p.heldMu.Unlock()
	p.last = appendKeyOf(args)
	p.queue <- f // never blocks: the queue has a place for every slot
	if err := p.stream.Send(req); err != nil {
		// The stream is broken; the receiver learns why from Recv and
		// fails the queued futures, including f.
		select {
		case <-p.failCh:
			return nil, p.err
		case <-p.ctx.Done():
			return nil, p.closedErr()
		}
	}
	return f, nil
}

// holdRepeat holds args back when it repeats the last request sent (see
// the type's comment); held reports whether it did, with f its future.
func (p *appendPipeline) holdRepeat(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (f *appendFuture, held bool, err error) {
	if p.hold < 0 || !p.last.idleRepeat(args) || p.peer.following.Load() != args.Term {
		return nil, false, nil
	}
	now := time.Now()
	p.heldMu.Lock()
	defer p.heldMu.Unlock()
	select {
	case <-p.failCh: // the receive goroutine may have delivered held ones already
		return nil, false, p.err
	default:
	}
	if len(p.held) > 0 && now.Sub(p.heldSince) >= p.hold {
		return nil, false, nil // send it, with the held ones riding
	}
	if len(p.held) == 0 {
		p.heldSince = now
	}
	f = &appendFuture{start: now, args: args, resp: resp, done: make(chan struct{})}
	p.held = append(p.held, f)
	return f, true, nil
}

// appendKey is what idleRepeat compares of a sent request (it does not keep
// the request's entries alive).
type appendKey struct {
	valid                        bool
	entries                      bool
	term, prev, prevTerm, commit uint64
	version                      raft.ProtocolVersion
	id, addr, leader             []byte
}

func appendKeyOf(r *raft.AppendEntriesRequest) appendKey {
	return appendKey{
		valid: true, entries: len(r.Entries) > 0,
		term: r.Term, prev: r.PrevLogEntry, prevTerm: r.PrevLogTerm, commit: r.LeaderCommitIndex,
		//lint:ignore SA1019 raft still sends the deprecated Leader field; a repeat must carry the same.
		version: r.ProtocolVersion, id: r.ID, addr: r.Addr, leader: r.Leader,
	}
}

// idleRepeat reports whether r carries nothing a follower that processed
// the request of k did not learn from it: neither has entries, and term,
// leader, previous entry and commit index are the same.
func (k *appendKey) idleRepeat(r *raft.AppendEntriesRequest) bool {
	return k.valid && !k.entries && len(r.Entries) == 0 &&
		k.term == r.Term && k.prev == r.PrevLogEntry && k.prevTerm == r.PrevLogTerm &&
		k.commit == r.LeaderCommitIndex && k.version == r.ProtocolVersion &&
		//lint:ignore SA1019 raft still sends the deprecated Leader field; a repeat must carry the same.
		bytes.Equal(k.id, r.ID) && bytes.Equal(k.addr, r.Addr) && bytes.Equal(k.leader, r.Leader)
}

// Consumer implements raft.AppendPipeline.
func (p *appendPipeline) Consumer() <-chan raft.AppendFuture { return p.doneCh }

// Close implements raft.AppendPipeline: it aborts the stream (outstanding
// requests are abandoned) and waits for the receive goroutine.
func (p *appendPipeline) Close() error {
	p.closeOnce.Do(func() {
		p.watchdog.Stop()
		p.cancel()
	})
	<-p.recvDone
	return nil
}

// deliver hands a completed future to raft unless the pipeline is closed.
func (p *appendPipeline) deliver(f *appendFuture) bool {
	select {
	case p.doneCh <- f:
		return true
	case <-p.ctx.Done():
		return false
	}
}

func (p *appendPipeline) receive() {
	defer p.g.pipelines.Done()
	defer close(p.recvDone)
	defer p.streamCancel()
	for {
		var f *appendFuture
		select {
		case f = <-p.queue:
		case <-p.ctx.Done():
			p.fail(p.closedErr())
			return
		}
		p.watchdog.Reset(p.timeout)
		msg, err := p.stream.Recv()
		p.watchdog.Stop()
		if err != nil {
			switch {
			case p.ctx.Err() != nil:
				err = p.closedErr()
			case p.timedOut.Load():
				err = p.g.outErr("AppendEntriesPipeline", p.target,
					fmt.Errorf("no response within %v: %w", p.timeout, err))
			default:
				err = p.g.outErr("AppendEntriesPipeline", p.target, err)
			}
			p.fail(err)
			for f != nil {
				if !p.deliverWithRiders(f, err) {
					return
				}
				select {
				case f = <-p.queue:
				default:
					f = nil
				}
			}
			// Held repeats come after everything sent; failCh is closed,
			// so no more are held.
			p.heldMu.Lock()
			held := p.held
			p.held = nil
			p.heldMu.Unlock()
			for _, h := range held {
				h.complete(err)
				if !p.deliver(h) {
					return
				}
			}
			return
		}
		appendEntriesResponseFromProto(msg, f.resp)
		var ferr error
		if msg.Error != "" {
			ferr = errors.New(msg.Error)
		}
		<-p.sem
		if !p.deliverWithRiders(f, ferr) {
			return
		}
	}
}

// deliverWithRiders completes and delivers the held repeats riding on f,
// answered with f's response, then f itself.
func (p *appendPipeline) deliverWithRiders(f *appendFuture, err error) bool {
	for _, r := range f.riders {
		*r.resp = *f.resp
		r.start = f.start // it went out with f
		r.complete(err)
		if !p.deliver(r) {
			return false
		}
	}
	f.complete(err)
	return p.deliver(f)
}

// appendFuture implements raft.AppendFuture.
type appendFuture struct {
	start  time.Time
	args   *raft.AppendEntriesRequest
	resp   *raft.AppendEntriesResponse
	err    error
	done   chan struct{}
	riders []*appendFuture // held repeats answered with this response
}

func (f *appendFuture) complete(err error) {
	f.err = err
	close(f.done)
}

// Error implements raft.Future.
func (f *appendFuture) Error() error {
	<-f.done
	return f.err
}

// Start implements raft.AppendFuture.
func (f *appendFuture) Start() time.Time { return f.start }

// Request implements raft.AppendFuture.
func (f *appendFuture) Request() *raft.AppendEntriesRequest { return f.args }

// Response implements raft.AppendFuture.
func (f *appendFuture) Response() *raft.AppendEntriesResponse { return f.resp }
