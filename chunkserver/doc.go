// Package chunkserver is the chunkserver process: configuration, lifecycle
// and listeners, the gRPC services of the seeds (one file per service) and
// the chunk state machine that turns replicated chunk ops into datastore
// calls.
//
// It wires copyset (replication) to chunkserver/datastore (chunk files). It
// must not import cli/ or cmd/.
//
// Must not import: cli/..., cmd/..., test/...
package chunkserver
