// Package kinds is the one table of replicated state machine kinds: the
// number in the op header (copyset.PutOpHeader) that routes a replicated
// operation to its state machine on a copyset. copyset itself names no
// kind; the server registers one machine per kind (copyset.MachineSpec).
//
// A kind's number is raft log format: ops carrying it sit in raft logs and
// snapshots on disk. A number is never reused and never renumbered, not
// even after its service is removed (mark it retired instead). Add a new
// service at the next free number, here, in the same change that registers
// its machine. 0 is never a kind. The constants are untyped so that any
// package can use them as a copyset.Kind without this package importing
// copyset.
//
// Must not import: github.com/chunkraft/chunkraft/...
package kinds
