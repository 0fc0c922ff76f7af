package copyset

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Leader-only workers: a service that has background work on the copysets
// this server leads (an integrity scan, a sync export, a DM load) hands a
// function to Manager.StartLeaderWorker, which runs it once per copyset
// and term of leadership:
//
//   - started when this replica becomes leader (raft's state observation,
//     Node.onState, wakes the worker; a resync every leaderResync covers a
//     copyset opened already leading);
//   - its context cancelled when the replica stops leading (a new term
//     counts as losing the old one), when the copyset closes or leaves the
//     server, when the worker is stopped (LeaderWorker.Stop) and when the
//     Manager closes, before its copysets do;
//   - never two runs of one worker on one copyset at a time: a new term's
//     run starts only after the old run returned;
//   - a run that returns an error while still leading is logged and
//     started again after RetryDelay; one that returns nil is done for the
//     term.
//
// A run starts as soon as the replica leads, before it has applied its
// predecessors' entries: work that reads the state machines waits first
// (Node.ReadBarrier, or Node.WaitWritable before proposing client-visible
// changes). Broken replicas get no run. A run must not call Stop of its
// own worker (Stop waits for it).
//
// The integrity scan worker (integrity/scan.go, Service.lead) is one: its
// run on a led copyset waits for the ReadBarrier, then for the copyset's
// next job (woken by the machine's jobsChanged through a channel of that
// copyset, or the poll interval), takes the server-wide range gate and
// throttle shared by all runs and steps the job. A failed step is retried
// inside the run after 200 ms (the failures of a job count across terms,
// up to the job's failure), not by returning an error.

// LeaderWork is the function a LeaderWorker runs on a copyset it leads. It
// must return soon after ctx ends.
type LeaderWork func(ctx context.Context, n *Node) error

// LeaderWorkerOptions configure a LeaderWorker.
type LeaderWorkerOptions struct {
	// Name names the worker in logs.
	Name string
	// RetryDelay is the wait before a run that returned an error starts
	// again (default 1s).
	RetryDelay time.Duration
}

// leaderResync is how often a worker looks at every copyset even when no
// leadership change was signalled.
const leaderResync = time.Second

// LeaderWorker runs a LeaderWork on every copyset this server leads.
type LeaderWorker struct {
	m     *Manager
	fn    LeaderWork
	opts  LeaderWorkerOptions
	log   *slog.Logger
	stop  context.CancelFunc
	done  chan struct{}
	ended chan *leaderRun // a run's goroutine reports its end
	// passes counts the loop's reconciles: tests wait on it to know the
	// worker looked at its copysets again.
	passes atomic.Int64
}

// leaderRun is one run of a worker on one copyset in one term. Owned by
// the worker's loop goroutine.
type leaderRun struct {
	n      *Node
	term   uint64
	cancel context.CancelFunc
	err    error // set before the run is sent on ended
}

// leaderWork is the Manager's side of its workers.
type leaderWork struct {
	changed signal // fired at every raft state change of a copyset and at every open

	mu      sync.Mutex
	workers map[*LeaderWorker]struct{}
	closed  bool
}

// StartLeaderWorker starts running fn on every copyset this server leads
// (see the rules above) until Stop or the Manager's Close.
func (m *Manager) StartLeaderWorker(fn LeaderWork, opts LeaderWorkerOptions) (*LeaderWorker, error) {
	if opts.RetryDelay <= 0 {
		opts.RetryDelay = time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &LeaderWorker{
		m: m, fn: fn, opts: opts, log: m.log.With("worker", opts.Name), stop: cancel,
		done: make(chan struct{}), ended: make(chan *leaderRun),
	}
	lw := &m.work
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.closed {
		cancel()
		return nil, fmt.Errorf("start leader worker %s: manager closed", opts.Name)
	}
	if lw.workers == nil {
		lw.workers = make(map[*LeaderWorker]struct{})
	}
	lw.workers[w] = struct{}{}
	go w.loop(ctx)
	return w, nil
}

// Stop cancels every run of the worker and waits until they returned. It
// is idempotent.
func (w *LeaderWorker) Stop() {
	w.stop()
	<-w.done
	w.m.work.mu.Lock()
	delete(w.m.work.workers, w)
	w.m.work.mu.Unlock()
}

// stopLeaderWorkers stops every worker and refuses new ones (Close).
func (m *Manager) stopLeaderWorkers() {
	m.work.mu.Lock()
	m.work.closed = true
	workers := make([]*LeaderWorker, 0, len(m.work.workers))
	for w := range m.work.workers {
		workers = append(workers, w)
	}
	m.work.mu.Unlock()
	for _, w := range workers {
		w.Stop()
	}
}

// loop reconciles the worker's runs with the copysets this server leads at
// every signalled change, run end and resync, until ctx ends; then it
// cancels every run and waits for them.
func (w *LeaderWorker) loop(ctx context.Context) {
	defer close(w.done)
	rs := &leaderRuns{
		runs: map[*Node]*leaderRun{}, stopping: map[*Node]*leaderRun{},
		finished: map[*Node]uint64{}, retryAt: map[*Node]time.Time{},
	}
	runs, stopping := rs.runs, rs.stopping
	for {
		changed := w.m.work.changed.wait()
		next := w.reconcile(ctx, rs)
		w.passes.Add(1)
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			for n, r := range runs {
				r.cancel()
				stopping[n] = r
			}
			for len(stopping) > 0 {
				r := <-w.ended
				delete(stopping, r.n)
			}
			return
		case r := <-w.ended:
			w.runEnded(r, rs)
		case <-changed:
		case <-t.C:
		}
		t.Stop()
	}
}

