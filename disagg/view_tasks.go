package disagg

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/chunkread"
	"github.com/chunkraft/chunkraft/internal/slack"
	vpb "github.com/chunkraft/chunkraft/proto/chunkraft/viewpb"
)

// The leader's bookkeeping of read views: tasks (a task's views, one per
// copyset, and which segments were fetched), leases, and why a task's
// views went (for the next Fetch). It is memory: a new leader rebuilds a
// task from the view infos it finds (findTask) and gives each view it
// finds a lease of max(the register deadline, now + RefreshLease), which
// no extension its predecessor granted can pass. An extension a Fetch
// grants (extend) is in this memory only, not replicated: it is lost
// with the leader, and the grace a new leader gives covers it.

// viewRef names a view: its copyset and register sequence number.
type viewRef struct {
	group copyset.GroupID
	seq   uint64
}

// viewTask is one disagg task on this leader.
type viewTask struct {
	key  string
	segs map[copyset.GroupID]*segTask
}

// segTask is one segment (copyset) of a task.
type segTask struct {
	seq     uint64
	fetched bool
}

// maxGone bounds the remembered reasons of tasks that went.
const maxGone = 4096

// viewTasks is the Service's bookkeeping.
type viewTasks struct {
	mu        sync.Mutex
	tasks     map[string]*viewTask
	leases    map[viewRef]time.Time
	gone      map[string]string
	goneOrder []string
	worker    *copyset.LeaderWorker

	// admit serialises, per copyset, the look for a view of the task, the
	// bound check and the register; running serialises the Establish and
	// Cancel calls of one task (by task key) on this server.
	admit   keyLocks[copyset.GroupID]
	running keyLocks[string]
}

func newViewTasks() *viewTasks {
	return &viewTasks{tasks: map[string]*viewTask{}, leases: map[viewRef]time.Time{}, gone: map[string]string{}}
}

// keyLocks are mutexes by key whose lock waits no longer than a context.
// A key's entry lives while the lock is held or waited for.
type keyLocks[K comparable] struct {
	mu    sync.Mutex
	locks map[K]*keyLock
}

type keyLock struct {
	held chan struct{} // holds a token while locked
	refs int           // holders and waiters
}

// lock locks k, or fails when ctx ends first; unlock releases it.
func (l *keyLocks[K]) lock(ctx context.Context, k K) (unlock func(), err error) {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[K]*keyLock{}
	}
	kl := l.locks[k]
	if kl == nil {
		kl = &keyLock{held: make(chan struct{}, 1)}
		l.locks[k] = kl
	}
	kl.refs++
	l.mu.Unlock()
	release := func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if kl.refs--; kl.refs == 0 {
			delete(l.locks, k)
		}
	}
	select {
	case kl.held <- struct{}{}:
		return sync.OnceFunc(func() {
			<-kl.held
			release()
		}), nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}

// setGone records why task key's views went. The caller holds mu.
func (vt *viewTasks) setGone(key, why string) {
	if _, ok := vt.gone[key]; !ok {
		vt.goneOrder = append(vt.goneOrder, key)
		if len(vt.goneOrder) > maxGone {
			delete(vt.gone, vt.goneOrder[0])
			vt.goneOrder = vt.goneOrder[1:]
		}
	}
	vt.gone[key] = why
}

// extend moves the leases of t's views to at least until. The caller
// holds mu.
func (vt *viewTasks) extend(t *viewTask, until time.Time) {
	for g, seg := range t.segs {
		r := viewRef{g, seg.seq}
		if until.After(vt.leases[r]) {
			vt.leases[r] = until
		}
	}
}

// findTask returns task key: from memory, else rebuilt from the views of
// the copysets this server leads (after a leader change); nil when no
// view of it is here.
func (s *Service) findTask(key string) *viewTask {
	vt := s.views
	vt.mu.Lock()
	t := vt.tasks[key]
	vt.mu.Unlock()
	if t != nil {
		return t
	}
	t = &viewTask{key: key, segs: map[copyset.GroupID]*segTask{}}
	now := time.Now()
	for _, n := range s.copysets.List() {
		if !n.IsLeader() {
			continue
		}
		st, ok := s.viewStore(n)
		if !ok {
			continue
		}
		for _, v := range st.Views() {
			if v.Info.GetTaskKey() == key {
				t.segs[n.Group()] = &segTask{seq: v.Seq}
				s.views.mu.Lock()
				s.views.leaseFor(viewRef{n.Group(), v.Seq}, v.Info, now)
				s.views.mu.Unlock()
			}
		}
	}
	if len(t.segs) == 0 {
		return nil
	}
	vt.mu.Lock()
	defer vt.mu.Unlock()
	if have := vt.tasks[key]; have != nil {
		return have
	}
	vt.tasks[key] = t
	return t
}

