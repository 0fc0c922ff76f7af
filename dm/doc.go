// Package dm is the dm service: online migration of a pool into this
// cluster, spoken as TiFlow DM's worker protocol (pb.Worker, proto/dm/pb).
// It is a tenant of the chunkserver host (chunkserver.Tenant): the dm
// state machine on every copyset, the Worker service and DMInternal
// between servers.
//
// # The model
//
// A task migrates a source pool (of another cluster, read through the
// export a sync task writes to a relay location, or an export already
// written) into a target pool of this cluster, copyset C into copyset C.
// Its share on a target copyset (a pb.SubTask of proto/chunkraft/dmpb) is
// replicated there by the dm machine (kind internal/kinds.DM): the task's
// config, the source copyset, the stage and unit (upstream's Stage and
// UnitType), the errors that paused it, the checkpoint in the source's
// export and the counters. A task file is YAML (ParseTaskYAML), a subtask
// config TOML (ParseTaskTOML): the same keys, unknown keys refused.
//
// Any server answers the Worker RPCs: it asks every reachable server of
// the cluster map for the shares of the copysets it leads (DMInternal.List,
// past a read barrier) and reports a task from its shares (Stage: all
// alike, else the transitional stage); a copyset whose leader did not
// answer is named in the message. With no task at all, the guarded RPCs
// answer upstream's ErrWorkerNoStart.
//
// # Applying a share (lead.go, applier.go)
//
// The leader of a target copyset runs an applier per Running share: it
// reads the source copyset's export from the share's checkpoint, plans
// each unit as the sync restore does (restore.PlanRebuild for a chunk
// image, restore.Replay for a binlog record) and proposes the chunk ops
// with the share's Advance as one grouped proposal through the chunk
// store (its admission and checks). What stops a share is a ProcessError:
// a gap in the export, a packet that does not decode, an answer of the
// target that is not the source's (a divergence) are not resumable; the
// target's OVERLOAD or NOSPACE and a source that cannot be read are, and
// auto-resume resumes them after a backoff.
//
// # Stages (applySetStage, applyFail, applyAdvance)
//
// Upstream's machine per share: Running to Paused (by an error, Fail; or
// by a user, which marks the result canceled and stops auto-resume),
// Paused or Stopped back to Running (resume clears the errors), Running
// or Paused to Stopped, Running to Finished by the last Advance. Finished
// is final. A task's transitional stages (Pausing, Resuming, Stopping)
// are what its shares show while some have taken a change and some not.
//
// # Cutover (cutover.go, cutover_fence.go)
//
// A cutover fences the source copysets (write fence owner
// dm-cutover:<task>, set on the source cluster through its DMInternal
// SourceFence), waits until the relay covers each fence and the share has
// applied the relay's every packet, compares the copysets' digests on
// both sides, then commits (the share Finished) and lifts the target's
// fence. Each step is a replicated SetCutover on every share before the
// next begins, so a driver run again resumes it; abort lifts the source
// fences before a commit.
//
// # Invariants
//
//   - Every op is deterministic (no clock: the proposer's time rides in
//     the op) and idempotent under replay: the state is stamped with the
//     index of the last op that changed it (copyset/statemachine), and a
//     refused op changes nothing.
//   - An Advance applies only from the share's checkpoint and only while
//     it runs: one that does not match is refused, so two proposers can
//     never both move a checkpoint past the same records.
//   - Each source op is applied once: one proposer per share (the
//     leader's applier, a group only after the one before has applied),
//     a run starts from the checkpoint read after a full barrier, and an
//     Advance refused for its checkpoint stops the share (applier.go).
//   - The machine may ride in a grouped proposal (MachineSpec.Group): an
//     Advance in one raft entry with the chunk ops it covers, so that the
//     ops and the checkpoint survive crashes, leader changes and snapshot
//     installs together.
//
// Must not import: chunkserver/..., cli/..., cmd/..., test/..., integrity/...
package dm
