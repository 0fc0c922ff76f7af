// Package copysettest is the test harness of replicated state machines:
// in-process copysets on loopback with the real copyset Manager, raft
// transport and gRPC server (Cluster, with fault hooks: Stop and Start or
// Restart a server, Cut it off the network and Heal it, force a Snapshot),
// a toy machine (ToyKV: a key-value map in one append-only, index-stamped
// file in its spec's own Dir) and RunStateMachineConformance, the suite
// every machine's package runs with its MachineSpecs and a Workload (valid
// ops, and a state to compare two replicas by).
//
// The suite checks the StateMachine contract of copyset/fsm.go:
//   - replay: a prefix applied, then the log replayed from an earlier index
//     (also after Sync, Close and reopen), gives the state of one apply;
//     for a workload of groups (Workload.Group: whole entries of several
//     kinds, proposed with copyset.Node.ProposeGroup), from every op
//     boundary, inside a group too, restarted, and from every earlier
//     entry; with Workload.Expect, one apply gives the expected state;
//   - Sync: the machines' Files copied right after Sync, opened with no
//     replay, hold the state at that index;
//   - fuzzy copy: the Files streamed as a snapshot install streams them
//     (list and sizes at the snapshot index, bytes read after random
//     numbers of further applies), with the log replayed from the snapshot
//     index + 1, converge to the source; so do those files cut to random
//     prefixes with the whole log replayed;
//   - cluster: on three replicas a snapshot install, a cut-off replica and
//     a restart of every server keep every replica's state equal to the
//     leader's, and no replica's log is truncated below an op its machines
//     had not applied at a Sync (the machines are wrapped and recorded;
//     copyset.MachineAs looks through the wrapper).
//
// Specs are opened with copyset.OpenMachines, as a copyset opens them. A
// run takes a few seconds per machine set. Only tests import this package.
//
// Must not import: chunkserver/..., cli/..., cmd/..., test/..., integrity/..., datasync/..., dm/..., disagg/...
package copysettest
