// Package cli is the client side of chunkraft: a gRPC client library for
// chunkservers (Client) and the cobra command tree of the chunkctl admin tool
// (NewRootCommand).
//
// Client finds the leader of a copyset by asking the configured servers
// (CliService2.GetLeader), caches it per copyset, follows
// CHUNK_OP_STATUS_REDIRECTED hints, moves on to other servers when one does
// not host the copyset, is unreachable or times out, and retries with a small
// backoff until an overall deadline. Every RPC attempt has its own, shorter
// timeout so that a dead or stopped leader cannot use up the whole deadline.
// Two cases end the retries early: every server says it does not host the
// copyset (one COPYSET_NOTEXIST line), and every server refuses connections,
// or does not host the copyset, for 1.5 s (refusedGrace: a server that
// restarts within it is retried; the error names the servers). Chunk I/O is
// checked against the chunk geometry (ChunkSize, BlockSize) and sn before it
// is sent; a request that breaks a rule is refused naming the rule.
// A few calls go to every configured server instead of the leader:
// ChunkHashes (compare replicas at one applied index, see CompareHashes and
// SettledChunkHashes) and UpdateEpoch (each server commits the fence to the
// copysets it hosts). Beyond the Curve messages, chunkraft servers send a few gRPC
// response trailers the client reads: the applied index a hash covers and a
// replica's configuration (client_replica.go).
//
// Admin calls: membership changes (AddPeer, RemovePeer, ChangePeers) and
// integrity jobs (Scan) go to the copyset's leader; those services answer a
// follower with FailedPrecondition rather than a redirect, which makes the
// client find the leader again. Snapshots, configuration, ResetPeer and
// DeleteBrokenCopyset go to the servers named. Reads of state (Config get and
// dump, LoadFinished, the status fan-outs) make one attempt per server, so
// that a dead server costs one attempt timeout; changes are retried while a
// server is unreachable, but not while it refuses connections for longer
// than refusedGrace. ClassifyCopyset, PlanLeaderBalance and
// CheckConsistency are what `cluster status`, `leader balance` and
// `cluster check-consistency` are built on.
//
// Peers are named on the wire as "ip:port:0" (curve.common.Peer.address);
// everything here also accepts "host:port" and normalises it.
//
// Dependency rule: cli talks to servers only through the generated protocol
// packages under proto/. It must not import chunkserver/, copyset/ or any other
// server-side package, so that it can be built and used without the server.
//
// Must not import: chunkserver/..., copyset/..., internal/kinds, cmd/..., test/...
package cli
