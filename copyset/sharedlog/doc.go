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
// This package must not import other chunkraft packages: it depends only on
// the standard library, hashicorp/raft (for the interfaces and raft.Log) and
// klauspost/crc32, so that it can be tested and benchmarked on its own.
package sharedlog
