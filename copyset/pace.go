package copyset

import (
	"github.com/hashicorp/raft"
)

// paceLeader sets the heartbeat timeout this replica's raft runs with:
// opts.LeaderHeartbeatTimeout while it leads, so that raft's own
// heartbeat goroutines wake less often while the peers' batchers beat
// for it (transport_beat.go), and opts.HeartbeatTimeout otherwise, which
// is what the lease's argument (lease.go) counts on from a follower.
// ElectionTimeout is raised with it where raft requires it to be at least
// the heartbeat timeout; on a leader, raft uses it only as the timeout of
// a leadership transfer (which holds the leader's applies meanwhile).
// It runs on raft's goroutine at every state change (a raft.Observer,
// after raft stored the new state) and is serialized with ReloadRaft by
// reloadMu; it reads the state under the lock, so the last call sets what
// the current state needs.
func (n *Node) paceLeader() {
	n.reloadMu.Lock()
	defer n.reloadMu.Unlock()
	state := n.raft.State()
	hb, et := n.opts.HeartbeatTimeout, n.opts.ElectionTimeout
	if lh := n.opts.LeaderHeartbeatTimeout; lh > hb && state == raft.Leader {
		hb, et = lh, max(et, lh)
	}
	rc := n.raft.ReloadableConfig()
	if rc.HeartbeatTimeout == hb && rc.ElectionTimeout == et {
		return
	}
	rc.HeartbeatTimeout, rc.ElectionTimeout = hb, et
	if err := n.raft.ReloadConfig(rc); err != nil {
		n.log.Warn("set the raft heartbeat timeout", "state", state.String(), "heartbeat_timeout", hb, "err", err)
	}
}

// leadingIn reports whether this replica's raft is leader in term.
func (n *Node) leadingIn(term uint64) bool {
	return n.raft.State() == raft.Leader && n.raft.CurrentTerm() == term
}
