package dm

import (
	"context"
	"strings"

	"github.com/chunkraft/chunkraft/chunkstore"
	"github.com/chunkraft/chunkraft/copyset"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
)

// A task's target copysets are fenced (chunkstore's write fence): from
// before the task's share exists on a copyset until the task is stopped,
// every client write there is refused (EPOCH_TOO_OLD) and only the task's
// applier writes, as the fence's owner "dm:<task>". So nothing but the
// source's ops reaches the target, and the target cannot diverge.
//
// The Start of a share sets the fence first, then proposes the share; a
// stop-task deletes the share, then lifts the fence. A fence whose task
// has no share on the copyset (a stop whose lift failed, a start whose
// share never committed) is lifted by the copyset's leader worker, which
// reads the shares after a barrier and skips the starts this server has
// in flight.

// fencePrefix begins the owner of every fence a dm task holds: owners
// beginning with it are the dm service's, and no other user of the write
// fence may take one (liftOrphanFence lifts those without a share).
const fencePrefix = "dm:"

// fenceOwner is the write fence owner of task name.
func fenceOwner(name string) string { return fencePrefix + name }

// fenceReason is the reason task name's fence gives.
func fenceReason(name string) string {
	return "dm task " + name + " migrates into this copyset; client writes resume when the task is stopped"
}

// starting marks a Start of task name on copyset g in flight on this
// server (its fence set, its share not yet committed); the returned
// function unmarks it.
func (s *Service) starting(g copyset.GroupID, name string) func() {
	s.startMu.Lock()
	defer s.startMu.Unlock()
	if s.starts == nil {
		s.starts = map[startKey]int{}
	}
	k := startKey{g, name}
	s.starts[k]++
	return func() {
		s.startMu.Lock()
		defer s.startMu.Unlock()
		if s.starts[k]--; s.starts[k] == 0 {
			delete(s.starts, k)
		}
	}
}

type startKey struct {
	g    copyset.GroupID
	name string
}

func (s *Service) isStarting(g copyset.GroupID, name string) bool {
	s.startMu.Lock()
	defer s.startMu.Unlock()
	return s.starts[startKey{g, name}] > 0
}

// liftOrphanFence lifts copyset n's dm fence when its task has no share
// there, or a share whose cutover committed (n is led by this server; its
// machine state is past a barrier).
func (s *Service) liftOrphanFence(ctx context.Context, n *copyset.Node, m *Machine) {
	f, ok := chunkstore.LocalWriteFence(n)
	if !ok {
		return
	}
	name, isDM := strings.CutPrefix(f.Owner, fencePrefix)
	if !isDM || s.isStarting(n.Group(), name) {
		return
	}
	if sh := m.Get(name); sh != nil && sh.GetCutover().GetStep() != pb.CutoverStep_CUTOVER_COMMITTED {
		return
	}
	if err := s.deps.Chunks.LiftWriteFence(ctx, n.Group(), f.Owner); err != nil {
		s.log.Warn("dm: lift the write fence of a task without a share", "task", name, "pool", n.Group().Pool(), "copyset", n.Group().Copyset(), "error", err)
		return
	}
	s.log.Info("dm: lifted the write fence of a task without a share", "task", name, "pool", n.Group().Pool(), "copyset", n.Group().Copyset())
}
