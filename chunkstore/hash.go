// The copyset data hash (GetCopysetStatus queryHash) and atRest, which runs a
// read of a replica's chunk state while no entry is being applied, so that
// what it saw is the state at one applied index (the chunk hash of
// GetChunkHash uses it too).

package chunkstore

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/chunkraft/chunkraft/copyset"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// hashAttempts bounds how often copysetHash retries while applies keep
// changing the data under it.
const hashAttempts = 50

// CopysetHash returns the copyset data hash of replica n (see
// GetCopysetStatus) and the applied index it was taken at. The hash is
// taken while no entry is being applied: if one was applied meanwhile the
// hash is taken again, and after hashAttempts tries the copyset is reported
// busy.
func CopysetHash(ctx context.Context, n *copyset.Node) (hash uint32, applied uint64, err error) {
	applied, err = atRest(ctx, n, hashAttempts, func(m *chunkMachine) error {
		var herr error
		hash, herr = m.store.DataHash()
		return herr
	})
	if errors.Is(err, errKeptApplying) {
		return 0, 0, errors.New("copyset kept applying writes while it was hashed; retry when writes pause")
	}
	return hash, applied, err
}

// errKeptApplying: atRest found the replica applying on every attempt.
var errKeptApplying = errors.New("replica kept applying entries")

// atRest runs read on n's chunk state machine while no entry is being
// applied and returns the applied index it saw: read is run again when an
// entry was applied meanwhile (its error may come from that too), at most
// attempts times, then errKeptApplying. So what read saw is the state at
// exactly that index, on any replica.
func atRest(ctx context.Context, n *copyset.Node, attempts int, read func(*chunkMachine) error) (uint64, error) {
	for try := 0; try < attempts; try++ {
		if try > 0 {
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(time.Duration(min(try, 10)) * 5 * time.Millisecond):
			}
		}
		before, err := n.ApplyState()
		if err != nil {
			return 0, err
		}
		if !before.Idle {
			continue
		}
		m, err := chunkMachineOf(n)
		if err != nil {
			return 0, err
		}
		rerr := read(m)
		after, err := n.ApplyState()
		if err != nil {
			return 0, err
		}
		if !after.Idle || after.Applied != before.Applied {
			continue // data changed while it was read; an error may be from that too
		}
		if rerr != nil {
			return 0, rerr
		}
		return before.Applied, nil
	}
	return 0, errKeptApplying
}

// AppliedTrailerKey is a gRPC response trailer that accompanies a hash
// (GetChunkHash, GetCopysetStatus with queryHash): the state machines'
// applied index the hash was taken at, with no entry being applied.
// Replicas with equal values hold the same data exactly when their hashes
// are equal. It counts only entries that reach the state machines (not
// raft's no-ops and barriers), so it can be below knownAppliedIndex.
const AppliedTrailerKey = "chunkraft-hash-applied"

// SetAppliedTrailer sets AppliedTrailerKey on the response.
func SetAppliedTrailer(ctx context.Context, applied uint64) {
	_ = grpc.SetTrailer(ctx, metadata.Pairs(AppliedTrailerKey, strconv.FormatUint(applied, 10)))
}

// shareCommitTimeout bounds ShareCommit: a leader without a quorum cannot
// commit the barrier, and the hash it serves must not wait for one.
const shareCommitTimeout = time.Second

// ShareCommit has n, when it leads, tell its followers its commit index now
// (Node.ShareCommit), so that replicas compared right after a write have
// applied it; a failure only delays that and is logged.
func ShareCommit(ctx context.Context, n *copyset.Node, log *slog.Logger) {
	if !n.IsLeader() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, shareCommitTimeout)
	defer cancel()
	var nl *copyset.NotLeaderError
	if err := n.ShareCommit(ctx); err != nil && !errors.As(err, &nl) {
		log.Debug("share commit index", "pool", n.Group().Pool(), "copyset", n.Group().Copyset(), "err", err)
	}
}
