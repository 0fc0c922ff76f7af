// Package statefile is the append-only file in which a small replicated
// state machine keeps its whole state (integrity scan jobs, epoch fences,
// sync sub-tasks): each change appends one line holding
// the whole state, usually as JSON stamped with the log index that produced
// it, so that a machine reopened on the file knows which ops it already
// reflects and skips them on replay.
//
// Why append-only: a raft snapshot (copyset/snapshot.go) streams a
// machine's files live, at the size each had when the stream started. A
// prefix of an append-only file is a consistent earlier state; a replaced
// JSON document cut to its old size is not. Loading (EachLine) ignores a
// torn last line and the zero padding a stream may add. When the file
// outgrows its last line by far, Append compacts it to that line (write a
// temp file, fsync, rename: internal/atomicfile), so the file stays near
// the size of one state. Sync fsyncs the appended lines; a machine calls it
// from its StateMachine.Sync, before raft truncates the log that produced
// them.
//
// Why here, under copyset/ rather than internal/: the file's rules follow
// from the copyset snapshot contract (files streamed live, any prefix a
// state at or before the snapshot index), it is a building block of
// machines hosted on copysets, and the service packages (integrity/, sync/,
// disagg/, dm/) import it beside copyset without importing chunkserver/.
// It is a leaf: of this module it imports only internal/atomicfile, and it
// must not import copyset itself or any service package, so that copyset
// and every machine may use it.
//
// A machine whose state is too large to append whole on every change
// keeps a journal instead: AppendEntry appends a line holding one change
// (never compacted away by itself), and Replace writes the whole state as
// the file's only line when the machine decides the journal has grown
// enough (disagg's table.jsonl). Any prefix of a journal is still an
// earlier state: its base, then the changes in order.
//
// copyset/statemachine is the machine built on this file (decode, replay
// guard, stamp, persist, load); a new machine uses it rather than File
// directly.
//
// The on-disk format is the caller's lines, each ended by '\n'; this
// package adds nothing to them.
//
// Must not import: github.com/chunkraft/chunkraft/..., !internal/atomicfile
package statefile
