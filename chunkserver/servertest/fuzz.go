package servertest

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// MarshalSeed adds (method, m marshalled) to f's corpus: the seed shape of
// the RPC fuzz targets, whose method byte picks the call and whose bytes
// are its request.
func MarshalSeed(f *testing.F, method uint8, m proto.Message) {
	f.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(method, b)
}

// CallCtx bounds one fuzzed call: a request may wait on raft, never on
// more than this.
func CallCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 5*time.Second)
}

// Inconclusive skips an input whose call outlived its deadline (a loaded
// machine), which says nothing about validation.
func Inconclusive(t *testing.T, ctx context.Context, err error) {
	t.Helper()
	if ctx.Err() != nil || grpcstatus.Code(err) == codes.DeadlineExceeded {
		t.Skipf("call outlived its deadline: %v", err)
	}
}

// Healthy fails t when server i no longer hosts the cluster's copyset or
// its replica is broken: no request may break a healthy replica.
func (c *Cluster[C, S]) Healthy(t testing.TB, i int) {
	t.Helper()
	n := c.Node(i)
	if n == nil {
		t.Fatal("the cluster's copyset is gone")
	}
	if b := n.Broken(); b != nil {
		t.Fatalf("the cluster's copyset is broken: %v", b)
	}
}
