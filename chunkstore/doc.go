// Package chunkstore is the chunk store as a tenant of the server's
// copysets: the chunk machine of every copyset (replicated chunk ops
// applied to its datastore, chunk images for snapshot streams), the write
// fence machine (a copyset's chunk writes refused from a replicated point
// on, but its owner's), the epoch fence machine and the server's epoch
// map, the read-view machine, Curve's
// ChunkService and the Fences service between servers, the admission of
// chunk requests (in-flight limit, free-space floor), clone sources and
// clone source locks, the copyset hash, and the codecs of the chunk ops
// and their pooled buffers. The chunk files themselves are
// chunkstore/datastore.
//
// Invariants: every chunk op is validated and admitted before it is
// proposed, and its apply is deterministic and idempotent under replay
// (ops carry their (index, position) into the datastore, and a write
// fence decides by the fence in force at the op's index, whatever state a
// replay starts from); a failed apply stops the replica. Other tenants read chunks only through
// internal/chunkread, which the chunk machine implements (reader.go). On
// disk and on the wire nothing depends on where this code lives: the
// chunk and fence machines keep their files in the copyset data dir.
//
// It imports disagg (clone source locks, the view op codec); disagg never
// imports it.
//
// Must not import: chunkserver/..., cli/..., cmd/..., test/..., integrity/..., datasync/..., dm/...
package chunkstore