// leaseFor returns view r's lease, giving a view this leader has not seen
// max(its register deadline, now + RefreshLease). The caller holds mu.
func (vt *viewTasks) leaseFor(r viewRef, info *vpb.ViewInfo, now time.Time) time.Time {
	if l, ok := vt.leases[r]; ok {
		return l
	}
	l := time.UnixMilli(info.GetDeadlineUnixMs())
	if g := now.Add(RefreshLease); g.After(l) {
		l = g
	}
	vt.leases[r] = l
	return l
}

// viewStore returns the read views of n's chunk store; false when n has
// no chunk store open.
func (s *Service) viewStore(n *copyset.Node) (chunkread.Views, bool) {
	st, err := chunkread.Of(n)
	return st, err == nil
}

// proposeView replicates a view op on n and returns its result.
func proposeView(ctx context.Context, n *copyset.Node, op *vpb.Op) (ViewApplied, error) {
	b, err := EncodeViewOp(op)
	if err != nil {
		return ViewApplied{}, err
	}
	_, r, err := copyset.ProposeAs[ViewApplied](ctx, n, b)
	if err != nil {
		return ViewApplied{}, fmt.Errorf("propose view op on copyset %s: %w", n.Group(), err)
	}
	if r.Err != nil {
		return r, fmt.Errorf("view op refused on copyset %s: %w", n.Group(), r.Err)
	}
	return r, nil
}

// dropView proposes the drop of view seq on n (its leader), with why, and
// forgets its lease.
func (s *Service) dropView(ctx context.Context, n *copyset.Node, seq uint64, why string) error {
	_, err := proposeView(ctx, n, &vpb.Op{Op: &vpb.Op_Drop{Drop: &vpb.Drop{View: seq, Reason: why, AtUnixMs: time.Now().UnixMilli()}}})
	if err == nil {
		s.views.mu.Lock()
		delete(s.views.leases, viewRef{n.Group(), seq})
		s.views.mu.Unlock()
	}
	return err
}

// forgetTask removes task key, remembering why.
func (s *Service) forgetTask(key, why string) {
	vt := s.views
	vt.mu.Lock()
	defer vt.mu.Unlock()
	delete(vt.tasks, key)
	vt.setGone(key, why)
}

// leaseWork is the lease worker's run on a copyset this server leads:
// after the read barrier, every LeaseCheck it drops the views whose lease
// passed or that went over budget, with the deadline it saw pass in the
// op. It returns when ctx ends (leadership lost).
func (s *Service) leaseWork(ctx context.Context, n *copyset.Node) error {
	if _, err := n.ReadBarrier(ctx); err != nil {
		return err
	}
	st, ok := s.viewStore(n)
	if !ok {
		return nil
	}
	for {
		now := time.Now()
		for _, v := range st.Views() {
			r := viewRef{n.Group(), v.Seq}
			s.views.mu.Lock()
			lease := s.views.leaseFor(r, v.Info, now)
			s.views.mu.Unlock()
			why := ""
			switch {
			case v.Over:
				why = fmt.Sprintf("dropped: over its pre-image budget of %d bytes (disagg.views.max_preimage_bytes)", v.Budget)
			case now.After(lease):
				why = fmt.Sprintf("dropped: lease expired at %s", lease.UTC().Format(time.RFC3339))
			}
			if why == "" {
				continue
			}
			if err := s.dropView(ctx, n, v.Seq, why); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				s.log.Warn("disagg: dropping read view failed", "copyset", n.Group(), "view", v.Seq, "err", err)
				continue
			}
			s.log.Info("disagg: read view dropped", "copyset", n.Group(), "view", v.Seq, "why", why)
			s.forgetTask(v.Info.GetTaskKey(), why)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-slack.After(s.deps.Config.Views.LeaseCheck):
		}
	}
}

// startViews starts the lease worker on the copysets this server leads.
func (s *Service) startViews() error {
	w, err := s.copysets.StartLeaderWorker(s.leaseWork, copyset.LeaderWorkerOptions{Name: "disagg-views", RetryDelay: time.Second})
	if err != nil {
		return fmt.Errorf("disagg views: %w", err)
	}
	s.views.mu.Lock()
	s.views.worker = w
	s.views.mu.Unlock()
	return nil
}

// stopViews stops the lease worker (idempotent).
func (s *Service) stopViews() {
	s.views.mu.Lock()
	w := s.views.worker
	s.views.worker = nil
	s.views.mu.Unlock()
	if w != nil {
		w.Stop()
	}
}

var errNoViews = errors.New("this server keeps no read views")
