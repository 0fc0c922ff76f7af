package copyset

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// RaftReload is the raft settings a running copyset can change (raft's
// ReloadableConfig minus the timeouts, which are tied to the leader lease
// and need a restart). A zero field keeps the current value.
type RaftReload struct {
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64
	SnapshotBytes     uint64
	TrailingBytes     uint64
}

// ReloadRaft applies r to this replica: the entry and interval snapshot
// settings to its running raft instance (raft.ReloadConfig), taking effect
// at raft's next snapshot check; the byte snapshot setting at the next
// entries stored; the trailing logs and bytes at the next log truncation
// (logretain.go).
func (n *Node) ReloadRaft(r RaftReload) error {
	c := n.stores.cache
	c.mu.Lock()
	if r.TrailingLogs != 0 {
		c.retain.trailingLogs = r.TrailingLogs
	}
	if r.TrailingBytes != 0 {
		c.retain.trailingBytes = r.TrailingBytes
	}
	if r.SnapshotBytes != 0 {
		c.retain.snapshotBytes = r.SnapshotBytes
	}
	c.mu.Unlock()
	if r.SnapshotThreshold == 0 && r.SnapshotInterval == 0 {
		return nil
	}
	n.reloadMu.Lock()
	defer n.reloadMu.Unlock()
	rc := n.raft.ReloadableConfig()
	if r.SnapshotThreshold != 0 {
		rc.SnapshotThreshold = r.SnapshotThreshold
	}
	if r.SnapshotInterval != 0 {
		rc.SnapshotInterval = r.SnapshotInterval
	}
	if err := n.raft.ReloadConfig(rc); err != nil {
		return fmt.Errorf("reload raft config of copyset %s: %w", n.group, err)
	}
	return nil
}

// RaftSettings returns the reloadable snapshot settings the replica runs
// with now.
func (n *Node) RaftSettings() RaftReload {
	rc := n.raft.ReloadableConfig()
	ret := n.stores.cache.retention()
	return RaftReload{
		SnapshotThreshold: rc.SnapshotThreshold,
		SnapshotInterval:  rc.SnapshotInterval,
		TrailingLogs:      ret.trailingLogs,
		SnapshotBytes:     ret.snapshotBytes,
		TrailingBytes:     ret.trailingBytes,
	}
}

// ReloadRaft applies r to every open copyset and to the options copysets
// opened later (created or loaded) start with. Every copyset is tried; the
// errors are joined.
func (m *Manager) ReloadRaft(r RaftReload) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r.SnapshotThreshold != 0 {
		m.opts.Raft.SnapshotThreshold = r.SnapshotThreshold
	}
	if r.SnapshotInterval != 0 {
		m.opts.Raft.SnapshotInterval = r.SnapshotInterval
	}
	if r.TrailingLogs != 0 {
		m.opts.Raft.TrailingLogs = r.TrailingLogs
	}
	if r.SnapshotBytes != 0 {
		m.opts.Raft.SnapshotBytes = r.SnapshotBytes
	}
	if r.TrailingBytes != 0 {
		m.opts.Raft.TrailingBytes = r.TrailingBytes
	}
	var errs []error
	for _, n := range m.nodes {
		if err := n.ReloadRaft(r); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ApplyState is where a replica's state machines are in the log.
type ApplyState struct {
	// Applied is the highest index the state machines have applied.
	Applied uint64
	// Idle is true when no committed entry that reaches the state machines
	// is waiting for, or in the middle of, its apply (committed no-op and
	// barrier entries do not count).
	Idle bool
	// Applying is the first committed index not yet applied when not Idle
	// (0 when Idle).
	Applying uint64
}

// ApplyState reports the state machines' progress. Two calls that both
// report Idle with the same Applied bracket a stretch in which no entry was
// applied: the state machines' data did not change in between (an entry is
// committed before it is applied, so an apply that began in between shows
// as not Idle or as a higher Applied in the second call).
func (n *Node) ApplyState() (ApplyState, error) {
	applied := n.fsm.applied.Load()
	ci := n.raft.CommitIndex()
	var l raft.Log
	for idx := ci; idx > applied; idx-- {
		if err := n.stores.log.GetLog(idx, &l); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				break // compacted: covered by a snapshot, so applied
			}
			return ApplyState{Applied: applied}, fmt.Errorf("apply state of copyset %s: get log %d: %w", n.group, idx, err)
		}
		if l.Type == raft.LogCommand || l.Type == raft.LogConfiguration {
			return ApplyState{Applied: applied, Applying: applied + 1}, nil
		}
	}
	return ApplyState{Applied: applied, Idle: true}, nil
}
