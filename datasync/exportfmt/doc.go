// Package exportfmt is the export format of the sync service: how a
// copyset's export is cut into packets, how a packet is encoded and named,
// the manifest that lists a copyset's packets, and the checks a reader
// (chunkctl sync restore) makes. The messages are chunkraft.sync's
// (proto/chunkraft/syncpb/export.proto); the byte layout, the naming and
// the reader's checks are documented for users in docs/sync-format.md.
//
// # Points
//
// A [Point] is a position in a copyset's export, the upstream
// openmldb.datasync.SyncPoint with chunkraft's meaning ([ParsePoint],
// [Point.Proto]):
//
//   - the start: kSNAPSHOT with no pk (and no offset);
//   - a snapshot point: kSNAPSHOT, pk = a chunk id in canonical decimal,
//     offset = a byte offset in that chunk (at most 2^32-1; absent means 0);
//   - a binlog point: kBINLOG, offset = the next raft log index to export,
//     inclusive (at least 1).
//
// ts is never used. Points are totally ordered ([Point.Compare]): the start,
// then snapshot points by (chunk, offset), then binlog points by index.
//
// # Invariants
//
//   - A packet covers [start_point, next_point) with next_point >= start_point;
//     a packet whose next equals its start holds no record (a heartbeat; it
//     need not be written, and the next packet, of the same name, replaces
//     it).
//   - A packet whose start is the start or a snapshot point holds only
//     snapshot and COW snapshot records, each at a (chunk, offset) inside
//     [start, next); its next may be a binlog point (the switch to the
//     binlog phase). A packet whose start is a binlog point holds only binlog
//     records, with indexes non-decreasing (several ops may share an entry)
//     and inside [start, next).
//   - A packet's records are applied in order. A packet with no record but
//     next > start (log entries that carry no chunk op) still belongs in the
//     chain: it must be written, or the chain has a gap.
//   - One object per packet, named by its start point ([PacketName]): a
//     resent packet replaces itself, and the lexical order of the names of
//     one copyset is the order of their start points.
//   - A copyset's packets form a chain: sorted by name, each one's
//     start_point is the previous one's next_point ([Chain]), and all are
//     of one export (the same export_id, [Chain.AddPacket]; the empty id
//     of an export written before ids goes with empty ids only). Its
//     manifest, and every sealed part of it, has that export_id too.
//   - [Decode] returns a packet only when every check passes: the magic,
//     the version, the lengths, the body's CRC-32C, the record count, the
//     points and the records' places; otherwise its error names what is
//     wrong. Packets are at most [MaxPacketSize] bytes, both ways. Decode
//     never panics on any input (FuzzDecode).
//   - Encoding is deterministic: the same header and records give the same
//     bytes.
//   - A manifest is cut into sealed parts ([Seal], [ManifestPartName]) of
//     [ManifestPartEntries] entries; manifest.pb keeps at least its last
//     entry, so a resent last packet never changes a sealed part, and each
//     part names the last entry of the one before ([JoinManifest] checks
//     the order).
//
// The package is pure: no I/O, no clock; the sync service and the restore
// command do the reading and writing.
//
// Must not import: github.com/chunkraft/chunkraft/..., !proto/...
package exportfmt
