package servertest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/chunkstore/datastore"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/testwait"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Server is what the harness needs of a server.
type Server interface {
	// Serve serves on lis until ctx is cancelled.
	Serve(ctx context.Context, lis net.Listener) error
	// Ready reports whether the server's copysets are loaded and it serves.
	Ready() bool
	// Local is the server's peer ID.
	Local() copyset.PeerID
	// Copysets is the server's copyset manager.
	Copysets() *copyset.Manager
}

// Binding builds the servers of a cluster.
type Binding[C any, S Server] struct {
	// Config is the configuration of a server listening on listen with its
	// data in dataDir.
	Config func(listen, dataDir string) C
	// New builds a server (not yet serving) on fs.
	New func(cfg C, fs *datastore.FaultFS) (S, error)
}

// Cluster is n in-process servers on loopback with one copyset; a server
// can be stopped and started again on its address and data dir. The slices
// are indexed by server and owned by the test goroutine.
type Cluster[C any, S Server] struct {
	T       testing.TB
	Cfgs    []C
	FS      []*datastore.FaultFS
	Servers []S
	Conns   []*grpc.ClientConn
	Group   copyset.GroupID

	bind     Binding[C, S]
	opts     []func(*C)
	addrs    []string
	dataDirs []string
	cancels  []context.CancelFunc
	dones    []chan struct{}
}

// Start starts n servers, each with the configuration of b.Config adjusted
// by opts, creates copyset 1 of pool 1 on all of them and waits for its
// leader.
func Start[C any, S Server](t testing.TB, n int, b Binding[C, S], opts ...func(*C)) *Cluster[C, S] {
	t.Helper()
	c := &Cluster[C, S]{T: t, Group: copyset.NewGroupID(1, 1), bind: b, opts: opts}
	var peers []copyset.PeerID
	for i := 0; i < n; i++ {
		peers = append(peers, c.Servers[c.AddServer(t)].Local())
	}
	t.Cleanup(func() {
		for i := range c.Servers {
			c.Stop(i)
		}
		for _, conn := range c.Conns {
			conn.Close()
		}
	})
	for _, srv := range c.Servers {
		if _, err := srv.Copysets().Create(context.Background(), c.Group, peers); err != nil {
			t.Fatal(err)
		}
	}
	c.Leader(t)
	return c
}

// AddServer starts one more server, configured as the others but with its
// own address and data dir and no copysets, and returns its index.
func (c *Cluster[C, S]) AddServer(t testing.TB) int {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	dataDir := filepath.Join(t.TempDir(), "data")
	cfg := c.bind.Config(addr, dataDir)
	for _, o := range c.opts {
		o(&cfg)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	var zero S
	c.Cfgs, c.Conns, c.addrs = append(c.Cfgs, cfg), append(c.Conns, conn), append(c.addrs, addr)
	c.dataDirs = append(c.dataDirs, dataDir)
	c.FS = append(c.FS, datastore.NewFaultFS(nil))
	c.Servers = append(c.Servers, zero)
	c.cancels, c.dones = append(c.cancels, nil), append(c.dones, nil)
	i := len(c.Servers) - 1
	c.Start(i, lis)
	return i
}

// Start runs server i (listening on lis, or on its address again) and
// waits until it is ready.
func (c *Cluster[C, S]) Start(i int, lis net.Listener) {
	c.T.Helper()
	if lis == nil {
		// The address is free once the stopped server's socket is closed.
		testwait.Until(c.T, 2*time.Second, func() (err error) {
			lis, err = net.Listen("tcp", c.addrs[i])
			return err
		})
	}
	srv, err := c.bind.New(c.Cfgs[i], c.FS[i])
	if err != nil {
		c.T.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ctx, lis) }()
	c.Servers[i], c.cancels[i], c.dones[i] = srv, cancel, done
	testwait.Until(c.T, time.Minute, func() error {
		select {
		case <-done:
			c.T.Fatalf("server %d stopped before it was ready", i)
		default:
		}
		if !srv.Ready() {
			return fmt.Errorf("server %d is not ready", i)
		}
		return nil
	})
}

// Stop shuts server i down cleanly; stopping a stopped server does nothing.
func (c *Cluster[C, S]) Stop(i int) {
	if c.cancels[i] != nil {
		c.cancels[i]()
		<-c.dones[i]
		c.cancels[i] = nil
	}
}

// Restart stops server i and starts it again on its address and data dir.
func (c *Cluster[C, S]) Restart(i int) {
	c.T.Helper()
	c.Stop(i)
	c.Start(i, nil)
}

// Running reports whether server i is serving (started and not stopped).
func (c *Cluster[C, S]) Running(i int) bool { return c.cancels[i] != nil }

// Up returns the indexes of the running servers.
func (c *Cluster[C, S]) Up() []int {
	var out []int
	for i := range c.Servers {
		if c.Running(i) {
			out = append(out, i)
		}
	}
	return out
}

// Leader returns the index of the copyset's leader among the running
// servers, waiting up to 10 seconds for one.
func (c *Cluster[C, S]) Leader(t testing.TB) int {
	t.Helper()
	leader := -1
	testwait.Until(t, 10*time.Second, func() error {
		for i, srv := range c.Servers {
			if !c.Running(i) {
				continue
			}
			if n := srv.Copysets().Get(c.Group); n != nil && n.IsLeader() {
				leader = i
				return nil
			}
		}
		return errors.New("no leader")
	})
	return leader
}
