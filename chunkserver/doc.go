// Package chunkserver is the chunkserver process, the host of the
// services built on copysets: configuration (file, flags, runtime
// changes), TLS and roles, the listeners and gRPC health and reflection,
// the server's metrics and pprof, the connection cache, the lifecycle,
// and the admin services of the whole server (CliService, CopysetService,
// Config, the cluster map). Everything a copyset replicates belongs to a
// tenant (tenant.go): the chunk store (package chunkstore), integrity,
// datasync and disagg; the server opens their machines, registers their
// services and starts and stops them in the order of its tenant list.
//
// Invariant: the host holds no tenant's state or rules; what a tenant
// needs of another it reaches through that tenant's exported API (the
// chunk store's admission and fences) or internal/chunkread.
//
// Must not import: cli/..., cmd/..., test/...
package chunkserver
