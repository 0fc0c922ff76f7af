// Package servertest is the test harness of whole servers: n in-process
// servers on loopback, each serving its real gRPC services from its own
// data dir through a datastore.FaultFS (FS), with one copyset created on
// all of them (Start). A server can be stopped and started again on the
// same address and data dir (Stop, Restart); Leader finds the copyset's
// leader among the running servers; Conns are client connections that
// survive a restart. The chunk helpers (WriteReq, Write, Read, WaitSame, …)
// drive the copyset's ChunkService; the fuzz helpers (MarshalSeed,
// CallCtx, Inconclusive, Healthy) are the shape of the RPC fuzz targets,
// which run on a one-server cluster.
//
// The cluster is generic over the server's configuration and type: a
// Binding says how to build a configuration for an address and data dir
// and a server from a configuration and a file system. The package does not
// import chunkserver, so chunkserver's own tests use it as well;
// chunkserver/chunkservertest binds it to the chunkserver for the other
// packages' tests.
//
// Invariants: Start returns once every server is ready and the copyset has
// a leader; a stopped server's slot keeps its configuration, FaultFS and
// connection; the cluster is torn down by t.Cleanup. Only tests import this
// package.
//
// Must not import: chunkserver, cli/..., cmd/..., test/..., integrity/..., datasync/..., dm/..., disagg/...
package servertest
