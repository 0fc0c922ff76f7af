package chunkserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"syscall"

	"github.com/chunkraft/chunkraft/chunkstore/datastore"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/integrity"
	"github.com/chunkraft/chunkraft/internal/testwait"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	commonpb "github.com/chunkraft/chunkraft/proto/curve/common"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func mbPeer(id string) *commonpb.Peer { return &commonpb.Peer{Address: proto.String(id)} }

func mbPeers(ids ...string) []*commonpb.Peer {
	out := make([]*commonpb.Peer, len(ids))
	for i, id := range ids {
		out[i] = mbPeer(id)
	}
	return out
}

func mbAddrs(peers []*commonpb.Peer) []string {
	out := make([]string, len(peers))
	for i, p := range peers {
		out[i] = p.GetAddress()
	}
	slices.Sort(out)
	return out
}

func (c *testCluster) id(i int) string                 { return string(c.Servers[i].Local()) }
func (c *testCluster) cli2(i int) pb.CliService2Client { return pb.NewCliService2Client(c.Conns[i]) }
func (c *testCluster) cli1(i int) pb.CliServiceClient  { return pb.NewCliServiceClient(c.Conns[i]) }
func (c *testCluster) mbIndex(id copyset.PeerID) int {
	return slices.IndexFunc(c.Servers, func(s *Server) bool { return s.Local() == id })
}
func (c *testCluster) mbCopysetDir(i int) string {
	return filepath.Join(c.Cfgs[i].DataDir, "copysets", c.Group.String())
}
func (c *testCluster) mbCopyset() (*uint32, *uint32) {
	return proto.Uint32(c.Group.Pool()), proto.Uint32(c.Group.Copyset())
}
func (c *testCluster) mbCopysets(i int) pb.CopysetServiceClient {
	return pb.NewCopysetServiceClient(c.Conns[i])
}

// mbOnLeader runs call against the copyset's leader, again while the
// answer says leadership moved or the change could not be made yet.
func (c *testCluster) mbOnLeader(t *testing.T, what string, call func(i int) error) int {
	t.Helper()
	var leader int
	testwait.Until(t, 20*time.Second, func() error {
		leader = c.Leader(t)
		err := call(leader)
		switch grpcstatus.Code(err) {
		case codes.OK:
			return nil
		case codes.FailedPrecondition, codes.Unavailable, codes.Aborted:
			return fmt.Errorf("%s on server %d: %w", what, leader, err)
		}
		t.Fatalf("%s on server %d: %v", what, leader, err)
		return nil
	})
	return leader
}

// mbCreateEmpty makes server i host an empty replica that waits to be
// added: CreateCopysetNode with the current peers, which exclude it.
func (c *testCluster) mbCreateEmpty(t *testing.T, i int, peers []string) {
	t.Helper()
	pool, cs := c.mbCopyset()
	resp, err := c.mbCopysets(i).CreateCopysetNode(context.Background(), &pb.CopysetRequest{LogicPoolId: pool, CopysetId: cs, Peerid: peers})
	if err != nil || resp.GetStatus() != pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_SUCCESS {
		t.Fatalf("create empty replica on server %d: %v %v", i, resp.GetStatus(), err)
	}
	if n := c.Node(i); n == nil || n.IsLeader() || n.Removed() {
		t.Fatalf("server %d: joined replica %v", i, n)
	}
}

// mbSettle waits until every member has applied the leader's commit index
// and then checks that every chunk hashes alike on all of them (and the
// whole copyset, GetCopysetStatus queryHash). It returns the members.
func (c *testCluster) mbSettle(t *testing.T, chunks []uint64) []int {
	t.Helper()
	var members []int
	testwait.Until(t, 20*time.Second, func() error {
		l := c.Leader(t)
		ln := c.Node(l)
		if ln == nil {
			return fmt.Errorf("members to catch up: the leader, server %d, hosts no replica", l)
		}
		peers, err := ln.Peers()
		if err != nil {
			return fmt.Errorf("members to catch up: the leader's peers: %w", err)
		}
		members = members[:0]
		ci := ln.Status().CommittedIndex
		for _, p := range peers {
			i := c.mbIndex(p)
			if i < 0 || c.Node(i) == nil {
				return fmt.Errorf("members to catch up: member %s has no replica running", p)
			}
			if applied := c.Node(i).Status().AppliedIndex; applied < ci {
				return fmt.Errorf("members to catch up: server %d applied %d, the leader committed %d", i, applied, ci)
			}
			members = append(members, i)
		}
		return nil
	})
	for _, ch := range chunks {
		want := c.Hash(t, members[0], ch)
		for _, i := range members[1:] {
			if got := c.Hash(t, i, ch); got != want {
				t.Fatalf("chunk %d: server %d hash %s, server %d hash %s", ch, i, got, members[0], want)
			}
		}
	}
	pool, cs := c.mbCopyset()
	var hashes []string
	for _, i := range members {
		resp, err := c.mbCopysets(i).GetCopysetStatus(context.Background(), &pb.CopysetStatusRequest{
			LogicPoolId: pool, CopysetId: cs, Peer: mbPeer(c.id(i)), QueryHash: proto.Bool(true)})
		if err != nil || resp.GetStatus() != pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_SUCCESS {
			t.Logf("copyset hash on server %d: %v %v (not compared)", i, resp.GetStatus(), err)
			return members
		}
		hashes = append(hashes, resp.GetHash())
	}
	for k := range hashes {
		if hashes[k] != hashes[0] {
			t.Fatalf("copyset hashes differ across members %v: %v", members, hashes)
		}
	}
	return members
}

