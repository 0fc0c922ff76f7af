package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	chunkserverpb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// serverCall is one ChunkService call against one server, returning the
// reply's status or the gRPC error.
type serverCall func(ctx context.Context, svc chunkserverpb.ChunkServiceClient) (chunkserverpb.CHUNK_OP_STATUS, error)

// onServer runs call against one server (no leader involved) until it gets a
// reply other than OVERLOAD or an error waiting cannot fix. An unreachable,
// stalled or restarting server is retried with backoff until the client's
// timeout. Errors do not name the server: the caller's row does.
func (c *Client) onServer(parent context.Context, addr string, call serverCall) (chunkserverpb.CHUNK_OP_STATUS, error) {
	start := time.Now()
	ctx, cancel := c.withDeadline(parent)
	defer cancel()
	svc, err := c.chunkService(addr)
	if err != nil {
		return 0, err
	}
	bo := newBackoff()
	var last error
	for ctx.Err() == nil {
		actx, acancel := context.WithTimeout(ctx, c.attemptTimeout)
		st, err := call(actx, svc)
		acancel()
		switch {
		case err != nil && (!retryable(err) || bo.final(&serverError{Err: err})):
			return 0, &serverError{Err: err}
		case err != nil:
			last = &serverError{Err: err}
		case st == chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_OVERLOAD:
			last = &ChunkStatusError{Status: st}
			bo.final(nil) // it answered: not down
		default:
			return st, nil
		}
		bo.wait(ctx)
	}
	if err := parent.Err(); err != nil {
		return 0, err
	}
	if last == nil {
		last = context.DeadlineExceeded
	}
	return 0, &GaveUpError{After: time.Since(start), Last: last}
}

// ReplicaHash is one server's GetChunkHash answer for a chunk.
type ReplicaHash struct {
	Server string // the address asked
	// Hosted is false when the server does not host the copyset
	// (COPYSET_NOTEXIST); such rows carry no hash and no error.
	Hosted bool
	// Status is the server's reply status; meaningful when Replied.
	Status  chunkserverpb.CHUNK_OP_STATUS
	Replied bool
	Hash    string // crc32c as a decimal string; "0" for a missing chunk
	// Applied is the replica's applied index the hash covers, when the
	// server reported it (HasApplied; see appliedTrailerKey).
	Applied    int64
	HasApplied bool
	Err        error // non-nil when the server could not be asked or did not answer SUCCESS
}

// Response trailers of chunkraft servers beyond the Curve messages
// (chunkserver/copyset_service.go).
const (
	appliedTrailerKey        = "chunkraft-hash-applied"      // the applied index a hash was taken at
	peersTrailerKey          = "chunkraft-peers"             // the replica's newest configuration, peer ids joined by commas
	committedPeersTrailerKey = "chunkraft-committed-peers"   // its newest committed configuration
	writeFenceTrailerKey     = "chunkraft-write-fence"       // the owner of the copyset's write fence, as the replica applied it
	writeFenceSinceKey       = "chunkraft-write-fence-since" // the log index the fence was set at
)

