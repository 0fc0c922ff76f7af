// Package sharedlog is a raft log and stable store shared by every copyset
// (raft group) of one chunkserver process.
//
// One hashicorp/raft group runs per copyset and a chunkserver hosts hundreds
// of them. With a store per group the disk sees hundreds of independent small
// fsync streams; this package instead appends the StoreLogs batches of all
// groups to a few shared write-ahead logs and commits them together: a single
// writer goroutine per shard drains everything queued, writes it with one
// write and makes it durable with one fdatasync, then wakes every waiter
// (group commit across copysets) and yields the processor, so that the
// waiters queue their next records before it drains the queue again.
// Records are chained in place (a record is encoded once), and an entry
// payload of 64 KiB or more is referenced by its record, not copied into it
// (encodeEntries). On Linux, where
// the filesystem takes O_DIRECT,
// a commit to a preallocated segment copies them into one aligned buffer
// and writes it with O_DIRECT, bypassing the page cache: the log is written
// once and rarely read, and filling fresh page-cache pages costs the kernel
// more than the copy (direct_linux.go). Otherwise the write is one pwritev
// of the records' own buffers, never copied into a batch buffer.
//
// Layout: Open(Options) returns a *Log; Log.Group(id) returns a *GroupStore,
// the per-copyset view that implements raft.LogStore and raft.StableStore.
// Groups map to shard id % Shards; every shard owns a directory of segment
// files, a commit queue, a writer goroutine, an fdatasync stream and a
// preparer goroutine that keeps the next segment file ready. An
// in-memory per-group index maps raft indexes to (segment, offset, length)
// and GetLog reads entries back with pread. DeleteRange and StableStore
// writes are WAL records too. Segments are retired, oldest first, once no
// group has a live entry in them (recycled as the next segment, or deleted); Stats reports which groups pin the oldest
// segment so they can be snapshotted early.
//
// # On-disk format (version 2)
//
//	<Dir>/META                  "sharedlog v2 shards N" (shard count is fixed)
//	<Dir>/LOCK                  flock'ed while open
//	<Dir>/shard-NNN/SSSSSSSSSS.seg     segment files, ids 1, 2, 3, ... (contiguous)
//	<Dir>/shard-NNN/QQQQQQQQQQ.spare   spare segment files (at most Options.SpareSegments)
//	<Dir>/shard-NNN/QQQQQQQQQQ.spare.tmp  a spare being zero-filled
//
// A directory of another version (v1 existed only in development builds)
// is refused with ErrUnsupportedFormat; it is not converted.
//
// Segment files are preallocated: they are written to their full size
// (Options.SegmentSize; zeros, or the records of a previous life) and made
// durable before they become active, so that a group commit's write never
// changes the file's size or extents and its fdatasync is a pure data flush
// (appending would make every fdatasync commit the inode through the
// filesystem journal). Writes are padded with zeros to a page boundary so
// that they never read a page from disk first (and, written with O_DIRECT,
// end on a block boundary). Each shard's preparer
// goroutine keeps the next segment ready as a spare: a segment freed by
// garbage collection is renamed to a spare (recycled) instead of being
// deleted, up to Options.SpareSegments of them, and only when none is left
// is a new one zero-filled (see spare.go). A new log's first segment is an ordinary growing file
// until the first spare is ready.
//
// A segment starts with a 36-byte header (magic "CRSL", version, shard,
// segment id, salt, prevEnd, crc32c), written when the segment becomes
// active. The salt is random and differs from the file's previous one;
// prevEnd is where the records of the previous segment end. The header is
// followed by a checkpoint: one Set record per stable-store key of every
// group of the shard, so stable-store state never pins old segments. Then
// come records, each
//
//	uint32 payload length | uint32 crc32c | uint32 link | uint8 type | uint64 group | payload
//
// (little endian; the Castagnoli crc covers length, type, group and
// payload; link = crc32c(previous record's link, or the salt for the first
// record | this record's crc), which chains every record to the segment's
// incarnation and to all records before it). After the last record the
// file holds zeros or garbage. Types: entries (uvarint count, then per
// entry uvarint length + encoded raft.Log), delete range (uvarint min,
// max), set (uvarint key length, key, value), drop group (empty). An
// encoded raft.Log is uvarint Index, uvarint Term, byte Type, byte flags,
// [varint AppendedAt in unix ns if flag 1], uvarint len(Extensions),
// Extensions, Data (rest).
//
// # Recovery
//
// Open replays every shard's segments in id order. Files before the last
// gap in the id sequence are leftovers of a garbage collection whose unlinks
// or renames were not durable and are deleted; so are unfinished spares
// (.spare.tmp) and the spares beyond Options.SpareSegments. A segment whose header is bad ends the
// shard: it and all later segments are deleted. Segment k is valid up to the
// prevEnd in the header of segment k+1; the last segment up to its first
// record that is short, fails its crc or its link, or does not decode: that
// is the end of the log, and the rest of the file (zeros, a torn batch,
// records of the file's previous life, which do not continue the chain) is
// left in place and overwritten by later appends (a growing file is
// truncated there). A bad record before the prevEnd of a non-last segment
// ends the shard there and deletes all later segments. Because the link
// chain starts at the salt, a record written in an earlier incarnation of a
// recycled file can never continue the new one; because it runs through
// every record, a record of a torn batch that lies after a record rewritten
// since the crash does not continue it either (unless that record was
// rewritten byte for byte, when what follows is what the same writer wrote
// next). Because every record's effect on a raft index is independent of
// earlier state (entries at a..b replace [a, ∞); delete replaces [min, max]
// with nothing), replaying any contiguous suffix of segments that starts at
// or before the oldest live entry yields the same state, which is what
// allows deleting old segments.
//
// This package must not import other chunkraft packages except
// internal/bufpool (standard library only): it depends on the standard
// library, hashicorp/raft (for the interfaces and raft.Log) and
// klauspost/crc32, so that it can be tested and benchmarked on its own.
//
// Must not import: github.com/chunkraft/chunkraft/..., !internal/bufpool
package sharedlog
