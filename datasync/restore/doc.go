// Package restore replays a sync export (sync/exportfmt packets in a
// sync/dest destination) into a cluster through the ordinary ChunkService:
// `chunkctl sync restore` is this package on the cli client ([Target] is
// the seam; tests use a datastore.Store behind it). The user-facing rules,
// the op sequence that rebuilds a snapshot-phase chunk and what
// --until-index/--until-time mean are in docs/sync-format.md (Restore).
//
// # What a restore does, per copyset
//
//  1. Check (before anything is written, for every copyset of the
//     restore): list the copyset's packets, decode each one (every CRC and
//     record check of exportfmt.Decode) and check the chain of points
//     (exportfmt.Chain: all of one export id); the first gap or bad packet
//     (one of another export among them) stops the restore with an error
//     naming it. The export must start at the start (a full
//     export) or at a binlog point (an incremental one) and reach the binlog
//     phase. A manifest, if the copyset has one (manifest.pb and the sealed
//     parts it counts, read whole by ReadManifest), must be of the packets'
//     export and list only packets the export has (see checkManifest): the loss of the last packets leaves
//     an unbroken chain, and only the manifest tells. The until point N is fixed here (the export's last index, the
//     --until-index, or the index of the last binlog record appended at or
//     before --until-time), and checked: N must be at least the earliest
//     consistent point, the largest as_of_index of the snapshot phase (and
//     the index before the binlog phase starts), and at most the last index
//     the export reaches. A --until-time must be at least the earliest time
//     (plan.earliestTime): the first packet's start_state_ms, when the
//     starting state was taken, or, when a chunk was imaged after a later
//     write, that write's append time; for an export without
//     start_state_ms, the append time of its first binlog record at or
//     after the earliest index (none: no time can be restored). Then every
//     target copyset must exist and hold no chunk ([Target.CheckEmpty]).
//  2. Replay, in point order: each snapshot-phase chunk is rebuilt by the
//     op sequence of [Rebuild] (its sn, corrected sn, COW snapshot and the
//     data of both, exactly as of its as_of_index t_c); then the binlog
//     records with index <= N, skipping, for a chunk with snapshot records,
//     those with index <= t_c (its image reflects them), and every PASTE
//     (a CREATE_CLONE record carries the clone source's materialised data,
//     which the restore writes in its place).
//
// A resumed restore (Options.ResumeFrom, resume.go) checks and replays
// each copyset from its restore marker's next record on, onto a target
// copyset whose digest is the marker's instead of an empty one.
//
// # Invariants
//
//   - Nothing is written to any target copyset unless every packet of every
//     copyset of the restore decoded and chained, the until point is
//     restorable for each, and every target copyset is empty. Packets are
//     read again for the replay and checked again; one that changed in
//     between stops the restore there (the copysets replayed so far stay
//     written).
//   - Binlog ops are sent as the source applied them, a chunk's ops one
//     after the other in log order (ops of different chunks commute: each
//     changes its own chunk only, so they run in parallel lanes, a chunk
//     always in the same lane); outcomes the source met too (BACKWARD, a write
//     refused because it needs a snapshot the chunk cannot take) are
//     expected and counted, not errors. A chunk rebuild's steps go one
//     after the other; the writes of one step (one sn, disjoint blocks,
//     which commute: see rebuilder.spread) go Options.WriteDepth at once.
//     The ops of a chunk rebuild must all succeed: anything else means the
//     target was not empty or was changed meanwhile, and is an error.
//   - Copysets are replayed in parallel (Options.Parallel), each by one
//     goroutine owned by Restore, which waits for all of them; a copyset's
//     binlog lanes (Options.ChunkParallel) are goroutines its replay owns
//     and waits for, also after the first failure.
//   - Progress callbacks are serialised.
//
// Must not import: chunkserver/..., copyset/..., cli/..., cmd/..., test/...
package restore
