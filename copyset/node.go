package copyset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chunkraft/chunkraft/copyset/sharedlog"
	"github.com/chunkraft/chunkraft/internal/slogbridge"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// RaftOptions are the raft settings shared by every copyset of a server.
type RaftOptions struct {
	HeartbeatTimeout   time.Duration // follower election trigger (default 1s)
	ElectionTimeout    time.Duration // candidate timeout (default 1s)
	LeaderLeaseTimeout time.Duration // leader steps down without quorum contact (default 500ms)
	// LeaderHeartbeatTimeout is the heartbeat timeout a replica's raft runs
	// with while it leads (pace.go): raft heartbeats its followers every
	// tenth to fifth of it, and the transport's leader beats keep them in
	// between (transport_beat.go). Keep a fifth of it, plus the transport's
	// heartbeat batch window, well below LeaderLeaseTimeout: raft's own
	// heartbeats must still reach a quorum within it;
	// 0 or at most HeartbeatTimeout: the leader runs with HeartbeatTimeout.
	LeaderHeartbeatTimeout time.Duration
	CommitTimeout          time.Duration // idle AppendEntries cadence: how soon followers learn the commit index when no new entries flow (default 1s; see ShareCommit)
	MaxAppendEntries       int           // entries per AppendEntries and group commit (default 64)
	// MaxInflightEntries bounds the entries a leader's copyset has handed
	// to raft and not yet seen committed and applied (default 1; negative:
	// no bound). Proposals arriving meanwhile wait and are packed into
	// the next entry, so fewer, fuller entries carry the same load.
	MaxInflightEntries int
	LogCacheSize       int           // recent entries kept in memory (default 512)
	ApplyTimeout       time.Duration // proposal timeout when ctx has no deadline (default 10s)
	LogLevel           string        // hashicorp/raft log level (default "warn")
	// SnapshotThreshold is how many log entries since the last snapshot
	// make raft take one (default 8192); SnapshotInterval how often it
	// checks (default 120s, randomised up to 2x by raft).
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	// TrailingLogs is how many entries stay in the log after a snapshot, for
	// followers to catch up without a snapshot install (default 10240).
	TrailingLogs uint64
	// SnapshotBytes is how many bytes of entries stored since the last
	// snapshot make the replica take one (default DefaultSnapshotBytes);
	// TrailingBytes bounds the bytes of the entries that stay after a
	// snapshot: the fewer of TrailingLogs entries and TrailingBytes bytes
	// stay (default DefaultTrailingBytes). See logretain.go.
	SnapshotBytes uint64
	TrailingBytes uint64
	// Logger receives hashicorp/raft's own log lines (adapted from hclog,
	// filtered by LogLevel alone), with the copyset's pool and copyset as
	// attributes; nil means the manager's logger.
	Logger *slog.Logger
	// NoReadLease makes every batch of reads verify leadership with a
	// quorum round instead of using the leader's read lease (lease.go).
	NoReadLease bool
	// MaxPinnedEntries bounds the entries a log retention pin may hold
	// back from truncation, from the pin to the last index (logpin.go;
	// default 65536).
	MaxPinnedEntries uint64
	// MaxPinnedBytes bounds the bytes of entry data a log retention pin
	// may hold back, from the pin to the last index (logpin.go; default
	// DefaultMaxPinnedBytes).
	MaxPinnedBytes uint64
}

func (o *RaftOptions) withDefaults() RaftOptions {
	r := *o
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&r.HeartbeatTimeout, time.Second)
	def(&r.ElectionTimeout, time.Second)
	def(&r.LeaderLeaseTimeout, 500*time.Millisecond)
	def(&r.CommitTimeout, time.Second)
	def(&r.ApplyTimeout, 10*time.Second)
	if r.MaxAppendEntries == 0 {
		r.MaxAppendEntries = 64
	}
	if r.MaxInflightEntries == 0 {
		r.MaxInflightEntries = 1
	}
	if r.LogCacheSize == 0 {
		r.LogCacheSize = 512
	}
	if r.LogLevel == "" {
		r.LogLevel = "warn"
	}
	def(&r.SnapshotInterval, 120*time.Second)
	if r.SnapshotThreshold == 0 {
		r.SnapshotThreshold = 8192
	}
	if r.TrailingLogs == 0 {
		r.TrailingLogs = 10240
	}
	if r.SnapshotBytes == 0 {
		r.SnapshotBytes = DefaultSnapshotBytes
	}
	if r.TrailingBytes == 0 {
		r.TrailingBytes = DefaultTrailingBytes
	}
	if r.MaxPinnedEntries == 0 {
		r.MaxPinnedEntries = DefaultMaxPinnedEntries
	}
	if r.MaxPinnedBytes == 0 {
		r.MaxPinnedBytes = DefaultMaxPinnedBytes
	}
	return r
}

