package chunkserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/copyset/copysettest"
	"github.com/chunkraft/chunkraft/internal/testwait"
)

// toyKind is the test tenant's machine kind, far from internal/kinds'.
const toyKind copyset.Kind = 202

// toyTenant is a tenant for tests beside the real four: the toy key-value machine on
// every copyset and a gRPC service, chunkraft.test.Toy, whose Put
// ("pool/copyset/key=value") proposes on that copyset's leader and whose
// Get ("pool/copyset/key") reads the applied value; a metric counts Puts.
type toyTenant struct {
	copysets *copyset.Manager
	puts     prometheus.Counter
	started  atomic.Bool
}

var _ Tenant = (*toyTenant)(nil)

func (t *toyTenant) Name() string              { return "toy" }
func (t *toyTenant) Attach(m *copyset.Manager) { t.copysets = m }
func (t *toyTenant) Start() error              { t.started.Store(true); return nil }
func (t *toyTenant) Stop()                     { t.started.Store(false) }
func (t *toyTenant) Specs() []copyset.MachineSpec {
	return []copyset.MachineSpec{copysettest.ToySpec(toyKind, "toy")}
}
func (t *toyTenant) Collectors() []prometheus.Collector {
	return []prometheus.Collector{t.puts}
}

func (t *toyTenant) Register(g grpc.ServiceRegistrar) {
	handler := func(f func(*toyTenant, context.Context, string) (string, error)) grpc.MethodHandler {
		return func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := &wrapperspb.StringValue{}
			if err := dec(in); err != nil {
				return nil, err
			}
			out, err := f(srv.(*toyTenant), ctx, in.GetValue())
			return wrapperspb.String(out), err
		}
	}
	g.RegisterService(&grpc.ServiceDesc{ServiceName: "chunkraft.test.Toy", HandlerType: (*any)(nil), Methods: []grpc.MethodDesc{
		{MethodName: "Put", Handler: handler((*toyTenant).put)},
		{MethodName: "Get", Handler: handler((*toyTenant).get)},
	}}, t)
}

// node parses "pool/copyset/rest" and returns the copyset's replica here.
func (t *toyTenant) node(arg string) (*copyset.Node, string, error) {
	var pool, cs uint32
	parts := strings.SplitN(arg, "/", 3)
	if len(parts) != 3 {
		return nil, "", grpcstatus.Errorf(codes.InvalidArgument, "%q: want pool/copyset/...", arg)
	}
	if _, err := fmt.Sscanf(parts[0]+" "+parts[1], "%d %d", &pool, &cs); err != nil {
		return nil, "", grpcstatus.Errorf(codes.InvalidArgument, "%q: %v", arg, err)
	}
	n := t.copysets.Get(copyset.NewGroupID(pool, cs))
	if n == nil {
		return nil, "", grpcstatus.Errorf(codes.NotFound, "copyset %d/%d is not hosted here", pool, cs)
	}
	return n, parts[2], nil
}

func (t *toyTenant) put(ctx context.Context, arg string) (string, error) {
	n, kv, err := t.node(arg)
	if err != nil {
		return "", err
	}
	k, v, ok := strings.Cut(kv, "=")
	if !ok {
		return "", grpcstatus.Errorf(codes.InvalidArgument, "%q: want key=value", kv)
	}
	if _, _, err := n.Propose(ctx, copysettest.ToyOp(toyKind, k, v)); err != nil {
		return "", grpcstatus.Errorf(codes.Unavailable, "propose: %v", err)
	}
	t.puts.Inc()
	return "ok", nil
}

func (t *toyTenant) get(_ context.Context, arg string) (string, error) {
	n, k, err := t.node(arg)
	if err != nil {
		return "", err
	}
	m, ok := copyset.MachineOf[*copysettest.ToyKV](n, toyKind)
	if !ok {
		return "", grpcstatus.Error(codes.Internal, "no toy machine")
	}
	for _, line := range strings.Split(m.Dump(), "\n") {
		if key, v, _ := strings.Cut(line, "="); key == k {
			return v, nil
		}
	}
	return "", grpcstatus.Errorf(codes.NotFound, "%q not set", k)
}

// A tenant is one entry in the server's list: the toy tenant, given to
// NewWithSeams, has its machine opened on a new copyset, its gRPC service
// answered on the server's port, its metric on /metrics' registry, and was
// started before the copysets loaded and stopped at shutdown.
func TestToyTenantEndToEnd(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Listen, cfg.MetricsListen = lis.Addr().String(), ""
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.ChunkFilePool = 0
	cfg.Raft.HeartbeatTimeout, cfg.Raft.ElectionTimeout = 300*time.Millisecond, 300*time.Millisecond
	cfg.Raft.LeaderLeaseTimeout = 150 * time.Millisecond
	toy := &toyTenant{puts: prometheus.NewCounter(prometheus.CounterOpts{Name: "chunkraft_test_toy_puts_total", Help: "Toy puts."})}
	srv, err := NewWithSeams(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), Seams{RaftLog: io.Discard, Tenants: []Tenant{toy}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ctx, lis) }()
	testwait.Until(t, time.Minute, func() error {
		if !srv.ready.Load() {
			return errors.New("the server is not ready")
		}
		return nil
	})
	if !toy.started.Load() {
		t.Fatal("the tenant was not started before the copysets loaded")
	}
	g := copyset.NewGroupID(1, 1)
	if _, err := srv.Copysets().Create(ctx, g, []copyset.PeerID{srv.Local()}); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(cfg.Listen, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	call := func(method, arg string) (string, error) {
		out := &wrapperspb.StringValue{}
		err := conn.Invoke(ctx, "/chunkraft.test.Toy/"+method, wrapperspb.String(arg), out)
		return out.GetValue(), err
	}
	testwait.Until(t, 10*time.Second, func() error {
		_, err := call("Put", "1/1/colour=blue")
		return err
	})
	if v, err := call("Get", "1/1/colour"); err != nil || v != "blue" {
		t.Fatalf("Get after Put: %q %v", v, err)
	}
	if _, err := call("Put", "1/1/nonsense"); grpcstatus.Code(err) != codes.InvalidArgument {
		t.Fatalf("a bad Put: %v", err)
	}
	mfs, err := srv.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "chunkraft_test_toy_puts_total" && mf.GetMetric()[0].GetCounter().GetValue() >= 1 {
			found = true
		}
	}
	if !found {
		t.Fatal("the tenant's metric is not in the server's registry")
	}
	cancel()
	<-done
	if toy.started.Load() {
		t.Fatal("the tenant was not stopped at shutdown")
	}
}
