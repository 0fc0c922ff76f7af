package copyset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/chunkraft/chunkraft/copyset/sharedlog"
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

// ErrInvalidPeers wraps a membership request whose peer set is unusable
// (empty, duplicated, without this server where it must be there).
var ErrInvalidPeers = errors.New("invalid peer set")

// ErrHealthy is returned by Manager.DeleteBroken for a loaded replica that
// is neither broken nor removed from its copyset.
var ErrHealthy = errors.New("copyset replica is healthy")

// ErrNotHosted is returned for a copyset this server has no replica of.
var ErrNotHosted = errors.New("copyset is not hosted on this server")

// confHas reports whether conf names id.
func confHas(conf raft.Configuration, id PeerID) bool {
	for _, s := range conf.Servers {
		if s.ID == raft.ServerID(id) {
			return true
		}
	}
	return false
}

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

func isNotLeader(err error) bool {
	return errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) ||
		errors.Is(err, raft.ErrLeadershipTransferInProgress)
}

// openLogStores opens copyset group's raft log and stable store: its view
// of the shared log when there is one, else its own raft-boltdb file.
func openLogStores(shared *sharedlog.Log, group GroupID, dir string, cacheSize int) (*logStores, error) {
	if shared != nil {
		return openSharedLogStore(shared, group, cacheSize)
	}
	return openBoltLogStore(filepath.Join(dir, "raft"), cacheSize)
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

// background runs a node's helper goroutines; close stops new ones, tells
// the running ones (sleep returns false) and waits for them.
type background struct {
	mu     sync.Mutex
	closed bool
	done   chan struct{}
	wg     sync.WaitGroup
}

func (b *background) do(f func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	if b.done == nil {
		b.done = make(chan struct{})
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		f()
	}()
}

// sleep waits d; false if close was called meanwhile.
func (b *background) sleep(d time.Duration) bool {
	b.mu.Lock()
	done := b.done
	b.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}

func (b *background) close() {
	b.mu.Lock()
	if !b.closed && b.done != nil {
		close(b.done)
	}
	b.closed = true
	b.mu.Unlock()
	b.wg.Wait()
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
// here) and returns its log index.
func (n *Node) waitConfChange(ctx context.Context, op string, fut raft.IndexFuture) (uint64, error) {
	done := make(chan error, 1)
	go func() { done <- fut.Error() }()
	select {
	case err := <-done:
		if err != nil {
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

// TransferLeaderAny moves leadership to the most up-to-date follower
// (raft's choice) and waits until the transfer has finished. It must run
// on the leader.
func (n *Node) TransferLeaderAny(ctx context.Context) error {
	if n.raft.State() != raft.Leader {
		return n.notLeader()
	}
	if err := n.raft.LeadershipTransfer().Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) {
			return n.notLeader()
		}
		return fmt.Errorf("transfer leader of copyset %s: %w", n.group, err)
	}
	return nil
}

// Removal notices are retried this long (a removed server that restarts
// within it is told on its return), backing off up to noticeMaxWait; a
// peer that answers it has no such copyset for noticeNotFoundFor is given
// up on.
const (
	noticeFor         = 10 * time.Minute
	noticeMaxWait     = 5 * time.Second
	noticeNotFoundFor = time.Minute
)

// noticeRemoved tells removed peer p that the configuration entry at idx,
// which removed it, has committed (see the top of this file): it sends the
// entries p lacks up to idx (MaxAppendEntries at a time) with idx as the
// commit index, in the entry's term, as this server, the leader of that
// term. It gives up when p follows a newer term, its log conflicts, the
// entries it needs were compacted away, or after noticeFor.
func (n *Node) noticeRemoved(p PeerID, idx uint64) {
	var entry raft.Log
	if err := n.stores.log.GetLog(idx, &entry); err != nil {
		n.log.Warn("removal notice: read removal entry", "peer", p, "index", idx, "err", err)
		return
	}
	term := entry.Term
	prev := idx // first assume p has everything up to idx
	wait := 100 * time.Millisecond
	var notFound time.Time
	for deadline := time.Now().Add(noticeFor); time.Now().Before(deadline); {
		req, err := n.noticeRequest(term, prev, idx)
		if err != nil {
			n.log.Warn("removal notice: entries no longer in the log", "peer", p, "from", prev+1, "err", err)
			return
		}
		var resp raft.AppendEntriesResponse
		err = n.trans.AppendEntries(raft.ServerID(p), raft.ServerAddress(p.Addr()), req, &resp)
		switch {
		case errors.Is(err, raft.ErrTransportShutdown):
			return
		case err != nil:
			if grpcstatus.Code(err) != codes.NotFound {
				notFound = time.Time{}
			} else if notFound.IsZero() {
				notFound = time.Now()
			} else if time.Since(notFound) > noticeNotFoundFor {
				return // it has no replica (any more)
			}
			if !n.bg.sleep(wait) {
				return
			}
			wait = min(2*wait, noticeMaxWait)
		case resp.Term > term:
			return // it follows a newer term's leader, which will not replicate to it
		case resp.Success:
			if prev += uint64(len(req.Entries)); prev >= idx {
				n.log.Info("removed peer told its removal committed", "peer", p, "index", idx)
				return
			}
		case resp.LastLog >= prev:
			return // its log conflicts with ours: not ours to fix
		default:
			prev = resp.LastLog // it lacks entries: send them
		}
	}
}

// noticeRequest builds one removal notice: entries prev+1.. (at most
// MaxAppendEntries, up to idx) after prev, commit index idx.
func (n *Node) noticeRequest(term, prev, idx uint64) (*raft.AppendEntriesRequest, error) {
	self := []byte(n.local.Addr())
	req := &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(n.local), Addr: self},
		Term:      term, PrevLogEntry: prev, LeaderCommitIndex: idx,
	}
	if prev > 0 {
		var l raft.Log
		if err := n.stores.log.GetLog(prev, &l); err != nil {
			return nil, err
		}
		req.PrevLogTerm = l.Term
	}
	for i := prev + 1; i <= idx && len(req.Entries) < n.opts.MaxAppendEntries; i++ {
		l := new(raft.Log)
		if err := n.stores.log.GetLog(i, l); err != nil {
			return nil, err
		}
		req.Entries = append(req.Entries, l)
	}
	return req, nil
}

// Local returns this server's peer id.
func (m *Manager) Local() PeerID { return m.opts.Local }

// Join opens an empty replica of copyset g that has no configuration: it
// never campaigns and waits for the leader to add it (AddPeer) and send it
// the log or a snapshot. ErrExist if this server already has g. after is a
// log index of the copyset before the add (the leader's last index now) and
// peers its current peers: both go into the replica's join marker, durable
// when Join returns (join.go), so the replica survives a restart before it
// received anything and ignores configurations up to after. With after 0
// every configuration counts (a copyset whose earlier members never
// included this server).
func (m *Manager) Join(ctx context.Context, g GroupID, after uint64, peers []PeerID) (*Node, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("join copyset %s: %w", g, err)
	}
	if peers != nil {
		if err := checkPeerSet(peers); err != nil {
			return nil, fmt.Errorf("join copyset %s: %w", g, err)
		}
	}
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	dir := m.groupDir(g)
	if m.opts.SharedLog != nil && m.Get(g) == nil && !dirExists(dir) && m.hasRaftState(g, dir) {
		return nil, fmt.Errorf("join copyset %s: the shared log holds raft state of it", g)
	}
	return m.openMode(g, nil, &joinMarker{After: after, Peers: slices.Clone(peers)})
}

