// Package chunkop is the codec of the chunk machine's replicated op: a
// Curve ChunkRequest (without its data field) and the write data, behind
// the copyset op header of kind kinds.Chunk. The chunk machine
// (chunkserver) proposes and applies it; the sync export (sync/) reads it
// back from the raft log.
//
// Payload layout (after the copyset op header), as Curve's
// ChunkOpRequest::Encode: a 4-byte big-endian length n, n bytes of the
// marshalled ChunkRequest without its data field, then the raw write data.
// A write may carry a pre-image for the chunk's read views (PreImage):
// then the length's top bit is set and the data is followed by the
// pre-image's bytes and a 16-byte footer (big-endian view seq, first
// block, pre-image length). An op proposed by a write fence's owner
// (EncodeOwned) carries the owner last: the length's second bit is set
// and the op ends with the owner's bytes and their big-endian 2-byte
// length. A build older than the owner trailer refuses such an op (its
// length does not fit the payload), which stops its replica: every
// server must run a build that knows it before a fence owner writes.
//
// Must not import: github.com/chunkraft/chunkraft/chunkserver/..., github.com/chunkraft/chunkraft/cli/..., github.com/chunkraft/chunkraft/datasync/..., github.com/chunkraft/chunkraft/cmd/...
package chunkop
