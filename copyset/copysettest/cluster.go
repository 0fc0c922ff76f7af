package copysettest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/chunkraft/chunkraft/copyset"
)

// Cluster is in-process chunkservers on loopback, each with the real
// copyset Manager, TransportManager and gRPC server, hosting copysets of
// the machines of Specs. Its fault hooks stop and restart a server, cut one
// off the network and heal it, and force a snapshot. Methods fail the test
// on errors; call them from the test goroutine.
type Cluster struct {
	t       testing.TB
	root    string
	specs   []copyset.MachineSpec
	opts    copyset.RaftOptions
	Servers []*Server
}

// Server is one in-process chunkserver of a Cluster.
type Server struct {
	Addr string // "127.0.0.1:port", kept across restarts
	Dir  string
	Mgr  *copyset.Manager // nil while stopped

	grpc   *grpc.Server
	tm     *copyset.TransportManager
	net    *netSwitch
	starts int
}

// Peer is the server's copyset peer id.
func (s *Server) Peer() copyset.PeerID { return copyset.PeerID(s.Addr + ":0") }

// FastRaft is raft tuned for tests: sub-second elections, snapshots every
// 32 entries and 8 trailing logs, so that a replica that misses a few dozen
// entries catches up by a snapshot install.
func FastRaft() copyset.RaftOptions {
	return copyset.RaftOptions{
		HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond,
		LeaderLeaseTimeout: 150 * time.Millisecond, CommitTimeout: 10 * time.Millisecond,
		SnapshotThreshold: 32, TrailingLogs: 8, SnapshotInterval: 200 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	}
}

// NewCluster starts n servers under a temporary directory hosting the
// machines of specs with raft options opts. They stop at the end of the
// test.
func NewCluster(t testing.TB, n int, specs []copyset.MachineSpec, opts copyset.RaftOptions) *Cluster {
	t.Helper()
	c := &Cluster{t: t, root: t.TempDir(), specs: specs, opts: opts}
	for i := range n {
		s := &Server{Addr: "127.0.0.1:0", Dir: filepath.Join(c.root, fmt.Sprint(i))}
		c.Servers = append(c.Servers, s)
		c.Start(i)
	}
	t.Cleanup(func() {
		for i := range c.Servers {
			c.Stop(i)
		}
	})
	return c
}

