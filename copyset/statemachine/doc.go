// Package statemachine is the small replicated state machine that keeps
// its whole state in one copyset/statefile file, stamped with the log
// index of the last op that changed it (integrity jobs, sync sub-tasks,
// disagg's lock table, the chunk store's write fences). A tenant supplies
// its state type, its op decoder, its apply function and its line codec
// (JSONState for a state kept as JSON); Machine does the rest: decoding,
// the replay guard, stamping, persistence, the mapping of failures to
// *copyset.FatalError, Sync, Files, Close, and loading.
//
// Apply, for an op at log index i:
//
//  1. Decode the payload; an op that does not decode is a
//     *copyset.FatalError (a newer op kind, a corrupt log: going on would
//     diverge).
//  2. i <= the state's applied index: the op is already in the state (a
//     replay after a crash, or after a snapshot install whose file is newer
//     than the snapshot index). Nothing changes; the answer is the tenant's
//     Replayed answer, or the zero result.
//  3. Apply the op to the state in place, under the machine's lock. An op
//     that changes nothing is answered and not persisted.
//  4. Stamp i as the applied index, encode and persist: the whole state
//     as one line (Append, which compacts the file to its last line), or,
//     with a Journal, one entry line for the op and from time to time the
//     whole state as the file's only line (a base). An encode or write
//     failure is a *copyset.FatalError: the state in memory is ahead of
//     the file and must not be answered from.
//  5. Call the tenant's Changed hook, outside the lock.
//
// Why each machine guards replays itself rather than the copyset (as a
// disk state machine whose Open returns its persisted index would have
// it): the machines of a copyset share one apply goroutine and one raft
// log but persist independently, each at its own index, and several
// tenants answer a replayed op from their state (the sub-task or the job
// it names) rather than drop it. The stamp and the guard sit together in
// the state they protect, in one place here, and the copyset's apply loop
// stays the same for every machine, including the chunk machine that
// stamps (index, position).
//
// The fence machine (chunkstore/fence.go) is not a tenant: its table
// only rises, it keeps no index stamp, its load merges every line (the
// greatest epoch of each file) rather than take the newest, and every
// apply, a replay included, raises the server's epoch map again. A
// replay is harmless there by monotonicity, not by a guard.
//
// Invariants:
//   - The state changes only in Apply, under the machine's lock; readers
//     take View. The stamp is the index of the last op that changed it.
//   - A stamped op is never applied twice: loading restores the stamp with
//     the state it belongs to (the newest whole-state line, or a base plus
//     the entries above its stamp), so any prefix of the file, including
//     one a snapshot stream cut or a torn last write, loads as an earlier
//     state and the log replays the rest.
//   - A tenant's machine may not share a log index with other ops (its
//     MachineSpec is not Batch): the stamp is the index alone.
//   - The on-disk lines are the tenant's; this package adds nothing.
//
// Must not import: chunkserver/..., cli/..., cmd/..., test/..., internal/kinds, integrity/..., datasync/..., dm/..., disagg/...
package statemachine
