// ResetPeers: forcing a replica's configuration without a quorum (disaster
// recovery) through raft.RecoverCluster, with recoveryFSM replaying the log
// onto the state machines.

package copyset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"

	"github.com/hashicorp/raft"
)

// configurationOf is the all-voter configuration of peers.
func configurationOf(peers []PeerID) raft.Configuration {
	conf := raft.Configuration{}
	for _, p := range peers {
		conf.Servers = append(conf.Servers, raft.Server{
			Suffrage: raft.Voter, ID: raft.ServerID(p), Address: raft.ServerAddress(p.Addr()),
		})
	}
	return conf
}

// ResetPeers forcibly sets the configuration of this server's replica of g
// to peers, locally and without a quorum (disaster recovery, as
// raft.RecoverCluster): the replica is closed, every entry in its log is
// applied, a snapshot with the new configuration replaces the log, and the
// replica is reopened. peers must include this server. The epoch grows by
// one (plus any configuration entries not applied before). The other
// replicas are not told: reset each survivor.
func (m *Manager) ResetPeers(ctx context.Context, g GroupID, peers []PeerID) error {
	if err := checkPeerSet(peers); err != nil {
		return fmt.Errorf("reset peers of copyset %s: %w", g, err)
	}
	if !slices.Contains(peers, m.opts.Local) {
		return fmt.Errorf("reset peers of copyset %s: %w: %v do not include this server %s", g, ErrInvalidPeers, peers, m.opts.Local)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("reset peers of copyset %s: %w", g, err)
	}
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	m.mu.Lock()
	n := m.nodes[g]
	switch {
	case m.closed:
		m.mu.Unlock()
		return fmt.Errorf("reset peers of copyset %s: manager closed", g)
	case n == nil:
		m.mu.Unlock()
		return fmt.Errorf("reset peers of copyset %s: %w", g, ErrNotHosted)
	case n.Broken() != nil:
		m.mu.Unlock()
		return fmt.Errorf("reset peers of copyset %s: replica is broken (%v): delete it instead", g, n.Broken())
	}
	delete(m.nodes, g)
	m.mu.Unlock()

	epoch, applied := n.fsm.epoch.Load(), n.fsm.applied.Load()
	if err := n.Close(); err != nil {
		m.log.Warn("close replica before reset", "group", g, "err", err)
	}
	recErr := m.recoverCluster(g, configurationOf(peers), epoch, applied)
	if recErr != nil {
		m.log.Error("reset peers", "group", g, "err", recErr)
	}
	if _, err := m.open(g, nil); err != nil {
		return errors.Join(recErr, fmt.Errorf("reopen copyset %s after reset: %w", g, err))
	}
	if recErr != nil {
		return fmt.Errorf("reset peers of copyset %s: %w", g, recErr)
	}
	m.log.Warn("copyset peers reset", "group", g, "peers", peers)
	return nil
}

// recoverCluster runs raft.RecoverCluster on g's closed replica. epoch and
// applied are the replica's epoch and applied index when it was closed.
func (m *Manager) recoverCluster(g GroupID, conf raft.Configuration, epoch, applied uint64) error {
	dir := m.groupDir(g)
	log := m.log.With("pool", g.Pool(), "copyset", g.Copyset())
	m.mu.RLock() // ReloadRaft may change the options
	opts := m.opts.Raft.withDefaults()
	m.mu.RUnlock()
	snaps, err := newSnapshotStore(g, dir, log)
	if err != nil {
		return err
	}
	stores, err := openLogStores(m.opts.SharedLog, g, dir, opts.LogCacheSize)
	if err != nil {
		return err
	}
	defer stores.close()
	// Configuration entries not applied yet count toward the epoch too;
	// the reset itself is one more change.
	last, err := stores.log.LastIndex()
	if err != nil {
		return fmt.Errorf("last log index: %w", err)
	}
	for i := applied + 1; i <= last; i++ {
		var l raft.Log
		if err := stores.log.GetLog(i, &l); err != nil {
			return fmt.Errorf("read log %d: %w", i, err)
		}
		if l.Type == raft.LogConfiguration {
			epoch++
		}
	}
	// No pins here: the recovery's compaction is not held back.
	machines, err := m.openMachines(g, filepath.Join(dir, "data"), newLogPins(g, opts.MaxPinnedEntries, opts.MaxPinnedBytes, log))
	if err != nil {
		return err
	}
	rf := recoveryFSM{newFSM(m.reg, machines, log)}
	defer rf.closeMachines()
	rf.epoch.Store(epoch + 1)
	cfg := raft.DefaultConfig()
	cfg.LocalID = raft.ServerID(m.opts.Local)
	cfg.Logger = raftLogger(opts, log, g)
	if err := raft.RecoverCluster(cfg, rf, stores.log, stores.stable, snaps, nil, conf); err != nil {
		return fmt.Errorf("recover cluster: %w", err)
	}
	return nil
}

// recoveryFSM is the copyset FSM as raft.RecoverCluster needs it: the data
// directory already holds every snapshot's state (snapshots copy no data),
// so Restore reads nothing; Apply replays the log onto the state machines
// (idempotent); the snapshot fails if an op failed fatally.
type recoveryFSM struct{ *fsm }

func (r recoveryFSM) Restore(rc io.ReadCloser) error { return rc.Close() }

func (r recoveryFSM) Snapshot() (raft.FSMSnapshot, error) {
	if fe := r.broken.Load(); fe != nil {
		return nil, fe
	}
	return r.fsm.Snapshot()
}
