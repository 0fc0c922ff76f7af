// Package proto holds the wire contract of chunkraft: the .proto files of
// every seed service (Curve chunkserver, OpenMLDB data sync, TiFlow DM worker,
// TiKV/TiFlash disaggregated) with upstream names and field numbers, the
// internal chunkraft.* services, and the generated Go code beside each file.
// Regenerate with `make proto`. Generated packages import nothing of ours.
//
// Must not import: github.com/chunkraft/chunkraft/..., !proto/...
package proto
