// Package grpcbuf replaces gRPC's process-wide default buffer pool, at
// init, with a bufpool.Pool: size classes up to 64 MiB, buffers not zeroed.
//
// gRPC's default pool stops at 1 MiB classes and clears a buffer's whole
// capacity on every Get; its proto codec materialises every received
// message in a buffer from the default pool (no option reaches it). For a
// 1 MiB write that is a fresh, zeroed 1 MiB allocation per message on
// every hop, a seventh of the servers' CPU in a 1 MiB write benchmark
// (docs/performance.md, "gRPC's default buffer pool").
// Every user of these buffers overwrites what it reads, so zeroing buys
// nothing.
//
// The default reaches the proto codec and clients, but not servers: grpc's
// default server options captured the pool at grpc's init, so a server
// must also pass experimental.BufferPool(Pool) (chunkserver does).
//
// Binaries and packages that speak gRPC import it for the side effect
// (chunkserver, cli). Hold lets a codec decode bytes fields that alias the
// received message instead of copying them (copyset's AppendEntries codec);
// Borrow does the same for fields that live only until a release (the
// ChunkRequests and SendDataRequests of chunkserver's codec). It imports
// only grpc and internal/bufpool.
//
// Must not import: github.com/chunkraft/chunkraft/..., !internal/bufpool
package grpcbuf
