// Package integrity is the integrity scans of a chunkserver: replicated
// scan jobs that compare the replicas of every chunk range of a copyset
// (Curve's IntegrityService and ScanService, and GET /integrity). It is
// the worked example of a service built on the copyset seam:
//
//   - a state machine (machine.go, kind kinds.Integrity) that keeps the
//     copyset's jobs in a copyset/statemachine.Machine, whose state file
//     is integrity.jsonl in the copyset data dir, and which skips ops its
//     state already reflects (the snapshot contract of
//     copyset.StateMachine);
//   - its MachineSpec (Service.Spec), opened after the chunk machine,
//     whose store it reads through chunkread.Chunks;
//   - a leader-side worker and a follower-side sender (scan.go) started
//     and stopped with the server (Service.Start, Service.Stop);
//   - its gRPC services and HTTP endpoint (service.go), registered by the
//     server (Service.Register, Service.ServeHTTP).
//
// What it needs of the process comes in Deps (the local peer id, the chunk
// store of a copyset, connections to peers, the logger) and the copyset
// Manager (Service.Attach); chunkserver wires it.
//
// Must not import: chunkserver/..., chunkstore/..., cli/..., cmd/..., test/..., datasync/..., dm/..., disagg/...
package integrity
