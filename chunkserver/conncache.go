package chunkserver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// connCache keeps one gRPC client connection per server address, dialled
// with opts on first use: the server's one set of connections to the other
// chunkservers, for every call it makes to them outside raft (clone
// sources, scan maps, fences, the cluster map, leader and membership
// probes, the load check). A cached connection to a server that went away
// reconnects on its own, with its backoff capped at peerBackoffMax so that
// a server that comes back is reached again within seconds (gRPC's default
// grows to two minutes). close closes them all; a later get dials again.
type connCache struct {
	opts []grpc.DialOption

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// peerBackoffMax caps the reconnect backoff of a cached connection.
const peerBackoffMax = 2 * time.Second

func newConnCache(opts ...grpc.DialOption) *connCache {
	return &connCache{opts: append([]grpc.DialOption{
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: peerBackoffMax},
			MinConnectTimeout: 5 * time.Second,
		}),
	}, opts...)}
}

func (c *connCache) get(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, c.opts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	if c.conns == nil {
		c.conns = map[string]*grpc.ClientConn{}
	}
	c.conns[addr] = cc
	return cc, nil
}

// call runs fn on the connection to the chunkserver at addr, with ctx
// bounded to timeout: every call this server makes to another one.
func (c *connCache) call(ctx context.Context, addr string, timeout time.Duration, fn func(context.Context, *grpc.ClientConn) error) error {
	cc, err := c.get(addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return fn(ctx, cc)
}

func (c *connCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, cc := range c.conns {
		errs = append(errs, cc.Close())
	}
	c.conns = nil
	return errors.Join(errs...)
}
