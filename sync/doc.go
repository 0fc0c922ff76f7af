// Package sync is the sync service of a chunkserver: the continuous export
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
// holds the sub-task of its own (tid, pid). A record (record.go) is the
// whole AddSyncTaskRequest plus status (upstream's INIT, RUNNING, SUCCESS,
// FAILED, REASSIGNING), count, last update time, the kFull binlog end, a
// failure message and the log indices that created and last changed it;
// at most one per (tid, pid), so one task per pool.
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
//   - PutSubTask: upstream AddSyncTask. A new (tid, pid) is created INIT;
//     the token it has is refused ("why send a same task?"); a new token
//     reassigns it: the token and endpoints are replaced, the stored
//     progress (point, count, mode, dest) is kept, it is RUNNING again
//     unless still INIT. Another task's (tid, pid) and a SUCCESS or FAILED
//     sub-task are refused.
//   - Advance: an accepted packet. Only under the current token, while
//     INIT or RUNNING, from exactly the stored point; it stores the next
//     point, adds the count and becomes RUNNING, or SUCCESS when finished
//     (kFull only, past the binlog end, which SetBinlogEnd records once).
//   - Touch: an empty packet; moves the last update time only.
//   - SetStatus: FAILED or REASSIGNING, with a message; not out of SUCCESS
//     or FAILED. An Advance or Touch of a REASSIGNING sub-task is refused,
//     which fences the collector being replaced.
//   - DeleteTask (every sub-task of a task), DeleteAll (clear_all).
//
// Invariants. Apply is deterministic: every time value travels in the op
// (the proposer's clock; last_update_ms only moves forward), nothing is
// read from the clock or the network, and a refusal is a Result naming
// why (the same on every replica), never a changed state. The state is
// bounded (MaxSubTasks, the Max* sizes, refused at admission and apply).
// Every change appends the whole state, stamped with its log index
// (State.applied), to sync/state.jsonl, a copyset/statefile file: any
// prefix of it loads as the state at some earlier index, Apply skips ops
// at or below the loaded stamp (a replay never counts a packet twice),
// Sync makes it durable, Files lists it (the StateMachine snapshot
// contract of copyset/fsm.go).
//
// Must not import: chunkserver/..., cli/..., cmd/..., test/..., integrity/..., dm/..., disagg/...
package sync
