package bench

import (
	"context"
	"errors"
	"maps"
	"sync"

	"google.golang.org/grpc"

	"github.com/chunkraft/chunkraft/cli"
	chunkserverpb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// IO is what the engine needs of a cluster: block writes and reads of
// chunks. *cli.Client implements it (see ClientIO); tests use fakes.
// Implementations must be safe for concurrent use, must not keep data after
// WriteChunk returns, and return exactly size bytes from a successful
// ReadChunk.
type IO interface {
	WriteChunk(ctx context.Context, id cli.ChunkID, offset uint32, data []byte, sn uint64) error
	ReadChunk(ctx context.Context, id cli.ChunkID, offset, size uint32) ([]byte, error)
}

// ClientIO adapts a client to IO. The client finds leaders, follows
// redirects and retries within its timeout, so an error from it is final.
func ClientIO(c *cli.Client) IO { return clientIO{c} }

type clientIO struct{ c *cli.Client }

func (a clientIO) WriteChunk(ctx context.Context, id cli.ChunkID, offset uint32, data []byte, sn uint64) error {
	return a.c.WriteChunk(ctx, id, offset, data, sn)
}

func (a clientIO) ReadChunk(ctx context.Context, id cli.ChunkID, offset, size uint32) ([]byte, error) {
	return a.c.ReadChunk(ctx, id, offset, size)
}

// AttemptCounter counts the RPC attempts of a client that did not succeed,
// by kind, whether the client then retried them (a redirect followed, a
// server found down, OVERLOAD waited out) or gave up. Calls the client
// canceled itself (the rest of a leader discovery once one server answered)
// are not counted. Install it with DialOption when building the client.
type AttemptCounter struct {
	mu     sync.Mutex
	counts map[string]int64
}

// NewAttemptCounter returns an empty counter.
func NewAttemptCounter() *AttemptCounter {
	return &AttemptCounter{counts: map[string]int64{}}
}

// DialOption installs the counter as a unary client interceptor.
func (a *AttemptCounter) DialOption() grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(a.intercept)
}

func (a *AttemptCounter) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err != nil {
		// The client cancels the rest of a leader discovery when the first
		// server answers: its own cancellations are no server's failure.
		if !errors.Is(ctx.Err(), context.Canceled) {
			a.add(Classify(err))
		}
		return err
	}
	if r, ok := reply.(*chunkserverpb.ChunkResponse); ok {
		if st := r.GetStatus(); st != chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
			a.add(st.String())
		}
	}
	return nil
}

func (a *AttemptCounter) add(kind string) {
	a.mu.Lock()
	a.counts[kind]++
	a.mu.Unlock()
}

// Counts returns a copy of the counts so far.
func (a *AttemptCounter) Counts() map[string]int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.counts)
}

// Reset zeroes the counts (between the prefill and the measured phase).
func (a *AttemptCounter) Reset() {
	a.mu.Lock()
	clear(a.counts)
	a.mu.Unlock()
}
