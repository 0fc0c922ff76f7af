package copyset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
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
// groups to a peer travel in batches on one stream (heartbeatBatcher), so
// do the AppendEntries of all their pipelines (appendStream), and
// pipelines hold back repeats of idle AppendEntries (appendPipeline): at
// hundreds of groups per server, one gRPC message per heartbeat and per
// idle commit-index refresh was most of an idle server's CPU.
//
// Files: this one holds the TransportManager, its options and its peer
// connections; transport_group.go the GroupTransport; transport_pipeline.go
// the AppendEntries pipeline; transport_append.go the shared stream the
// pipelines' AppendEntries travel on in batches, transport_append_server.go
// its inbound side; transport_heartbeat.go the heartbeat batches;
// transport_server.go the inbound service; transport_codec.go the
// conversion of raft's messages to raftpb; transport_wire.go the gRPC codec
// that encodes AppendEntries without copying entry data.

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
	// and goes out with every heartbeat queued meanwhile (except those of a
	// VerifyLeader round, which go at once). The wait adds to raft's
	// heartbeat period (HeartbeatTimeout/10 to /5), so keep it well below
	// raft's LeaderLeaseTimeout.
	// Negative: no wait (heartbeats queued while a batch is being sent
	// still share the next one).
	HeartbeatBatchWindow time.Duration
	// HeartbeatBatchMax caps the heartbeats of one batch.
	HeartbeatBatchMax int
	// LeaderBeatInterval is how often each peer's heartbeat batcher
	// repeats the last heartbeat of every group this server leads with a
	// follower there (transport_beat.go); at most a fifth of raft's
	// HeartbeatTimeout, so followers hear from their leader as often as
	// raft's own heartbeats would. 0: no beats.
	LeaderBeatInterval time.Duration
	// NoHeartbeatBatching sends every heartbeat as its own AppendEntries
	// call (what a peer without the Heartbeats stream gets anyway).
	NoHeartbeatBatching bool
	// NoAppendBatching gives every pipeline a stream of its own (what a
	// peer without the AppendEntriesStream gets anyway) instead of sending
	// the AppendEntries of every group bound for a peer in batches on one
	// shared stream (transport_append.go).
	NoAppendBatching bool
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
	// localBytes is local as EncodePeer returns it, one copy for every
	// call (cap-limited: an append reallocates); nobody writes to it.
	localBytes []byte
	opts       TransportOptions
	log        *slog.Logger

	ctx    context.Context // parent of every group's context
	cancel context.CancelFunc

	groupMu sync.RWMutex
	groups  map[uint64]*GroupTransport
	closed  bool

	connMu sync.Mutex
	conns  map[raft.ServerAddress]*transportPeerConn

	stats raftCounters // Stats
}

// transportPeerConn holds two connections to one peer server: cc carries
// the bulk traffic (AppendEntries with entries, pipelines, snapshots); light
// carries the small, latency-sensitive calls (heartbeats, votes, TimeoutNow)
// so that they never queue behind megabytes of payload in a TCP send buffer
// or an HTTP/2 flow-control window.
type transportPeerConn struct {
	cc      *grpc.ClientConn
	client  raftpb.RaftTransportClient
	light   *grpc.ClientConn
	lightC  raftpb.RaftTransportClient
	hb      *heartbeatBatcher // created by the first heartbeat to the peer
	appends *appendMux        // the shared AppendEntriesStream, created with the connections
}

// NewTransportManager returns a manager whose groups report local as their
// address. local must be the address peers use to reach this server's gRPC
// port.
func NewTransportManager(local raft.ServerAddress, opts TransportOptions) *TransportManager {
	opts = opts.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &TransportManager{
		local:      local,
		localBytes: []byte(local)[:len(local):len(local)],
		opts:       opts,
		log:        opts.Logger.With("component", "raft-transport", "local", string(local)),
		ctx:        ctx,
		cancel:     cancel,
		groups:     make(map[uint64]*GroupTransport),
		conns:      make(map[raft.ServerAddress]*transportPeerConn),
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
		pc.appends.streams.Wait() // m.ctx is cancelled: their streams end
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
	pc.appends = &appendMux{m: m, target: target, client: pc.client}
	m.conns[target] = pc
	return pc, nil
}

// appendStream returns the shared AppendEntriesStream to target, or nil
// when target's pipelines get streams of their own.
func (m *TransportManager) appendStream(target raft.ServerAddress) (*appendStream, error) {
	if m.opts.NoAppendBatching {
		return nil, nil
	}
	pc, err := m.peer(target)
	if err != nil {
		return nil, err
	}
	return pc.appends.stream()
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
