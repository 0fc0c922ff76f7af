package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/chunkraft/chunkraft/cli"
	"github.com/chunkraft/chunkraft/proto/etcd/etcdserverpb"
)

// The etcd target (chunkbench --etcd-endpoints): the same engine, workloads
// and reports, with every block of the run's layout stored as one etcd key.
// Block g is the key EtcdKey(g); a write of the block is a Put of its BS
// bytes, a read a linearizable Range of the key. Prefill writes of several
// blocks are split into one Put per block, a few in flight.

// EtcdKeyPrefix starts every key chunkbench writes to etcd.
const EtcdKeyPrefix = "chunkbench/"

// etcdKeyDigits is the zero-padded width of the block number in a key.
const etcdKeyDigits = 10

// DefaultEtcdConns is the number of gRPC connections per etcd endpoint.
const DefaultEtcdConns = 2

// etcdPrefillFanout is how many Puts one multi-block write keeps in flight
// (the engine runs prefillDepth such writes at once).
const etcdPrefillFanout = 8

// Error kinds of the etcd target besides the generic ones (see Classify).
const (
	// KindEtcdKeyNotFound is a Range of a key nobody wrote.
	KindEtcdKeyNotFound = "etcd: key not found"
	// KindEtcdValueSize is a Range that returned a value of another size.
	KindEtcdValueSize = "etcd: value size"
)

// EtcdKey returns the etcd key of block g: EtcdKeyPrefix and g in decimal,
// zero-padded to 10 digits ("chunkbench/0000000042").
func EtcdKey(g uint64) string { return string(appendEtcdKey(nil, g)) }

func appendEtcdKey(b []byte, g uint64) []byte {
	b = append(b, EtcdKeyPrefix...)
	var d [20]byte
	s := strconv.AppendUint(d[:0], g, 10)
	for range etcdKeyDigits - len(s) {
		b = append(b, '0')
	}
	return append(b, s...)
}

// EtcdOptions configure an EtcdIO.
type EtcdOptions struct {
	// Endpoints are the etcd members' client addresses: host:port, or
	// http://host:port / https://host:port as etcd prints them.
	Endpoints []string
	// ConnsPerEndpoint is the number of gRPC connections to each endpoint
	// (DefaultEtcdConns if 0).
	ConnsPerEndpoint int
	// Timeout bounds each request (DefaultTimeout of package cli if 0).
	// Requests are not retried: a failed request is a failed operation.
	Timeout time.Duration
	// DialOptions are added to every connection after the defaults:
	// plaintext, or TLS with the system roots when an endpoint is given as
	// https://. Transport credentials among them replace the default.
	DialOptions []grpc.DialOption
}

// EtcdIO is the IO of the etcd target: block writes and reads of a run's
// layout as Puts and linearizable Ranges of one key per block, spread round
// robin over connections to every endpoint (a member that is not the leader
// forwards them to it). Close it when done.
type EtcdIO struct {
	l        layout
	index    map[uint32]uint64 // copyset -> its position in the layout
	timeout  time.Duration
	conns    []*grpc.ClientConn
	kvs      []etcdserverpb.KVClient
	next     atomic.Uint64
	keyspace string
}