// mbTrashed reports whether server i's trash holds a replica of the group.
func (c *testCluster) mbTrashed(i int, g copyset.GroupID) bool {
	entries, _ := os.ReadDir(filepath.Join(c.Cfgs[i].DataDir, "trash"))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), g.String()+".") {
			return true
		}
	}
	return false
}

// mbLoad writes random 4 KiB blocks from several goroutines, each to its
// own chunk, retrying each write until it is acknowledged (the same data
// again: idempotent), so a block's final content is its last acknowledged
// write.
type mbLoad struct {
	conns []*grpc.ClientConn
	addrs map[string]int // peer id -> conn index
	stop  chan struct{}
	wg    sync.WaitGroup
	acked atomic.Int64

	mu   sync.Mutex
	last map[[2]uint64][]byte // {chunk, block} -> last acknowledged data
	err  error
}

const mbBlocks = 32 // blocks per writer's chunk

func (c *testCluster) mbStartLoad(writers int) *mbLoad {
	l := &mbLoad{conns: slices.Clone(c.Conns), addrs: map[string]int{}, stop: make(chan struct{}), last: map[[2]uint64][]byte{}}
	for i, srv := range c.Servers {
		l.addrs[string(srv.Local())] = i
	}
	for w := range writers {
		l.wg.Add(1)
		go l.run(w, uint64(100+w))
	}
	return l
}

func (l *mbLoad) chunks() []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []uint64
	for k := range l.last {
		if !slices.Contains(out, k[0]) {
			out = append(out, k[0])
		}
	}
	slices.Sort(out)
	return out
}

