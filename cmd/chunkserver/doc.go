// Command chunkserver runs one chunkraft chunkserver: the copysets on its
// data dir, the seed gRPC services and raft on one port, and metrics,
// health and pprof over HTTP. See `chunkserver --help`.
//
// Must not import: cli/..., cmd/..., test/...
package main
