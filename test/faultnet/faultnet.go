package faultnet

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Network holds the fault matrix of n nodes.
type Network struct {
	mu      sync.Mutex
	rng     *rand.Rand
	n       int
	addrs   map[string]int
	blocked [][]bool
	drop    [][]float64
	delay   [][]time.Duration

	dropped, blockedCalls, delayed atomic.Int64
}

// New returns a healthy network of n nodes whose random decisions come
// from seed.
func New(n int, seed int64) *Network {
	nw := &Network{rng: rand.New(rand.NewSource(seed)), n: n, addrs: make(map[string]int)}
	nw.blocked, nw.drop, nw.delay = make([][]bool, n), make([][]float64, n), make([][]time.Duration, n)
	for i := 0; i < n; i++ {
		nw.blocked[i], nw.drop[i], nw.delay[i] = make([]bool, n), make([]float64, n), make([]time.Duration, n)
	}
	return nw
}

// SetAddr records that node listens on addr (the target string dialers use).
func (nw *Network) SetAddr(node int, addr string) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	nw.addrs[addr] = node
}

// Block blocks (or opens) the direction from -> to.
func (nw *Network) Block(from, to int, blocked bool) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	nw.blocked[from][to] = blocked
}

// SetPartition replaces the whole matrix: m[from][to] true blocks from -> to.
func (nw *Network) SetPartition(m [][]bool) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	for i := range nw.blocked {
		for j := range nw.blocked[i] {
			nw.blocked[i][j] = i < len(m) && j < len(m[i]) && m[i][j]
		}
	}
}

// Isolate cuts node off from every node in among (both directions).
func (nw *Network) Isolate(node int, among []int) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	for _, o := range among {
		if o != node {
			nw.blocked[node][o], nw.blocked[o][node] = true, true
		}
	}
}

// SetDrop sets the probability that a message from -> to is lost; from or
// to may be -1 for all.
func (nw *Network) SetDrop(from, to int, p float64) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	nw.each(from, to, func(i, j int) { nw.drop[i][j] = p })
}

// SetDelay sets the added delay of a message from -> to (each message waits
// d plus up to d/2 of jitter); from or to may be -1 for all.
func (nw *Network) SetDelay(from, to int, d time.Duration) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	nw.each(from, to, func(i, j int) { nw.delay[i][j] = d })
}

// Heal removes every partition, drop rate and delay.
func (nw *Network) Heal() {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	nw.each(-1, -1, func(i, j int) { nw.blocked[i][j], nw.drop[i][j], nw.delay[i][j] = false, 0, 0 })
}

func (nw *Network) each(from, to int, fn func(i, j int)) {
	for i := 0; i < nw.n; i++ {
		for j := 0; j < nw.n; j++ {
			if (from < 0 || from == i) && (to < 0 || to == j) && i != j {
				fn(i, j)
			}
		}
	}
}

// Stats reports the messages failed by a partition, dropped at random and
// delayed so far.
func (nw *Network) Stats() (blocked, dropped, delayed int64) {
	return nw.blockedCalls.Load(), nw.dropped.Load(), nw.delayed.Load()
}

// String describes the current matrix ("0->1" entries that are blocked).
func (nw *Network) String() string {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	s := "blocked:"
	for i := range nw.blocked {
		for j, b := range nw.blocked[i] {
			if b {
				s += fmt.Sprintf(" %d->%d", i, j)
			}
		}
	}
	return s
}

// node maps a dial target to its node.
func (nw *Network) node(target string) (int, bool) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	n, ok := nw.addrs[target]
	return n, ok
}

// pass decides the fate of one message from -> to: it waits the added
// delay, then returns nil or an Unavailable error.
func (nw *Network) pass(ctx context.Context, from, to int) error {
	nw.mu.Lock()
	blocked := nw.blocked[from][to]
	lost := !blocked && nw.drop[from][to] > 0 && nw.rng.Float64() < nw.drop[from][to]
	var d time.Duration
	if base := nw.delay[from][to]; base > 0 && !blocked && !lost {
		d = base + time.Duration(nw.rng.Int63n(int64(base)/2+1))
	}
	nw.mu.Unlock()
	switch {
	case blocked:
		nw.blockedCalls.Add(1)
		return status.Errorf(codes.Unavailable, "faultnet: %d->%d partitioned", from, to)
	case lost:
		nw.dropped.Add(1)
		return status.Errorf(codes.Unavailable, "faultnet: %d->%d message dropped", from, to)
	case d > 0:
		nw.delayed.Add(1)
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
	return nil
}

// DialOptions returns the interceptors for every dialer of node from.
func (nw *Network) DialOptions(from int) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(nw.unary(from)),
		grpc.WithChainStreamInterceptor(nw.stream(from)),
	}
}

func (nw *Network) unary(from int) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		to, ok := nw.node(cc.Target())
		if !ok || to == from {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		if err := nw.pass(ctx, from, to); err != nil {
			return err
		}
		if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
			return err
		}
		return nw.pass(ctx, to, from)
	}
}

func (nw *Network) stream(from int) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		to, ok := nw.node(cc.Target())
		if !ok || to == from {
			return streamer(ctx, desc, cc, method, opts...)
		}
		if err := nw.pass(ctx, from, to); err != nil {
			return nil, err
		}
		ctx, cancel := context.WithCancel(ctx)
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			cancel()
			return nil, err
		}
		return &faultStream{ClientStream: cs, nw: nw, ctx: ctx, cancel: cancel, from: from, to: to}, nil
	}
}

// faultStream applies the matrix to every message of a stream; a lost
// message breaks the whole stream (as a broken connection would: a stream
// never silently skips a message).
type faultStream struct {
	grpc.ClientStream
	nw       *Network
	ctx      context.Context
	cancel   context.CancelFunc
	from, to int
}

func (s *faultStream) SendMsg(m any) error {
	if err := s.nw.pass(s.ctx, s.from, s.to); err != nil {
		s.cancel()
		return err
	}
	return s.ClientStream.SendMsg(m)
}

func (s *faultStream) RecvMsg(m any) error {
	if err := s.ClientStream.RecvMsg(m); err != nil {
		s.cancel()
		return err
	}
	if err := s.nw.pass(s.ctx, s.to, s.from); err != nil {
		s.cancel()
		return err
	}
	return nil
}