func (l *mbLoad) run(w int, chunk uint64) {
	defer l.wg.Done()
	rng := rand.New(rand.NewPCG(uint64(w), 7))
	target := w % len(l.conns)
	for {
		select {
		case <-l.stop:
			return
		default:
		}
		blk := rng.IntN(mbBlocks)
		data := make([]byte, 4096)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		req := writeReq(chunk, uint32(blk*4096), data)
		for deadline := time.Now().Add(30 * time.Second); ; {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			resp, err := pb.NewChunkServiceClient(l.conns[target]).WriteChunk(ctx, req)
			cancel()
			if err == nil && resp.GetStatus() == pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
				l.mu.Lock()
				l.last[[2]uint64{chunk, uint64(blk)}] = data
				l.mu.Unlock()
				l.acked.Add(1)
				break
			}
			if time.Now().After(deadline) {
				l.mu.Lock()
				l.err = fmt.Errorf("writer %d: write to chunk %d block %d never acknowledged: %v %v", w, chunk, blk, resp.GetStatus(), err)
				l.mu.Unlock()
				return
			}
			if i, ok := l.addrs[resp.GetRedirect()]; ok && err == nil &&
				resp.GetStatus() == pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_REDIRECTED && i != target {
				target = i
				continue
			}
			target = (target + 1) % len(l.conns)
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// waitAcked waits until n more writes than now are acknowledged.
func (l *mbLoad) waitAcked(t *testing.T, n int64) {
	t.Helper()
	want := l.acked.Load() + n
	testwait.Until(t, 30*time.Second, func() error {
		if got := l.acked.Load(); got < want {
			return fmt.Errorf("%d acknowledged writes, want %d", got, want)
		}
		return nil
	})
}

func (l *mbLoad) finish(t *testing.T) {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	if l.err != nil {
		t.Fatal(l.err)
	}
}

// TestMembershipUnderLoad: while four writers run, a fourth server's empty
// replica is added (CreateCopysetNode with the current peers, then AddPeer
// on the leader), an old replica removed (v1 remove_peer), and leadership
// moved to the new replica. No acknowledged write is lost, the current
// replicas end identical, the removed server's replica is in its trash,
// and the epoch grew by one per configuration change.
func TestMembershipUnderLoad(t *testing.T) {
	c := startTestCluster(t, 3)
	ctx := context.Background()
	pool, cs := c.mbCopyset()
	fresh := c.AddServer(t)
	load := c.mbStartLoad(4)
	load.waitAcked(t, 100)

	epoch := c.Node(c.Leader(t)).Status().Epoch
	old := []string{c.id(0), c.id(1), c.id(2)}
	c.mbCreateEmpty(t, fresh, old)

	// Add the new replica on the leader.
	var added *pb.AddPeerResponse2
	l := c.mbOnLeader(t, "add peer", func(i int) (err error) {
		added, err = c.cli2(i).AddPeer(ctx, &pb.AddPeerRequest2{LogicPoolId: pool, CopysetId: cs,
			Leader: mbPeer(c.id(i)), AddPeer: mbPeer(c.id(fresh))})
		return err
	})
	if got := mbAddrs(added.GetNewPeers()); !slices.Equal(got, mbSorted(append(old, c.id(fresh)))) {
		t.Fatalf("add peer: new peers %v", got)
	}
	if got := mbAddrs(added.GetOldPeers()); !slices.Equal(got, mbSorted(old)) {
		t.Fatalf("add peer: old peers %v", got)
	}
	if got := c.Node(l).Status().Epoch; got != epoch+1 {
		t.Fatalf("epoch after add peer %d, want %d", got, epoch+1)
	}
	load.waitAcked(t, 100)

	// Remove an old follower through the v1 surface ("ip:port" ids).
	victim := (c.Leader(t) + 1) % 3 // an old replica that does not lead
	var removed *pb.RemovePeerResponse
	l = c.mbOnLeader(t, "remove peer", func(i int) (err error) {
		removed, err = c.cli1(i).RemovePeer(ctx, &pb.RemovePeerRequest{LogicPoolId: pool, CopysetId: cs,
			LeaderId: proto.String(c.Servers[i].Local().Addr()), PeerId: proto.String(c.Servers[victim].Local().Addr())})
		return err
	})
	if len(removed.GetOldPeers()) != 4 || len(removed.GetNewPeers()) != 3 || slices.Contains(removed.GetNewPeers(), c.id(victim)) {
		t.Fatalf("remove peer: old %v new %v", removed.GetOldPeers(), removed.GetNewPeers())
	}
	if got := c.Node(l).Status().Epoch; got != epoch+2 {
		t.Fatalf("epoch after remove peer %d, want %d", got, epoch+2)
	}
	load.waitAcked(t, 100)

	// Move leadership to the new replica.
	c.mbOnLeader(t, "transfer leader", func(i int) error {
		_, err := c.cli2(i).TransferLeader(ctx, &pb.TransferLeaderRequest2{LogicPoolId: pool, CopysetId: cs,
			Leader: mbPeer(c.id(i)), Transferee: mbPeer(c.id(fresh))})
		return err
	})
	testwait.Until(t, 10*time.Second, func() error {
		if !c.Node(fresh).IsLeader() {
			return errors.New("the new replica does not lead")
		}
		return nil
	})
	load.waitAcked(t, 100)
	load.finish(t)

	// Every acknowledged block reads back with its last value.
	load.mu.Lock()
	last := load.last
	load.mu.Unlock()
	for k, want := range last {
		if got := c.Read(t, k[0], uint32(k[1]*4096), 4096); !bytes.Equal(got, want) {
			t.Fatalf("chunk %d block %d lost its last acknowledged write", k[0], k[1])
		}
	}
	t.Logf("%d writes acknowledged, %d blocks verified", load.acked.Load(), len(last))
	members := c.mbSettle(t, load.chunks())
	if !slices.Contains(members, fresh) || slices.Contains(members, victim) || len(members) != 3 {
		t.Fatalf("members %v", members)
	}
	for _, i := range members {
		if got := c.Node(i).Status().Epoch; got != epoch+2 {
			t.Fatalf("server %d epoch %d, want %d", i, got, epoch+2)
		}
		// Every member knows the committed configuration (what stale
		// replicas are checked against).
		committed, ok := c.Node(i).CommittedPeers()
		if !ok || len(committed) != 3 || !slices.Contains(committed, c.Servers[fresh].Local()) || slices.Contains(committed, c.Servers[victim].Local()) {
			t.Fatalf("server %d committed configuration %v (%v)", i, committed, ok)
		}
	}
	// The removed server dropped its replica into its trash.
	testwait.Until(t, 10*time.Second, func() error {
		if c.Node(victim) != nil || !c.mbTrashed(victim, c.Group) {
			return errors.New("the removed replica is not dropped to the trash")
		}
		return nil
	})
	if _, err := os.Stat(c.mbCopysetDir(victim)); !os.IsNotExist(err) {
		t.Fatalf("removed replica's directory still there: %v", err)
	}
}

func mbSorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// TestResetPeerRecoversLostMajority: a copyset whose two other replicas are
// gone is reset to the survivor alone, which then serves the old data and
// takes writes; ChangePeers then brings a new server in and finally hands
// the copyset over to it, the old leader removing itself.
// It runs with either raft log store.
func TestResetPeerRecoversLostMajority(t *testing.T) {
	for _, store := range []string{"boltdb", "shared"} {
		t.Run(store, func(t *testing.T) {
			testResetPeer(t, func(cfg *Config) { cfg.Raft.LogStore = store })
		})
	}
}

func testResetPeer(t *testing.T, opts ...clusterOpts) {
	c := startTestCluster(t, 3, opts...)
	ctx := context.Background()
	pool, cs := c.mbCopyset()
	for b := range 8 {
		c.Write(t, 1, 1, uint32(b*4096), block(byte(10+b)), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	}
	s := c.Leader(t)
	epoch := c.Node(s).Status().Epoch
	for i := range 3 {
		if i != s {
			c.Stop(i)
		}
	}
	other := c.id((s + 1) % 3)
	_, err := c.cli2(s).ResetPeer(ctx, &pb.ResetPeerRequest2{LogicPoolId: pool, CopysetId: cs,
		RequestPeer: mbPeer(other), NewPeers: mbPeers(other)})
	if grpcstatus.Code(err) != codes.InvalidArgument {
		t.Fatalf("reset naming another server: %v", err)
	}
	if _, err := c.cli2(s).ResetPeer(ctx, &pb.ResetPeerRequest2{LogicPoolId: pool, CopysetId: cs,
		RequestPeer: mbPeer(c.id(s)), NewPeers: mbPeers(c.id(s))}); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, func() error {
		if n := c.Node(s); n == nil || !n.IsLeader() {
			return errors.New("the survivor does not lead")
		}
		return nil
	})
	if got := c.Node(s).Status().Epoch; got != epoch+1 {
		t.Fatalf("epoch after reset %d, want %d", got, epoch+1)
	}
	for b := range 8 {
		if got := c.Read(t, 1, uint32(b*4096), 4096); !bytes.Equal(got, block(byte(10+b))) {
			t.Fatalf("block %d lost by the reset", b)
		}
	}
	c.Write(t, 1, 1, 8*4096, block(42), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	// The reset survives a restart (its log may be empty but for a snapshot).
	c.Stop(s)
	c.Start(s, nil)
	testwait.Until(t, 10*time.Second, func() error {
		if n := c.Node(s); n == nil || !n.IsLeader() {
			return errors.New("the survivor does not lead again")
		}
		return nil
	})
	if got := c.Read(t, 1, 0, 4096); !bytes.Equal(got, block(10)) {
		t.Fatal("data lost across the restart after the reset")
	}
	if got := c.Node(s).Status().Epoch; got != epoch+1 {
		t.Fatalf("epoch after restart %d, want %d", got, epoch+1)
	}

	// Back to two replicas: a new server joins through change_peers (v1).
	j := c.AddServer(t)
	c.mbCreateEmpty(t, j, []string{c.id(s)})
	resp, err := c.cli1(s).ChangePeers(ctx, &pb.ChangePeersRequest{LogicPoolId: pool, CopysetId: cs,
		LeaderId: proto.String(c.id(s)), NewPeers: []string{c.Servers[s].Local().Addr(), c.Servers[j].Local().Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(resp.GetOldPeers(), []string{c.id(s)}) || !slices.Equal(mbSorted(resp.GetNewPeers()), mbSorted([]string{c.id(s), c.id(j)})) {
		t.Fatalf("change peers: old %v new %v", resp.GetOldPeers(), resp.GetNewPeers())
	}
	if got := c.Node(s).Status().Epoch; got != epoch+2 {
		t.Fatalf("epoch after change peers %d, want %d", got, epoch+2)
	}
	c.mbSettle(t, []uint64{1})

	// Hand over: the leader removes itself (ChangePeers to the new server).
	if _, err := c.cli2(s).ChangePeers(ctx, &pb.ChangePeersRequest2{LogicPoolId: pool, CopysetId: cs,
		Leader: mbPeer(c.id(s)), NewPeers: mbPeers(c.id(j))}); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, func() error {
		if c.Node(s) != nil || !c.mbTrashed(s, c.Group) {
			return errors.New("the old leader has not dropped its replica to the trash")
		}
		return nil
	})
	testwait.Until(t, 10*time.Second, func() error {
		if !c.Node(j).IsLeader() {
			return errors.New("the new server does not lead")
		}
		return nil
	})
	if got := c.Read(t, 1, 8*4096, 4096); !bytes.Equal(got, block(42)) {
		t.Fatal("write after reset lost in the hand-over")
	}
	if got := c.Node(j).Status().Epoch; got != epoch+3 {
		t.Fatalf("epoch after the hand-over %d, want %d", got, epoch+3)
	}
}

// TestCliRequestValidation runs the same bad requests through both wire
// adapters (CliService v1 and CliService2) and expects the same codes.
func TestCliRequestValidation(t *testing.T) {
	// Slow elections: the table below needs the leader it starts with (a
	// loaded CI machine flaps the harness's 300 ms elections).
	c := startTestCluster(t, 3, func(cfg *Config) {
		cfg.Raft.HeartbeatTimeout, cfg.Raft.ElectionTimeout = 2*time.Second, 2*time.Second
		cfg.Raft.LeaderLeaseTimeout = time.Second
	})
	ctx := context.Background()
	l := c.Leader(t)
	f := (l + 1) % 3
	lid, fid := c.id(l), c.id(f)
	const unknown = 99
	type adapters struct {
		v1 func(s *cliService, cs uint32) error
		v2 func(s *cliService2, cs uint32) error
	}
	add := func(leader, peer string) adapters {
		return adapters{
			func(s *cliService, cs uint32) error {
				_, err := s.AddPeer(ctx, &pb.AddPeerRequest{LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(cs), LeaderId: &leader, PeerId: &peer})
				return err
			},
			func(s *cliService2, cs uint32) error {
				_, err := s.AddPeer(ctx, &pb.AddPeerRequest2{LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(cs), Leader: mbPeer(leader), AddPeer: mbPeer(peer)})
				return err
			}}
	}
	remove := func(leader, peer string) adapters {
		return adapters{
			func(s *cliService, cs uint32) error {
				_, err := s.RemovePeer(ctx, &pb.RemovePeerRequest{LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(cs), LeaderId: &leader, PeerId: &peer})
				return err
			},
			func(s *cliService2, cs uint32) error {
				_, err := s.RemovePeer(ctx, &pb.RemovePeerRequest2{LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(cs), Leader: mbPeer(leader), RemovePeer: mbPeer(peer)})
				return err
			}}
	}
	change := func(leader string, peers ...string) adapters {
		return adapters{
			func(s *cliService, cs uint32) error {
				_, err := s.ChangePeers(ctx, &pb.ChangePeersRequest{LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(cs), LeaderId: &leader, NewPeers: peers})
				return err
			},
			func(s *cliService2, cs uint32) error {
				_, err := s.ChangePeers(ctx, &pb.ChangePeersRequest2{LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(cs), Leader: mbPeer(leader), NewPeers: mbPeers(peers...)})
				return err
			}}
	}
	transfer := func(leader, to string) adapters {
		return adapters{
			func(s *cliService, cs uint32) error {
				_, err := s.TransferLeader(ctx, &pb.TransferLeaderRequest{LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(cs), LeaderId: &leader, PeerId: &to})
				return err
			},
			func(s *cliService2, cs uint32) error {
				_, err := s.TransferLeader(ctx, &pb.TransferLeaderRequest2{LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(cs), Leader: mbPeer(leader), Transferee: mbPeer(to)})
				return err
			}}
	}
	reset := func(req string, peers ...string) adapters {
		return adapters{
			func(s *cliService, cs uint32) error {
				_, err := s.ResetPeer(ctx, &pb.ResetPeerRequest{LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(cs), PeerId: &req, NewPeers: peers})
				return err
			},
			func(s *cliService2, cs uint32) error {
				_, err := s.ResetPeer(ctx, &pb.ResetPeerRequest2{LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(cs), RequestPeer: mbPeer(req), NewPeers: mbPeers(peers...)})
				return err
			}}
	}
	snapshot := func(peer string) adapters {
		return adapters{
			func(s *cliService, cs uint32) error {
				_, err := s.Snapshot(ctx, &pb.SnapshotRequest{LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(cs), PeerId: &peer})
				return err
			},
			func(s *cliService2, cs uint32) error {
				_, err := s.Snapshot(ctx, &pb.SnapshotRequest2{LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(cs), Peer: mbPeer(peer)})
				return err
			}}
	}
	getLeader := adapters{
		func(s *cliService, cs uint32) error {
			_, err := s.GetLeader(ctx, &pb.GetLeaderRequest{LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(cs)})
			return err
		},
		func(s *cliService2, cs uint32) error {
			_, err := s.GetLeader(ctx, &pb.GetLeaderRequest2{LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(cs)})
			return err
		}}
	nobody := "127.0.0.1:1" // a well-formed peer that is no member
	never := func(context.Context, string) (bool, error) { return false, nil }
	cases := []struct {
		name  string
		srv   int
		cs    uint32
		call  adapters
		setup func(*cliService2)
		want  codes.Code
		msg   string // in the error message
	}{
		{name: "add: bad peer", srv: l, call: add(lid, "nonsense"), want: codes.InvalidArgument},
		{name: "add: bad leader", srv: l, call: add("1.2.3.4:x", nobody), want: codes.InvalidArgument},
		{name: "remove: peer index not 0", srv: l, call: remove(lid, "127.0.0.1:1:2"), want: codes.InvalidArgument},
		{name: "change: bad peer", srv: l, call: change(lid, lid, "bad"), want: codes.InvalidArgument},
		{name: "change: empty", srv: l, call: change(lid), want: codes.InvalidArgument},
		{name: "change: duplicate", srv: l, call: change(lid, lid, lid), want: codes.InvalidArgument},
		{name: "transfer: bad peer", srv: l, call: transfer(lid, "x"), want: codes.InvalidArgument},
		{name: "transfer: not a member", srv: l, call: transfer(lid, nobody), want: codes.InvalidArgument},
		{name: "reset: bad request peer", srv: l, call: reset("nope", lid), want: codes.InvalidArgument},
		{name: "reset: names another server", srv: l, call: reset(fid, fid), want: codes.InvalidArgument},
		{name: "reset: new peers without it", srv: l, call: reset(lid, fid), want: codes.InvalidArgument},
		{name: "snapshot: bad peer", srv: l, call: snapshot("::"), want: codes.InvalidArgument},
		{name: "add: unknown copyset", srv: l, cs: unknown, call: add(lid, nobody), want: codes.NotFound},
		{name: "remove: unknown copyset", srv: l, cs: unknown, call: remove(lid, fid), want: codes.NotFound},
		{name: "change: unknown copyset", srv: l, cs: unknown, call: change(lid, lid), want: codes.NotFound},
		{name: "transfer: unknown copyset", srv: l, cs: unknown, call: transfer(lid, fid), want: codes.NotFound},
		{name: "reset: unknown copyset", srv: l, cs: unknown, call: reset(lid, lid), want: codes.NotFound},
		{name: "snapshot: unknown copyset", srv: l, cs: unknown, call: snapshot(lid), want: codes.NotFound},
		{name: "get leader: unknown copyset", srv: l, cs: unknown, call: getLeader, want: codes.NotFound},
		{name: "add: follower", srv: f, call: add(fid, nobody), want: codes.FailedPrecondition},
		{name: "remove: follower", srv: f, call: remove(fid, lid), want: codes.FailedPrecondition},
		{name: "change: follower", srv: f, call: change(fid, lid, fid), want: codes.FailedPrecondition},
		{name: "transfer: follower", srv: f, call: transfer(fid, fid), want: codes.FailedPrecondition},
		{name: "add: peer without a replica", srv: l, call: add(lid, nobody), want: codes.FailedPrecondition,
			setup: func(s *cliService2) {
				s.hosts = func(context.Context, string, copyset.GroupID) (bool, error) { return false, nil }
			},
			msg: "does not host"},
		{name: "transfer: member without a replica", srv: l, call: transfer(lid, fid), want: codes.InvalidArgument,
			setup: func(s *cliService2) {
				s.loadFinished = func(context.Context, string) (bool, error) { return true, nil }
				s.hosts = func(context.Context, string, copyset.GroupID) (bool, error) { return false, nil }
			},
			msg: "without a replica"},
		{name: "transfer: transferee still loading", srv: l, call: transfer(lid, fid), want: codes.Unavailable,
			setup: func(s *cliService2) { s.loadFinished = never }, msg: "not finished loading"},
		{name: "get leader: server loading", srv: l, call: getLeader, want: codes.Unavailable,
			setup: func(s *cliService2) { s.ready = &atomic.Bool{} }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cs := uint32(1)
			if tc.cs != 0 {
				cs = tc.cs
			}
			core := &cliService2{copysets: c.Servers[tc.srv].Copysets(), ready: &c.Servers[tc.srv].ready, conns: c.Servers[tc.srv].peers}
			if tc.setup != nil {
				tc.setup(core)
			}
			for name, err := range map[string]error{"v1": tc.call.v1(&cliService{core: core}, cs), "v2": tc.call.v2(core, cs)} {
				if grpcstatus.Code(err) != tc.want || !strings.Contains(grpcstatus.Convert(err).Message(), tc.msg) {
					t.Errorf("%s: %v, want %v (%q)", name, err, tc.want, tc.msg)
				}
			}
		})
	}
	if l2 := c.Leader(t); l2 != l {
		t.Fatalf("leadership moved during validation (%d -> %d)", l, l2)
	}

	// Over the wire: both services are registered and answer. A follower
	// answers Unavailable until the leader's first append reaches it (a
	// loaded CI machine can take seconds), so ask until it knows one.
	pool, cs := c.mbCopyset()
	var gl *pb.GetLeaderResponse
	var err error
	testwait.Until(t, 15*time.Second, func() error {
		gl, err = c.cli1(f).GetLeader(ctx, &pb.GetLeaderRequest{LogicPoolId: pool, CopysetId: cs})
		if grpcstatus.Code(err) == codes.Unavailable {
			return fmt.Errorf("the follower knows no leader: %w", err)
		}
		return nil
	})
	if err != nil || gl.GetLeaderId() != lid {
		t.Fatalf("get_leader: %q %v, want %s", gl.GetLeaderId(), err, lid)
	}
	c.Write(t, 1, 1, 0, block(1), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS) // the leader has applied its term
	epoch := c.Node(l).Status().Epoch
	ap, err := c.cli1(l).AddPeer(ctx, &pb.AddPeerRequest{LogicPoolId: pool, CopysetId: cs, LeaderId: &lid, PeerId: &fid})
	if err != nil || len(ap.GetOldPeers()) != 3 || !slices.Equal(ap.GetOldPeers(), ap.GetNewPeers()) {
		t.Fatalf("add_peer of a member: %v %v", ap, err)
	}
	if got := c.Node(l).Status().Epoch; got != epoch {
		t.Fatalf("a no-op add changed the epoch: %d -> %d", epoch, got)
	}
	for range 2 { // the second has nothing new: still success
		if _, err := c.cli1(l).Snapshot(ctx, &pb.SnapshotRequest{LogicPoolId: pool, CopysetId: cs}); err != nil {
			t.Fatalf("snapshot: %v", err)
		}
	}
	if _, err := c.cli2(f).SnapshotAll(ctx, &pb.SnapshotAllRequest{}); err != nil {
		t.Fatalf("snapshot all: %v", err)
	}
	if _, err := c.cli1(l).TransferLeader(ctx, &pb.TransferLeaderRequest{LogicPoolId: pool, CopysetId: cs, LeaderId: &lid}); err != nil {
		t.Fatalf("transfer_leader to any peer: %v", err)
	}
	testwait.Until(t, 10*time.Second, func() error {
		if c.Leader(t) == l {
			return fmt.Errorf("leadership stays on server %d", l)
		}
		return nil
	})
}

// TestDeleteBrokenCopyset: a healthy replica is refused, nothing there is
// FAILURE_UNKNOWN, a directory that is not loaded and a broken replica go
// to the trash, which the purge empties once they are old enough.
func TestDeleteBrokenCopyset(t *testing.T) {
	c := startTestCluster(t, 3)
	c.Write(t, 1, 1, 0, block(1), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	del := func(i int, cs uint32) pb.COPYSET_OP_STATUS {
		t.Helper()
		resp, err := c.mbCopysets(i).DeleteBrokenCopyset(context.Background(), &pb.CopysetRequest{
			LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(cs)})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus()
	}
	l := c.Leader(t)
	f := (l + 1) % 3
	for _, i := range []int{l, f} {
		if st := del(i, 1); st != pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_COPYSET_IS_HEALTHY {
			t.Fatalf("healthy replica on server %d: %v", i, st)
		}
	}
	if st := del(l, 77); st != pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_FAILURE_UNKNOWN {
		t.Fatalf("no such copyset: %v", st)
	}
	// A copyset directory the server does not have loaded.
	stray := copyset.NewGroupID(1, 55)
	dir := filepath.Join(c.Cfgs[l].DataDir, "copysets", stray.String())
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if st := del(l, 55); st != pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_SUCCESS {
		t.Fatalf("unloaded directory: %v", st)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) || !c.mbTrashed(l, stray) {
		t.Fatalf("unloaded directory not moved to the trash: %v", err)
	}

	// A replica stopped by a disk error.
	c.FS[f].Inject(datastore.FaultRule{Ops: datastore.FaultWrite, Path: datastore.PathContains("chunk_1"), Err: syscall.EIO})
	c.Write(t, 1, 1, 4096, block(2), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	testwait.Until(t, 10*time.Second, func() error {
		if c.Node(f).Broken() == nil {
			return errors.New("the follower is not broken")
		}
		return nil
	})
	if st := del(f, 1); st != pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_SUCCESS {
		t.Fatalf("broken replica: %v", st)
	}
	if c.Node(f) != nil || !c.mbTrashed(f, c.Group) {
		t.Fatal("broken replica still loaded or not in the trash")
	}
	if _, err := os.Stat(c.mbCopysetDir(f)); !os.IsNotExist(err) {
		t.Fatalf("broken replica's directory still there: %v", err)
	}
	if st := del(f, 1); st != pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_FAILURE_UNKNOWN {
		t.Fatalf("second delete: %v", st)
	}
	c.Write(t, 1, 1, 8192, block(3), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)

	// The purge keeps young entries and deletes old ones.
	m := c.Servers[f].Copysets()
	if n := m.PurgeTrash(time.Now()); n != 0 || !c.mbTrashed(f, c.Group) {
		t.Fatalf("purge removed a young entry (%d)", n)
	}
	if n := m.PurgeTrash(time.Now().Add(301 * time.Second)); n != 1 || c.mbTrashed(f, c.Group) {
		t.Fatalf("purge of an old entry: %d", n)
	}
}

// TestRemovedWhileDown: a replica removed while its server is down drops
// itself when the server returns: the leader keeps telling it, sending the
// entries it missed (more than one AppendEntries' worth).
func TestRemovedWhileDown(t *testing.T) {
	c := startTestCluster(t, 3)
	ctx := context.Background()
	pool, cs := c.mbCopyset()
	v := (c.Leader(t) + 1) % 3
	c.Stop(v)
	for b := range 100 {
		c.Write(t, 2, 1, uint32(b%64*4096), block(byte(b)), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	}
	c.mbOnLeader(t, "remove peer", func(i int) error {
		_, err := c.cli2(i).RemovePeer(ctx, &pb.RemovePeerRequest2{LogicPoolId: pool, CopysetId: cs,
			Leader: mbPeer(c.id(i)), RemovePeer: mbPeer(c.id(v))})
		return err
	})
	c.Start(v, nil)
	testwait.Until(t, 20*time.Second, func() error {
		if c.Node(v) != nil || !c.mbTrashed(v, c.Group) {
			return errors.New("the returning replica has not dropped itself to the trash")
		}
		return nil
	})
	c.Write(t, 2, 1, 0, block(7), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
}

// TestDeleteStaleReplica: DeleteBrokenCopyset of a loaded, healthy-looking
// replica asks the copyset's leader (the highest-term replica reporting
// itself leader, found through the peers of the replica's configuration and
// the leaders they name): a member is refused, a replica outside the
// leader's committed configuration goes to the trash, and an uncommitted
// configuration or no leader found is a failure that says why.
func TestDeleteStaleReplica(t *testing.T) {
	c := startTestCluster(t, 3)
	l := c.Leader(t)
	f := (l + 1) % 3
	other := (l + 2) % 3
	peer := func(i int) copyset.PeerID { return copyset.PeerID(c.id(i)) }
	var answers map[copyset.PeerID]peerReplica
	var asked []copyset.PeerID
	var mu sync.Mutex
	svc := &copysetService{copysets: c.Servers[f].Copysets(), admit: c.Servers[f].admit, log: slog.New(slog.DiscardHandler), conns: c.Servers[f].peers,
		peerStatus: func(_ context.Context, addr string, _ copyset.GroupID) (peerReplica, error) {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, copyset.PeerID(addr+":0"))
			a, ok := answers[copyset.PeerID(addr+":0")]
			if !ok {
				return peerReplica{}, errors.New("connection refused")
			}
			return a, nil
		}}
	delCopyset := func(cs uint32) (pb.COPYSET_OP_STATUS, string) {
		t.Helper()
		var md metadata.MD
		ctx := grpc.NewContextWithServerTransportStream(context.Background(), &trailerStream{md: &md})
		resp, err := svc.DeleteBrokenCopyset(ctx, &pb.CopysetRequest{LogicPoolId: proto.Uint32(c.Group.Pool()), CopysetId: proto.Uint32(cs)})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus(), strings.Join(md.Get(integrity.ErrorTrailerKey), "")
	}
	del := func() (pb.COPYSET_OP_STATUS, string) { t.Helper(); return delCopyset(c.Group.Copyset()) }
	all := []copyset.PeerID{peer(0), peer(1), peer(2)}

	// An empty replica waiting to be added knows nobody to ask.
	if _, err := c.Servers[f].Copysets().Join(context.Background(), copyset.NewGroupID(c.Group.Pool(), 2), 0, nil); err != nil {
		t.Fatal(err)
	}
	if st, why := delCopyset(2); st != pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_FAILURE_UNKNOWN || !strings.Contains(why, "knows no configuration") {
		t.Fatalf("empty joined replica: %v %q", st, why)
	}
	follower := peerReplica{hosted: true, term: 5, leader: peer(l), conf: all, committed: all, hasCommitted: true}
	leading := peerReplica{hosted: true, leading: true, term: 5, conf: all, committed: all, hasCommitted: true}

	// A member.
	answers = map[copyset.PeerID]peerReplica{peer(l): leading, peer(other): follower}
	if st, why := del(); st != pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_COPYSET_IS_HEALTHY || !strings.Contains(why, "is a member") {
		t.Fatalf("member: %v %q", st, why)
	}
	// No leader answers: found out through the follower's hint, then refused.
	answers = map[copyset.PeerID]peerReplica{peer(other): follower}
	if st, why := del(); st != pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_FAILURE_UNKNOWN || !strings.Contains(why, "no leader found") {
		t.Fatalf("no leader: %v %q", st, why)
	}
	// The leader removed f in a change that has not committed yet: f is a
	// member still. One that removed it and is adding it back: unclear.
	without := []copyset.PeerID{peer(l), peer(other)}
	removing := leading
	removing.conf = without
	answers = map[copyset.PeerID]peerReplica{peer(l): removing}
	if st, why := del(); st != pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_COPYSET_IS_HEALTHY || !strings.Contains(why, "is a member") {
		t.Fatalf("removal not committed: %v %q", st, why)
	}
	readding := leading
	readding.committed = without
	answers = map[copyset.PeerID]peerReplica{peer(l): readding}
	if st, why := del(); st != pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_FAILURE_UNKNOWN || !strings.Contains(why, "adding it back") {
		t.Fatalf("being added back: %v %q", st, why)
	}
	unknown := leading
	unknown.committed, unknown.hasCommitted = nil, false
	answers = map[copyset.PeerID]peerReplica{peer(l): unknown}
	if st, why := del(); st != pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_FAILURE_UNKNOWN || !strings.Contains(why, "does not report a committed configuration") {
		t.Fatalf("no committed configuration: %v %q", st, why)
	}
	if c.Node(f) == nil {
		t.Fatal("replica deleted although it could not be told stale")
	}
	// A deposed leader of a lower term does not count; the newer one's
	// committed configuration leaves f out: the replica goes to the trash.
	deposed := leading
	deposed.term = 4
	stale := leading
	stale.term, stale.conf, stale.committed = 6, without, without
	answers = map[copyset.PeerID]peerReplica{peer(l): deposed, peer(other): stale}
	asked = nil
	if st, why := del(); st != pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_SUCCESS {
		t.Fatalf("stale: %v %q", st, why)
	}
	if len(asked) != 2 || c.Node(f) != nil || !c.mbTrashed(f, c.Group) {
		t.Fatalf("stale replica: asked %v, still loaded %v, trashed %v", asked, c.Node(f) != nil, c.mbTrashed(f, c.Group))
	}
	// An empty replica created to be added but never added asks the peers
	// its copyset had when it was created: trashed once the leader's
	// committed configuration leaves it out.
	g3 := copyset.NewGroupID(c.Group.Pool(), 3)
	if _, err := c.Servers[f].Copysets().Join(context.Background(), g3, 9, without); err != nil {
		t.Fatal(err)
	}
	if st, why := delCopyset(3); st != pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_SUCCESS {
		t.Fatalf("empty replica never added: %v %q", st, why)
	}
	if c.Servers[f].Copysets().Get(g3) != nil || !c.mbTrashed(f, g3) {
		t.Fatal("empty replica never added: not moved to the trash")
	}
}

// trailerStream is the grpc.ServerTransportStream of a handler called
// directly: it keeps the trailer the handler sets.
type trailerStream struct{ md *metadata.MD }

func (s *trailerStream) Method() string                  { return "" }
func (s *trailerStream) SetHeader(md metadata.MD) error  { return nil }
func (s *trailerStream) SendHeader(md metadata.MD) error { return nil }
func (s *trailerStream) SetTrailer(md metadata.MD) error {
	*s.md = metadata.Join(*s.md, md)
	return nil
}
