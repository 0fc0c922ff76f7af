// Package datastore keeps the chunks of a chunkserver on a local disk: one
// file per chunk, each a meta page followed by the chunk's data, in the model
// of Curve's CSDataStore.
//
// # Files
//
// A [Store] owns one directory, [Options.Dir]. Chunk id N lives in the file
// "chunk_N" (N in decimal, no leading zeros). The file is exactly
// [Options.PageSize] + [Options.ChunkSize] bytes long: the meta page (see
// [MetaPage]) occupies file offsets [0, PageSize) and chunk data offset X
// lives at file offset PageSize+X. New files are sparse; ranges that were
// never written read as zeros.
//
// A chunk file is created on the first write to the chunk: the store builds
// "chunk_N.tmp" at full size, writes and fsyncs its meta page, renames it to
// "chunk_N" and fsyncs the directory, so after a crash a chunk file either
// exists with a valid meta page or does not exist. Leftover "chunk_N.tmp"
// files are removed by [Open]; files with any other name are ignored, which
// leaves room for snapshot files ("chunk_N_snap_S") and pool files later.
//
// # Durability
//
// The store is the state machine below a Raft log, so it does not make chunk
// data durable on the write path: [Store.WriteChunk] writes with a plain
// pwrite and marks the chunk dirty. [Store.Sync] fsyncs every dirty chunk and
// must be called before the log entries that produced those writes are
// truncated. After a crash the log is replayed from the last snapshot; the
// write rules (sequence-number guard, idempotent writes and deletes) make that
// replay safe. File creation, meta pages of new files, and deletion are made
// durable at once, because a replayed log cannot repair a directory that lost
// or resurrected a file.
//
// # Sequence numbers
//
// Every chunk carries the sequence number (sn) of the volume's current
// snapshot epoch at its last write and a corrected sn (see [ChunkInfo]). A
// request whose sn is older than the chunk's is refused with [ErrBackward];
// this is how the replay of an old log entry, or a client that missed a volume
// snapshot, is stopped from overwriting newer data. In this version a request
// with a newer sn only persists the new sn; the copy-on-write chunk snapshots
// that Curve takes at that moment, clone chunks, per-block checksums and the
// preallocated file pool come later and will extend the meta page under a new
// version number (see [MetaPage]).
//
// # Concurrency
//
// All methods of [Store] are safe for concurrent use. Each chunk has its own
// lock: operations on different chunks run in parallel, reads of one chunk
// run in parallel with each other, and a write or delete of a chunk excludes
// other operations on that chunk only.
//
// # Dependencies
//
// This package is a leaf: it must not import Raft (hashicorp/raft or the
// copyset package), gRPC, or generated protobuf code, nor any other package of
// this module. Callers map its sentinel errors (see errors.go) onto protocol
// status codes.
package datastore
