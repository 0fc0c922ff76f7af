package copyset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/chunkraft/chunkraft/copyset/sharedlog"
)

// ErrExist is returned by Manager.Create for a copyset this server hosts.
var ErrExist = errors.New("copyset already exists")

// ManagerOptions configure a Manager.
type ManagerOptions struct {
	Dir        string            // server data dir; copysets live in Dir/copysets/<group>
	Local      PeerID            // this server's peer id "ip:port:0"
	Transports *TransportManager // the server's raft transport
	// Machines are the state machines of every copyset, opened in this
	// order each time a copyset opens (machine.go).
	Machines []MachineSpec
	Raft     RaftOptions
	Logger   *slog.Logger
	// SharedLog, when set, holds every copyset's raft log and term/vote
	// (raft.log_store: shared); nil keeps one raft-boltdb file per copyset.
	SharedLog *sharedlog.Log
	// LeaderPrepare, when set, runs on a leader once per term before it
	// accepts writes (Node.WaitWritable).
	LeaderPrepare LeaderPrepare
	// Trash configures the purge of replicas that left this server
	// (Dir/trash, trash.go).
	Trash TrashOptions
}

// Manager owns every copyset replica of a chunkserver.
type Manager struct {
	opts ManagerOptions
	log  *slog.Logger
	reg  *registry

	mu     sync.RWMutex
	nodes  map[GroupID]*Node
	closed bool

	// lifeMu serialises replica lifecycle steps (load, create, join,
	// reset, drop, delete); taken before mu.
	lifeMu sync.Mutex
	// The lifecycle goroutine (lifecycle.go) drops removed replicas
	// queued in drops and purges the trash; stopLoop ends it.
	trash    TrashOptions
	dropMu   sync.Mutex
	drops    []*Node
	kick     chan struct{}
	stopLoop context.CancelFunc
	loopDone chan struct{}
	// dropsPending counts the replicas queued in drops and not yet
	// handled (under dropMu): tests wait for 0 before they check that a
	// replica was kept.
	dropsPending int
	// work is the leader-only workers (leaderwork.go).
	work leaderWork
}

// NewManager returns a manager with no copysets open; call Load to reopen
// the ones on disk.
func NewManager(opts ManagerOptions) (*Manager, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	reg, err := newRegistry(opts.Machines)
	if err != nil {
		return nil, fmt.Errorf("copyset manager: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(opts.Dir, "copysets"), 0o755); err != nil {
		return nil, fmt.Errorf("copyset manager: %w", err)
	}
	m := &Manager{
		opts: opts, log: opts.Logger, reg: reg, nodes: make(map[GroupID]*Node),
		trash: opts.Trash.withDefaults(), kick: make(chan struct{}, 1), loopDone: make(chan struct{}),
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.stopLoop = cancel
	go m.runLifecycle(ctx)
	return m, nil
}

// openMachines opens the state machines of copyset g on dataDir.
func (m *Manager) openMachines(g GroupID, dataDir string, pins *logPins) (*machineSet, error) {
	set, err := m.reg.open(g, dataDir, m.log.With("pool", g.Pool(), "copyset", g.Copyset()), pins)
	if err != nil {
		return nil, fmt.Errorf("open state machines of copyset %s: %w", g, err)
	}
	return set, nil
}

func (m *Manager) groupDir(g GroupID) string {
	return filepath.Join(m.opts.Dir, "copysets", g.String())
}

// Load reopens every copyset found under the data dir. A directory whose
// raft store holds no state is the remains of a create that never
// finished (it was never acknowledged) and is removed, unless it is a
// replica created to be added (its join marker, join.go, is durable before
// the create is acknowledged): that one is reopened empty and waits for its
// leader, which may have added it already.
func (m *Manager) Load(ctx context.Context) error {
	entries, err := os.ReadDir(filepath.Join(m.opts.Dir, "copysets"))
	if err != nil {
		return fmt.Errorf("load copysets: %w", err)
	}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("load copysets: %w", err)
		}
		if !e.IsDir() {
			continue
		}
		g, err := ParseGroupID(e.Name())
		if err != nil {
			m.log.Warn("ignoring unexpected entry in copysets dir", "name", e.Name())
			continue
		}
		if err := m.loadOne(g); err != nil {
			return err
		}
	}
	return nil
}

func (m *Manager) loadOne(g GroupID) error {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	dir := m.groupDir(g)
	if !dirExists(dir) {
		return nil // moved to the trash meanwhile
	}
	if _, joined, _ := readJoinMarker(dir); !joined && !m.hasRaftState(g, dir) {
		m.log.Warn("removing copyset whose creation never finished", "group", g)
		m.dropSharedLog(g)
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("remove unfinished copyset %s: %w", g, err)
		}
		return nil
	}
	if _, err := m.open(g, nil); err != nil {
		return err
	}
	m.log.Info("copyset loaded", "pool", g.Pool(), "copyset", g.Copyset())
	return nil
}

// dropSharedLog forgets g's records in the shared log, if one is used.
func (m *Manager) dropSharedLog(g GroupID) {
	if m.opts.SharedLog == nil {
		return
	}
	if err := m.opts.SharedLog.DropGroup(uint64(g)); err != nil {
		m.log.Warn("drop copyset from shared log", "group", g, "err", err)
	}
}

