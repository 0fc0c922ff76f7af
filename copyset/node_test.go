package copyset

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"

	"github.com/chunkraft/chunkraft/copyset/sharedlog"
	"github.com/chunkraft/chunkraft/internal/testwait"
)

// fileMachine is a test state machine: op "name=value" writes value into
// the file name under the copyset data dir (idempotent, like chunk ops).
type fileMachine struct {
	dir    string
	failOn string // an op for this name fails fatally (an injected I/O error)
}

func (m *fileMachine) Apply(index uint64, payload []byte) any {
	name, value, ok := strings.Cut(string(payload), "=")
	if !ok {
		return fmt.Errorf("bad op %q", payload)
	}
	if m.failOn != "" && name == m.failOn {
		return &FatalError{Err: fmt.Errorf("write %s: %w", name, syscall.EIO)}
	}
	return os.WriteFile(filepath.Join(m.dir, name), []byte(value), 0o644)
}

func (m *fileMachine) Sync() error { return syncDirTree(m.dir) }

func (m *fileMachine) Files() ([]string, error) {
	entries, err := os.ReadDir(m.dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out, nil
}

func (m *fileMachine) Close() error { return nil }

const kindFile Kind = 200

// testServer is one in-process "chunkserver" hosting copysets.
type testServer struct {
	addr string
	dir  string
	grpc *grpc.Server
	tm   *TransportManager
	mgr  *Manager

	failOn string // see fileMachine.failOn; set before creating copysets
	shared *sharedlog.Log
}

// testSharedLog makes startTestServer use a shared log store per server.
var testSharedLog bool

func startTestServer(t *testing.T, addr, dir string, opts RaftOptions) *testServer {
	t.Helper()
	return startTestServerWith(t, addr, dir, opts, nil)
}

// startTestServerWith is startTestServer with the copysets' state machines
// registered by machines (nil: a fileMachine under kindFile).
func startTestServerWith(t *testing.T, addr, dir string, opts RaftOptions, machines []MachineSpec) *testServer {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{addr: lis.Addr().String(), dir: dir, grpc: grpc.NewServer()}
	local, _, err := ParsePeer(s.addr)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s.tm = NewTransportManager(raft.ServerAddress(local.Addr()), TransportOptions{
		Logger: log, LeaderBeatInterval: opts.withDefaults().HeartbeatTimeout / 5,
	})
	s.tm.Register(s.grpc)
	var shared *sharedlog.Log
	if testSharedLog {
		if shared, err = sharedlog.Open(sharedlog.Options{Dir: filepath.Join(dir, "raftlog"), Logger: log}); err != nil {
			t.Fatal(err)
		}
		s.shared = shared
	}
	if machines == nil {
		machines = []MachineSpec{{Kind: kindFile, Name: "file", Open: func(env MachineEnv, _ Machines) (StateMachine, error) {
			return &fileMachine{dir: env.DataDir, failOn: s.failOn}, nil
		}}}
	}
	s.mgr, err = NewManager(ManagerOptions{
		Dir: dir, Local: local, Transports: s.tm, Raft: opts, Logger: log, SharedLog: shared,
		Machines: machines,
	})
	if err != nil {
		t.Fatal(err)
	}
	go s.grpc.Serve(lis)
	if err := s.mgr.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *testServer) stop() {
	s.mgr.Close()
	s.grpc.Stop()
	s.tm.Close()
	if s.shared != nil {
		s.shared.Close()
	}
}

func (s *testServer) peer() PeerID { return PeerID(s.addr + ":0") }

func fastRaft() RaftOptions {
	return RaftOptions{
		HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond,
		LeaderLeaseTimeout: 150 * time.Millisecond, CommitTimeout: 10 * time.Millisecond,
		SnapshotThreshold: 32, TrailingLogs: 8, SnapshotInterval: 200 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	}
}

func fileOp(name, value string) []byte {
	op := make([]byte, OpHeaderLen, OpHeaderLen+len(name)+1+len(value))
	PutOpHeader(op, kindFile)
	return append(op, name+"="+value...)
}

func waitLeader(t *testing.T, g GroupID, servers ...*testServer) *Node {
	t.Helper()
	var leader *Node
	testwait.Until(t, 10*time.Second, func() error {
		for _, s := range servers {
			if n := s.mgr.Get(g); n != nil && n.IsLeader() {
				leader = n
				return nil
			}
		}
		return fmt.Errorf("no leader for %s", g)
	})
	return leader
}

func propose(t *testing.T, g GroupID, servers []*testServer, op []byte) {
	t.Helper()
	if res := proposeResult(t, g, servers, op); res != nil {
		t.Fatal(res)
	}
}

// proposeResult commits op through whichever server leads and returns the
// leader's apply result.
func proposeResult(t *testing.T, g GroupID, servers []*testServer, op []byte) any {
	t.Helper()
	_, res := proposeAt(t, g, servers, op)
	return res
}

// proposeAt is proposeResult that also returns op's log index.
func proposeAt(t *testing.T, g GroupID, servers []*testServer, op []byte) (uint64, any) {
	t.Helper()
	var idx uint64
	var res any
	testwait.Until(t, 2*time.Minute, func() error {
		n := waitLeader(t, g, servers...)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		if idx, res, err = n.Propose(ctx, op); err != nil {
			return fmt.Errorf("propose %q failed: %w", op, err)
		}
		return nil
	})
	return idx, res
}

// dirContents maps file name -> content for a replica's data dir.
func dirContents(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

func waitCaughtUp(t *testing.T, g GroupID, leader *Node, s *testServer) {
	t.Helper()
	testwait.Until(t, 20*time.Second, func() error {
		n := s.mgr.Get(g)
		if n == nil {
			return fmt.Errorf("replica on %s did not catch up: not hosted", s.addr)
		}
		if applied, committed := n.Status().AppliedIndex, leader.Status().CommittedIndex; applied < committed {
			return fmt.Errorf("replica on %s did not catch up: applied %d, the leader committed %d", s.addr, applied, committed)
		}
		return nil
	})
}

// sameDirs reports how two replicas' data dirs differ, or nil.
func sameDirs(t *testing.T, a, b string) error {
	t.Helper()
	ca, cb := dirContents(t, a), dirContents(t, b)
	if len(ca) != len(cb) {
		return fmt.Errorf("%d files vs %d files", len(ca), len(cb))
	}
	var names []string
	for k := range ca {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if ca[k] != cb[k] {
			return fmt.Errorf("file %s differs: %q vs %q", k, ca[k], cb[k])
		}
	}
	return nil
}

// TestSnapshotInstallCatchUp: a replica stopped while more than the trailing
// logs are written catches up through InstallSnapshot (the leader's log no
// longer has what it needs) and ends with identical files.
// startGroup starts three test servers under root with fastRaft and
// creates copyset g on all of them. The caller stops the servers (stopAll).
func startGroup(t *testing.T, root string, g GroupID) []*testServer {
	t.Helper()
	return startGroupWith(t, root, g, fastRaft())
}

// startGroupWith is startGroup with raft options opts.
func startGroupWith(t *testing.T, root string, g GroupID, opts RaftOptions) []*testServer {
	t.Helper()
	var servers []*testServer
	for i := range 3 {
		servers = append(servers, startTestServer(t, "127.0.0.1:0", filepath.Join(root, fmt.Sprint(i)), opts))
	}
	peers := []PeerID{servers[0].peer(), servers[1].peer(), servers[2].peer()}
	for _, s := range servers {
		if _, err := s.mgr.Create(context.Background(), g, peers); err != nil {
			stopAll(servers)
			t.Fatal(err)
		}
	}
	return servers
}

// stopAll stops every server that is not nil.
func stopAll(servers []*testServer) {
	for _, s := range servers {
		if s != nil {
			s.stop()
		}
	}
}

func TestSnapshotInstallCatchUp(t *testing.T) {
	root := t.TempDir()
	g := NewGroupID(1, 1)
	servers := startGroup(t, root, g)
	defer stopAll(servers)
	for i := range 20 {
		propose(t, g, servers, fileOp(fmt.Sprintf("f%d", i%7), fmt.Sprintf("v%d", i)))
	}
	// Stop a follower.
	leader := waitLeader(t, g, servers...)
	victim := 0
	for i, s := range servers {
		if s.mgr.Get(g) != leader {
			victim = i
			break
		}
	}
	vs := servers[victim]
	vs.stop()
	live := append(append([]*testServer{}, servers[:victim]...), servers[victim+1:]...)
	for i := range 200 {
		propose(t, g, live, fileOp(fmt.Sprintf("f%d", i%11), fmt.Sprintf("w%d", i)))
	}
	leader = waitLeader(t, g, live...)
	if err := leader.Snapshot(context.Background()); err != nil {
		t.Fatal(err)
	}
	if first := leader.Status().FirstIndex; first <= 20 {
		t.Fatalf("leader log not truncated: first index %d", first)
	}
	servers[victim] = startTestServer(t, vs.addr, vs.dir, fastRaft())
	waitCaughtUp(t, g, leader, servers[victim])
	testwait.Until(t, 10*time.Second, func() error {
		return sameDirs(t, filepath.Join(leader.Dir(), "data"), filepath.Join(servers[victim].mgr.Get(g).Dir(), "data"))
	})

	// The restarted replica installed a received snapshot.
	recs, err := servers[victim].mgr.Get(g).snaps.records()
	if err != nil {
		t.Fatal(err)
	}
	installed := false
	for _, r := range recs {
		installed = installed || (r.Received && r.Installed)
	}
	if !installed {
		t.Fatalf("no installed received snapshot on the restarted replica: %+v", recs)
	}
	// And keeps applying new writes.
	propose(t, g, servers, fileOp("after", "install"))
	waitCaughtUp(t, g, waitLeader(t, g, servers...), servers[victim])
	// Caught up is judged against the leader's index as read then, which a
	// leader change between propose and the wait can leave short of the
	// write: its file must appear, not necessarily at once.
	testwait.Until(t, 10*time.Second, func() error {
		b, err := os.ReadFile(filepath.Join(servers[victim].mgr.Get(g).Dir(), "data", "after"))
		if err != nil || !bytes.Equal(b, []byte("install")) {
			return fmt.Errorf("write after install: %q %v", b, err)
		}
		return nil
	})
}

// TestRestartAfterTruncation: every replica restarted after snapshots
// truncated their logs still has all data and the same files.
func TestRestartAfterTruncation(t *testing.T) {
	root := t.TempDir()
	var servers []*testServer
	for i := range 3 {
		servers = append(servers, startTestServer(t, "127.0.0.1:0", filepath.Join(root, fmt.Sprint(i)), fastRaft()))
	}
	g := NewGroupID(1, 2)
	peers := []PeerID{servers[0].peer(), servers[1].peer(), servers[2].peer()}
	for _, s := range servers {
		if _, err := s.mgr.Create(context.Background(), g, peers); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 150 {
		propose(t, g, servers, fileOp(fmt.Sprintf("k%d", i%13), fmt.Sprintf("x%d", i)))
	}
	for _, s := range servers {
		if err := s.mgr.Get(g).Snapshot(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	want := dirContents(t, filepath.Join(waitLeader(t, g, servers...).Dir(), "data"))
	for i, s := range servers {
		s.stop()
		servers[i] = startTestServer(t, s.addr, s.dir, fastRaft())
	}
	defer func() {
		for _, s := range servers {
			s.stop()
		}
	}()
	leader := waitLeader(t, g, servers...)
	if st := leader.Status(); st.FirstIndex <= 1 {
		t.Fatalf("log not truncated: %+v", st)
	}
	propose(t, g, servers, fileOp("k0", "final"))
	want["k0"] = "final"
	for _, s := range servers {
		waitCaughtUp(t, g, leader, s)
		testwait.Until(t, 10*time.Second, func() error {
			got := dirContents(t, filepath.Join(s.mgr.Get(g).Dir(), "data"))
			for k, v := range want {
				if got[k] != v {
					return fmt.Errorf("%s: file %s = %q, want %q", s.addr, k, got[k], v)
				}
			}
			return nil
		})
	}
}

// TestFatalApplyStopsOnlyThatReplica: an I/O error while applying on one
// replica stops that replica's copyset (visible as Broken, raft shut down,
// applied index stays before the failed op) while the other replicas and
// the server's other copysets carry on.
func TestFatalApplyStopsOnlyThatReplica(t *testing.T) {
	root := t.TempDir()
	var servers []*testServer
	for i := range 3 {
		servers = append(servers, startTestServer(t, "127.0.0.1:0", filepath.Join(root, fmt.Sprint(i)), fastRaft()))
	}
	defer func() {
		for _, s := range servers {
			s.stop()
		}
	}()
	servers[2].failOn = "bad"
	g, other := NewGroupID(1, 5), NewGroupID(1, 6)
	peers := []PeerID{servers[0].peer(), servers[1].peer(), servers[2].peer()}
	for _, s := range servers {
		for _, gid := range []GroupID{g, other} {
			if _, err := s.mgr.Create(context.Background(), gid, peers); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The failing replica must have applied the good op before the bad one
	// is proposed: wait for its index there (the leader's commit index is
	// not enough: a leader elected meanwhile may not know it yet).
	good, res := proposeAt(t, g, servers, fileOp("good", "1"))
	if res != nil {
		t.Fatal(res)
	}
	testwait.Until(t, 10*time.Second, func() error {
		if got := servers[2].mgr.Get(g).AppliedIndex(); got < good {
			return fmt.Errorf("replica on %s applied %d, want %d", servers[2].addr, got, good)
		}
		return nil
	})
	before := servers[2].mgr.Get(g).AppliedIndex()
	proposeResult(t, g, servers, fileOp("bad", "2")) // fatal where the leader is the failing replica
	broken := servers[2].mgr.Get(g)
	testwait.Until(t, 10*time.Second, func() error {
		if broken.Broken() == nil {
			return errors.New("replica did not report the fatal apply error")
		}
		return nil
	})
	if !errors.Is(broken.Broken(), syscall.EIO) {
		t.Fatalf("broken = %v, want EIO", broken.Broken())
	}
	if got := broken.AppliedIndex(); got != before {
		t.Fatalf("applied index moved past the failed op: %d -> %d", before, got)
	}
	if _, err := os.Stat(filepath.Join(broken.Dir(), "data", "bad")); err == nil {
		t.Fatal("failed op left its file")
	}
	// The healthy majority keeps committing; the other copyset on the same
	// server is unaffected.
	propose(t, g, servers[:2], fileOp("more", "3"))
	propose(t, other, servers, fileOp("x", "y"))
	waitCaughtUp(t, other, waitLeader(t, other, servers...), servers[2])
	if servers[2].mgr.Get(other).Broken() != nil {
		t.Fatal("other copyset broken too")
	}
}

// TestSharedLogStore runs the snapshot and restart scenarios with every
// copyset's raft log in the server's shared log store.
func TestSharedLogStore(t *testing.T) {
	testSharedLog = true
	defer func() { testSharedLog = false }()
	t.Run("SnapshotInstallCatchUp", TestSnapshotInstallCatchUp)
	t.Run("RestartAfterTruncation", TestRestartAfterTruncation)
}

// TestShareCommitLetsFollowersApply: with an idle AppendEntries cadence far
// longer than the test, followers learn that an entry committed only
// because ShareCommit pushed the commit index out; a follower refuses it.
func TestShareCommitLetsFollowersApply(t *testing.T) {
	root := t.TempDir()
	g := NewGroupID(1, 1)
	opts := fastRaft()
	opts.CommitTimeout = time.Minute
	servers := startGroupWith(t, root, g, opts)
	defer stopAll(servers)
	leader := waitLeader(t, g, servers...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var followers []*Node
	for _, s := range servers {
		if n := s.mgr.Get(g); n != leader {
			followers = append(followers, n)
		}
	}
	if err := followers[0].ShareCommit(ctx); err == nil {
		t.Fatal("ShareCommit on a follower: want a not-leader error")
	}
	// The premise: an entry committed while no later traffic carries the
	// commit index is not applied on the followers, though both have it in
	// their logs. A retried append on a loaded machine may carry it anyway;
	// then try with another entry.
	var index uint64
	for attempt := 0; ; attempt++ {
		var err error
		if index, _, err = leader.Propose(ctx, fileOp("k", fmt.Sprint(attempt))); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, 10*time.Second, func() error {
			for _, f := range followers {
				if last := f.Status().LastIndex; last < index {
					return fmt.Errorf("a follower's log ends at %d, before index %d", last, index)
				}
			}
			return nil
		})
		held := true
		for _, f := range followers {
			if f.AppliedIndex() >= index {
				held = false
			}
		}
		if held {
			break
		}
		if attempt == 4 {
			t.Fatalf("followers applied index %d before ShareCommit in 5 attempts: the test's premise does not hold", index)
		}
	}
	if err := leader.ShareCommit(ctx); err != nil {
		t.Fatal(err)
	}
	waitFollowers := func(index uint64) {
		t.Helper()
		testwait.Until(t, 3*time.Second, func() error {
			for _, f := range followers {
				if applied := f.AppliedIndex(); applied < index {
					return fmt.Errorf("follower applied %d, want >= %d after ShareCommit", applied, index)
				}
			}
			return nil
		})
	}
	waitFollowers(index)

	// Nothing committed since: ShareCommit appends nothing. After a new
	// write it shares again.
	last := leader.Status().LastIndex
	for range 3 {
		if err := leader.ShareCommit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := leader.Status().LastIndex; got != last {
		t.Fatalf("idle ShareCommit appended entries: last index %d -> %d", last, got)
	}
	index, _, err := leader.Propose(ctx, fileOp("k", "w"))
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.ShareCommit(ctx); err != nil {
		t.Fatal(err)
	}
	waitFollowers(index)
}

// TestStatusCountsLeaderChanges: every replica counts the first election
// and a leadership transfer in Status().LeaderChanges. (Counts are compared
// with before, not pinned: a loaded machine may see an extra election.)
// transferAway moves g's leadership off leader to another server, retried
// (on a loaded machine a transfer may time out) from whoever leads then.
func transferAway(t *testing.T, g GroupID, servers []*testServer, leader *Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for try := 0; ; try++ {
		var to PeerID
		for _, s := range servers {
			if s.mgr.Get(g) != leader {
				to = s.peer()
				break
			}
		}
		err := leader.TransferLeader(ctx, to)
		if err == nil {
			return
		}
		if try == 4 {
			t.Fatal(err)
		}
		leader = waitLeader(t, g, servers...)
	}
}

func TestStatusCountsLeaderChanges(t *testing.T) {
	g := NewGroupID(1, 1)
	servers := startGroup(t, t.TempDir(), g)
	defer stopAll(servers)
	leader := waitLeader(t, g, servers...)
	propose(t, g, servers, fileOp("k", "v")) // every replica has heard of the leader
	before := map[string]uint64{}
	testwait.Until(t, 10*time.Second, func() error {
		for _, s := range servers {
			got := s.mgr.Get(g).Status().LeaderChanges
			if got == 0 {
				return fmt.Errorf("%s: no leader change counted after the first election", s.addr)
			}
			before[s.addr] = got
		}
		return nil
	})
	transferAway(t, g, servers, leader)
	propose(t, g, servers, fileOp("k", "v2"))
	testwait.Until(t, 10*time.Second, func() error {
		for _, s := range servers {
			if got := s.mgr.Get(g).Status().LeaderChanges; got <= before[s.addr] {
				return fmt.Errorf("%s: %d leader changes after a transfer, %d before", s.addr, got, before[s.addr])
			}
		}
		return nil
	})
}
