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
// A few calls go to every configured server instead of the leader:
// ChunkHashes (compare replicas, see CompareHashes) and UpdateEpoch (a
// per-server fence that raft does not replicate).
//
// Peers are named on the wire as "ip:port:0" (curve.common.Peer.address);
// everything here also accepts "host:port" and normalises it.
//
// Dependency rule: cli talks to servers only through the generated protocol
// packages under proto/. It must not import chunkserver/, copyset/ or any other
// server-side package, so that it can be built and used without the server.
package cli
