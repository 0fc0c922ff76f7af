// Package bufpool recycles byte buffers in power-of-two size classes
// without zeroing them.
//
// It serves two users: the shared log's record buffers and gRPC's message
// buffers (a *Pool satisfies google.golang.org/grpc/mem.BufferPool). gRPC's
// own pools clear a buffer's whole capacity on every Get, which for a small
// message taken from a megabyte class is most of the cost of handling it;
// both users overwrite every byte they later read, so zeroing buys nothing.
//
// A buffer handed to Put must come from Get of the same Pool and must no
// longer be referenced by anyone. The package imports only the standard
// library.
//
// Must not import: github.com/chunkraft/chunkraft/...
package bufpool
