// Package datasync is the sync service of a chunkserver: the continuous export
// of a logical pool to files or S3 (OpenMLDB's openmldb.datasync, rebuilt
// on the copysets). This part is its replicated state: a state machine
// (kind kinds.Sync, Spec) on every copyset that holds the sub-task records
// of the export tasks of the copyset's pool, so that any server can answer
// for any task and no restart, leader change or lost server loses
// progress. The collectors, the SyncTool service and SendData are built on
// it (they propose the ops below and read Get and List).
//
// Mapping. A task exports one pool: db is the pool id in decimal, name the
// task's name; tid is the pool id, pid the copyset id, and each copyset
// holds the sub-tasks of its own (tid, pid). A pool may have several tasks
// (at most MaxTasksPerPool), each of its own name, so a sub-task is
// (tid, pid, name): the key of the records, kept in that order (a state of
// one task per (tid, pid), as written before, is in it). A record
// (record.go) is the whole AddSyncTaskRequest (with chunkraft's task_name
// and export_id) plus status (upstream's INIT, RUNNING, SUCCESS, FAILED,
// REASSIGNING), count, last update time, the last packet's written_at_ms,
// the kFull binlog end, a failure message and the log indices that created
// and last changed it. Each task has its own token per sub-task, its own
// collector, dest, status and log pin (the machine's log hold is the
// lowest cursor over every live sub-task, of whatever task).
//
// Export id. Every task has an export id, 128 random bits in hex chosen by
// the server that handles CreateSyncTask (the DataCollector's AddSyncTask
// chooses one for a sub-task it creates without one) and carried in the
// PutSubTask op, so that apply takes it and stays deterministic; the same
// for every sub-task of the task, kept when a sub-task is reassigned. Every
// packet and heartbeat carries it (PacketHeader.export_id,
// SendDataRequest.export_id) and the time its collector built it
// (written_at_ms). SendData refuses a packet of another export than its
// sub-task's, and the SyncTool writes no packet into a copyset directory of
// the dest that holds another export's manifest or packets (destCache.claim:
// it looks once per directory and server, at the manifest and the first and
// last packets; the puts of one directory are serialised in a server): the
// sub-task is set FAILED with a message naming both ids. A sub-task created
// before export ids has none, and its packets carry none, as before.
//
// Requests without a task name. Upstream's protocol names sub-tasks by
// (tid, pid). An AddSyncTask or SendData without chunkraft's task_name
// addresses the (tid, pid)'s only task, and is refused naming the tasks
// when there are several; so is an op whose ref has no name (one written
// to the log before copysets held several tasks): apply resolves it
// against the state, the same on every replica (ErrTaskNotNamed).
//
// SyncPoint (point.go): kSNAPSHOT with neither pk nor offset is the very
// start; else pk is a chunk id in decimal and offset a byte offset in it;
// kBINLOG's offset is the next raft log index to export (inclusive); ts is
// not used. A packet covers [start, next); points are ordered snapshot
// (by chunk, offset) before binlog (by index), and no packet goes back.
//
// Ops (syncstatepb.Op, proposed with the Encode functions, which run the
// Validate functions first: admission refuses bad input with one line and
// it never reaches the log):
//   - PutSubTask: upstream AddSyncTask. A new (tid, pid, name) is created
//     INIT (with the request's export id), unless its (tid, pid) has
//     sub-tasks of MaxTasksPerPool tasks already; the token it has is
//     refused ("why send a same task?": a task-wide put retried after a
//     lost answer takes that refusal, with its own token in the record, as
//     its success); a put of another export id is a create whose name is
//     taken, refused with upstream's "sync task already exists(creating or
//     created)"; a new token with the sub-task's export id or none
//     reassigns it: the token and endpoints are replaced, the stored
//     progress (point, count, mode, dest, export id) is kept, it is RUNNING
//     again unless still INIT. A SUCCESS or FAILED sub-task is refused.
//   - The ops below name one sub-task by a ref (tid, pid, token, name); a
//     ref without a name is resolved as above.
//   - Advance: an accepted packet. Only under the current token, while
//     INIT or RUNNING, from exactly the stored point; it stores the next
//     point, adds the count and becomes RUNNING, or SUCCESS when finished
//     (kFull only, past the binlog end, which SetBinlogEnd records once).
//     The first one records the binlog start and the start time; one that
//     ends in the binlog moves the covered index to its next index - 1 and
//     the covered time to the packet's (below), each only forward; the
//     last packet time moves to its written_at_ms, only forward.
//   - Touch: an empty packet (a heartbeat); moves the last update and
//     packet times and, when it is at the stored point, a binlog point,
//     the covered index and time to the heartbeat's, each only forward.
//   - SetStatus: FAILED or REASSIGNING, with a message; not out of SUCCESS
//     or FAILED. An Advance or Touch of a REASSIGNING sub-task is refused,
//     which fences the collector being replaced.
//   - DeleteTask (every sub-task of a task; with an export id, only those
//     of that export: a failed create's undo removes its own sub-tasks,
//     never those of another create of the same name), DeleteAll
//     (clear_all).
//
// Invariants. Apply is deterministic: every time value travels in the op
// (the proposer's clock; last_update_ms only moves forward), nothing is
// read from the clock or the network, and a refusal is a Result naming
// why (the same on every replica), never a changed state. The state is
// bounded (MaxSubTasks, MaxTasksPerPool, the Max* sizes, refused at
// admission and apply).
// Every change appends the whole state, stamped with its log index
// (State.applied), to sync/state.jsonl, the copyset/statefile file of a
// copyset/statemachine.Machine: any prefix of it loads as the state at some earlier index, Apply skips ops
// at or below the loaded stamp (a replay never counts a packet twice),
// Sync makes it durable, Files lists it (the StateMachine snapshot
// contract of copyset/fsm.go).
//
// # Why the export is exact
//
// Export (export.go) makes a sub-task's packets: a snapshot phase of chunk
// images, then a binlog phase of the raft log's chunk ops. Replaying them
// (snapshot records, then binlog records in order) gives exactly what the
// copyset's clients could read as of the last exported index:
//
//  1. The pin. When the snapshot phase starts, the exporter reads the
//     applied index I and pins the log at B = I+1, the binlog start (sent
//     with every packet, replicated with the first). The applied index
//     moves only once its entry's ops are applied, so every op up to I is
//     in the chunk store before the first image is taken; the pin keeps
//     every entry from B on until the binlog phase has exported it. The
//     binlog phase is the complete sequence of ops after I. (A phase
//     that waits for its server's SnapshotGate reads I once through it:
//     the wait is before the pin, not between the pin and the images.)
//  2. The images. A chunk is exported from one image (datastore
//     Store.ChunkImage: the chunk and its COW snapshot copied under the
//     chunk's lock, as of one moment), stamped with T, the place in the log
//     of the last op applied to the chunk: its entry's index and its
//     position among the entry's ops (several ops share an entry when
//     proposals are batched; the chunk machine applies them one by one, so
//     an image can lie between two of them). It holds every op on the chunk
//     up to T and none after. All its records come from that image and go
//     in one packet (as_of_index, as_of_op = T); a chunk never mixes
//     moments, which no replay repairs (a copy-on-write of a block from
//     another moment).
//  3. Replay. A restore rebuilds each chunk from its records, then applies
//     the binlog from B in order, skipping a chunk's ops before T (by index,
//     then op_position). The op at T applies again: harmless, since it is
//     applied to the state it left (a chunk op applied twice in a row leaves
//     the state it left once). Skipping it instead would do too, but only
//     the position tells it apart from a later op of its entry, which must
//     apply: replaying an earlier op of the entry after a later one could
//     change its outcome (a write refused for an older snapshot, applied
//     again after the entry's DELETE_SNAP removed that snapshot, would
//     succeed). From there the restored chunk goes through the source's ops
//     from the source's state, and a chunk op's outcome is a function of the
//     chunk's state and the op (sn guards, snapshot rules; epoch fences
//     refuse at admission, so refused ops never reach the log), so it ends
//     in the source's state.
//  4. Chunks without an image: one gone when imaged (deleted after I) or
//     not listed (deleted or created after I) has its deletion, or its
//     whole life, in the binlog; replayed from nothing, the ops before its
//     deletion act on an empty chunk that the deletion removes.
//  5. Clones. An image holds what a client reads (a clone chunk's data
//     materialised), and a CREATE_CLONE op carries the materialised data of
//     its location, so a restore never reads the source cluster (clone
//     sources, snapshots or read-only volumes, do not change). PASTE ops
//     are exported as they are; a restore ignores them, the materialised
//     data already holds what they paste.
//  6. Resume. A new collector (perhaps on a new leader) goes on from the
//     stored point. In the snapshot phase it keeps the stored B: it waits
//     until its replica has applied B-1, pins B again (the machine's log
//     hold, below, kept B on this replica too; if the log no longer holds
//     B all the same, a bound let it go, Export fails with ErrLogGone and
//     the task must start again) and images the chunks left, at later
//     moments, which 1-4 cover. A packet sent but not acknowledged is made
//     again from the same start, so it replaces its first copy.
//
// # What an export covers
//
// A sub-task's point says which chunk ops are in packets at the dest. A
// tailing export does not send a packet for entries without a chunk op
// (every packet replicates an Advance, one more such entry; they go with
// the next op, or once maxEmptySpan of them wait), so on a quiet copyset
// the point stays behind the log. The record says more, replicated like
// the rest (the values travel in the ops; Apply only takes maxima, so a
// replay changes nothing):
//
//   - The covered index C: every entry up to C is in a packet the dest
//     holds, or was read by the collector and holds no chunk op. A packet
//     [s, n) of the binlog phase, once written, covers n-1; a heartbeat at
//     point s covers the entries from s that its export read, none of
//     them a chunk op (its covered_index), and counts only while s is the
//     stored point (so everything before s is in packets).
//   - The covered time: every write the copyset acknowledged before it is
//     at or below C. The binlog phase takes a read barrier (Source.
//     ReadBarrier: an index at or above every write acknowledged before
//     the call, on the leader, under its lease) at time t, at most every
//     quarter of Idle; once it has read every entry up to that index, the
//     packets and heartbeats that reach it carry t.
//   - The start time (start_state_ms): when the starting state at the
//     binlog start B - 1 was taken, the collector's clock right after it
//     read the applied index B - 1 and pinned B; every op up to B - 1 was
//     applied, so appended, by then. An incremental export's is its
//     start_ts. Recorded with B from the first packet and carried by
//     every packet, so that a restore refuses a time before it (sync/
//     restore): the ops before B are not in the binlog, and nothing else
//     says when they happened.
//
// TaskStatus reports C and the covered time in each sub-task's readable
// info (coveredIndex, coveredTime), with the last packet time and the
// export id (lastPacketTime, exportId): `chunkctl sync status`.
//
// # Log retention
//
// The exporter's pin (copyset.LogPin) is in memory on the leader that runs
// the collector. So that followers keep the log too, and a leader change
// or the loss of a server loses nothing, the machine holds its replica's
// log (copyset.LogHold, MachineEnv.Log) from retainFrom(state): the lowest
// cursor of its live sub-tasks (INIT, RUNNING, REASSIGNING): a binlog
// point's index; in the snapshot phase the binlog start B, or, before the
// first packet records B, the sub-task's created index + 1 (B is the
// applied index + 1 of a leader that applied the creation, so never
// lower); a kIncrementalByTimestamp sub-task only from its first packet
// on (its start in the log is found by its collector). Every replica
// computes the same from the replicated records; the hold is set after the
// state loads (a restart, a snapshot install) and after every change an
// op applies, so it moves forward with Advance and is released by FAILED,
// SUCCESS and the deletes (and when the machine closes). It is never
// late: raft truncates nothing above the applied index, so the hold set
// when a creation at index c applies keeps c+1 on, and every later cursor
// is at or above the one held before it (the first packet's B is above
// c). Only an incremental sub-task's first entries are unheld until its
// first packet (a follower may truncate them meanwhile; the sub-task then
// fails only if that follower becomes its leader).
//
// Bounds: both pins obey the copyset's raft.max_pinned_entries and
// sync.max_retained_bytes (copyset.RaftOptions.MaxPinnedBytes, about the
// bytes of entry data from the pin to the last index). A compaction that
// finds a pin further behind moves it up; a hold moved up never fails and
// the replica goes on; the collector on the leader learns it from its own
// pin (a *copyset.LogPinCappedError on its next read) or when pinning its
// cursor again is refused (the same error), and turns the sub-task FAILED
// with a message naming the bound, which releases every replica's hold.
//
// So a restore is exact at the last exported index, and at every index from
// the end of the snapshot phase (the applied index when its last image was
// taken) on. At an index inside the snapshot phase's window it is not: a
// chunk imaged later may hold ops after that index (a restore --until-index
// must not go below the largest as_of_index of the snapshot records).
//
// Must not import: chunkserver/..., chunkstore/..., cli/..., cmd/..., test/..., integrity/..., dm/..., disagg/...
package datasync
