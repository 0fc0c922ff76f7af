// Package test holds multi-node tests of chunkraft: clusters of real
// chunkserver processes built from cmd/ (kill -9, restart on the same data
// dir) driven through the cli client library and raw gRPC stubs.
//
// Helpers here start and stop processes; they must not import chunkserver/
// or copyset/ internals (tests see the server only over the wire).
//
// Must not import: chunkserver/..., copyset/...
package test