// leaderRuns is the state of a worker's loop, owned by its goroutine.
type leaderRuns struct {
	runs     map[*Node]*leaderRun // the current run of each copyset
	stopping map[*Node]*leaderRun // cancelled runs not yet returned
	finished map[*Node]uint64     // term in which the run returned nil
	retryAt  map[*Node]time.Time  // when a failed run may start again
}

// runEnded records the end of run r.
func (w *LeaderWorker) runEnded(r *leaderRun, rs *leaderRuns) {
	if rs.stopping[r.n] == r {
		delete(rs.stopping, r.n)
		return
	}
	delete(rs.runs, r.n)
	r.cancel()
	if r.err == nil {
		rs.finished[r.n] = r.term
		return
	}
	w.log.Warn("leader work failed; retrying", "pool", r.n.group.Pool(), "copyset", r.n.group.Copyset(),
		"term", r.term, "err", r.err, "retry_in", w.opts.RetryDelay)
	rs.retryAt[r.n] = time.Now().Add(w.opts.RetryDelay)
}

// reconcile cancels the runs of copysets no longer led in their run's term
// and starts runs on led copysets that have none, and returns how long
// until it should look again.
func (w *LeaderWorker) reconcile(ctx context.Context, rs *leaderRuns) time.Duration {
	runs, stopping, finished, retryAt := rs.runs, rs.stopping, rs.finished, rs.retryAt
	nodes := w.m.List()
	hosted := make(map[*Node]bool, len(nodes))
	for _, n := range nodes {
		hosted[n] = true
	}
	for n, r := range runs {
		if !hosted[n] || !n.leadsIn(r.term) {
			r.cancel()
			delete(runs, n)
			stopping[n] = r
		}
	}
	for n, term := range finished {
		if !hosted[n] || n.raft.CurrentTerm() != term {
			delete(finished, n)
		}
	}
	next := leaderResync
	now := time.Now()
	for n, at := range retryAt {
		if !hosted[n] {
			delete(retryAt, n)
		}
		if d := at.Sub(now); d > 0 {
			next = min(next, d)
		}
	}
	for _, n := range nodes {
		if runs[n] != nil || stopping[n] != nil || !n.IsLeader() || n.Broken() != nil {
			continue
		}
		term := n.raft.CurrentTerm()
		if t, ok := finished[n]; ok && t == term {
			continue
		}
		if at, ok := retryAt[n]; ok && now.Before(at) {
			continue
		}
		delete(retryAt, n)
		rctx, cancel := context.WithCancel(ctx)
		r := &leaderRun{n: n, term: term, cancel: cancel}
		runs[n] = r
		go func() {
			r.err = w.fn(rctx, n)
			w.ended <- r
		}()
	}
	return next
}

// leadsIn reports whether this replica leads in term now.
func (n *Node) leadsIn(term uint64) bool {
	return n.IsLeader() && n.raft.CurrentTerm() == term && n.Broken() == nil
}

// WorkerSlot holds a service's leader worker from its Start to its Stop
// (the tenants' Start and Stop). The zero value is empty.
type WorkerSlot struct {
	mu sync.Mutex
	w  *LeaderWorker
}

// Start starts fn as m's leader worker (StartLeaderWorker) and keeps it.
func (s *WorkerSlot) Start(m *Manager, fn LeaderWork, opts LeaderWorkerOptions) error {
	w, err := m.StartLeaderWorker(fn, opts)
	if err != nil {
		return fmt.Errorf("%s: %w", opts.Name, err)
	}
	s.mu.Lock()
	s.w = w
	s.mu.Unlock()
	return nil
}

// Stop stops the worker it holds, if any, and waits for its runs.
func (s *WorkerSlot) Stop() {
	s.mu.Lock()
	w := s.w
	s.w = nil
	s.mu.Unlock()
	if w != nil {
		w.Stop()
	}
}
