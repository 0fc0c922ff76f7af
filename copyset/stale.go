package copyset

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// A stale replica is one its copyset no longer has: its server was down
// or paused when the removal committed and was never told (the removal
// notice gave up, or the leader that sent it went away), so the replica
// hears from no leader and asks for votes the members refuse. It cannot
// learn its removal from its own log, which may lack the removal entry or
// be older than a later re-add; only the copyset's leader can say. The
// caller (the chunkserver's stale sweep and DeleteBrokenCopyset) asks the
// leader and, when the leader's committed and newest configurations both
// leave this server out, calls DeleteStale.
//
// What makes that safe against a concurrent re-add: adding a server
// starts with a create request on it (CreateCopysetNode, which finds the
// replica and answers EXIST), then the AddPeer on the leader, whose
// newest configuration names the server from then on. DeleteStale refuses
// a replica claimed by a create request since the caller's bound, so a
// caller that asked the leader after the bound deletes nothing a re-add
// is about to use.

// ErrClaimed is returned by Manager.DeleteStale for a replica a create
// request named since the caller's bound: a re-add may be under way.
var ErrClaimed = errors.New("copyset replica was named by a create request")

// claim records a create request naming this replica.
func (n *Node) claim() { n.claimed.Store(time.Now().UnixNano()) }

// EverMember reports whether this replica has known a configuration naming
// this server (one after its join marker, for a replica created empty).
func (n *Node) EverMember() bool { return n.wasMember.Load() }

// Unled returns how long this replica has gone without hearing from a
// leader: since its last contact with one, or since it was opened when
// that is later; 0 while it leads.
func (n *Node) Unled(now time.Time) time.Duration {
	if n.raft.State() == raft.Leader {
		return 0
	}
	since := n.opened
	if lc := n.raft.LastContact(); lc.After(since) {
		since = lc
	}
	return max(now.Sub(since), 0)
}

// DeleteStale moves n, a replica the caller has found (asking the leader)
// to be outside its copyset's committed configuration, to the trash. It
// refuses (ErrClaimed) a replica a create request named at or after
// claimedBefore, and fails (wrapping ErrNotHosted) when n is no longer the
// hosted replica of its group.
func (m *Manager) DeleteStale(n *Node, claimedBefore time.Time) error {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	if c := n.claimed.Load(); c != 0 && c >= claimedBefore.UnixNano() {
		return fmt.Errorf("delete stale copyset %s: %w at %s", n.group, ErrClaimed, time.Unix(0, c).UTC().Format(time.RFC3339Nano))
	}
	path, err := m.drop(n)
	if err != nil {
		return fmt.Errorf("delete stale copyset %s: %w", n.group, err)
	}
	m.log.Info("stale copyset replica moved to trash", "group", n.group, "path", path)
	return nil
}
