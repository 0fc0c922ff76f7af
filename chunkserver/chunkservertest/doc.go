// Package chunkservertest starts in-process chunkservers for the tests of
// the packages the chunkserver hosts (datasync, disagg, integrity, ...):
// Start is servertest.Start bound to chunkserver.LoopbackConfig and
// chunkserver.NewQuiet, so each server runs the real gRPC services and
// state machines on loopback with its chunk stores on a datastore.FaultFS.
//
// Invariants: the servers are those of chunkserver's own tests (one
// harness, servertest); Start returns once the copyset has a leader. Only
// tests import this package.
//
// Must not import: cli/..., cmd/..., test/...
package chunkservertest