// raftLogger is the hclog logger a copyset's raft instance writes to: opts.Logger
// (else log, the manager's) with the copyset's pool and copyset.
func raftLogger(opts RaftOptions, log *slog.Logger, g GroupID) hclog.Logger {
	if opts.Logger != nil {
		log = opts.Logger.With("pool", g.Pool(), "copyset", g.Copyset())
	}
	return slogbridge.Hclog(log, "raft", hclog.LevelFromString(opts.LogLevel))
}

// NotLeaderError is returned for an operation that must run on the leader
// when this replica is not it. Leader is the known leader's peer id, or
// empty when none is known.
type NotLeaderError struct {
	Leader PeerID
}

func (e *NotLeaderError) Error() string { return withLeader("not leader", e.Leader) }

// withLeader is msg followed by the leader hint.
func withLeader(msg string, leader PeerID) string {
	if leader == "" {
		return msg + ", leader unknown"
	}
	return msg + ", leader is " + string(leader)
}

// OutcomeUnknownError is returned by Propose when raft appended the op to
// this leader's log and then this replica lost the leadership before the
// entry committed: the entry may still commit under the next leader, or be
// overwritten. A caller that retries must treat the op as maybe committed.
// Leader is the known leader's peer id, or empty when none is known. A
// *NotLeaderError from Propose, by contrast, means nothing was appended.
type OutcomeUnknownError struct {
	Leader PeerID
}

func (e *OutcomeUnknownError) Error() string {
	return withLeader("leadership lost after the op was appended, outcome unknown", e.Leader)
}

// LeaderLost reports whether a proposal's err says this replica does not
// lead (NotLeaderError) or lost the lead after appending it
// (OutcomeUnknownError), and the leader either names: a caller that
// retries on the leader does both alike (its op must then be safe to
// apply twice, or recognise its own commit).
func LeaderLost(err error) (PeerID, bool) {
	var (
		nl *NotLeaderError
		ou *OutcomeUnknownError
	)
	switch {
	case errors.As(err, &nl):
		return nl.Leader, true
	case errors.As(err, &ou):
		return ou.Leader, true
	}
	return "", false
}

// Status is a point-in-time view of one replica (GetCopysetStatus).
type Status struct {
	State          raft.RaftState
	Peer           PeerID
	Leader         PeerID
	Term           uint64
	CommittedIndex uint64
	// AppliedIndex is the highest index handed to the state machines (raft's
	// applied index, which also covers no-op entries); the machines may
	// still be applying the last few. Reads never rely on it.
	AppliedIndex uint64
	FirstIndex   uint64
	LastIndex    uint64
	Epoch        uint64
	// Broken is the apply error that stopped this replica, or nil.
	Broken error
	// SnapshotsInstalled counts the snapshots this replica received from a
	// leader and installed since it started.
	SnapshotsInstalled uint64
	// LeaderChanges counts the times this replica learned of a new leader
	// (itself included) since it started.
	LeaderChanges uint64
	// SnapshotsByBytes counts the snapshots taken because the entries
	// since the last one held RaftOptions.SnapshotBytes (logretain.go).
	SnapshotsByBytes uint64
	// LogBytes is about how many bytes of entry data the log holds, from
	// its first index to its last (logsize.go).
	LogBytes uint64
}

