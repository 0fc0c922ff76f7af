package sharedlog

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/chunkraft/chunkraft/internal/testwait"
)

// listFSM records the commands applied to it. A command already applied is
// ignored: a command that failed with raft.ErrLeadershipLost may still have
// committed, and the test retries it.
type listFSM struct {
	mu      sync.Mutex
	applied []string
	seen    map[string]bool
}

func (f *listFSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen == nil {
		f.seen = make(map[string]bool)
	}
	if c := string(l.Data); !f.seen[c] {
		f.seen[c] = true
		f.applied = append(f.applied, c)
	}
	return len(f.applied)
}

func (f *listFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return listSnap(slices.Clone(f.applied)), nil
}

func (f *listFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var v []string
	if err := json.NewDecoder(rc).Decode(&v); err != nil {
		return err
	}
	f.mu.Lock()
	f.applied = v
	f.seen = make(map[string]bool, len(v))
	for _, c := range v {
		f.seen[c] = true
	}
	f.mu.Unlock()
	return nil
}

func (f *listFSM) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.applied)
}

type listSnap []string

func (s listSnap) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode([]string(s)); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (listSnap) Release() {}

const clusterGroups = 4

type testNode struct {
	id    int
	dir   string
	log   *Log
	rafts [clusterGroups]*raft.Raft
	fsms  [clusterGroups]*listFSM
	trans [clusterGroups]*raft.InmemTransport
}

func nodeAddr(n, g int) raft.ServerAddress { return raft.ServerAddress(fmt.Sprintf("n%d-g%d", n, g)) }

