// Package copyset runs one hashicorp/raft group per copyset and everything a
// group needs on a chunkserver: group and peer identities (id.go), the node
// that owns one raft instance (node.go), the manager of all groups of a
// server (manager.go), the registry of the state machines every copyset
// hosts (machine.go: the server hands the manager one MachineSpec per kind;
// MachineOf looks a machine up by kind and type), the FSM that dispatches
// replicated operations to them (fsm.go; StateMachine's doc is the contract a
// machine must keep, snapshots included), the typed propose tenants call
// and proposal batching (propose.go: ProposeAs returns an op's apply result
// as the machine's result type; concurrent ops of kinds whose spec says
// Batch, the chunk store's, share one raft entry), grouped proposals
// (group.go: ProposeGroup proposes several ops, of several kinds, as one
// entry applied at one index), the leader's read lease (lease.go), the
// raft log store (logstore.go, fronted by a cache of recent entries bounded
// in count and bytes, logcache.go), reading committed entries by index
// (logread.go) and log retention pins that hold back truncation for a
// consumer following the log (logpin.go), and the multiplexed gRPC raft transport
// (transport*.go, heartbeats batched per peer server in
// transport_heartbeat.go and repeated for the groups this server leads by
// one clock per peer server in transport_beat.go, while the leaders' raft
// runs with a longer heartbeat timeout, pace.go; every pipeline's
// AppendEntries batched per peer
// server in transport_append.go, AppendEntries payloads passed through
// gRPC without copies by the codec in transport_wire.go).
//
// The package replicates opaque operations: it knows nothing about chunks,
// sync tasks or locks, and names no machine kind (their numbers are in
// internal/kinds). It must not import chunkserver/, cli/, sync/, dm/ or
// disagg/; of this module it imports only proto/chunkraft, copyset/sharedlog,
// internal/atomicfile, internal/grpcbuf and internal/slogbridge.
//
// Invariants:
//   - A copyset's directory holds its raft log, stable store, snapshots and
//     the data of its state machines; the server finds copysets again on
//     restart by scanning the copysets directory.
//   - ServerID of a replica is its chunkserver's peer id "ip:port:0";
//     ServerAddress is "ip:port".
//   - An operation is applied to state machines strictly in log order, once
//     per replica lifetime, and re-applied after a crash from the last
//     durable point: state machines must apply idempotently.
//   - Reads are served by a leader that holds its lease or has just
//     verified leadership with a quorum, after applying everything committed
//     when the read arrived.
//
// Must not import: chunkserver/..., chunkstore/..., cli/..., cmd/..., test/..., internal/kinds, integrity/..., datasync/..., dm/..., disagg/...
package copyset