// Node is one replica of one copyset: a hashicorp/raft instance with its
// log store, transport and FSM. All methods are safe for concurrent use.
type Node struct {
	group  GroupID
	local  PeerID
	dir    string
	opts   RaftOptions
	log    *slog.Logger
	raft   *raft.Raft
	fsm    *fsm
	stores *logStores
	pins   *logPins // log retention pins (logpin.go)
	snaps  *snapshotStore
	trans  *GroupTransport
	// reloadMu serializes the read-modify-write reloads of raft's config
	// (ReloadRaft, paceLeader).
	reloadMu sync.Mutex

	// ready: this replica, as leader, has applied an entry of its own
	// term; reads are served only in that term.
	ready termOnce
	// writable: this replica, as leader, has run prepare in the term
	// (WaitWritable).
	writable termOnce
	prepare  LeaderPrepare
	reads    readBatcher
	// shared is a commit index this leader has made its followers learn
	// (ShareCommit): every state machine entry up to it has been sent to
	// them with a commit index covering it.
	shared atomic.Uint64
	props  proposer // batches proposals into raft entries (propose.go)
	lease  lease    // read lease of this leader (lease.go)

	closeOnce sync.Once
	closeErr  error

	// stopping is closed when a broken replica's raft instance is being
	// shut down; stopDone once it is.
	stopOnce sync.Once
	stopping chan struct{} // closed when the raft instance starts shutting down
	stopDone chan struct{}

	// Membership (membership.go): memberMu serialises configuration
	// changes; wasMember is set once a configuration naming this server is
	// known; onRemoved is told (from the FSM goroutine, must not block) when
	// a committed configuration no longer names it; bg runs the leader's
	// removal notices, waited for by Close.
	memberMu  sync.Mutex
	wasMember atomic.Bool
	// joined: created empty to be added (join.go); configurations at or
	// before joinAfter are older than that add and say nothing about this
	// replica's membership.
	joined    bool
	joinAfter uint64
	joinPeers []PeerID
	// committed is the newest configuration this replica knows to have
	// committed: applied here, or in a snapshot it holds.
	committed atomic.Pointer[committedConf]
	onRemoved func(*Node)
	bg        background
	// opened is when this replica was opened; claimed the last time (unix
	// nanoseconds) a create request named it (Manager.Create or Join
	// answering ErrExist), which holds off DeleteStale (stale.go).
	opened  time.Time
	claimed atomic.Int64

	// leaderChanges counts raft's leader observations naming a leader.
	leaderChanges atomic.Uint64
	// snapshotsByBytes counts the snapshots runSnapshotter took.
	snapshotsByBytes atomic.Uint64
	// onState, when set, is told (on raft's goroutine, must not block) of
	// every raft state change of this replica (leaderwork.go).
	onState func()
}

// nodeConfig is everything openNode needs.
type nodeConfig struct {
	group     GroupID
	dir       string // the copyset's directory
	local     PeerID
	trans     *GroupTransport
	reg       *registry                           // the machine specs
	machines  func(*logPins) (*machineSet, error) // opens the state machines on dir/data, their log holds on the pins
	opts      RaftOptions
	log       *slog.Logger
	bootstrap []PeerID       // initial configuration for a new copyset, nil to reopen
	shared    *sharedlog.Log // the server's shared log store; nil = raft-boltdb per copyset
	onRemoved func(*Node)    // see Node.onRemoved
	onState   func()         // see Node.onState
	prepare   LeaderPrepare  // see WaitWritable; nil: nothing to prepare
	// join, when set, is written as the join marker before raft opens
	// (a new replica created to be added, join.go).
	join *joinMarker
}

