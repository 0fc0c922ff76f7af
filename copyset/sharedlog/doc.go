// Package sharedlog is a raft log and stable store shared by every copyset
// (raft group) of one chunkserver process.
//
// One hashicorp/raft group runs per copyset and a chunkserver hosts hundreds
// of them. With a store per group the disk sees hundreds of independent small
// fsync streams; this package instead appends the StoreLogs batches of all
// groups to a few shared write-ahead logs and commits them together: a single
// writer goroutine per shard drains everything queued, writes it with one
// write and makes it durable with one fdatasync, then wakes every waiter
// (group commit across copysets).
//
// Layout: Open(Options) returns a *Log; Log.Group(id) returns a *GroupStore,
// the per-copyset view that implements raft.LogStore and raft.StableStore.
// Groups map to shard id % Shards; every shard owns a directory of segment
// files, a commit queue, a writer goroutine and an fdatasync stream. An
// in-memory per-group index maps raft indexes to (segment, offset, length)
// and GetLog reads entries back with pread. DeleteRange and StableStore
// writes are WAL records too. Segments are deleted, oldest first, once no
// group has a live entry in them; Stats reports which groups pin the oldest
// segment so they can be snapshotted early.
//
// # On-disk format
//
//	<Dir>/META                  "sharedlog v1 shards N" (shard count is fixed)
//	<Dir>/LOCK                  flock'ed while open
//	<Dir>/shard-NNN/SSSSSSSSSS.seg   segment files, ids 1, 2, 3, ... (contiguous)
//
// A segment starts with a 24-byte header (magic "CRSL", version, shard,
// segment id, crc32c) followed by records. A segment created by a roll
// first holds a checkpoint: one Set record per stable-store key of every
// group of the shard, so stable-store state never pins old segments. Each
// record is
//
//	uint32 payload length | uint32 crc32c | uint8 type | uint64 group | payload
//
// (little endian; the Castagnoli crc covers length, type, group and payload).
// Types: entries (uvarint count, then per entry uvarint length + encoded
// raft.Log), delete range (uvarint min, max), set (uvarint key length, key,
// value), drop group (empty). An encoded raft.Log is uvarint Index, uvarint
// Term, byte Type, byte flags, [varint AppendedAt in unix ns if flag 1],
// uvarint len(Extensions), Extensions, Data (rest).
//
// # Recovery
//
// Open replays every shard's segments in id order. Files before the last
// gap in the id sequence are leftovers of a garbage collection whose unlinks
// were not durable and are deleted. The first record that is short (torn),
// fails its crc or does not decode ends the shard: its segment is truncated
// at that record and all later segments are deleted; a segment whose header
// is bad is deleted with all later ones. Because every record's effect on a
// raft index is independent of earlier state (entries at a..b replace
// [a, ∞); delete replaces [min, max] with nothing), replaying any contiguous
// suffix of segments that starts at or before the oldest live entry yields
// the same state, which is what allows deleting old segments.
//
// This package must not import other chunkraft packages: it depends only on
// the standard library, hashicorp/raft (for the interfaces and raft.Log) and
// klauspost/crc32, so that it can be tested and benchmarked on its own.
package sharedlog
