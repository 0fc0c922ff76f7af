// Package datastore keeps the chunks of a chunkserver on a local disk: one
// file per chunk, each a meta page, the chunk's data and a table of per-block
// checksums, in the model of Curve's CSDataStore (sequence numbers,
// copy-on-write chunk snapshots, clone chunks, a preallocated file pool).
//
// # Files
//
// A [Store] owns one directory, [Options.Dir]:
//
//	chunk_<id>               chunk id (decimal, no leading zeros)
//	chunk_<id>_snap_<sn>     copy-on-write snapshot of chunk id at sn (cow.go)
//	chunk_<id>_view_<seq>    pre-images of chunk id for the read view
//	                         registered by the op at seq (view.go)
//	chunk_<id>_vbase_<seq>   chunk id as the op at seq deleted it, kept for
//	                         the read views covering it (view.go)
//	view_<seq>               a read view's info (view.go)
//	*.tmp                    a file under construction; disposed of by Open
//
// Every chunk and snapshot file has the same length and layout:
//
//	[0, PageSize)                        meta page: MetaPage (MetaVersion3) or
//	                                     SnapMetaPage (SnapMetaVersion1)
//	[PageSize, PageSize+ChunkSize)       data: data offset X at PageSize+X
//	[PageSize+ChunkSize, end)            crc table: 4 bytes per block, zero-
//	                                     padded to a multiple of PageSize
//
// A file is created as "<name>.tmp" (taken from the [FilePool] if
// [Options.Pool] has a ready file, else created sparse; the pool refills
// only after a quiet period without creations, [DefaultPoolQuiet], and a
// file it is zeroing pauses at a creation), its
// meta page written and fsynced, renamed to its name, and the directory
// fsynced: after a crash a file either exists with a valid meta page or
// does not exist. Deleted files go back to the pool (or are removed), and
// the directory is fsynced. Files with other names are ignored.
//
// # Checksums
//
// Every block's crc32c is kept in the crc table and verified on every read
// (crc.go); a mismatch fails the read with [ErrCRC] naming chunk and block.
// Zero blocks have checksum entry 0, so unwritten blocks, new sparse files
// and zeroed pool files need no initialisation.
//
// # Writes and the page cache
//
// Data goes through the page cache in 64 KiB pieces (maxWritePiece: small
// folios keep later 4 KiB overwrites cheap), and a write of 256 KiB or more
// starts its writeback at once (earlyWritebackMin, writeback_linux.go).
// Neither changes durability: Sync (fsync) is what makes data durable, and
// until then the raft log holds every applied write.
//
// # Sequence numbers, snapshots and clones
//
// Every chunk carries the sequence number (sn) of the volume's snapshot epoch
// at its last write and a corrected sn. A request whose sn is older is
// refused with [ErrBackward]: this is how the replay of an old log entry, or
// a client that missed a volume snapshot, is kept from overwriting newer
// data. A write with a newer sn snapshots the chunk and copies blocks into
// the snapshot before overwriting them ([Store.WriteChunk], cow.go). Clone
// chunks fill lazily from a source location (clone.go).
//
// # Durability
//
// The store is the state machine below a Raft log; [Store.Sync] must be
// called before log entries are truncated, and after a crash every entry
// after the last Sync is applied again. What a crash without Sync preserves:
//
//   - File existence is always durable: chunk and snapshot creation
//     (including the creating write's meta page and, for clones, location)
//     and deletion are fsynced, file and directory, before they return.
//
//   - Snapshot copies are durable before the chunk blocks they preserve are
//     overwritten (cow.go).
//
//   - Chunk data, checksums and meta changes after creation (sn, corrected
//     sn, clone bitmap, clone-to-normal) are durable only after Sync; any
//     subset of them may survive, except that a meta page on disk is never
//     newer than the data it describes, since Sync writes it only after
//     fsyncing the data (see [Store.Sync]).
//
//   - Removing a snapshot (DeleteChunkSnapshotOrCorrectSn) first makes the
//     chunk's meta page durable, after its data.
//
// # Read views
//
// A read view (view.go) keeps, from its register op on, the pre-image of
// every block of its chunks that is overwritten (with the copy path of
// the snapshots, copyOut) and the files of its chunks that are deleted
// (moved aside, not copied), until it is dropped: reads as of the
// register op, for the disagg service. view.go argues why the pre-images
// stay consistent with the chunks under replay and snapshot streams.
//
// # Replay
//
// The replicated ops come with their place in the raft log, a sequence
// number increasing in log order (WriteChunkAt and the other ...At methods;
// the plain methods are the same ops unstamped, 0). The chunk machine's is
// the entry's index << 8 | the op's position in the entry, since batched
// ops share an entry. Every change of a chunk's meta (creation, sn,
// corrected sn, snapshot creation or removal, clone bitmap) stamps the meta
// with the op's number ([MetaPage.Seq]), and that stamp reaches the disk
// with the meta page. An op on a chunk whose stamp is later than the op's
// number is skipped: the
// chunk's state already reflects it, its data is durable with the page
// (written after the data was fsynced), and applying it again could change
// its outcome, since a later op may have removed the reason it was refused
// (a write refused because an older snapshot still existed is accepted once
// a later op has deleted the snapshot). The op at the stamp itself applies
// again, harmlessly, as does every op after it: writes rewrite the same data
// and checksums; a write finding a snapshot with snap.sn >= chunk.sn (made
// by the op before a crash lost its meta page) does not make another; COW
// skips blocks already in the snapshot; pastes skip blocks marked written;
// deletes and creations of existing clones succeed again. A block whose
// data and checksum were torn by the crash is rewritten by its replayed
// write before anything reads it through the log.
//
// A chunk's files copied live while writes go on can mix moments, which no
// replay repairs once a copy-on-write reads the mixed block; [Store.ChunkImage]
// copies a chunk and its snapshot as of one moment, stamped with the number
// of the last op on the chunk, for a snapshot stream or an export.
//
// # Concurrency
//
// All methods of [Store] are safe for concurrent use. Each chunk has its own
// lock: operations on different chunks run in parallel, reads of one chunk
// run in parallel with each other, and a write, paste or delete of a chunk
// excludes other operations on that chunk only. Sync fsyncs without holding
// chunk locks.
//
// # Dependencies
//
// This package is a leaf: it must not import Raft (hashicorp/raft or the
// copyset package), gRPC, generated protobuf code, prometheus, nor any other
// package of this module. Callers map its sentinel errors (see errors.go)
// onto protocol status codes.
//
// Must not import: github.com/chunkraft/chunkraft/..., github.com/hashicorp/raft/..., google.golang.org/grpc/..., google.golang.org/protobuf/..., github.com/prometheus/...
package datastore