// NewEtcdIO connects to opts.Endpoints for runs of cfg (whose layout names
// the keys). Connections are made lazily: an unreachable endpoint shows up
// as failed operations.
func NewEtcdIO(cfg Config, opts EtcdOptions) (*EtcdIO, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	eps, tlsWanted, err := ParseEtcdEndpoints(strings.Join(opts.Endpoints, ","))
	if err != nil {
		return nil, err
	}
	n := opts.ConnsPerEndpoint
	if n == 0 {
		n = DefaultEtcdConns
	}
	if n < 0 {
		return nil, fmt.Errorf("%d connections per endpoint: want >= 1", n)
	}
	e := &EtcdIO{l: newLayout(cfg), index: map[uint32]uint64{}, timeout: opts.Timeout}
	if e.timeout <= 0 {
		e.timeout = cli.DefaultTimeout
	}
	for i, cs := range cfg.Copysets {
		e.index[cs] = uint64(i)
	}
	dial := []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32))}
	if tlsWanted {
		dial = append(dial, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})))
	} else {
		dial = append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	dial = append(dial, opts.DialOptions...) // later options win
	// Connection i goes to endpoint i%len: consecutive requests visit every
	// endpoint in turn.
	for i := range n * len(eps) {
		cc, err := grpc.NewClient(eps[i%len(eps)], dial...)
		if err != nil {
			e.Close()
			return nil, fmt.Errorf("etcd endpoint %s: %w", eps[i%len(eps)], err)
		}
		e.conns = append(e.conns, cc)
		e.kvs = append(e.kvs, etcdserverpb.NewKVClient(cc))
	}
	e.keyspace = fmt.Sprintf("%d keys %s..%s", e.l.total, EtcdKey(0), EtcdKey(e.l.total-1))
	return e, nil
}

// ParseEtcdEndpoints parses a comma-separated endpoint list into host:port
// addresses, and reports whether any was given as https://.
func ParseEtcdEndpoints(s string) (eps []string, tlsWanted bool, err error) {
	seen := map[string]bool{}
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		addr := f
		if rest, ok := strings.CutPrefix(addr, "https://"); ok {
			addr, tlsWanted = rest, true
		} else if rest, ok := strings.CutPrefix(addr, "http://"); ok {
			addr = rest
		}
		addr = strings.TrimSuffix(addr, "/")
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host == "" || port == "" {
			return nil, false, fmt.Errorf("etcd endpoint %q: want host:port or http://host:port", f)
		}
		if seen[addr] {
			return nil, false, fmt.Errorf("etcd endpoint %s listed twice", f)
		}
		seen[addr] = true
		eps = append(eps, addr)
	}
	if len(eps) == 0 {
		return nil, false, errors.New("no etcd endpoint given")
	}
	return eps, tlsWanted, nil
}

// Keyspace describes the keys of the run: "16384 keys chunkbench/0000000000..chunkbench/0000016383".
func (e *EtcdIO) Keyspace() string { return e.keyspace }

// Conns returns the number of gRPC connections.
func (e *EtcdIO) Conns() int { return len(e.conns) }

// Close closes the connections.
func (e *EtcdIO) Close() error {
	var errs []error
	for _, cc := range e.conns {
		errs = append(errs, cc.Close())
	}
	return errors.Join(errs...)
}

// kv returns the client of the next request, round robin.
func (e *EtcdIO) kv() etcdserverpb.KVClient {
	return e.kvs[(e.next.Add(1)-1)%uint64(len(e.kvs))]
}

// block returns the block number of the block at offset of chunk id.
func (e *EtcdIO) block(id cli.ChunkID, offset uint32) (uint64, error) {
	ci, ok := e.index[id.Copyset]
	bs := uint64(e.l.bs)
	if !ok || id.Pool != e.l.pool || id.Chunk == 0 || uint64(offset)%bs != 0 {
		return 0, fmt.Errorf("etcd: %s offset %d is not a block of the run", id, offset)
	}
	b := (id.Chunk-1)*e.l.blocksPerChunk + uint64(offset)/bs
	if uint64(offset)/bs >= e.l.blocksPerChunk || b >= e.l.blocksPerCopyset {
		return 0, fmt.Errorf("etcd: %s offset %d is not a block of the run", id, offset)
	}
	return ci*e.l.blocksPerCopyset + b, nil
}

