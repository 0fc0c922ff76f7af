// Package disagg is the disagg service of a chunkserver: TiFlash's
// disaggregated-storage RPCs on tikvpb.Tikv, rebuilt on the copysets.
// This part is the S3 lock service (upstream S3LockService): tryAddLock,
// tryMarkDelete and GetDisaggConfig, so that several readers can share
// data files in the object store and a garbage collector marks deleted
// only a file no one holds. Upstream keeps the decision in one elected
// TiFlash process (the S3 GC owner) and in S3 objects; here the lock
// table is a replicated state machine (kind kinds.Disagg, Spec) and
// survives the loss of any one server. The read views (EstablishDisaggTask,
// FetchDisaggPages, CancelDisaggTask) are not built yet: they answer
// Unimplemented, as every TiKV method does.
//
// Owner. Every copyset opens the machine; only the one on the lock
// copyset (Config.LockCopyset, disagg.lock_copyset, default pool 1
// copyset 1) is used. Its raft leader is the owner: any other server
// answers not_owner and the client retries elsewhere (upstream's
// S3LockClient does).
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
// The decision. tryAddLock checks, on the owner, that the data file's
// object exists and its .del does not (else conflict "data file not
// exist" / "data file is mark deleted"); tryMarkDelete that no lock
// object of the file exists (else conflict "data file is locked, ...
// lock_by=<lock key>"). Then the op is proposed, and Apply decides again
// against the table in log order: an AddLock on a marked file and a
// MarkDelete on a locked one are conflicts. Two concurrent proposals on
// one key, from one owner or from two across a leader change, are
// ordered by the log, so never both a lock and a mark. Only after the
// commit is the lock or .del object written, then the answer is success.
// A proposal whose commit is not confirmed (leadership lost, not the
// leader any more) answers not_owner, never success; the retry is
// idempotent (the same lock again, a second mark, are successes that
// change nothing), so a retry after a lost answer finds its own commit.
// Release (chunkctl disagg lock release) removes a store's locks with
// seq <= N through raft, then deletes their lock objects.
//
// Clone locks and gc (clone.go, reconcile.go, gc.go; docs/disagg-gc.md).
// chunkraft uses the table for its own objects, keyed by any object name:
// an @s3 clone chunk locks its source for the clone (LockClone, through
// the owner) before its creation is proposed; a leader-only reconciler on
// each copyset releases, after a grace, the locks of clones no longer
// reading their source (ReleaseClone, only if the lock is still older
// than the cutoff); disagg gc marks unlocked objects (MarkDelete for data
// file keys, MarkObject else) and removes marked ones after a grace
// (Forget). Times in these ops are the proposer's clock. tryAddLock and
// tryMarkDelete keep upstream's key validation and objects.
//
// Invariants. Apply is deterministic: it reads only the state and the op,
// never a clock, the network or the object store; a refusal is a Result
// naming why (the same on every replica) with the state unchanged. The
// table is bounded (MaxFiles, MaxLocksPerFile, MaxLocks), checked before
// proposing and again in Apply; gc marks only below gcFill entries.
// Every change appends the whole table, stamped with its log index
// (State.applied), to disagg/state.jsonl, a
// copyset/statefile file: any prefix of it loads as the table at some
// earlier index, Apply skips ops at or below the loaded stamp, Sync makes
// it durable, Files lists it (the contract of copyset/fsm.go).
//
// Must not import: chunkserver/..., cli/..., cmd/..., test/..., sync/..., integrity/..., dm/...
package disagg