// Start starts server i (again, on its address and data: a restart).
func (c *Cluster) Start(i int) {
	c.t.Helper()
	s := c.Servers[i]
	if s.Mgr != nil {
		return
	}
	var lis net.Listener
	var err error
	for range 50 { // a restart may briefly find its port in use
		if lis, err = net.Listen("tcp", s.Addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		c.t.Fatalf("copysettest: listen %s: %v", s.Addr, err)
	}
	s.Addr = lis.Addr().String()
	if s.net == nil {
		s.net = &netSwitch{conns: map[net.Conn]bool{}}
	}
	local, _, err := copyset.ParsePeer(s.Addr)
	if err != nil {
		c.t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	s.grpc = grpc.NewServer()
	s.tm = copyset.NewTransportManager(raft.ServerAddress(local.Addr()), copyset.TransportOptions{
		Logger: log, DialOptions: []grpc.DialOption{
			grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(s.net.dial)},
	})
	s.tm.Register(s.grpc)
	mgr, err := copyset.NewManager(copyset.ManagerOptions{
		Dir: s.Dir, Local: local, Transports: s.tm, Raft: c.opts, Logger: log, Machines: c.specs,
	})
	if err != nil {
		lis.Close()
		c.t.Fatalf("copysettest: new manager: %v", err)
	}
	go s.grpc.Serve(s.net.listener(lis))
	if err := mgr.Load(context.Background()); err != nil {
		mgr.Close()
		s.grpc.Stop()
		s.tm.Close()
		c.t.Fatalf("copysettest: load copysets: %v", err)
	}
	s.Mgr = mgr
	s.starts++
}

// Stop stops server i as a shutdown does: its copysets close (machines
// included), its transport and gRPC server stop.
func (c *Cluster) Stop(i int) {
	s := c.Servers[i]
	if s.Mgr == nil {
		return
	}
	if err := s.Mgr.Close(); err != nil {
		c.t.Errorf("copysettest: close manager of %s: %v", s.Addr, err)
	}
	s.grpc.Stop()
	s.tm.Close()
	s.Mgr = nil
}

// Restart stops and starts server i.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.Stop(i)
	c.Start(i)
}

// Cut cuts server i off the network: every connection to and from it
// closes and no new one opens until Heal. It keeps running.
func (c *Cluster) Cut(i int) { c.Servers[i].net.cut(true) }

// Heal reconnects a server that was Cut.
func (c *Cluster) Heal(i int) { c.Servers[i].net.cut(false) }

// Create creates copyset g on every server, all of them its members.
func (c *Cluster) Create(g copyset.GroupID) {
	c.t.Helper()
	var peers []copyset.PeerID
	for _, s := range c.Servers {
		peers = append(peers, s.Peer())
	}
	for _, s := range c.Servers {
		if _, err := s.Mgr.Create(context.Background(), g, peers); err != nil {
			c.t.Fatalf("copysettest: create %s on %s: %v", g, s.Addr, err)
		}
	}
}

// Node returns server i's replica of g, nil if it is stopped or has none.
func (c *Cluster) Node(i int, g copyset.GroupID) *copyset.Node {
	if s := c.Servers[i]; s.Mgr != nil {
		return s.Mgr.Get(g)
	}
	return nil
}

// Leader waits up to 10 s for a leader of g among the running servers and
// returns its server index.
func (c *Cluster) Leader(g copyset.GroupID) int {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for i := range c.Servers {
			if n := c.Node(i, g); n != nil && n.IsLeader() && !c.Servers[i].net.isCut() {
				return i
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatalf("copysettest: no leader for %s", g)
	return -1
}

// Propose commits op on g through its leader, retrying across leader
// changes for up to 10 s, and returns the leader's apply result.
func (c *Cluster) Propose(g copyset.GroupID, op []byte) any {
	c.t.Helper()
	_, res := c.propose(g, op)
	return res
}

func (c *Cluster) propose(g copyset.GroupID, op []byte) (uint64, any) {
	c.t.Helper()
	return c.commit(g, func(ctx context.Context, n *copyset.Node) (uint64, any, error) { return n.Propose(ctx, op) })
}

// ProposeGroup commits ops as one entry (copyset.Node.ProposeGroup) on g
// through its leader, retrying across leader changes for up to 10 s, and
// returns the entry's index and the leader's apply results.
func (c *Cluster) ProposeGroup(g copyset.GroupID, ops [][]byte) (uint64, []any) {
	c.t.Helper()
	idx, res := c.commit(g, func(ctx context.Context, n *copyset.Node) (uint64, any, error) { return n.ProposeGroup(ctx, ops) })
	results, _ := res.([]any)
	return idx, results
}

// commit runs propose on g's leader until it succeeds, for up to 10 s.
func (c *Cluster) commit(g copyset.GroupID, propose func(context.Context, *copyset.Node) (uint64, any, error)) (uint64, any) {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		n := c.Node(c.Leader(g), g)
		if n == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		idx, res, err := propose(ctx, n)
		cancel()
		if err == nil {
			return idx, res
		}
		last = err
		if errors.Is(err, copyset.ErrInvalidGroup) {
			break // refused before proposing: a retry cannot help
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("copysettest: propose on %s: %v", g, last)
	return 0, nil
}

// Snapshot forces a raft snapshot of g on server i (its machines Sync, its
// log is truncated down to the trailing logs).
func (c *Cluster) Snapshot(i int, g copyset.GroupID) {
	c.t.Helper()
	n := c.Node(i, g)
	if n == nil {
		c.t.Fatalf("copysettest: snapshot: server %d has no running %s", i, g)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Snapshot(ctx); err != nil {
		c.t.Fatalf("copysettest: snapshot %s on server %d: %v", g, i, err)
	}
}

// WaitApplied waits up to 20 s until every running, connected replica of g
// applied everything the leader committed.
func (c *Cluster) WaitApplied(g copyset.GroupID) {
	c.t.Helper()
	leader := c.Node(c.Leader(g), g)
	want := leader.Status().CommittedIndex
	deadline := time.Now().Add(20 * time.Second)
	for i := range c.Servers {
		for {
			n := c.Node(i, g)
			if n == nil || c.Servers[i].net.isCut() || n.AppliedIndex() >= want {
				break
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("copysettest: %s on server %d applied %d, leader committed %d", g, i, n.AppliedIndex(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// netSwitch is the network of one server: every connection it accepts or
// dials, which cut closes and refuses while it lasts.
type netSwitch struct {
	mu    sync.Mutex
	off   bool
	conns map[net.Conn]bool
}

var errCut = errors.New("copysettest: server cut off the network")

func (w *netSwitch) cut(off bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.off = off
	if off {
		for conn := range w.conns {
			conn.Close()
		}
		clear(w.conns)
	}
}

func (w *netSwitch) isCut() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.off
}

// track registers conn, or closes it when cut.
func (w *netSwitch) track(conn net.Conn) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.off {
		conn.Close()
		return false
	}
	w.conns[conn] = true
	return true
}

func (w *netSwitch) dial(ctx context.Context, addr string) (net.Conn, error) {
	if w.isCut() {
		return nil, errCut
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if !w.track(conn) {
		return nil, errCut
	}
	return &trackedConn{Conn: conn, w: w}, nil
}

func (w *netSwitch) listener(l net.Listener) net.Listener { return &switchListener{Listener: l, w: w} }

type switchListener struct {
	net.Listener
	w *netSwitch
}

func (l *switchListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.w.track(conn) {
			return &trackedConn{Conn: conn, w: l.w}, nil
		}
	}
}

type trackedConn struct {
	net.Conn
	w    *netSwitch
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.w.mu.Lock()
		delete(c.w.conns, c.Conn)
		c.w.mu.Unlock()
	})
	return c.Conn.Close()
}