// WriteChunk puts every block of data (consecutive blocks from offset).
func (e *EtcdIO) WriteChunk(ctx context.Context, id cli.ChunkID, offset uint32, data []byte, sn uint64) error {
	bs := int(e.l.bs)
	if len(data) == 0 || len(data)%bs != 0 {
		return fmt.Errorf("etcd: write of %d bytes, not a whole number of %d-byte blocks", len(data), bs)
	}
	g, err := e.block(id, offset)
	if err != nil {
		return err
	}
	n := len(data) / bs
	if n == 1 {
		return e.put(ctx, g, data)
	}
	if _, err := e.block(id, offset+uint32((n-1)*bs)); err != nil {
		return err
	}
	var (
		next  atomic.Int64
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	for range min(etcdPrefillFanout, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := e.put(ctx, g+uint64(i), data[i*bs:(i+1)*bs]); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					next.Store(int64(n)) // stop the others
					return
				}
			}
		})
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// ReadChunk gets the blocks of [offset, offset+size) with linearizable Ranges.
func (e *EtcdIO) ReadChunk(ctx context.Context, id cli.ChunkID, offset, size uint32) ([]byte, error) {
	bs := e.l.bs
	if size == 0 || size%bs != 0 {
		return nil, fmt.Errorf("etcd: read of %d bytes, not a whole number of %d-byte blocks", size, bs)
	}
	g, err := e.block(id, offset)
	if err != nil {
		return nil, err
	}
	if size == bs {
		return e.get(ctx, g)
	}
	if _, err := e.block(id, offset+size-bs); err != nil {
		return nil, err
	}
	out := make([]byte, 0, size)
	for i := range uint64(size / bs) {
		v, err := e.get(ctx, g+i)
		if err != nil {
			return nil, err
		}
		out = append(out, v...)
	}
	return out, nil
}

func (e *EtcdIO) put(ctx context.Context, g uint64, value []byte) error {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	key := appendEtcdKey(make([]byte, 0, len(EtcdKeyPrefix)+etcdKeyDigits), g)
	if _, err := e.kv().Put(ctx, &etcdserverpb.PutRequest{Key: key, Value: value}); err != nil {
		return &EtcdError{Op: "put", Key: string(key), Err: err}
	}
	return nil
}

func (e *EtcdIO) get(ctx context.Context, g uint64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	key := appendEtcdKey(make([]byte, 0, len(EtcdKeyPrefix)+etcdKeyDigits), g)
	// Serializable false: a linearizable read (the member confirms with the
	// leader that it is up to date before answering).
	resp, err := e.kv().Range(ctx, &etcdserverpb.RangeRequest{Key: key, Serializable: false})
	if err != nil {
		return nil, &EtcdError{Op: "range", Key: string(key), Err: err}
	}
	kvs := resp.GetKvs()
	if len(kvs) == 0 {
		return nil, &EtcdError{Op: "range", Key: string(key), Err: errEtcdKeyNotFound}
	}
	v := kvs[0].GetValue()
	if len(v) != int(e.l.bs) {
		return nil, &EtcdError{Op: "range", Key: string(key), Err: fmt.Errorf("%w: %d bytes, want %d", errEtcdValueSize, len(v), e.l.bs)}
	}
	return v, nil
}

var (
	errEtcdKeyNotFound = errors.New("key not found")
	errEtcdValueSize   = errors.New("value of the wrong size")
)

// EtcdError is a failed request of the etcd target.
type EtcdError struct {
	Op  string // "put" or "range"
	Key string
	Err error
}

func (e *EtcdError) Error() string { return fmt.Sprintf("etcd %s %s: %v", e.Op, e.Key, e.Err) }

func (e *EtcdError) Unwrap() error { return e.Err }

// kind names the kind of e: KindEtcdKeyNotFound, KindEtcdValueSize, the
// message of an etcd server error ("etcdserver: request timed out",
// "etcdserver: leader changed", "etcdserver: mvcc: database space
// exceeded", ...), or a generic kind.
func (e *EtcdError) kind() string {
	switch {
	case errors.Is(e.Err, errEtcdKeyNotFound):
		return KindEtcdKeyNotFound
	case errors.Is(e.Err, errEtcdValueSize):
		return KindEtcdValueSize
	}
	if st, ok := status.FromError(e.Err); ok && strings.HasPrefix(st.Message(), "etcdserver: ") {
		return st.Message()
	}
	return classifyCause(e.Err)
}
