package cli

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"

	"github.com/chunkraft/chunkraft/internal/grpcbuf"
	chunkserverpb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

const (
	// DefaultTimeout bounds one Client operation, all retries included.
	DefaultTimeout = 15 * time.Second
	// DefaultAttemptTimeout bounds one RPC attempt to one server.
	DefaultAttemptTimeout = 3 * time.Second
	// maxMessageSize leaves room for a whole 16 MiB chunk plus framing.
	maxMessageSize = 64 << 20
)

// CopysetID names a copyset: a logical pool and a copyset in it.
type CopysetID struct {
	Pool    uint32 `json:"pool"`
	Copyset uint32 `json:"copyset"`
}

// GroupID is the copyset's raft group id: Pool<<32 | Copyset.
func (c CopysetID) GroupID() uint64 { return uint64(c.Pool)<<32 | uint64(c.Copyset) }

func (c CopysetID) String() string { return fmt.Sprintf("pool %d copyset %d", c.Pool, c.Copyset) }

// ChunkID names a chunk inside a copyset.
type ChunkID struct {
	CopysetID
	Chunk uint64 `json:"chunk"`
}

func (c ChunkID) String() string { return fmt.Sprintf("%s chunk %d", c.CopysetID, c.Chunk) }

// Options configures a Client.
type Options struct {
	// Servers are the chunkservers asked to find leaders ("host:port" or
	// "host:port:0"). At least one is required.
	Servers []string
	// Timeout bounds each operation including retries (DefaultTimeout if 0).
	// A deadline on the caller's context applies too; the earlier one wins.
	Timeout time.Duration
	// AttemptTimeout bounds each single RPC (DefaultAttemptTimeout if 0).
	AttemptTimeout time.Duration
	// DialOptions are appended to the client's own (plaintext, large messages,
	// fast reconnect).
	DialOptions []grpc.DialOption
}

// Client talks to a set of chunkservers. It holds one lazily created gRPC
// connection per server address (shared by all calls) and a leader cache per
// copyset. It is safe for concurrent use.
type Client struct {
	servers        []string
	timeout        time.Duration
	attemptTimeout time.Duration
	dialOpts       []grpc.DialOption

	mu      sync.Mutex
	closed  bool
	conns   map[string]*grpc.ClientConn
	leaders map[uint64]string // group id -> leader peer id "ip:port:0"
	rr      int               // rotates the first server asked during discovery
}

// New returns a Client for opts.Servers. It does not connect: connections are
// made on first use.
func New(opts Options) (*Client, error) {
	if len(opts.Servers) == 0 {
		return nil, errors.New("no servers given")
	}
	c := &Client{
		timeout:        opts.Timeout,
		attemptTimeout: opts.AttemptTimeout,
		conns:          map[string]*grpc.ClientConn{},
		leaders:        map[uint64]string{},
	}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	if c.attemptTimeout <= 0 {
		c.attemptTimeout = DefaultAttemptTimeout
	}
	seen := map[string]bool{}
	for _, s := range opts.Servers {
		a, err := PeerAddr(s)
		if err != nil {
			return nil, fmt.Errorf("server list: %w", err)
		}
		if !seen[a] {
			seen[a] = true
			c.servers = append(c.servers, a)
		}
	}
	c.dialOpts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithNoProxy(),
		// Message buffers are recycled without gRPC's per-Get clearing.
		experimental.WithBufferPool(grpcbuf.Pool),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(maxMessageSize),
			grpc.MaxCallSendMsgSize(maxMessageSize),
		),
		// gRPC's default reconnect backoff grows to 2 minutes; a restarted
		// chunkserver must be usable again at once: until the next
		// reconnect attempt, calls fail with the last connection error, so
		// a server that listens again must be noticed well within
		// refusedGrace.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  100 * time.Millisecond,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   refusedGrace / 6,
			},
			MinConnectTimeout: c.attemptTimeout,
		}),
	}, opts.DialOptions...)
	return c, nil
}

// Servers returns the normalised server addresses the client was built with.
func (c *Client) Servers() []string { return append([]string(nil), c.servers...) }

// Close closes all connections. Calls made after Close fail.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	var errs []error
	for addr, cc := range c.conns {
		if err := cc.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", addr, err))
		}
	}
	c.conns = map[string]*grpc.ClientConn{}
	return errors.Join(errs...)
}

// conn returns the shared connection to addr ("host:port"), creating it.
func (c *Client) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errors.New("client is closed")
	}
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, c.dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", addr, err)
	}
	c.conns[addr] = cc
	return cc, nil
}

func (c *Client) chunkService(addr string) (chunkserverpb.ChunkServiceClient, error) {
	cc, err := c.conn(addr)
	if err != nil {
		return nil, err
	}
	return chunkserverpb.NewChunkServiceClient(cc), nil
}

func (c *Client) cliService(addr string) (chunkserverpb.CliService2Client, error) {
	cc, err := c.conn(addr)
	if err != nil {
		return nil, err
	}
	return chunkserverpb.NewCliService2Client(cc), nil
}

func (c *Client) copysetService(addr string) (chunkserverpb.CopysetServiceClient, error) {
	cc, err := c.conn(addr)
	if err != nil {
		return nil, err
	}
	return chunkserverpb.NewCopysetServiceClient(cc), nil
}

// CachedLeader returns the cached leader peer id of a copyset, if any.
func (c *Client) CachedLeader(cs CopysetID) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.leaders[cs.GroupID()]
	return a, ok
}

func (c *Client) setLeader(cs CopysetID, id string) {
	c.mu.Lock()
	c.leaders[cs.GroupID()] = id
	c.mu.Unlock()
}

// forgetLeader drops the cached leader if it is still id.
func (c *Client) forgetLeader(cs CopysetID, id string) {
	c.mu.Lock()
	if c.leaders[cs.GroupID()] == id {
		delete(c.leaders, cs.GroupID())
	}
	c.mu.Unlock()
}

// serverOrder returns the servers starting at a rotating position, so that
// successive discoveries do not always hammer (or wait on) the first one.
func (c *Client) serverOrder() []string {
	c.mu.Lock()
	start := c.rr % len(c.servers)
	c.rr++
	c.mu.Unlock()
	out := make([]string, 0, len(c.servers))
	out = append(out, c.servers[start:]...)
	return append(out, c.servers[:start]...)
}
