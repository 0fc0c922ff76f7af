package copyset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/chunkraft/chunkraft/internal/atomicfile"
)

// A replica created empty to be added to its copyset (Manager.Join) keeps a
// join marker, <copyset dir>/joined, written durably before Join returns
// (so before the add is proposed). It records After, a log index of the
// copyset known before the add was proposed (the leader's last index when
// the replica was created; the add's entry comes later), and the peers the
// copyset had then.
//
// The marker does two things. Load keeps a joined replica that has not
// received anything yet (killed after its add committed, before the leader
// sent it a byte): it reopens it empty, waiting for the leader, instead of
// deleting it as the remains of an unfinished create. And membership counts
// only configurations after After: the empty replica of a server removed
// before and now added again catches up through entries (or a snapshot)
// older than its re-add, among them the one that removed its earlier
// incarnation, and a leader may still be sending that incarnation removal
// notices; neither names a configuration newer than After, so neither
// drops the new replica.
type joinMarker struct {
	After uint64   `json:"after"`
	Peers []PeerID `json:"peers,omitempty"`
}

const joinMarkerName = "joined"

func joinMarkerPath(dir string) string { return filepath.Join(dir, joinMarkerName) }

// writeJoinMarker stores m in the copyset directory dir durably (the file,
// dir and dir's parent are fsynced).
func writeJoinMarker(dir string, m joinMarker) error {
	data, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("join marker: %w", err)
	}
	if err := atomicfile.WriteFile(joinMarkerPath(dir), data, 0o644); err != nil {
		return fmt.Errorf("join marker: %w", err)
	}
	if err := atomicfile.SyncDir(filepath.Dir(dir)); err != nil {
		return fmt.Errorf("join marker: %w", err)
	}
	return nil
}

// readJoinMarker reads dir's join marker; false when there is none.
func readJoinMarker(dir string) (joinMarker, bool, error) {
	data, err := os.ReadFile(joinMarkerPath(dir))
	if errors.Is(err, os.ErrNotExist) {
		return joinMarker{}, false, nil
	}
	if err != nil {
		return joinMarker{}, false, fmt.Errorf("join marker: %w", err)
	}
	var m joinMarker
	if err := json.Unmarshal(data, &m); err != nil {
		return joinMarker{}, false, fmt.Errorf("join marker %s: %w", joinMarkerPath(dir), err)
	}
	return m, true, nil
}

// countsForMembership reports whether a configuration whose entry is at
// index tells this replica anything about its own membership: one at or
// before the marker's After is older than the add that made this replica.
func (n *Node) countsForMembership(index uint64) bool { return index > n.joinAfter }

// JoinPeers returns the peers the copyset had when this replica was created
// empty to be added (Manager.Join); false for a replica not created so.
func (n *Node) JoinPeers() ([]PeerID, bool) {
	if !n.joined {
		return nil, false
	}
	return n.joinPeers, true
}

// Join opens an empty replica of copyset g that has no configuration: it
// never campaigns and waits for the leader to add it (AddPeer) and send it
// the log or a snapshot. ErrExist if this server already has g. after is a
// log index of the copyset before the add (the leader's last index now) and
// peers its current peers: both go into the replica's join marker, durable
// when Join returns (joinMarker), so the replica survives a restart before it
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
