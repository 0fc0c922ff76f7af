package copyset

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Leader leases for reads.
//
// A linearizable read must not be served by a leader that another leader
// has already replaced. The safe default asks a quorum first (VerifyLeader,
// one heartbeat round per batch of reads). A lease avoids that round:
//
// A hashicorp/raft follower that accepted an AppendEntries from the leader
// refuses to vote for any other candidate until HeartbeatTimeout has passed
// since that contact (it rejects votes while it knows a leader, and forgets
// the leader only when its heartbeat timer finds no contact for
// HeartbeatTimeout). So if a quorum of the voters acknowledged, in the
// current term, AppendEntries requests this leader sent at or after instant
// s, no other server can win an election before s + HeartbeatTimeout: every
// quorum of voters includes one of them. Until then this leader's commit
// index covers every acknowledged write, and a read needs no quorum round.
//
// The lease is s + leaseFraction*HeartbeatTimeout, measured with this
// process's monotonic clock on both ends (the follower's contact is later
// than our send instant, so clock rate is the only drift; the fraction
// leaves room for it and for scheduling delays). What would break the
// argument, and how each case is closed:
//   - A leadership transfer: its TimeoutNow makes the target campaign with a
//     flag that voters honour despite knowing a leader. An outbound
//     TimeoutNow revokes the lease for the rest of the term.
//   - A restarted follower forgets its leader and would vote at once; the
//     transport refuses inbound vote requests for a group for
//     HeartbeatTimeout after it opens (voteGate), which is what a follower
//     that never restarted would do.
//   - Configuration changes: quorums are counted over the latest
//     configuration, fetched once per term and again whenever a
//     configuration entry was applied; while this node runs a change
//     (addVoter/removeServer) no lease is used at all, so the cached
//     configuration is never more than the one uncommitted change that
//     hashicorp/raft allows away from the latest, whose quorums intersect.
//   - All servers must run with the same HeartbeatTimeout (a cluster-wide
//     setting, see README).
//
// Whenever the lease does not hold, reads fall back to VerifyLeader; a
// successful round renews the lease through the heartbeats it sends.

// leaseFraction is the part of HeartbeatTimeout a lease lasts.
const leaseFraction = 0.75

// lease tracks, for the current term, the latest send instant of an
// AppendEntries each peer acknowledged, and the configuration to count a
// quorum over.
type lease struct {
	// changing counts configuration changes this node is running; no lease
	// is used while it is not zero.
	changing atomic.Int32

	mu      sync.Mutex
	term    uint64
	acks    map[raft.ServerID]time.Time
	revoked uint64 // a term whose lease a TimeoutNow revoked

	// The configuration the quorum is counted over, valid for confTerm and
	// confEpoch (fsm.epoch, the number of configuration entries applied).
	voters    []raft.ServerID
	confTerm  uint64
	confEpoch uint64
	confOK    bool
}

// ack records that id acknowledged (success, same term) an AppendEntries of
// term sent at sent.
func (l *lease) ack(term uint64, id raft.ServerID, sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if term < l.term {
		return
	}
	if term > l.term || l.acks == nil {
		l.term = term
		l.acks = make(map[raft.ServerID]time.Time)
	}
	if sent.After(l.acks[id]) {
		l.acks[id] = sent
	}
}

// revoke ends any lease of term (an outbound TimeoutNow).
func (l *lease) revoke(term uint64) {
	l.mu.Lock()
	if term > l.revoked {
		l.revoked = term
	}
	l.mu.Unlock()
}

// needsConfig reports whether the cached configuration is stale for term
// and epoch.
func (l *lease) needsConfig(term, epoch uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.confOK || l.confTerm != term || l.confEpoch != epoch
}

// setConfig caches the voters of the configuration read in term at epoch.
func (l *lease) setConfig(term, epoch uint64, conf raft.Configuration) {
	var voters []raft.ServerID
	for _, s := range conf.Servers {
		if s.Suffrage == raft.Voter {
			voters = append(voters, s.ID)
		}
	}
	l.mu.Lock()
	l.voters, l.confTerm, l.confEpoch, l.confOK = voters, term, epoch, true
	l.mu.Unlock()
}

// held reports whether, at now, self holds the lease of term given a lease
// length of d.
func (l *lease) held(now time.Time, term, epoch uint64, self raft.ServerID, d time.Duration) bool {
	if l.changing.Load() != 0 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if term != l.term || term <= l.revoked || !l.confOK || l.confTerm != term || l.confEpoch != epoch {
		return false
	}
	since := now.Add(-d)
	n, selfVoter := 0, false
	for _, id := range l.voters {
		if id == self {
			selfVoter = true
			n++
			continue
		}
		if l.acks[id].After(since) {
			n++
		}
	}
	return selfVoter && n > len(l.voters)/2
}

// leaseTransport is the raft.Transport a node's raft instance uses: the
// group transport, watched for the lease's acknowledgements and
// revocations. Every other method is the group transport's.
type leaseTransport struct {
	*GroupTransport
	n *Node
}

// AppendEntries implements raft.Transport (heartbeats and the non-pipelined
// replication path).
func (t *leaseTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	sent := time.Now()
	err := t.GroupTransport.AppendEntries(id, target, args, resp)
	if err == nil && resp.Success && resp.Term == args.Term {
		t.n.lease.ack(args.Term, id, sent)
	}
	return err
}

// TimeoutNow implements raft.Transport: a leadership transfer is starting.
func (t *leaseTransport) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	// Sent only by a leader starting a transfer, after raft was opened.
	t.n.lease.revoke(t.n.raft.CurrentTerm())
	return t.GroupTransport.TimeoutNow(id, target, args, resp)
}

// leaseRead reports whether a read may skip the quorum round: this leader
// holds the lease of the current term. It fetches the configuration when
// the cached one is stale.
func (n *Node) leaseRead() bool {
	if n.opts.NoReadLease {
		return false
	}
	term := n.raft.CurrentTerm()
	epoch := n.fsm.epoch.Load()
	if n.lease.needsConfig(term, epoch) {
		if n.lease.changing.Load() != 0 {
			return false
		}
		fut := n.raft.GetConfiguration()
		if fut.Error() != nil {
			return false
		}
		// The configuration is the latest one at some instant after term
		// and epoch were read; if either moved meanwhile, held refuses.
		n.lease.setConfig(term, epoch, fut.Configuration())
	}
	d := time.Duration(float64(n.opts.HeartbeatTimeout) * leaseFraction)
	return n.lease.held(time.Now(), term, epoch, raft.ServerID(n.local), d)
}