// openNode starts the raft instance of a copyset in c.dir. With a
// bootstrap configuration it must be new (no raft state on disk).
func openNode(c nodeConfig) (*Node, error) {
	opts := c.opts.withDefaults()
	snaps, err := newSnapshotStore(c.group, c.dir, c.log)
	if err != nil {
		return nil, err
	}
	// Finish a snapshot install a crash interrupted before the state
	// machines open the data dir.
	if err := snaps.recover(); err != nil {
		return nil, err
	}
	latest, hasSnap, err := snaps.latest()
	if err != nil {
		return nil, err
	}
	if c.join != nil {
		if err := writeJoinMarker(c.dir, *c.join); err != nil {
			return nil, err
		}
	}
	join, joined, err := readJoinMarker(c.dir)
	if err != nil {
		return nil, err
	}
	pins := newLogPins(c.group, opts.MaxPinnedEntries, opts.MaxPinnedBytes, c.log)
	machines, err := c.machines(pins)
	if err != nil {
		return nil, err
	}
	f := newFSM(c.reg, machines, c.log)
	if hasSnap {
		// NoSnapshotRestoreOnStart: the data dir already holds everything up
		// to the snapshot index; raft replays the log after it.
		f.setApplied(latest.Meta.Index, true)
		f.epoch.Store(latest.Manifest.Epoch)
	}
	fail := func(err error) (*Node, error) {
		f.closeMachines()
		return nil, err
	}
	stores, err := openLogStores(c.shared, c.group, c.dir, opts.LogCacheSize)
	if err != nil {
		return fail(err)
	}
	stores.cache.applied = &f.applied
	cfg := raft.DefaultConfig()
	cfg.LocalID = raft.ServerID(c.local)
	cfg.HeartbeatTimeout = opts.HeartbeatTimeout
	cfg.ElectionTimeout = opts.ElectionTimeout
	cfg.LeaderLeaseTimeout = opts.LeaderLeaseTimeout
	cfg.CommitTimeout = opts.CommitTimeout
	cfg.MaxAppendEntries = opts.MaxAppendEntries
	// BatchApplyCh stays off: with a buffered apply channel a future still
	// in the buffer when raft shuts down is never answered, and its
	// proposer would wait forever. The leader loop batches concurrent
	// proposals (up to MaxAppendEntries) either way.
	cfg.BatchApplyCh = false
	cfg.NoSnapshotRestoreOnStart = true
	cfg.SnapshotThreshold = opts.SnapshotThreshold
	cfg.SnapshotInterval = opts.SnapshotInterval
	// The cache keeps the trailing entries (logretain.go).
	cfg.TrailingLogs = raftTrailingLogs
	// A leader that removes itself steps down and its replica is dropped
	// by the manager (lifecycle.go) rather than raft shutting down under
	// the pending change.
	cfg.ShutdownOnRemove = false
	cfg.Logger = raftLogger(opts, c.log, c.group)

	if c.bootstrap != nil {
		has, err := raft.HasExistingState(stores.log, stores.stable, snaps)
		if err != nil {
			stores.close()
			return fail(fmt.Errorf("check raft state: %w", err))
		}
		if has {
			stores.close()
			return fail(fmt.Errorf("bootstrap copyset %s: raft state already exists", c.group))
		}
		conf := raft.Configuration{}
		for _, p := range c.bootstrap {
			conf.Servers = append(conf.Servers, raft.Server{
				Suffrage: raft.Voter, ID: raft.ServerID(p), Address: raft.ServerAddress(p.Addr()),
			})
		}
		if err := raft.BootstrapCluster(cfg, stores.log, stores.stable, snaps, c.trans, conf); err != nil {
			stores.close()
			return fail(fmt.Errorf("bootstrap copyset %s: %w", c.group, err))
		}
	}
	stores.cache.pins = pins
	stores.cache.sizes.setBounds(opts.MaxPinnedEntries, opts.MaxPinnedBytes)
	stores.cache.setRetention(retention{
		trailingLogs: opts.TrailingLogs, trailingBytes: opts.TrailingBytes, snapshotBytes: opts.SnapshotBytes,
	})
	n := &Node{
		group: c.group, local: c.local, dir: c.dir, opts: opts, log: c.log,
		fsm: f, stores: stores, pins: stores.cache.pins, snaps: snaps, trans: c.trans, stopDone: make(chan struct{}), stopping: make(chan struct{}),
		onRemoved: c.onRemoved, onState: c.onState, prepare: c.prepare,
		joined: joined, joinAfter: join.After, joinPeers: join.Peers, opened: time.Now(),
	}
	n.wasMember.Store(knownMember(c.local, n.joinAfter, latest, hasSnap, stores))
	if hasSnap {
		n.noteCommitted(latest.Meta.ConfigurationIndex, latest.Meta.Configuration)
	}
	f.onBroken = func(uint64, *FatalError) { n.stopRaft() }
	snaps.sources = f.sources
	snaps.checkFiles = f.reg.checkFiles
	snaps.saved = stores.cache.snapshotTaken
	f.restore = func(man snapManifest) (*machineSet, error) {
		id := snaps.takePending()
		if id == "" {
			return nil, errors.New("no received snapshot is staged")
		}
		if err := f.closeMachines(); err != nil {
			c.log.Warn("close state machines before snapshot install", "err", err)
		}
		if err := snaps.install(id); err != nil {
			return nil, err
		}
		n.snapshotInstalled(id)
		return c.machines(pins)
	}
	trans := &leaseTransport{GroupTransport: c.trans, n: n}
	if c.bootstrap == nil {
		// A brand-new group has no leader whose lease a vote could break.
		c.trans.holdVotes(opts.HeartbeatTimeout)
	}
	r, err := raft.NewRaft(cfg, &configWatchFSM{fsm: f, n: n}, stores.log, stores.stable, snaps, trans)
	if err != nil {
		stores.close()
		return fail(fmt.Errorf("start raft for copyset %s: %w", c.group, err))
	}
	n.raft = r
	pins.attach(stores.cache, r.LastIndex)
	// The filter runs on raft's goroutine at each leader and state change;
	// with no channel the observation goes nowhere else.
	r.RegisterObserver(raft.NewObserver(nil, false, func(o *raft.Observation) bool {
		if lo, ok := o.Data.(raft.LeaderObservation); ok && lo.LeaderID != "" {
			n.leaderChanges.Add(1)
		}
		if _, ok := o.Data.(raft.RaftState); ok {
			n.paceLeader()
			if n.onState != nil {
				n.onState()
			}
		}
		return false
	}))
	// A state change before the observer was registered.
	n.paceLeader()
	c.trans.setBeatHooks(&beatHooks{leading: n.leadingIn, acked: n.lease.ack})
	n.props.start(n)
	n.bg.do(n.runSnapshotter)
	return n, nil
}

