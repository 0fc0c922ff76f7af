package chunkservertest

import (
	"testing"

	"github.com/chunkraft/chunkraft/chunkserver"
	"github.com/chunkraft/chunkraft/chunkserver/servertest"
	"github.com/chunkraft/chunkraft/chunkstore/datastore"
)

// Cluster is n in-process chunkservers on loopback with copyset 1 of pool 1.
type Cluster = servertest.Cluster[chunkserver.Config, *chunkserver.Server]

// Binding builds the servers: chunkserver.LoopbackConfig and
// chunkserver.NewQuiet on the slot's FaultFS.
var Binding = servertest.Binding[chunkserver.Config, *chunkserver.Server]{
	Config: chunkserver.LoopbackConfig,
	New: func(cfg chunkserver.Config, fs *datastore.FaultFS) (*chunkserver.Server, error) {
		return chunkserver.NewQuiet(cfg, fs)
	},
}

// Start starts n chunkservers configured by opts and waits for the
// copyset's leader.
func Start(t testing.TB, n int, opts ...func(*chunkserver.Config)) *Cluster {
	t.Helper()
	return servertest.Start(t, n, Binding, opts...)
}

// StartWithTenants is Start with the tenants tenants returns hosted after
// the server's own (called at every start of a server: each gets its
// own).
func StartWithTenants(t testing.TB, n int, tenants func() []chunkserver.Tenant, opts ...func(*chunkserver.Config)) *Cluster {
	t.Helper()
	b := Binding
	b.New = func(cfg chunkserver.Config, fs *datastore.FaultFS) (*chunkserver.Server, error) {
		return chunkserver.NewQuietSeams(cfg, chunkserver.Seams{FS: fs, Tenants: tenants()})
	}
	return servertest.Start(t, n, b, opts...)
}
