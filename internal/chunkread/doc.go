// Package chunkread is how the tenants of a copyset read its chunk store:
// the interfaces the chunk machine answers (Store and its parts) and the
// values they pass (Meta, Image, View, ChunkPages). A tenant reaches the
// store of a copyset through Of (a running replica) or In (the machines
// opened before its own), never through the chunk store's package.
//
// Invariants: reads only; nothing here proposes or changes a chunk. The
// chunk machine (package chunkstore) implements Provider; any other
// machine registered for kinds.Chunk (a test's toy) may too.
//
// It imports only copyset, internal/kinds and generated protos.
//
// Must not import: chunkstore/..., chunkserver/..., integrity/..., datasync/..., disagg/..., dm/..., cli/..., cmd/...
package chunkread
