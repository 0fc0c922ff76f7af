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
// (with queryHash) on every configured server, for at most wait, until the
// replicas can be compared: equal copyset hashes are consistent at once
// (whatever their indices); different hashes count only between replicas at
// the same applied index (the index each hash was taken at, else the
// replica's applied index), on two rounds in a row. A follower applies a
// write a moment after the leader acknowledged it, and the leader's hash
// query makes it learn the commit index at once. When the hashes differ or
// are not reported, it compares GetChunkHash of each chunk in chunks (whole
// chunks) across the replicas to name the chunks that differ; there is no
// RPC to list a copyset's chunks. Under ongoing writes the replicas may
// never meet at one index: that is reported as not converged, not as a
// difference.
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
		at := hashIndices(rep.Replicas)
		rep.Converged, rep.Applied = true, at[0].applied
		rep.HashReported, rep.HashesEqual = true, true
		for _, h := range at {
			rep.Converged = rep.Converged && h.applied == rep.Applied
			rep.Applied = max(rep.Applied, h.applied)
			rep.HashReported = rep.HashReported && h.hash != ""
			rep.HashesEqual = rep.HashesEqual && h.hash == at[0].hash
		}
		rep.HashesEqual = rep.HashesEqual && rep.HashReported
		switch idx, differ := divergedAt(at); {
		case rep.HashesEqual:
			rep.Converged = true
		case !rep.HashReported:
		case differ && differedAt == idx:
			rep.Converged, rep.Applied = true, idx
		case differ:
			differedAt, rep.Converged = idx, false // confirm on the next round
		default:
			differedAt, rep.Converged = -1, false
		}
		if rep.Converged || !time.Now().Before(deadline) || !sleepCtx(ctx, consistencyPoll) {
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
		for i, h := range hashIndices(rep.Replicas) {
			parts = append(parts, fmt.Sprintf("%s=%d", replicaName(rep.Replicas[i]), h.applied))
		}
		rep.Problems = append(rep.Problems, fmt.Sprintf("applied indices still differ after %s: %s (not compared)", wait, strings.Join(parts, ", ")))
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

// hashIndices are the copyset hashes of replicas with the applied index
// each covers: the one reported with the hash, else (an older server) the
// replica's applied index.
func hashIndices(replicas []ReplicaStatus) []indexedHash {
	out := make([]indexedHash, len(replicas))
	for i, r := range replicas {
		out[i] = indexedHash{hash: r.Hash, applied: r.Applied, known: true}
		if r.HasHashApplied {
			out[i].applied = r.HashApplied
		}
	}
	return out
}

// divergedAt returns the applied index at which two replicas report
// different hashes, if any.
func divergedAt(hs []indexedHash) (int64, bool) {
	for i, a := range hs {
		for _, b := range hs[i+1:] {
			if a.known && b.known && a.applied == b.applied && a.hash != b.hash {
				return a.applied, true
			}
		}
	}
	return 0, false
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
