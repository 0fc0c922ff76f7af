package chunkserver

import (
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/chunkraft/chunkraft/copyset"
)

// Tenant is a service built on the copysets: the chunk store
// (chunkstore) and the services beside it (integrity, datasync, disagg).
// The server builds its tenants in NewWithSeams and then drives each the
// same way, in the order of its list: their machine specs open in that
// order (the chunk store's first: a later tenant's Open may look up the
// chunk machine among the opened ones, chunkread.In), Attach gives them
// the copyset manager before anything runs, Register adds their gRPC
// services, Collectors their metrics; Start runs before the copysets load
// (workers that wait for leadership), Stop after the copysets have
// closed. Adding a tenant is one entry in that list.
type Tenant interface {
	// Name names the tenant in logs and errors.
	Name() string
	// Specs are its state machines (each kind of internal/kinds once).
	Specs() []copyset.MachineSpec
	// Attach gives it the server's copyset manager.
	Attach(m *copyset.Manager)
	// Register registers its gRPC services.
	Register(g grpc.ServiceRegistrar)
	// Collectors are its metrics, for the server's registry.
	Collectors() []prometheus.Collector
	// Start starts its workers; Stop stops them and waits (idempotent).
	Start() error
	Stop()
}