// stopRaft shuts the raft instance down in the background (it cannot be
// waited for from the FSM goroutine that discovers the failure). Close waits
// for it.
func (n *Node) stopRaft() {
	n.stopOnce.Do(func() {
		close(n.stopping)
		go func() {
			defer close(n.stopDone)
			if err := n.raft.Shutdown().Error(); err != nil {
				n.log.Error("shutdown of broken copyset replica", "err", err)
			}
		}()
	})
}

// await waits for a raft future, but returns early when ctx ends or the
// raft instance shuts down: a future queued just before a shutdown may
// never be answered (the waiting goroutine then ends with the process).
// An early return leaves the operation's outcome unknown to the caller.
func (n *Node) await(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	err, werr := awaitChan(n, ctx, done)
	if werr != nil {
		return werr
	}
	return err
}

// awaitChan waits for the value on ch, the answer to something handed to
// raft, but returns early (with an error) when ctx ends or, after a grace
// second, when the raft instance shuts down and the answer may never come.
func awaitChan[T any](n *Node, ctx context.Context, ch <-chan T) (T, error) {
	var zero T
	select {
	case v := <-ch:
		return v, nil
	case <-n.stopping:
		select {
		case v := <-ch:
			return v, nil
		case <-time.After(time.Second):
			return zero, raft.ErrRaftShutdown
		}
	case <-ctx.Done():
		return zero, fmt.Errorf("copyset %s: %w", n.group, ctx.Err())
	}
}

// Broken returns the apply error that stopped this replica, or nil.
func (n *Node) Broken() error {
	if fe := n.fsm.broken.Load(); fe != nil {
		return fe
	}
	return nil
}

// Snapshot takes a raft snapshot now and waits for it: the state machines
// fsync, a manifest is written and the log before the trailing entries is
// truncated.
func (n *Node) Snapshot(ctx context.Context) error {
	if err := n.raft.Snapshot().Error(); err != nil {
		return fmt.Errorf("snapshot copyset %s: %w", n.group, err)
	}
	return ctx.Err()
}

// Machines returns the state machines open on the copyset now (a snapshot
// install replaces them all). Look one up with MachineOf.
func (n *Node) Machines() Machines { return Machines{n.fsm.machines.Load()} }

// Group returns the copyset's group id.
func (n *Node) Group() GroupID { return n.group }

