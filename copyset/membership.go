package copyset

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/hashicorp/raft"
)

// Membership changes and the replica lifecycle around them.
//
// Changes are hashicorp/raft single-server changes on the leader (AddVoter,
// RemoveServer): one configuration entry each, no joint consensus. The
// copyset epoch (Status.Epoch) counts applied configuration entries, so it
// grows by one per committed change; leader elections do not change it
// (hashicorp/raft commits a no-op entry, not a configuration, on election).
// ChangePeers applies a whole new set as a sequence of such changes: every
// add first, then every remove (this server last), so the copyset never
// has fewer replicas than the smaller of the two sets.
//
// A new replica joins empty: Manager.Join (CreateCopysetNode with peers that
// do not include the server) opens a replica with no configuration, which
// never campaigns; AddPeer on the leader then makes it a voter and the
// leader sends it the log (or a snapshot with the data files). Its join
// marker (join.go), durable before the add is proposed, keeps it across a
// restart before it received anything and makes it ignore the
// configurations older than its add, so a server removed before and added
// again does not drop its new replica on the strength of its own removal
// (caught up from the log, or told by a removal notice about the earlier
// replica: the notice names the removal entry, which is not newer than the
// marker's index).
//
// A removed replica drops itself: when a committed configuration without
// this server is applied here after one with it, the manager closes the
// replica and moves its directory to <data_dir>/trash/<group>.<unixmillis>
// (purged later, trash.go). hashicorp/raft stops replicating to a server as
// soon as the leader appends the entry that removes it, so that server would
// never learn that the entry committed; the leader therefore sends it one
// more AppendEntries once the removal has committed (noticeRemoved): its
// own log up to the removal entry, in that entry's term, with the entry as
// commit index: a message the leader of that term could have sent anyway
// (with the entries the removed server lacks, if any). The notice is
// retried for noticeFor, so a server that was down drops its replica when
// it returns. One that stays away longer (or whose remover restarted
// meanwhile) keeps an orphan replica. If its log holds the removal entry,
// the orphan never campaigns, Removed reports it and
// CopysetService.DeleteBrokenCopyset moves it to the trash; if not, it asks
// for votes the members refuse and stays a candidate (a stale replica):
// DeleteBrokenCopyset asks the copyset's leader for its configuration and,
// when that has committed without this server, moves it to the trash too
// (Manager.DeleteStale, stale.go); the chunkserver's stale sweep does
// the same on its own for a replica that has heard from no leader for a
// while.
//
// Files: this one holds the changes (AddPeer, RemovePeer, ChangePeers) and
// what a replica knows of its membership (CommittedPeers, Removed); joining
// empty is in join.go, removal notices in membership_notice.go, dropping a
// removed replica and DeleteBroken in lifecycle.go, ResetPeers in reset.go.

// ErrInvalidPeers wraps a membership request whose peer set is unusable
// (empty, duplicated, without this server where it must be there).
var ErrInvalidPeers = errors.New("invalid peer set")

// confHas reports whether conf names id.
func confHas(conf raft.Configuration, id PeerID) bool {
	for _, s := range conf.Servers {
		if s.ID == raft.ServerID(id) {
			return true
		}
	}
	return false
}

// checkPeerSet rejects an empty set or one that lists a peer twice.
func checkPeerSet(peers []PeerID) error {
	if len(peers) == 0 {
		return fmt.Errorf("%w: no peers", ErrInvalidPeers)
	}
	seen := make(map[PeerID]bool, len(peers))
	for _, p := range peers {
		if seen[p] {
			return fmt.Errorf("%w: peer %s listed twice", ErrInvalidPeers, p)
		}
		seen[p] = true
	}
	return nil
}

// isNotLeader reports whether raft refused a change before appending it.
func isNotLeader(err error) bool {
	return errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipTransferInProgress)
}

// knownMember reports whether this replica's durable state shows it as a
// member: the newest snapshot's configuration or the first log entry (the
// bootstrap configuration of a copyset never snapshotted) names local, in
// an entry after joinAfter (join.go).
func knownMember(local PeerID, joinAfter uint64, snap snapRecord, hasSnap bool, stores *logStores) bool {
	if hasSnap && snap.Meta.ConfigurationIndex > joinAfter && confHas(snap.Meta.Configuration, local) {
		return true
	}
	first, err := stores.first()
	if err != nil || first == 0 || first <= joinAfter {
		return false
	}
	var l raft.Log
	if err := stores.log.GetLog(first, &l); err != nil || l.Type != raft.LogConfiguration {
		return false
	}
	return confHas(raft.DecodeConfiguration(l.Data), local)
}

