// The manager's replica lifecycle after membership: the lifecycle goroutine
// (runLifecycle) drops replicas removed from their copyset and purges the
// trash; drop, retire and DeleteBroken take a replica out and move it to the
// trash (trash.go).

package copyset

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrHealthy is returned by Manager.DeleteBroken for a loaded replica that
// is neither broken nor removed from its copyset.
var ErrHealthy = errors.New("copyset replica is healthy")

// ErrNotHosted is returned for a copyset this server has no replica of.
var ErrNotHosted = errors.New("copyset is not hosted on this server")

// noteRemoved queues n for the manager's lifecycle goroutine. It is called
// on the FSM goroutine and does not block.
func (m *Manager) noteRemoved(n *Node) {
	m.dropMu.Lock()
	m.drops = append(m.drops, n)
	m.dropsPending++
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
				m.dropMu.Lock()
				m.dropsPending--
				m.dropMu.Unlock()
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