// TestRaftCluster runs 3 nodes x 4 raft groups (each node one shared Log
// holding its 4 groups) over raft's in-memory transport, applies commands,
// snapshots (which truncates logs through DeleteRange), restarts a node and
// checks that its logs survived and that every group converges.
func TestRaftCluster(t *testing.T) {
	hlog := hclog.New(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Off})
	root := t.TempDir()
	conf := func(n int) *raft.Config {
		c := raft.DefaultConfig()
		c.LocalID = raft.ServerID(fmt.Sprintf("n%d", n))
		c.HeartbeatTimeout = 150 * time.Millisecond
		c.ElectionTimeout = 150 * time.Millisecond
		c.LeaderLeaseTimeout = 100 * time.Millisecond
		c.CommitTimeout = 5 * time.Millisecond
		c.SnapshotThreshold = 1 << 30
		c.SnapshotInterval = time.Hour
		c.TrailingLogs = 10
		c.Logger = hlog
		return c
	}
	var servers []raft.Server
	for n := range 3 {
		servers = append(servers, raft.Server{ID: raft.ServerID(fmt.Sprintf("n%d", n))})
	}
	nodes := make([]*testNode, 3)

	start := func(n int, bootstrap bool) {
		t.Helper()
		nd := &testNode{id: n, dir: filepath.Join(root, fmt.Sprintf("n%d", n))}
		nd.log = openLog(t, Options{Dir: filepath.Join(nd.dir, "log")})
		for g := range clusterGroups {
			gs := group(t, nd.log, uint64(100+g))
			cached, err := raft.NewLogCache(32, gs)
			if err != nil {
				t.Fatal(err)
			}
			snaps, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(nd.dir, fmt.Sprintf("snap-%d", g)), 2, hlog)
			if err != nil {
				t.Fatal(err)
			}
			_, trans := raft.NewInmemTransport(nodeAddr(n, g))
			nd.trans[g] = trans
			for _, other := range nodes {
				if other == nil || other.id == n {
					continue
				}
				trans.Connect(nodeAddr(other.id, g), other.trans[g])
				other.trans[g].Connect(nodeAddr(n, g), trans)
			}
			c := conf(n)
			if bootstrap {
				cfg := raft.Configuration{}
				for i, s := range servers {
					s.Address = nodeAddr(i, g)
					cfg.Servers = append(cfg.Servers, s)
				}
				if err := raft.BootstrapCluster(c, cached, gs, snaps, trans, cfg); err != nil {
					t.Fatal(err)
				}
			} else if ok, err := raft.HasExistingState(cached, gs, snaps); err != nil || !ok {
				t.Fatalf("node %d group %d: no existing state after restart (%v)", n, g, err)
			}
			nd.fsms[g] = &listFSM{}
			r, err := raft.NewRaft(c, nd.fsms[g], cached, gs, snaps, trans)
			if err != nil {
				t.Fatal(err)
			}
			nd.rafts[g] = r
		}
		nodes[n] = nd
	}
	stop := func(n int) {
		t.Helper()
		nd := nodes[n]
		for g := range clusterGroups {
			if err := nd.rafts[g].Shutdown().Error(); err != nil {
				t.Fatal(err)
			}
			for _, other := range nodes {
				if other != nil && other.id != n {
					other.trans[g].Disconnect(nodeAddr(n, g))
				}
			}
			nd.trans[g].Close()
		}
		if err := nd.log.Close(); err != nil {
			t.Fatal(err)
		}
		nodes[n] = nil
	}
	defer func() {
		for n := range nodes {
			if nodes[n] != nil {
				stop(n)
			}
		}
	}()
	// leader runs on apply's goroutines: it returns its error.
	leader := func(g int) (*raft.Raft, error) {
		var r *raft.Raft
		err := testwait.For(10*time.Second, func() error {
			for _, nd := range nodes {
				if nd != nil && nd.rafts[g].State() == raft.Leader {
					r = nd.rafts[g]
					return nil
				}
			}
			return fmt.Errorf("group %d: no leader", g)
		})
		return r, err
	}
	next := make([]int, clusterGroups)
	apply := func(count int) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, clusterGroups)
		for g := range clusterGroups {
			from := next[g]
			next[g] += count
			wg.Go(func() {
				for i := from; i < from+count; {
					r, err := leader(g)
					if err != nil {
						errs <- err
						return
					}
					f := r.Apply(fmt.Appendf(nil, "g%d-cmd%d", g, i), 5*time.Second)
					if err := f.Error(); err != nil {
						if err == raft.ErrNotLeader || err == raft.ErrLeadershipLost {
							continue // the command did not commit here; retry on the new leader
						}
						errs <- err
						return
					}
					i++
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	converged := func() {
		t.Helper()
		testwait.Until(t, 15*time.Second, func() error {
			for g := range clusterGroups {
				a, b, c := nodes[0].fsms[g].list(), nodes[1].fsms[g].list(), nodes[2].fsms[g].list()
				if len(a) != next[g] || !slices.Equal(a, b) || !slices.Equal(a, c) {
					return fmt.Errorf("group %d did not converge: %d %d %d entries, want %d", g, len(a), len(b), len(c), next[g])
				}
				for i, s := range a {
					if s != fmt.Sprintf("g%d-cmd%d", g, i) {
						t.Fatalf("group %d entry %d = %q", g, i, s)
					}
				}
			}
			return nil
		})
	}

	for n := range 3 {
		start(n, true)
	}
	apply(40)
	converged()

	// A snapshot on every node of group 0 truncates its logs (DeleteRange
	// of a prefix, TrailingLogs=10).
	for _, nd := range nodes {
		if err := nd.rafts[0].Snapshot().Error(); err != nil {
			t.Fatal(err)
		}
		gs := group(t, nd.log, 100)
		if first, _ := gs.FirstIndex(); first <= 1 {
			t.Fatalf("node %d group 0 not compacted: first index %d", nd.id, first)
		}
	}

	// Restart node 2 while the others keep going.
	before := make([][2]uint64, clusterGroups)
	for g := range clusterGroups {
		gs := group(t, nodes[2].log, uint64(100+g))
		before[g][0], _ = gs.LastIndex()
		before[g][1], _ = gs.GetUint64([]byte("CurrentTerm"))
	}
	stop(2)
	apply(20)
	l := openLog(t, Options{Dir: filepath.Join(root, "n2", "log")})
	for g := range clusterGroups {
		gs := group(t, l, uint64(100+g))
		last, _ := gs.LastIndex()
		term, err := gs.GetUint64([]byte("CurrentTerm"))
		if last < before[g][0] || err != nil || term < before[g][1] {
			t.Fatalf("group %d after reopen: last %d term %d (%v), before close %v", g, last, term, err, before[g])
		}
		first, _ := gs.FirstIndex()
		var e raft.Log
		for i := first; i <= last; i++ {
			if err := gs.GetLog(i, &e); err != nil || e.Index != i {
				t.Fatalf("group %d entry %d after reopen: %v", g, i, err)
			}
		}
	}
	l.Close()
	start(2, false)
	apply(20)
	converged()
	st := nodes[0].log.Stats()
	t.Logf("node 0 log: %d records in %d batches (%.2f per batch), %d fsyncs", st.Records, st.Batches, st.MeanBatchSize, st.Fsyncs)
}