// configWatchFSM is the FSM raft runs: the copyset FSM, plus a look at
// every applied (so committed) configuration entry for membership.
type configWatchFSM struct {
	*fsm
	n *Node
}

var _ raft.BatchingFSM = (*configWatchFSM)(nil)

func (w *configWatchFSM) ApplyBatch(logs []*raft.Log) []any {
	out := w.fsm.ApplyBatch(logs)
	for _, l := range logs {
		if l.Type == raft.LogConfiguration {
			w.n.configApplied(l.Index, raft.DecodeConfiguration(l.Data))
		}
	}
	return out
}

func (w *configWatchFSM) Apply(l *raft.Log) any { return w.ApplyBatch([]*raft.Log{l})[0] }

// configApplied runs on the FSM goroutine for each committed configuration.
func (n *Node) configApplied(index uint64, conf raft.Configuration) {
	n.noteCommitted(index, conf)
	// A replica that joined empty applies the configurations older than its
	// add first (join.go): they neither make it a member nor remove it.
	if !n.countsForMembership(index) {
		return
	}
	if confHas(conf, n.local) {
		n.wasMember.Store(true)
		return
	}
	// Only a replica that was a member is removed.
	if len(conf.Servers) == 0 || !n.wasMember.Load() {
		return
	}
	n.log.Info("committed configuration no longer contains this replica", "index", index, "peers", len(conf.Servers))
	if n.onRemoved != nil {
		n.onRemoved(n)
	}
}

// snapshotInstalled notes the configuration of a snapshot received from the
// leader and installed.
func (n *Node) snapshotInstalled(id string) {
	rec, err := n.snaps.readRecord(id)
	if err != nil {
		return
	}
	n.noteCommitted(rec.Meta.ConfigurationIndex, rec.Meta.Configuration)
	if n.countsForMembership(rec.Meta.ConfigurationIndex) && confHas(rec.Meta.Configuration, n.local) {
		n.wasMember.Store(true)
	}
}

// committedConf is a configuration known to have committed, and the index
// of its entry.
type committedConf struct {
	index uint64
	peers []PeerID
}

// noteCommitted records conf, committed at index, unless a newer one is
// known.
func (n *Node) noteCommitted(index uint64, conf raft.Configuration) {
	next := &committedConf{index: index, peers: confPeers(conf)}
	for {
		old := n.committed.Load()
		if (old != nil && old.index > index) || n.committed.CompareAndSwap(old, next) {
			return
		}
	}
}

// CommittedPeers returns the peers of the newest configuration this
// replica knows to have committed (applied here, or in a snapshot it
// holds); false before it knows any (a replica restarted without a
// snapshot learns its configuration again as its log is applied). The
// leader's is the copyset's membership; Peers may be newer, while a
// change is under way.
func (n *Node) CommittedPeers() ([]PeerID, bool) {
	c := n.committed.Load()
	if c == nil {
		return nil, false
	}
	return slices.Clone(c.peers), true
}

// CommittedIndex returns the log index of the configuration CommittedPeers
// returns; false before it knows one.
func (n *Node) CommittedIndex() (uint64, bool) {
	c := n.committed.Load()
	if c == nil {
		return 0, false
	}
	return c.index, true
}

// confPeers returns the peer ids of conf.
func confPeers(conf raft.Configuration) []PeerID {
	out := make([]PeerID, 0, len(conf.Servers))
	for _, s := range conf.Servers {
		out = append(out, PeerID(s.ID))
	}
	return out
}

// Removed reports whether this replica has been taken out of its copyset:
// it was a member and the newest configuration it knows (committed or not)
// no longer names this server. Such a replica never campaigns.
func (n *Node) Removed() bool {
	if !n.wasMember.Load() {
		return false
	}
	conf := n.raft.GetConfiguration().Configuration()
	return len(conf.Servers) > 0 && !confHas(conf, n.local)
}

// leaderPeers returns the configuration's peers; only on the leader.
func (n *Node) leaderPeers() ([]PeerID, error) {
	if n.raft.State() != raft.Leader {
		return nil, n.notLeader()
	}
	return n.Peers()
}

