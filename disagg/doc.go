// Package disagg is the disagg service of a chunkserver: TiFlash's
// disaggregated-storage RPCs on tikvpb.Tikv, rebuilt on the copysets.
// This part is the S3 lock service (upstream S3LockService): tryAddLock,
// tryMarkDelete and GetDisaggConfig, so that several readers can share
// data files in the object store and a garbage collector marks deleted
// only a file no one holds. As upstream, the lock and delete-mark objects
// in S3 say which locks and marks exist; upstream orders the decisions in
// one elected TiFlash process (the S3 GC owner) with an in-memory latch,
// here they are ordered by the raft log of one copyset (a state machine of
// kind kinds.Disagg, Spec), across leader changes too. The read views
// (EstablishDisaggTask, FetchDisaggPages, CancelDisaggTask) are below,
// "Read views".
//
// Owner. Every copyset opens the machine; only the one on the lock
// copyset (Config.LockCopyset, disagg.lock_copyset, default pool 1
// copyset 1) is used. Its raft leader is the owner: any other server
// answers not_owner (with the owner's address in the chunkraft-owner
// response header when it knows it) and the client retries elsewhere
// (upstream's S3LockClient does).
//
// Keys (keys.go), upstream's S3 layout (TiFlash S3Filename) as object
// names in the server's object store (an S3 store's key prefix is
// upstream's root):
//   - data file: s{store_id}/data/{subpath}, subpath dat_{upload_seq}_{idx}
//     (a checkpoint data file), t_{table_id}/dmf_{file_id} (a DTFile) or
//     ks_{keyspace_id}_t_{table_id}/dmf_{file_id} (a DTFile of a
//     keyspace); a DTFile exists when <key>/meta does. Any other key is a
//     gRPC INTERNAL error, as upstream's RUNTIME_CHECK.
//   - lock: lock/s{store_id}/{subpath}.lock_s{lock_store_id}_{lock_seq}
//   - delete mark: s{store_id}/data/{subpath}.del
//
// The decision (decide.go, settle.go). tryAddLock and tryMarkDelete on
// the owner propose a Pend: Apply refuses it (busy) while a decision of
// the other kind is pending on the key, and the owner waits for that one's
// Settle and proposes again; a mark on a clone-locked key is a conflict.
// With its Pend committed the owner decides by the objects, as upstream: a
// lock needs the data file's object and no .del (else conflict "data file
// not exist" / "data file is mark deleted"), a mark no lock object of the
// file (else conflict "data file is locked, ... lock_by=<lock key>"). It
// writes the lock or .del object, answers success, and the settler
// proposes the decision's Settle. Of a lock and a mark on one key only one
// can win: whichever committed its Pend second decides after the first
// wrote its object. A decision nobody finishes (its owner lost the
// leadership, its request gave up) is completed by the next owner's
// settler, the same check and object while the key is still held. A
// retry is idempotent (the same lock or mark pending is joined; a lock or
// mark already written is written again). Release (chunkctl disagg lock
// release) deletes a store's lock objects with seq <= N.
//
// Clone locks and gc (clone.go, reconcile.go, vanished.go, gc.go;
// docs/disagg-gc.md). chunkraft keeps entries of its own objects in the
// state, keyed by any object name: an @s3 clone chunk locks its source for
// the clone (LockClone, through the owner, recording its copyset's
// members) before its creation is proposed; a leader-only reconciler on
// each copyset releases, after a grace, the locks of clones no longer
// reading their source (ReleaseClone, only if the lock is still older
// than the cutoff), and the owner those of copysets gone from the cluster
// for the grace (complete crawls of the cluster map, seeded with the
// recorded members, found no replica); disagg gc marks unlocked objects (a
// data file as tryMarkDelete does; any other name with MarkObjects, up to
// 256 names an op) and removes marked ones after a grace (Forget, up to
// 256 names an op, for the entries). Times in these ops are the
// proposer's clock.
//
// Invariants. Apply is deterministic: it reads only the state and the op,
// never a clock, the network or the object store; a refusal is a Result
// naming why (the same on every replica) with the state unchanged. The
// state holds no entry per data file ever seen: decisions in flight
// (MaxPending), clone locks and gc marks (MaxFiles, MaxLocks), each
// checked before proposing and again in Apply; gc marks only below gcFill
// entries. The state file disagg/table.jsonl (the copyset/statefile file
// of a copyset/statemachine.Machine with a Journal) is a journal of pb.Line: a base (the whole state, stamped with its log
// index), then each op that changed it with its index; any prefix loads
// as the state at some earlier index (the ops are applied again), Apply
// skips ops at or below the loaded stamp, Sync makes it durable, Files
// lists it (the contract of copyset/fsm.go). The journal is replaced by a
// base once it outgrows its last base eightfold (and 1 MiB). Format 0's
// whole-table file disagg/state.jsonl is converted on open and replaced
// by a directory, which builds before format 2 cannot read.
//
// Read views (view*.go, docs/disagg-views.md; upstream's write-node
// snapshots). A region is a copyset: region_id is the copyset's group id
// (pool << 32 | copyset), region_epoch.conf_ver the copyset's epoch (the
// configuration changes it applied, Node.Status().Epoch), ranges chunk id
// ranges [start, end) as 8-byte big-endian keys (an empty end: no bound;
// no ranges: every chunk). In the answer a table is a pool (table_id) and
// a segment a copyset (segment_id); tables holds one viewpb.Table per
// pool, each segment with its page ids (chunk_id << 20 | block index, the
// blocks that held data at the view's point); PagesPacket.pages holds
// viewpb.Page messages (page id, chunk, offset, data, crc32c of data).
//
// EstablishDisaggTask, on the leader of every requested copyset (else
// error_region naming the regions; another epoch too; any other invalid
// request error_other, gRPC OK as upstream), registers one view per
// copyset through raft (kind kinds.View, viewpb.Register, applied to the
// copyset's chunk store: chunkstore/view_fsm.go). The view's point I is
// the register op's place in the log; from I on every replica keeps the
// pre-image of each block of the view's chunks that is overwritten or
// deleted (chunkstore/datastore/view.go: why that is consistent under
// replay after kill -9 and snapshot install, the reason it lives in the
// chunk store and not in a machine of this package). The task meta
// identifies the task (taskKey): a retried Establish answers the same
// views. One view per task and copyset: the Establish calls of one task
// run one at a time on a server, and the leader registers a view only
// if, after a read barrier and under the copyset's admit lock, the
// copyset has none of the task (else that one is the answer, also one a
// predecessor as leader registered). It is the leader's rule, not
// Apply's, which a replay could not repeat (registerView). Bounds: disagg.views.max_per_copyset views per copyset (checked
// under a per-copyset lock before proposing), max_preimage_bytes per view
// (the chunk store stops saving past it and marks the view over budget,
// its reads fail; the leader then drops it and the next Fetch says why).
//
// FetchDisaggPages pops the segment (fetched once; a refused request, a
// page id outside the view, leaves it), extends the task's lease to now +
// 300 s, streams the pages as of I cut at disagg.views.packet_bytes, then
// drops the segment's view (freeing its pre-images); errors are one error
// packet {code, msg} with gRPC OK (CodeNotFound: unknown snapshot or
// segment, CodeGone: dropped, with why, CodeInvalid, CodeNotLeader).
// CancelDisaggTask drops the task's views at once on every copyset, from
// whichever server it reaches (view_cancel.go): that server has the
// leader of each copyset it knows of (its own replicas' leaders, the
// cluster map's for the others) drop the task's views there
// (DisaggViews.DropTask; the view infos name the task key), until every
// one answered or disagg.views.cancel_timeout (default 5 s); idempotent,
// empty answer. When a leader could not be reached in time the answer is
// gRPC UNAVAILABLE naming the copysets where views may be left: the
// others' views are dropped, those go with their lease, and a retry is
// idempotent.
//
// Leases are the leader's (view_tasks.go): it decides expiry by its wall
// clock and proposes the drop, the deadline it saw pass carried in the op
// for the log; Apply reads no clock. The register op carries the deadline
// of the establish; a new leader (the view's files came with the chunk
// store, so it serves the same bytes) gives a view it finds max(that
// deadline, now + 300 s): an extension its predecessor granted was at
// most 300 s past a fetch before now, so no view expires earlier than on
// the old leader. The extension a Fetch grants is the leader's memory
// only (no op carries it): a new leader can keep a view up to 300 s
// longer than its predecessor would have, never shorter. Which segments
// were fetched is the leader's memory too: after a leader change a
// segment whose view was not dropped yet can be fetched again.
//
// Must not import: chunkserver/..., chunkstore/..., cli/..., cmd/..., test/..., datasync/..., integrity/..., dm/...
package disagg
