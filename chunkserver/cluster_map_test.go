package chunkserver

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/chunkraft/chunkraft/proto/chunkraft/clusterpb"
)

// The map takes a copyset's members, term and epoch from its leader (else
// the replica with the highest term), remembers it, lists it with no
// replicas while every member is down, and forgets it once every member
// answered without it.
func TestClusterMapAssemble(t *testing.T) {
	const a, b, c = "10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"
	members := []string{a + ":0", b + ":0", c + ":0"}
	rep := func(peer string, leader bool, term, epoch uint64, m ...string) *clusterpb.Replica {
		return &clusterpb.Replica{Pool: 1, Copyset: 7, Peer: peer + ":0", IsLeader: leader, Term: term, Epoch: epoch, Members: m}
	}
	m := &clusterMap{}
	known := map[string]*crawlServer{
		a: {addr: a, asked: true, replicas: []*clusterpb.Replica{rep(a, false, 9, 3, members[:2]...)}},
		b: {addr: b, asked: true, replicas: []*clusterpb.Replica{rep(b, true, 8, 4, members...)}},
		c: {addr: c, asked: true, err: errors.New("refused")},
	}
	resp := m.assemble(known, nil, false)
	if len(resp.Copysets) != 1 || len(resp.Servers) != 3 {
		t.Fatalf("map: %v", resp)
	}
	cs := resp.Copysets[0]
	if cs.Leader != b+":0" || cs.Term != 8 || cs.Epoch != 4 || !slices.Equal(cs.Members, members) ||
		!slices.Equal(cs.Replicas, []string{a + ":0", b + ":0"}) || cs.Remembered {
		t.Errorf("copyset: %v", cs)
	}
	if s := resp.Servers[2]; s.Address != c || s.Reachable || s.Error != "refused" {
		t.Errorf("server %s: %v", c, s)
	}
	if s := resp.Servers[1]; !s.Reachable || s.Replicas != 1 || s.Leads != 1 {
		t.Errorf("server %s: %v", b, s)
	}

	// Every member down: remembered.
	down := map[string]*crawlServer{}
	for _, addr := range []string{a, b, c} {
		down[addr] = &crawlServer{addr: addr, asked: true, err: errors.New("refused")}
	}
	resp = m.assemble(down, m.seen, false)
	if len(resp.Copysets) != 1 || !resp.Copysets[0].Remembered || !slices.Equal(resp.Copysets[0].Members, members) ||
		len(resp.Copysets[0].Replicas) != 0 || resp.Copysets[0].Leader != "" {
		t.Errorf("all down: %v", resp.Copysets)
	}
	// Every member answers without it: forgotten.
	for _, s := range down {
		s.err = nil
	}
	if resp = m.assemble(down, m.seen, false); len(resp.Copysets) != 0 || len(m.seen) != 0 {
		t.Errorf("moved away: %v, memory %v", resp.Copysets, m.seen)
	}
}

// fakeLocal answers LocalCopysets with replicas (and loading), or, when
// stall, not before the caller gives up.
type fakeLocal struct {
	clusterpb.UnimplementedClusterServer
	replicas []*clusterpb.Replica
	loading  bool
	stall    bool
}

func (f *fakeLocal) LocalCopysets(ctx context.Context, _ *clusterpb.LocalCopysetsRequest) (*clusterpb.LocalCopysetsResponse, error) {
	if f.stall {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &clusterpb.LocalCopysetsResponse{Replicas: f.replicas, Loading: f.loading}, nil
}

func serveFake(t *testing.T, f *fakeLocal) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	clusterpb.RegisterClusterServer(g, f)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// ClusterMap follows the members a seed's replicas name, stops at
// max_servers (truncated: the third member is left out), reports a server that does not answer within
// clusterAskTimeout and one that refuses, marks one still loading its
// copysets, and refuses a bad seed.
func TestClusterMapCrawl(t *testing.T) {
	c := startTestCluster(t, 1)
	stalled := serveFake(t, &fakeLocal{stall: true})
	refusing := func() string {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer lis.Close()
		return lis.Addr().String()
	}
	far := []string{refusing() + ":0", refusing() + ":0", refusing() + ":0"}
	seedFake := &fakeLocal{loading: true}
	seed := serveFake(t, seedFake)
	seedFake.replicas = []*clusterpb.Replica{{Pool: 1, Copyset: 9, Peer: seed + ":0", IsLeader: true, Term: 2, Members: far}}
	svc := clusterpb.NewClusterClient(c.Conns[0])
	ctx := context.Background()
	resp, err := svc.ClusterMap(ctx, &clusterpb.ClusterMapRequest{Seeds: []string{seed, stalled}, MaxServers: 5})
	if err != nil {
		t.Fatal(err)
	}
	byAddr := map[string]*clusterpb.Server{}
	for _, s := range resp.Servers {
		byAddr[s.Address] = s
	}
	local := c.Servers[0].Local().Addr()
	if !resp.Truncated || len(resp.Servers) != 5 || !byAddr[local].GetReachable() || byAddr[local].GetReplicas() != 1 ||
		!byAddr[seed].GetReachable() || !byAddr[seed].GetLoading() || byAddr[local].GetLoading() || byAddr[strings.TrimSuffix(far[0], ":0")].GetReachable() ||
		!strings.Contains(byAddr[stalled].GetError(), "DeadlineExceeded") {
		t.Errorf("map: %v", resp)
	}
	if len(resp.Copysets) != 2 || resp.Copysets[1].Copyset != 9 || resp.Copysets[1].Leader != seed+":0" || !slices.Equal(resp.Copysets[1].Members, far) {
		t.Errorf("copysets: %v", resp.Copysets)
	}
	if _, err := svc.ClusterMap(ctx, &clusterpb.ClusterMapRequest{Seeds: []string{"nohost"}}); grpcstatus.Code(err) != codes.InvalidArgument {
		t.Errorf("a bad seed: %v", err)
	}
}
