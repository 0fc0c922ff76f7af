package chunkserver

import (
	"errors"
	"fmt"
	"sync"

	"google.golang.org/grpc"
)

// connCache keeps one gRPC client connection per server address, dialled
// with opts on first use, for a component that calls other chunkservers
// (clone sources, scan maps, fences). close closes them all; a later get
// dials again.
type connCache struct {
	opts []grpc.DialOption

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func newConnCache(opts ...grpc.DialOption) *connCache { return &connCache{opts: opts} }

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