// splitTrailerList parses a comma-separated trailer value.
func splitTrailerList(v []string) []string {
	var out []string
	for _, p := range strings.Split(strings.Join(v, ","), ",") {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// trailerInt parses an integer trailer; false when absent or malformed.
func trailerInt(md metadata.MD, key string) (int64, bool) {
	v, err := strconv.ParseInt(firstValue(md, key), 10, 64)
	return v, err == nil
}

// ChunkHashes asks every configured server, in parallel, for the hash of
// [offset, offset+length) of a chunk. GetChunkHash reads the replica's local
// data, leader or not, so the rows can be compared to find diverged replicas
// (see CompareHashes); a follower that is still catching up shows a
// different hash until it has applied the latest writes. Unreachable servers
// are retried until the client's timeout. It returns one row per server in
// server order; the error is non-nil only if the range does not lie inside
// the chunk (nothing is sent then) or ctx ended.
func (c *Client) ChunkHashes(ctx context.Context, id ChunkID, offset, length uint32) ([]ReplicaHash, error) {
	if err := checkInChunk(uint64(offset), uint64(length), "length"); err != nil {
		return nil, fmt.Errorf("hash %s: %w", id, err)
	}
	rows := c.chunkHashesOn(ctx, id, offset, length, c.servers)
	if err := ctx.Err(); err != nil {
		return rows, fmt.Errorf("hash %s: %w", id, err)
	}
	return rows, nil
}

// chunkHashesOn is ChunkHashes on the given servers.
func (c *Client) chunkHashesOn(ctx context.Context, id ChunkID, offset, length uint32, servers []string) []ReplicaHash {
	req := &chunkserverpb.GetChunkHashRequest{
		LogicPoolId: proto.Uint32(id.Pool),
		CopysetId:   proto.Uint32(id.Copyset),
		ChunkId:     proto.Uint64(id.Chunk),
		Offset:      proto.Uint32(offset),
		Length:      proto.Uint32(length),
	}
	rows := make([]ReplicaHash, len(servers))
	forEach(len(servers), len(servers), func(i int) {
		row := ReplicaHash{Server: servers[i]}
		var hash string
		st, err := c.onServer(ctx, row.Server, func(ctx context.Context, svc chunkserverpb.ChunkServiceClient) (chunkserverpb.CHUNK_OP_STATUS, error) {
			var trailer metadata.MD
			resp, err := svc.GetChunkHash(ctx, req, grpc.Trailer(&trailer))
			hash = resp.GetHash()
			row.Applied, row.HasApplied = trailerInt(trailer, appliedTrailerKey)
			return resp.GetStatus(), err
		})
		switch {
		case err != nil:
			row.Hosted, row.Err = true, err // it may host the copyset: we cannot tell
		case st == chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_COPYSET_NOTEXIST:
			row.Replied, row.Status = true, st
		case st == chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS:
			row.Hosted, row.Replied, row.Status, row.Hash = true, true, st, hash
		default:
			row.Hosted, row.Replied, row.Status, row.Err = true, true, st, &ChunkStatusError{Status: st}
		}
		rows[i] = row
	})
	return rows
}

// HashCheck is the comparison of ChunkHashes rows.
type HashCheck struct {
	// Consistent: at least one replica answered, every server that may host
	// the copyset answered, and all hashes are equal.
	Consistent bool
	// Diverged: two replicas at the same applied index report different
	// hashes, so their data differs. Unsettled: hashes differ, but only
	// between replicas at different (or unreported) applied indices: a
	// replica that has not applied the latest writes yet differs too, so
	// nothing is proven; compare again once they have.
	Diverged, Unsettled bool
	// Hash is the hash most replicas reported; "" when no replica answered or
	// the top counts tie (then no hash can be called the right one).
	Hash string
	// Mismatch[i] marks row i as a replica whose hash differs from Hash (every
	// answering replica when there is a tie), when Diverged.
	Mismatch []bool
	Replicas int // rows with a hash
	Distinct int // distinct hashes among them
	Failed   int // rows with an error (server down, other status)
}

// CompareHashes compares the hashes of ChunkHashes rows. Rows of servers that
// do not host the copyset are ignored. Replicas are called different
// (Diverged, Mismatch) only when two of them at the same applied index
// differ.
func CompareHashes(rows []ReplicaHash) HashCheck {
	hc := HashCheck{Mismatch: make([]bool, len(rows))}
	count := map[string]int{}
	var at []indexedHash
	for _, r := range rows {
		switch {
		case r.Err != nil:
			hc.Failed++
		case r.Hosted:
			hc.Replicas++
			count[r.Hash]++
			at = append(at, indexedHash{r.Hash, r.Applied, r.HasApplied})
		}
	}
	hc.Distinct = len(count)
	hc.Diverged = hc.Distinct > 1 && diverged(at)
	hc.Unsettled = hc.Distinct > 1 && !hc.Diverged
	best, tie := 0, false
	for h, n := range count {
		switch {
		case n > best:
			hc.Hash, best, tie = h, n, false
		case n == best:
			tie = true
		}
	}
	if tie {
		hc.Hash = ""
	}
	for i, r := range rows {
		if hc.Diverged && r.Err == nil && r.Hosted && (tie || r.Hash != hc.Hash) {
			hc.Mismatch[i] = true
		}
	}
	hc.Consistent = hc.Replicas > 0 && hc.Distinct == 1 && hc.Failed == 0
	return hc
}

// indexedHash is one replica's hash and the applied index it covers.
type indexedHash struct {
	hash    string
	applied int64
	known   bool // applied was reported
}

// diverged reports whether two replicas at the same applied index report
// different hashes.
func diverged(hs []indexedHash) bool {
	_, d := divergedAt(hs)
	return d
}

// hashSettle bounds how long the replica hash comparisons wait for
// replicas to reach a common applied index (a variable for tests), and
// hashPoll is the pause between their rounds.
var hashSettle = 5 * time.Second

const hashPoll = 100 * time.Millisecond

// SettledChunkHashes is ChunkHashes repeated until the replicas can be
// compared: every hash is equal, or two replicas at the same applied index
// differ (a divergence), or wait (at most) has passed with the replicas at
// different applied indices (CompareHashes' Unsettled). Followers apply a
// write a moment after the leader acknowledged it; the leader's GetChunkHash
// makes them learn its commit index at once. Rows with errors end it too.
func (c *Client) SettledChunkHashes(ctx context.Context, id ChunkID, offset, length uint32, wait time.Duration) ([]ReplicaHash, HashCheck, error) {
	deadline := time.Now().Add(wait)
	for {
		rows, err := c.ChunkHashes(ctx, id, offset, length)
		if err != nil {
			return rows, CompareHashes(rows), err
		}
		hc := CompareHashes(rows)
		if !hc.Unsettled || hc.Failed > 0 || !time.Now().Before(deadline) || !sleepCtx(ctx, hashPoll) {
			return rows, hc, nil
		}
	}
}

// EpochResult is one server's answer to UpdateEpoch.
type EpochResult struct {
	Server  string // the address asked
	Replied bool   // the server answered; Status is its reply
	Status  chunkserverpb.CHUNK_OP_STATUS
	Err     error // nil when the server took the epoch (SUCCESS)
}

// UpdateEpoch raises the epoch of file fileID on every configured server, in
// parallel. Each server stores the fence and commits it to the raft log of
// every copyset it hosts (so every replica of those copysets, present or
// added later, holds it); requests carrying an older epoch for the file are
// then refused with EPOCH_TOO_OLD. A server that already holds a newer epoch
// refuses the update with EPOCH_TOO_OLD. Unreachable servers are retried
// until the client's timeout. It returns one row per server in server order
// and an error naming every server that did not take the epoch.
func (c *Client) UpdateEpoch(ctx context.Context, fileID, epoch uint64) ([]EpochResult, error) {
	req := &chunkserverpb.UpdateEpochRequest{FileId: proto.Uint64(fileID), Epoch: proto.Uint64(epoch)}
	rows := make([]EpochResult, len(c.servers))
	forEach(len(c.servers), len(c.servers), func(i int) {
		row := EpochResult{Server: c.servers[i]}
		st, err := c.onServer(ctx, row.Server, func(ctx context.Context, svc chunkserverpb.ChunkServiceClient) (chunkserverpb.CHUNK_OP_STATUS, error) {
			resp, err := svc.UpdateEpoch(ctx, req)
			return resp.GetStatus(), err
		})
		switch {
		case err != nil:
			row.Err = err
		case st != chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS:
			row.Replied, row.Status, row.Err = true, st, &ChunkStatusError{Status: st}
		default:
			row.Replied, row.Status = true, st
		}
		rows[i] = row
	})
	var errs []error
	for _, r := range rows {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.Server, r.Err))
		}
	}
	if len(errs) > 0 {
		return rows, fmt.Errorf("update epoch of file %d to %d: failed on %d of %d servers: %w",
			fileID, epoch, len(errs), len(rows), joinErrors(errs))
	}
	return rows, nil
}