// Dir returns the copyset's directory.
func (n *Node) Dir() string { return n.dir }

// IsLeader reports whether this replica is the leader now.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Leader returns the known leader's peer id, or "" when none is known.
func (n *Node) Leader() PeerID {
	_, id := n.raft.LeaderWithID()
	return PeerID(id)
}

// AppliedIndex returns the highest log index applied to the state machines.
func (n *Node) AppliedIndex() uint64 { return n.fsm.applied.Load() }

func (n *Node) notLeader() error { return &NotLeaderError{Leader: n.Leader()} }

func (n *Node) applyTimeout(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		if d := time.Until(dl); d > 0 {
			return d
		}
		return time.Millisecond
	}
	return n.opts.ApplyTimeout
}

// Propose replicates op (built with PutOpHeader) through raft and returns
// its log index and the state machine's apply result once a majority has
// it in their fsynced logs and this leader has applied it. On a follower it
// returns a *NotLeaderError without proposing anything; so it does when
// raft refuses the op before appending it (not the leader any more, a
// leadership transfer in progress). When leadership is lost after the op
// was appended it returns an *OutcomeUnknownError. Concurrent proposals of
// batchable kinds may share one log entry and so one index (propose.go).
// Tenants call ProposeAs, which also checks the apply result's type.
func (n *Node) Propose(ctx context.Context, op []byte) (uint64, any, error) {
	if n.raft.State() != raft.Leader {
		return 0, nil, n.notLeader()
	}
	pr, err := n.props.submit(ctx, op)
	var r proposalResult
	if err == nil {
		if r, err = awaitChan(n, ctx, pr.done); err == nil {
			pr.recycle() // answered: the proposer is done with it
		} else if ctx.Err() != nil {
			return 0, nil, err // cut short by the caller: the outcome is unknown
		}
		if err == nil {
			err = r.err
		}
	}
	if err != nil {
		switch {
		case errors.Is(err, raft.ErrLeadershipLost):
			return 0, nil, &OutcomeUnknownError{Leader: n.Leader()}
		case errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipTransferInProgress):
			return 0, nil, n.notLeader()
		}
		return 0, nil, fmt.Errorf("propose to copyset %s: %w", n.group, err)
	}
	return r.index, r.res, nil
}

// ReadBarrier makes a linearizable read possible: on return without error
// every write acknowledged before the call is applied on this replica and
// this replica was the leader at some instant after the call began. It
// returns the applied index the read will observe. A leader holding its
// read lease (lease.go) skips the quorum round; otherwise concurrent callers
// share one leadership verification.
func (n *Node) ReadBarrier(ctx context.Context) (uint64, error) {
	if n.raft.State() != raft.Leader {
		return 0, n.notLeader()
	}
	if err := n.ensureLeaderReady(ctx); err != nil {
		return 0, err
	}
	var ci uint64
	if n.leaseRead() {
		ci = n.raft.CommitIndex()
	} else {
		var err error
		if ci, err = n.reads.verify(ctx, n); err != nil {
			return 0, err
		}
	}
	target, err := n.lastFSMIndex(ci)
	if err != nil {
		return 0, err
	}
	if err := n.fsm.waitApplied(ctx, target); err != nil {
		return 0, err
	}
	return n.fsm.applied.Load(), nil
}

// Barrier waits until every entry this leader has appended so far, in
// this term or before, is committed and applied here (raft's Barrier: it
// appends an entry and waits for it). A proposer that lost track of an
// entry it appended (its wait ended before the entry's outcome was known)
// calls it before it reads the state that entry may have changed: after
// Barrier the entry has applied or never will.
func (n *Node) Barrier(ctx context.Context) error {
	if n.raft.State() != raft.Leader {
		return n.notLeader()
	}
	if err := n.await(ctx, n.raft.Barrier(n.applyTimeout(ctx))); err != nil {
		return fmt.Errorf("copyset %s: barrier: %w", n.group, err)
	}
	return nil
}

