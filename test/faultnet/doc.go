// Package faultnet is a network fault layer for in-process clusters: gRPC
// client interceptors that, per directed (from, to) pair of nodes, fail a
// call with Unavailable (partition or random drop) or delay it. Decisions
// come from one seeded math/rand source, so a run's fault schedule is
// reproducible from its seed (goroutine scheduling aside).
//
// Nodes are small integers; a node's gRPC address maps a call's target back
// to its node. Every dialer of node i (its raft transport, a test client
// standing for node i) uses DialOptions(i). A call from i to j needs i->j
// open for its request messages and j->i open for its responses, so an
// asymmetric partition (i->j blocked, j->i open) breaks calls in both
// directions the way a lost TCP direction would, while a request delivered
// before its response was lost may still have taken effect.
//
// Must not import: github.com/chunkraft/chunkraft/...
package faultnet