// noteRemoved queues n for the manager's lifecycle goroutine. It is called
// on the FSM goroutine and does not block.
func (m *Manager) noteRemoved(n *Node) {
	m.dropMu.Lock()
	m.drops = append(m.drops, n)
	m.dropMu.Unlock()
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// runLifecycle drops removed replicas and purges the trash until ctx ends.
func (m *Manager) runLifecycle(ctx context.Context) {
	defer close(m.loopDone)
	tick := time.NewTicker(m.trash.ScanInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.kick:
			m.dropMu.Lock()
			drops := m.drops
			m.drops = nil
			m.dropMu.Unlock()
			for _, n := range drops {
				m.dropIfRemoved(n)
			}
		case now := <-tick.C:
			m.PurgeTrash(now)
		}
	}
}

// dropIfRemoved closes a removed replica and moves it to the trash, unless
// it was added back meanwhile or is no longer the hosted replica.
func (m *Manager) dropIfRemoved(n *Node) {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	// Let a membership call still running on this replica (a leader that
	// removed itself) finish first.
	n.memberMu.Lock()
	removed := n.Removed()
	n.memberMu.Unlock()
	if !removed {
		return
	}
	if _, err := m.drop(n); err != nil && !errors.Is(err, ErrNotHosted) {
		m.log.Error("drop removed replica", "group", n.group, "err", err)
	}
}

// drop takes n out of the hosted replicas, if it is still the one of its
// group, and moves it to the trash (ErrNotHosted when it is not). Called
// with lifeMu held.
func (m *Manager) drop(n *Node) (string, error) {
	if !m.detach(n) {
		return "", fmt.Errorf("drop copyset %s: %w", n.group, ErrNotHosted)
	}
	m.log.Info("dropping replica removed from its copyset", "pool", n.group.Pool(), "copyset", n.group.Copyset())
	return m.retire(n.group, n)
}

// detach takes n out of the hosted replicas if it is still the one of its
// group.
func (m *Manager) detach(n *Node) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.nodes[n.group] != n {
		return false
	}
	delete(m.nodes, n.group)
	return true
}

// retire closes n (if any), forgets g's shared-log records and moves g's
// directory to the trash, returning where it went.
func (m *Manager) retire(g GroupID, n *Node) (string, error) {
	if n != nil {
		if err := n.Close(); err != nil {
			m.log.Warn("close retired replica", "group", g, "err", err)
		}
	}
	m.dropSharedLog(g)
	return m.moveToTrash(g)
}

// DeleteBroken moves this server's replica of g to the trash: a loaded
// replica only when it is broken (Node.Broken) or removed from its copyset
// (Node.Removed), else ErrHealthy; a directory on disk that is not loaded
// as it is. It fails (wrapping ErrNotHosted) when there is neither.
func (m *Manager) DeleteBroken(g GroupID) error {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return fmt.Errorf("delete copyset %s: manager closed", g)
	}
	n := m.nodes[g]
	if n != nil {
		if n.Broken() == nil && !n.Removed() {
			m.mu.Unlock()
			return fmt.Errorf("delete copyset %s: %w", g, ErrHealthy)
		}
		delete(m.nodes, g)
	}
	m.mu.Unlock()
	if n == nil && !dirExists(m.groupDir(g)) {
		return fmt.Errorf("delete copyset %s: %w", g, ErrNotHosted)
	}
	path, err := m.retire(g, n)
	if err != nil {
		return fmt.Errorf("delete copyset %s: %w", g, err)
	}
	m.log.Info("copyset replica moved to trash", "group", g, "path", path, "broken", n != nil && n.Broken() != nil)
	return nil
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
	machines, err := m.openMachines(g, filepath.Join(dir, "data"))
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
