package cli

import (
	"context"
	"fmt"
	"strings"
	"time"
)

const (
	// consistencyPoll is the pause between status rounds while replicas
	// converge.
	consistencyPoll = 200 * time.Millisecond
	// chunkProbeParallelism bounds how many chunks CheckConsistency hashes at
	// once per copyset.
	chunkProbeParallelism = 8
)

// ChunkMismatch is a chunk whose replicas hold different data.
type ChunkMismatch struct {
	Chunk   uint64
	Hash    string   // the hash most replicas report ("" on a tie)
	Servers []string // the replicas that differ from it (every replica on a tie)
}

// ConsistencyReport is the outcome of CheckConsistency for one copyset.
type ConsistencyReport struct {
	Copyset  CopysetID
	Replicas []ReplicaStatus // the replicas that answered the last status round
	// Converged: every replica that answered reached the same applied index
	// (Applied) within the wait.
	Converged bool
	Applied   int64
	// HashReported: every replica reported a copyset hash (queryHash);
	// HashesEqual: and they were equal.
	HashReported bool
	HashesEqual  bool
	// Chunks are the chunk ids compared with GetChunkHash (none when the
	// copyset hashes were equal).
	Chunks     []uint64
	Mismatches []ChunkMismatch
	Problems   []string // why the copyset is not consistent; empty when it is
	Note       string   // a remark that is not a problem
}

// Consistent reports whether no problem was found.
func (r ConsistencyReport) Consistent() bool { return len(r.Problems) == 0 }

// sleepCtx sleeps d; false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// CheckConsistency compares the replicas of cs. It polls GetCopysetStatus
// (with queryHash) on every configured server until all replicas that
// answer have the same applied index, for at most wait. Replicas at the same
// index with equal copyset hashes are consistent. When the hashes differ (on
// two rounds in a row at the same index) or are not reported, it compares
// GetChunkHash of each chunk in chunks (whole chunks) across the replicas to
// name the chunks that differ; there is no RPC to list a copyset's chunks.
// Run it while no client writes the copyset: writes in flight make replicas
// differ for a moment.
func (c *Client) CheckConsistency(ctx context.Context, cs CopysetID, chunks []uint64, wait time.Duration) ConsistencyReport {
	rep := ConsistencyReport{Copyset: cs}
	deadline := time.Now().Add(wait)
	var unreachable []string
	differedAt := int64(-1) // applied index at which the hashes differed last round
	for {
		rows, err := c.CopysetHashes(ctx, cs)
		if err != nil {
			rep.Problems = append(rep.Problems, err.Error())
			return rep
		}
		rep.Replicas, unreachable = nil, nil
		for _, r := range rows {
			switch {
			case r.Err != nil:
				unreachable = append(unreachable, r.Server+" ("+cellError(r.Err)+")")
			case r.Hosted:
				rep.Replicas = append(rep.Replicas, r)
			}
		}
		if len(rep.Replicas) == 0 {
			break
		}
		rep.Converged, rep.Applied = true, rep.Replicas[0].Applied
		rep.HashReported, rep.HashesEqual = true, true
		for _, r := range rep.Replicas {
			rep.Converged = rep.Converged && r.Applied == rep.Applied
			rep.HashReported = rep.HashReported && r.Hash != ""
			rep.HashesEqual = rep.HashesEqual && r.Hash == rep.Replicas[0].Hash
		}
		rep.HashesEqual = rep.HashesEqual && rep.HashReported
		if rep.Converged {
			if !rep.HashReported || rep.HashesEqual || differedAt == rep.Applied {
				break
			}
			differedAt = rep.Applied // confirm on the next round
		} else {
			differedAt = -1
		}
		if !time.Now().Before(deadline) || !sleepCtx(ctx, consistencyPoll) {
			break
		}
	}
	if len(unreachable) > 0 {
		rep.Problems = append(rep.Problems, "could not ask "+strings.Join(unreachable, ", "))
	}
	switch {
	case len(rep.Replicas) == 0:
		if len(unreachable) == 0 {
			rep.Problems = append(rep.Problems, "no server in --servers hosts it")
		}
		return rep
	case !rep.Converged:
		var parts []string
		for _, r := range rep.Replicas {
			parts = append(parts, fmt.Sprintf("%s=%d", replicaName(r), r.Applied))
		}
		rep.Problems = append(rep.Problems, fmt.Sprintf("applied indices still differ after %s: %s", wait, strings.Join(parts, ", ")))
		return rep
	case rep.HashesEqual:
		return rep
	}

	servers := make([]string, len(rep.Replicas))
	for i, r := range rep.Replicas {
		servers[i] = r.Server
	}
	rep.Chunks = chunks
	rep.Mismatches = c.probeChunks(ctx, cs, chunks, servers, &rep.Problems)
	if len(rep.Mismatches) > 0 {
		// Confirm: a write that landed between two replicas' reads is not a
		// divergence.
		again := make([]uint64, len(rep.Mismatches))
		for i, m := range rep.Mismatches {
			again[i] = m.Chunk
		}
		var ignored []string
		rep.Mismatches = c.probeChunks(ctx, cs, again, servers, &ignored)
	}
	for _, m := range rep.Mismatches {
		rep.Problems = append(rep.Problems, fmt.Sprintf("chunk %d differs on %s", m.Chunk, strings.Join(m.Servers, ",")))
	}
	if len(rep.Mismatches) == 0 {
		if rep.HashReported {
			rep.Problems = append(rep.Problems, fmt.Sprintf("copyset hashes differ at applied index %d, but chunks %s agree (widen --chunks)",
				rep.Applied, formatChunkList(chunks)))
		} else {
			rep.Note = "replicas report no copyset hash; compared chunks " + formatChunkList(chunks) + " only"
		}
	}
	return rep
}

// probeChunks compares the whole-chunk hashes of chunks on servers and
// returns the chunks that differ, in chunk order; failures are appended to
// problems (once).
func (c *Client) probeChunks(ctx context.Context, cs CopysetID, chunks []uint64, servers []string, problems *[]string) []ChunkMismatch {
	found := make([]*ChunkMismatch, len(chunks))
	failed := make([]string, len(chunks))
	forEach(len(chunks), chunkProbeParallelism, func(i int) {
		rows := c.chunkHashesOn(ctx, ChunkID{CopysetID: cs, Chunk: chunks[i]}, 0, CloneChunkSize, servers)
		hc := CompareHashes(rows)
		for k, r := range rows {
			if r.Err != nil && failed[i] == "" {
				failed[i] = fmt.Sprintf("chunk %d on %s: %s", chunks[i], rows[k].Server, cellError(r.Err))
			}
		}
		if hc.Distinct > 1 {
			m := &ChunkMismatch{Chunk: chunks[i], Hash: hc.Hash}
			for k, bad := range hc.Mismatch {
				if bad {
					m.Servers = append(m.Servers, rows[k].Server)
				}
			}
			found[i] = m
		}
	})
	for _, f := range failed {
		if f != "" {
			*problems = append(*problems, "could not hash "+f)
			break
		}
	}
	var out []ChunkMismatch
	for _, m := range found {
		if m != nil {
			out = append(out, *m)
		}
	}
	return out
}

// formatChunkList renders chunk ids as ranges ("1-64").
func formatChunkList(ids []uint64) string { return formatRanges(ids) }