// ShareCommit makes the followers learn this leader's commit index now
// instead of at the next AppendEntries, which on an idle copyset is up to
// twice CommitTimeout away: it appends a barrier entry, which goes out at
// once carrying the current commit index, and waits until the barrier is
// applied here. A call when every state machine entry committed so far has
// already been shared this way appends nothing, so idle callers are free.
// Callers that need the followers to apply what has committed (a scan op
// whose replicas report back, a replica hash compared across replicas)
// call it; nothing else should, since a call after new writes is one more
// raft entry.
func (n *Node) ShareCommit(ctx context.Context) error {
	if n.raft.State() != raft.Leader {
		return n.notLeader()
	}
	ci := n.raft.CommitIndex()
	if target, err := n.lastFSMIndex(ci); err == nil && target <= n.shared.Load() {
		return nil
	}
	if err := n.await(ctx, n.raft.Barrier(n.applyTimeout(ctx))); err != nil {
		return fmt.Errorf("copyset %s: share commit index: %w", n.group, err)
	}
	// The barrier's AppendEntries carried a commit index of at least ci.
	for {
		old := n.shared.Load()
		if old >= ci || n.shared.CompareAndSwap(old, ci) {
			return nil
		}
	}
}

// ensureLeaderReady makes sure this leader has applied an entry of its own
// term, so its commit index covers everything an earlier leader committed.
func (n *Node) ensureLeaderReady(ctx context.Context) error {
	return n.ready.do(n.raft.CurrentTerm(), func() error {
		if err := n.await(ctx, n.raft.Barrier(n.applyTimeout(ctx))); err != nil {
			if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
				return n.notLeader()
			}
			return fmt.Errorf("leader barrier for copyset %s: %w", n.group, err)
		}
		return nil
	})
}

// termOnce records the raft term in which a leader step succeeded, so that
// it runs once per term: do is one atomic load once it has.
type termOnce struct {
	term atomic.Uint64
	mu   sync.Mutex // one caller runs the step; the others wait for it
}

// do runs step unless it already succeeded in term. A failed step is
// returned to its caller and run again by the next.
func (o *termOnce) do(term uint64, step func() error) error {
	if o.term.Load() == term {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.term.Load() == term {
		return nil
	}
	if err := step(); err != nil {
		return err
	}
	o.term.Store(term)
	return nil
}

// LeaderPrepare is what a replica must do, once per term in which it leads,
// before it accepts writes (WaitWritable): the chunkserver learns the epoch
// fences of the other members and commits them (chunkstore/fence.go). It
// runs on the leader and must end when ctx does.
type LeaderPrepare func(ctx context.Context, n *Node) error

// WaitWritable returns nil once this leader has run the LeaderPrepare of
// the manager in its current term; the first caller of a term runs it
// (others wait for it), and a failure is returned to that caller and
// retried by the next. Steady state: two atomic loads. A follower gets a
// *NotLeaderError. Callers check it before proposing a client mutation.
func (n *Node) WaitWritable(ctx context.Context) error {
	term := n.raft.CurrentTerm()
	return n.writable.do(term, func() error {
		if n.raft.State() != raft.Leader {
			return n.notLeader()
		}
		if n.prepare != nil {
			if err := n.prepare(ctx, n); err != nil {
				var nl *NotLeaderError
				if errors.As(err, &nl) {
					return err
				}
				return fmt.Errorf("prepare leader of copyset %s in term %d: %w", n.group, term, err)
			}
		}
		// Marked only if still the leader of that term: a prepare that
		// straddled a term change proves nothing about the new term.
		if n.raft.State() != raft.Leader || n.raft.CurrentTerm() != term {
			return n.notLeader()
		}
		return nil
	})
}

// lastFSMIndex returns the highest index <= ci whose entry reaches the FSM,
// or the FSM's applied index when every entry above it is one that never
// does (no-ops and barriers).
func (n *Node) lastFSMIndex(ci uint64) (uint64, error) {
	applied := n.fsm.applied.Load()
	var l raft.Log
	for idx := ci; idx > applied; idx-- {
		if err := n.stores.log.GetLog(idx, &l); err != nil {
			return 0, fmt.Errorf("read barrier: get log %d: %w", idx, err)
		}
		if l.Type == raft.LogCommand || l.Type == raft.LogConfiguration {
			return idx, nil
		}
	}
	return applied, nil
}

// readBatcher shares one leadership verification among concurrent reads.
type readBatcher struct {
	mu       sync.Mutex
	pending  *readRound
	verifyMu sync.Mutex // one verification in flight per node
}

type readRound struct {
	done chan struct{}
	ci   uint64
	err  error
}

// verify returns a commit index captured after the caller arrived and
// confirmed by a quorum heartbeat round that started after the capture.
func (b *readBatcher) verify(ctx context.Context, n *Node) (uint64, error) {
	b.mu.Lock()
	r := b.pending
	first := r == nil
	if first {
		r = &readRound{done: make(chan struct{})}
		b.pending = r
	}
	b.mu.Unlock()
	if first {
		b.verifyMu.Lock()
		b.mu.Lock()
		b.pending = nil // later arrivals form the next round
		b.mu.Unlock()
		r.ci = n.raft.CommitIndex()
		// The round's heartbeats skip the batch window (GroupTransport.verifying).
		n.trans.verifying.Add(1)
		err := n.await(ctx, n.raft.VerifyLeader())
		n.trans.verifying.Add(-1)
		if err != nil {
			if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
				r.err = n.notLeader()
			} else {
				r.err = fmt.Errorf("verify leader of copyset %s: %w", n.group, err)
			}
		}
		b.verifyMu.Unlock()
		close(r.done)
	}
	select {
	case <-r.done:
		return r.ci, r.err
	case <-ctx.Done():
		return 0, fmt.Errorf("verify leader: %w", ctx.Err())
	}
}