// waitConfChange waits for a configuration change to commit (and apply
// here) and returns its log index. A change raft appended before this
// replica lost the leadership is an *OutcomeUnknownError, one it refused a
// *NotLeaderError.
func (n *Node) waitConfChange(ctx context.Context, op string, fut raft.IndexFuture) (uint64, error) {
	done := make(chan error, 1)
	go func() { done <- fut.Error() }()
	select {
	case err := <-done:
		if err != nil {
			if errors.Is(err, raft.ErrLeadershipLost) {
				return 0, &OutcomeUnknownError{Leader: n.Leader()}
			}
			if isNotLeader(err) {
				return 0, n.notLeader()
			}
			return 0, fmt.Errorf("%s in copyset %s: %w", op, n.group, err)
		}
		return fut.Index(), nil
	case <-ctx.Done():
		return 0, fmt.Errorf("%s in copyset %s: outcome unknown: %w", op, n.group, ctx.Err())
	}
}

func (n *Node) addVoter(ctx context.Context, p PeerID) error {
	n.lease.changing.Add(1)
	defer n.lease.changing.Add(-1)
	fut := n.raft.AddVoter(raft.ServerID(p), raft.ServerAddress(p.Addr()), 0, n.applyTimeout(ctx))
	_, err := n.waitConfChange(ctx, "add peer "+string(p), fut)
	return err
}

func (n *Node) removeServer(ctx context.Context, p PeerID) error {
	n.lease.changing.Add(1)
	defer n.lease.changing.Add(-1)
	fut := n.raft.RemoveServer(raft.ServerID(p), 0, n.applyTimeout(ctx))
	idx, err := n.waitConfChange(ctx, "remove peer "+string(p), fut)
	if err != nil {
		return err
	}
	if p != n.local {
		n.bg.do(func() { n.noticeRemoved(p, idx) })
	}
	return nil
}

// AddPeer adds p to the copyset as a voter and returns once the change has
// committed, with the peers before and after. p must host an empty replica
// (Manager.Join) or an up-to-date one. Adding a member changes nothing. It
// must run on the leader (*NotLeaderError otherwise).
func (n *Node) AddPeer(ctx context.Context, p PeerID) (old, cur []PeerID, err error) {
	n.memberMu.Lock()
	defer n.memberMu.Unlock()
	if old, err = n.leaderPeers(); err != nil {
		return nil, nil, err
	}
	if slices.Contains(old, p) {
		return old, old, nil
	}
	if err := n.addVoter(ctx, p); err != nil {
		return old, nil, err
	}
	return old, append(slices.Clone(old), p), nil
}

// RemovePeer removes p from the copyset and returns once the change has
// committed, with the peers before and after; the removed server drops its
// replica. Removing a non-member changes nothing; the last peer cannot be
// removed. A leader that removes itself steps down. It must run on the
// leader.
func (n *Node) RemovePeer(ctx context.Context, p PeerID) (old, cur []PeerID, err error) {
	n.memberMu.Lock()
	defer n.memberMu.Unlock()
	if old, err = n.leaderPeers(); err != nil {
		return nil, nil, err
	}
	if !slices.Contains(old, p) {
		return old, old, nil
	}
	if len(old) == 1 {
		return old, nil, fmt.Errorf("%w: cannot remove %s, the last peer of copyset %s", ErrInvalidPeers, p, n.group)
	}
	if err := n.removeServer(ctx, p); err != nil {
		return old, nil, err
	}
	return old, slices.DeleteFunc(slices.Clone(old), func(q PeerID) bool { return q == p }), nil
}

// ChangePeers makes peers the copyset's configuration: the missing peers
// are added one at a time, then the extra ones removed one at a time (this
// server last), each committed before the next. It returns the peers before
// and after. A failure part-way leaves the changes made so far in place
// (the error says which step failed). It must run on the leader.
func (n *Node) ChangePeers(ctx context.Context, peers []PeerID) (old, cur []PeerID, err error) {
	if err := checkPeerSet(peers); err != nil {
		return nil, nil, err
	}
	n.memberMu.Lock()
	defer n.memberMu.Unlock()
	if old, err = n.leaderPeers(); err != nil {
		return nil, nil, err
	}
	var adds, removes []PeerID
	for _, p := range peers {
		if !slices.Contains(old, p) {
			adds = append(adds, p)
		}
	}
	for _, p := range old {
		if !slices.Contains(peers, p) {
			removes = append(removes, p)
		}
	}
	// This server last: once it is out it is no longer the leader.
	slices.SortStableFunc(removes, func(a, b PeerID) int {
		switch {
		case a == n.local:
			return 1
		case b == n.local:
			return -1
		}
		return 0
	})
	for _, p := range adds {
		if err := n.addVoter(ctx, p); err != nil {
			return old, nil, err
		}
	}
	for _, p := range removes {
		if err := n.removeServer(ctx, p); err != nil {
			return old, nil, err
		}
	}
	return old, slices.Clone(peers), nil
}
