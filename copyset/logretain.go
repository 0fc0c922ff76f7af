package copyset

import (
	"errors"
	"time"

	"github.com/hashicorp/raft"
)

// Log retention by bytes.
//
// hashicorp/raft bounds a copyset's log by entries only: it snapshots once
// SnapshotThreshold entries follow the last snapshot and then keeps
// TrailingLogs entries. With 1 MiB entries the defaults keep some 18 GiB
// per copyset, and the shared log (sharedlog) frees a segment only once no
// copyset has a live entry in it: under large writes it frees nothing, so
// every segment it starts is a new one, zero-filled first (one more disk
// byte per log byte), instead of a freed one recycled. Two byte bounds
// keep the log's size in step with what it holds:
//
//   - RaftOptions.SnapshotBytes: once the entries stored since the last
//     snapshot hold that many bytes, the replica takes a snapshot. The
//     check is made as entries are stored (logCache.StoreLogs, O(1));
//     the snapshot is asked of raft by the node's snapshotter goroutine
//     (raft.Snapshot blocks while raft's own snapshot goroutine is busy,
//     which raft's goroutines that store entries must not).
//   - RaftOptions.TrailingBytes: a compaction keeps the fewer of
//     TrailingLogs entries and TrailingBytes bytes of entries before the
//     last index.
//
// The entry and byte sizes come from logSizes (logsize.go), which counts
// entries as they are stored and never reads the log back.
//
// raft computes a compaction's range itself, from its own TrailingLogs:
// [first index, min(snapshot index, last index - TrailingLogs)], and a log
// store must never delete more than that (the entries after the snapshot
// index are in no snapshot). So raft runs with TrailingLogs 1, asking for
// everything the snapshot covers but the last entry, and logCache's
// DeleteRange keeps the trailing entries the policy wants by deleting less
// than asked, which raft tolerates (it reads the first index afresh at
// every compaction; see logpin.go); the log pins then clamp further.
// TrailingLogs and TrailingBytes are read at every compaction, so a reload
// takes effect at the next one.

// DefaultSnapshotBytes is RaftOptions.SnapshotBytes when unset, and
// DefaultTrailingBytes RaftOptions.TrailingBytes. A copyset then keeps
// at most about 32 MiB of log, so a server's shared log stops growing
// (and recycles the segments it frees) once each copyset written has
// taken 32 MiB; larger bounds only delay that, while the bursts of
// segments freed together grow with them. Measured with 1 MiB writes over
// 16 copysets (docs/performance.md, "The raft log bounded by bytes"):
// 16 MiB each reached 6.4 disk bytes per client byte within 20 s of a
// laid-out cluster and 6.1 after a minute, 64 MiB each 9.1 and 6.6. The
// trailing bytes are also how far a follower may fall behind and still
// catch up from the log rather than by a snapshot install.
const (
	DefaultSnapshotBytes = 16 << 20
	DefaultTrailingBytes = 16 << 20
)

// raftTrailingLogs is the TrailingLogs raft itself runs with: it asks to
// compact all the snapshot covers but the last entry, and logCache keeps
// the trailing entries of the policy.
const raftTrailingLogs = 1

// retention is a copyset's log retention policy, read by logCache when
// entries are stored and deleted, changed by ReloadRaft.
type retention struct {
	trailingLogs, trailingBytes, snapshotBytes uint64
}

// keepFrom returns the lowest index a compaction must keep with last the
// last index and lowestWithin the log's lowest index within a bytes bound:
// the fewer of trailingLogs entries and trailingBytes bytes.
func (r retention) keepFrom(last uint64, lowestWithin func(uint64) uint64) uint64 {
	from := last + 1 - min(r.trailingLogs, last+1)
	if r.trailingBytes > 0 {
		from = max(from, min(lowestWithin(r.trailingBytes), last+1))
	}
	return from
}

// snapshotRetry is how long the snapshotter waits after a snapshot it
// asked for failed before asking again.
const snapshotRetry = time.Second

// runSnapshotter takes a snapshot whenever the log cache says that the
// entries since the last one hold SnapshotBytes. It runs on n.bg until
// the node closes (raft shut down first answers a pending raft.Snapshot).
func (n *Node) runSnapshotter() {
	c := n.stores.cache
	for n.bg.wait(c.snapKick) {
		err := n.raft.Snapshot().Error()
		switch {
		case err == nil:
			n.snapshotsByBytes.Add(1)
			continue // snapshotTaken cleared the request
		case errors.Is(err, raft.ErrRaftShutdown):
			return
		case errors.Is(err, raft.ErrNothingNewToSnapshot):
			n.log.Debug("log bytes snapshot: nothing new to snapshot")
		default:
			n.log.Warn("log bytes snapshot failed", "err", err)
		}
		if !n.bg.sleep(snapshotRetry) {
			return
		}
		c.snapshotFailed()
	}
}