// TransferLeader moves leadership to peer and waits until the transfer
// has finished. It must run on the leader.
func (n *Node) TransferLeader(ctx context.Context, to PeerID) error {
	if n.raft.State() != raft.Leader {
		return n.notLeader()
	}
	if to == n.local {
		return nil
	}
	if err := n.raft.LeadershipTransferToServer(raft.ServerID(to), raft.ServerAddress(to.Addr())).Error(); err != nil {
		return fmt.Errorf("transfer leader of copyset %s to %s: %w", n.group, to, err)
	}
	return nil
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

// Peers returns the current configuration's peer ids.
func (n *Node) Peers() ([]PeerID, error) {
	peers, _, err := n.Configuration()
	return peers, err
}

// Configuration returns the peer ids of the newest configuration this
// replica has (committed or not) and the log index of its entry (0 for
// none).
func (n *Node) Configuration() ([]PeerID, uint64, error) {
	fut := n.raft.GetConfiguration()
	if err := fut.Error(); err != nil {
		return nil, 0, fmt.Errorf("get configuration of copyset %s: %w", n.group, err)
	}
	return confPeers(fut.Configuration()), fut.Index(), nil
}

// Status returns the replica's current raft status.
func (n *Node) Status() Status {
	first, _ := n.stores.first()
	return Status{
		State:          n.raft.State(),
		Peer:           n.local,
		Leader:         n.Leader(),
		Term:           n.raft.CurrentTerm(),
		CommittedIndex: n.raft.CommitIndex(),
		AppliedIndex:   max(n.fsm.applied.Load(), n.raft.AppliedIndex()),
		FirstIndex:     first,
		LastIndex:      n.raft.LastIndex(),
		Epoch:          n.fsm.epoch.Load(),
		Broken:         n.Broken(),

		SnapshotsInstalled: n.snaps.installs.Load(),
		LeaderChanges:      n.leaderChanges.Load(),
		SnapshotsByBytes:   n.snapshotsByBytes.Load(),
		LogBytes:           n.stores.cache.bytesFrom(first),
	}
}

// Close shuts the raft instance down, then closes the state machines and
// the log store. It is idempotent.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		var errs []error
		n.stopRaft()
		<-n.stopDone
		if err := n.raft.Shutdown().Error(); err != nil {
			errs = append(errs, fmt.Errorf("shutdown raft of copyset %s: %w", n.group, err))
		}
		n.props.stop()
		if err := n.trans.Close(); err != nil {
			errs = append(errs, err)
		}
		n.bg.close()
		n.pins.releaseAll()
		if err := n.fsm.closeMachines(); err != nil {
			errs = append(errs, err)
		}
		if err := n.stores.close(); err != nil {
			errs = append(errs, fmt.Errorf("close log store of copyset %s: %w", n.group, err))
		}
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}