// hasRaftState reports whether copyset g has a raft log or a snapshot (a
// log may be empty after a snapshot install or a peer reset).
func (m *Manager) hasRaftState(g GroupID, dir string) bool {
	if hasSnapshot(dir) {
		return true
	}
	if m.opts.SharedLog != nil {
		gs, err := m.opts.SharedLog.Group(uint64(g))
		if err != nil {
			return true // let open report the real error
		}
		last, err := gs.LastIndex()
		return err != nil || last > 0
	}
	path := filepath.Join(dir, "raft", "raft.db")
	if _, err := os.Stat(path); err != nil {
		return false
	}
	store, err := raftboltdb.New(raftboltdb.Options{Path: path})
	if err != nil {
		return true // let open report the real error
	}
	defer store.Close()
	last, err := store.LastIndex()
	return err != nil || last > 0
}

// hasSnapshot reports whether the copyset directory holds a snapshot.
func hasSnapshot(dir string) bool {
	entries, err := os.ReadDir(filepath.Join(dir, "raft", "snapshots"))
	if err != nil {
		return false
	}
	for _, e := range entries {
		if e.IsDir() && !strings.HasSuffix(e.Name(), ".tmp") {
			if _, err := os.Stat(filepath.Join(dir, "raft", "snapshots", e.Name(), "meta.json")); err == nil {
				return true
			}
		}
	}
	return false
}

// Create makes a new replica of copyset g with the initial configuration
// peers and starts it. ErrExist if this server already hosts g. When peers
// do not include this server they are the copyset's current members and
// the replica is created empty, to be added by its leader (Join).
func (m *Manager) Create(ctx context.Context, g GroupID, peers []PeerID) (*Node, error) {
	if len(peers) == 0 {
		return nil, fmt.Errorf("create copyset %s: no peers", g)
	}
	seen := map[PeerID]bool{}
	for _, p := range peers {
		if seen[p] {
			return nil, fmt.Errorf("create copyset %s: peer %s listed twice", g, p)
		}
		seen[p] = true
	}
	if !seen[m.opts.Local] {
		return m.Join(ctx, g, 0, peers)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("create copyset %s: %w", g, err)
	}
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	return m.open(g, peers)
}

// open starts the node for g; with bootstrap peers it creates it.
func (m *Manager) open(g GroupID, bootstrap []PeerID) (*Node, error) {
	return m.openMode(g, bootstrap, nil)
}

// openMode is open; g must be new (no directory yet) with bootstrap peers
// or a join marker (a new empty replica to be added, written first).
func (m *Manager) openMode(g GroupID, bootstrap []PeerID, join *joinMarker) (*Node, error) {
	fresh := bootstrap != nil || join != nil
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, fmt.Errorf("open copyset %s: manager closed", g)
	}
	if n, ok := m.nodes[g]; ok {
		n.claim()
		return nil, fmt.Errorf("copyset %s: %w", g, ErrExist)
	}
	dir := m.groupDir(g)
	if fresh {
		if _, err := os.Stat(dir); err == nil {
			return nil, fmt.Errorf("copyset %s: %w (directory %s)", g, ErrExist, dir)
		}
	}
	dataDir := filepath.Join(dir, "data")
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, fmt.Errorf("open copyset %s: %w", g, err)
	}
	fail := func(err error) (*Node, error) {
		if fresh {
			os.RemoveAll(dir)
			m.dropSharedLog(g)
		}
		return nil, err
	}
	trans, err := m.opts.Transports.Transport(uint64(g))
	if err != nil {
		return fail(fmt.Errorf("open transport of copyset %s: %w", g, err))
	}
	n, err := openNode(nodeConfig{
		group: g, dir: dir, local: m.opts.Local, trans: trans,
		reg: m.reg, machines: func(pins *logPins) (*machineSet, error) {
			return m.openMachines(g, dataDir, pins)
		},
		opts: m.opts.Raft, log: m.log.With("pool", g.Pool(), "copyset", g.Copyset()),
		bootstrap: bootstrap, shared: m.opts.SharedLog, onRemoved: m.noteRemoved, onState: m.work.changed.fire,
		prepare: m.opts.LeaderPrepare, join: join,
	})
	if err != nil {
		trans.Close()
		return fail(err)
	}
	if join != nil {
		n.claim() // the create request that made it
	}
	m.nodes[g] = n
	m.work.changed.fire()
	return n, nil
}

// Local returns this server's peer id.
func (m *Manager) Local() PeerID { return m.opts.Local }

// Get returns the replica of g, or nil when this server does not host it.
func (m *Manager) Get(g GroupID) *Node {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.nodes[g]
}

// List returns every hosted replica ordered by group id.
func (m *Manager) List() []*Node {
	m.mu.RLock()
	out := make([]*Node, 0, len(m.nodes))
	for _, n := range m.nodes {
		out = append(out, n)
	}
	m.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].group < out[j].group })
	return out
}

// Close stops the leader workers, then every replica and the lifecycle
// goroutine. The manager cannot be used afterwards.
func (m *Manager) Close() error {
	m.stopLeaderWorkers()
	m.stopLoop()
	<-m.loopDone
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	m.mu.Lock()
	m.closed = true
	nodes := m.nodes
	m.nodes = map[GroupID]*Node{}
	m.mu.Unlock()
	var (
		wg   sync.WaitGroup
		emu  sync.Mutex
		errs []error
	)
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.Close(); err != nil {
				emu.Lock()
				errs = append(errs, err)
				emu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
