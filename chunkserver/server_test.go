package chunkserver

import (
	"testing"

	"github.com/chunkraft/chunkraft/chunkserver/servertest"
	"github.com/chunkraft/chunkraft/chunkstore/datastore"
)

// testCluster is n in-process chunkservers on loopback with one copyset
// (servertest.Cluster bound to this package's servers).
type testCluster struct {
	*servertest.Cluster[Config, *Server]
}

// clusterOpts adjust the servers' configuration before they start.
type clusterOpts = func(*Config)

// testBinding builds the test clusters' servers (LoopbackConfig, NewQuiet).
var testBinding = servertest.Binding[Config, *Server]{
	Config: LoopbackConfig,
	New:    func(cfg Config, fs *datastore.FaultFS) (*Server, error) { return NewQuiet(cfg, fs) },
}

func startTestCluster(t testing.TB, n int, opts ...clusterOpts) *testCluster {
	t.Helper()
	return &testCluster{servertest.Start(t, n, testBinding, opts...)}
}

var (
	block      = servertest.Block
	writeReq   = servertest.WriteReq
	mustStatus = servertest.MustStatus
)
