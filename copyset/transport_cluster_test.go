package copyset

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"go.uber.org/goleak"

	"github.com/chunkraft/chunkraft/internal/testwait"
)

// trCountFSM counts applied commands and sums their payloads. Its snapshot
// carries the state followed by padding bytes in a checkable pattern, so a
// snapshot can be made larger than a transport chunk.
type trCountFSM struct {
	padding int

	mu       sync.Mutex
	count    uint64
	sum      uint64
	restores int
}

func (f *trCountFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count++
	f.sum += binary.BigEndian.Uint64(l.Data)
	return f.count
}

func (f *trCountFSM) state() (count, sum uint64, restores int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.count, f.sum, f.restores
}

func (f *trCountFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &trCountSnapshot{count: f.count, sum: f.sum, padding: f.padding}, nil
}

func trPadByte(i int) byte { return byte(i*7 + 3) }

func (f *trCountFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	if len(b) < 16 {
		return fmt.Errorf("snapshot of %d bytes", len(b))
	}
	for i, c := range b[16:] {
		if c != trPadByte(i) {
			return fmt.Errorf("snapshot corrupt at padding byte %d", i)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count = binary.BigEndian.Uint64(b)
	f.sum = binary.BigEndian.Uint64(b[8:])
	f.restores++
	return nil
}

type trCountSnapshot struct {
	count, sum uint64
	padding    int
}

func (s *trCountSnapshot) Persist(sink raft.SnapshotSink) error {
	b := make([]byte, 16+s.padding)
	binary.BigEndian.PutUint64(b, s.count)
	binary.BigEndian.PutUint64(b[8:], s.sum)
	for i := 0; i < s.padding; i++ {
		b[16+i] = trPadByte(i)
	}
	if _, err := sink.Write(b); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *trCountSnapshot) Release() {}

// trRaftNode is one replica of one group.
type trRaftNode struct {
	id    raft.ServerID
	node  *trNode
	trans *GroupTransport
	fsm   *trCountFSM
	raft  *raft.Raft
}

func trRaftConfig(id raft.ServerID) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = id
	c.HeartbeatTimeout = 500 * time.Millisecond
	c.ElectionTimeout = 500 * time.Millisecond
	c.LeaderLeaseTimeout = 250 * time.Millisecond
	c.CommitTimeout = 20 * time.Millisecond
	c.SnapshotInterval = time.Hour // snapshots only when a test asks
	c.SnapshotThreshold = 1 << 30
	level := hclog.Off
	if os.Getenv("CHUNKRAFT_RAFT_LOG") != "" {
		level = hclog.Debug
	}
	c.Logger = hclog.New(&hclog.LoggerOptions{Name: string(id), Level: level, Output: os.Stderr})
	return c
}

func trStartRaft(t *testing.T, n *trNode, group uint64, id raft.ServerID, conf *raft.Config, padding int) *trRaftNode {
	t.Helper()
	tr := trTransport(t, n, group)
	fsm := &trCountFSM{padding: padding}
	r, err := raft.NewRaft(conf, fsm, raft.NewInmemStore(), raft.NewInmemStore(), raft.NewInmemSnapshotStore(), tr)
	if err != nil {
		t.Fatal(err)
	}
	return &trRaftNode{id: id, node: n, trans: tr, fsm: fsm, raft: r}
}

func (rn *trRaftNode) shutdown(t *testing.T) {
	t.Helper()
	if err := rn.raft.Shutdown().Error(); err != nil {
		t.Errorf("shutdown %s: %v", rn.id, err)
	}
}

// trStartGroup starts one raft replica of group on each node and
// bootstraps them as one cluster.
func trStartGroup(t *testing.T, nodes []*trNode, group uint64, tweak func(*raft.Config), padding int) []*trRaftNode {
	t.Helper()
	var cfg raft.Configuration
	var rns []*trRaftNode
	for i, n := range nodes {
		id := raft.ServerID(fmt.Sprintf("g%d-n%d", group, i))
		conf := trRaftConfig(id)
		if tweak != nil {
			tweak(conf)
		}
		rns = append(rns, trStartRaft(t, n, group, id, conf, padding))
		cfg.Servers = append(cfg.Servers, raft.Server{ID: id, Address: n.addr, Suffrage: raft.Voter})
	}
	for _, rn := range rns {
		if err := rn.raft.BootstrapCluster(cfg).Error(); err != nil {
			t.Fatal(err)
		}
	}
	return rns
}

func trWaitLeader(t *testing.T, rns []*trRaftNode, not raft.ServerID) *trRaftNode {
	t.Helper()
	var leader *trRaftNode
	testwait.Until(t, 10*time.Second, func() error {
		for _, rn := range rns {
			if rn.raft.State() == raft.Leader && rn.id != not {
				leader = rn
				return nil
			}
		}
		return errors.New("no leader elected")
	})
	return leader
}

// trApply applies n commands with payloads from..from+n-1, pipelined.
// It may run on any goroutine (it reports with t.Errorf).
func trApply(t *testing.T, leader *trRaftNode, from, n uint64) {
	t.Helper()
	futures := make([]raft.ApplyFuture, 0, n)
	for i := from; i < from+n; i++ {
		b := make([]byte, 8)
		binary.BigEndian.PutUint64(b, i)
		futures = append(futures, leader.raft.Apply(b, 5*time.Second))
	}
	for _, f := range futures {
		if err := f.Error(); err != nil {
			t.Errorf("apply on %s: %v", leader.id, err)
			return
		}
	}
}

func trWaitConverged(t *testing.T, rns []*trRaftNode, count, sum uint64) {
	t.Helper()
	testwait.Until(t, 10*time.Second, func() error {
		var differ []string
		for _, rn := range rns {
			if c, s, _ := rn.fsm.state(); c != count || s != sum {
				differ = append(differ, fmt.Sprintf("%s: count %d sum %d", rn.id, c, s))
			}
		}
		if len(differ) > 0 {
			return fmt.Errorf("FSMs did not converge to count %d sum %d: %s", count, sum, strings.Join(differ, "; "))
		}
		return nil
	})
}

func trSum(from, n uint64) uint64 { return (from + from + n - 1) * n / 2 }

// Two groups share three TransportManagers (three gRPC servers); each group
// elects a leader with pre-vote, replicates 200 entries through pipelines,
// and transfers leadership (TimeoutNow). The pipelines' AppendEntries go
// in batches on one shared stream per pair of servers, or, with
// NoAppendBatching (what a peer without the shared stream gets), on a
// stream per pipeline.
func TestTransportRaftCluster(t *testing.T) {
	t.Run("shared stream", func(t *testing.T) { testTransportRaftCluster(t, TransportOptions{}) })
	t.Run("stream per pipeline", func(t *testing.T) { testTransportRaftCluster(t, TransportOptions{NoAppendBatching: true}) })
}

func testTransportRaftCluster(t *testing.T, opts TransportOptions) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var nodes []*trNode
	for i := 0; i < 3; i++ {
		nodes = append(nodes, trStartNode(t, opts))
	}
	groups := [][]*trRaftNode{
		trStartGroup(t, nodes, 1, nil, 0),
		trStartGroup(t, nodes, 2, nil, 0),
	}

	const n = 200
	var wg sync.WaitGroup
	leaders := make([]*trRaftNode, len(groups))
	for gi, rns := range groups {
		leaders[gi] = trWaitLeader(t, rns, "")
		wg.Add(1)
		go func(leader *trRaftNode, from uint64) {
			defer wg.Done()
			trApply(t, leader, from, n)
		}(leaders[gi], uint64(gi)*1000+1)
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for gi, rns := range groups {
		trWaitConverged(t, rns, n, trSum(uint64(gi)*1000+1, n))
	}

	// Leadership transfer: the old leader sends TimeoutNow to a follower.
	old := leaders[0]
	if err := old.raft.LeadershipTransfer().Error(); err != nil {
		t.Fatalf("leadership transfer: %v", err)
	}
	newLeader := trWaitLeader(t, groups[0], old.id)
	trApply(t, newLeader, 5000, 10)
	trWaitConverged(t, groups[0], n+10, trSum(1, n)+trSum(5000, 10))

	var preVotes, timeoutNows, pipelines, shared int
	var appends, appendMsgs, answerMsgs, recvAnswerMsgs uint64
	for _, nd := range nodes {
		preVotes += nd.rpcs.Calls("RequestPreVote")
		timeoutNows += nd.rpcs.Calls("TimeoutNow")
		pipelines += nd.rpcs.Calls("AppendEntriesPipeline")
		shared += nd.rpcs.Calls("AppendEntriesStream")
		for _, p := range nd.m.Stats().Peers {
			appends += p.AppendsSent
			appendMsgs += p.AppendMessagesSent
			answerMsgs += p.AnswerMessagesSent
			recvAnswerMsgs += p.AnswerMessagesReceived
		}
	}
	if appends == 0 || appendMsgs == 0 || appendMsgs > appends || answerMsgs == 0 || answerMsgs > appends {
		t.Errorf("AppendEntries counters: %d requests in %d messages, answered in %d", appends, appendMsgs, answerMsgs)
	}
	if opts.NoAppendBatching {
		if shared != 0 {
			t.Errorf("%d AppendEntriesStream streams opened with NoAppendBatching", shared)
		}
	} else {
		if shared == 0 {
			t.Error("no AppendEntriesStream stream was opened")
		}
		// At most one per pair of servers and direction, as no stream failed.
		if shared > 6 {
			t.Errorf("%d AppendEntriesStream streams opened, want at most 6", shared)
		}
		pipelines = shared
	}
	t.Logf("%d AppendEntries in %d messages, answered in %d (received %d)", appends, appendMsgs, answerMsgs, recvAnswerMsgs)
	if preVotes == 0 {
		t.Error("no RequestPreVote RPC was made: pre-vote not in use")
	}
	if timeoutNows == 0 {
		t.Error("no TimeoutNow RPC was made")
	}
	if pipelines == 0 {
		t.Error("no pipeline stream was opened")
	}

	for _, rns := range groups {
		for _, rn := range rns {
			rn.shutdown(t)
		}
	}
	// raft closed every group transport on Shutdown.
	for _, nd := range nodes {
		nd.m.groupMu.RLock()
		left := len(nd.m.groups)
		nd.m.groupMu.RUnlock()
		if left != 0 {
			t.Errorf("%s: %d groups still registered after raft shutdown", nd.addr, left)
		}
		nd.stop()
	}
}

// A replica added after the leader compacted its log must be caught up with
// InstallSnapshot, streamed in several chunks.
func TestTransportRaftInstallSnapshot(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const chunk = 4 << 10
	const padding = 5*chunk + 1000 // the FSM snapshot spans 6 chunks
	opts := TransportOptions{SnapshotChunkSize: chunk}
	var nodes []*trNode
	for i := 0; i < 3; i++ {
		nodes = append(nodes, trStartNode(t, opts))
	}
	tweak := func(c *raft.Config) {
		c.TrailingLogs = 5
	}
	rns := trStartGroup(t, nodes, 7, tweak, padding)
	leader := trWaitLeader(t, rns, "")
	trApply(t, leader, 1, 100)
	if err := leader.raft.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}

	fresh := trStartNode(t, opts)
	conf := trRaftConfig("g7-fresh")
	tweak(conf)
	newcomer := trStartRaft(t, fresh, 7, "g7-fresh", conf, padding)
	if err := leader.raft.AddVoter(newcomer.id, fresh.addr, 0, 5*time.Second).Error(); err != nil {
		t.Fatalf("add voter: %v", err)
	}
	all := append(rns, newcomer)
	trWaitConverged(t, all, 100, trSum(1, 100))
	if _, _, restores := newcomer.fsm.state(); restores == 0 {
		t.Error("the new replica did not restore a snapshot")
	}
	if got := fresh.rpcs.Calls("InstallSnapshot"); got == 0 {
		t.Error("no InstallSnapshot stream reached the new replica")
	}
	if got := fresh.rpcs.Msgs("InstallSnapshot"); got < 6 {
		t.Errorf("snapshot came in %d messages, want >= 6", got)
	}
	trApply(t, leader, 1000, 10)
	trWaitConverged(t, all, 110, trSum(1, 100)+trSum(1000, 10))

	for _, rn := range all {
		rn.shutdown(t)
	}
	for _, nd := range append(nodes, fresh) {
		nd.stop()
	}
}
