package chunkserver

// The cluster map: from any one server, every server and every copyset of
// the cluster (proto/chunkraft/clusterpb).
//
//   - LocalCopysets answers for this server's own replicas: pool, copyset,
//     the replica's leader, term, epoch and newest configuration.
//   - ClusterMap crawls: it starts from this server, the servers of its
//     cluster_seeds configuration, the seeds of the request and the
//     members of every copyset an earlier crawl of this server found; it
//     asks each of them LocalCopysets (clusterAskParallel at once,
//     clusterAskTimeout each), adds every member and leader their replicas
//     name, and repeats until no server is left unasked, the request's
//     context ends, or max_servers are known (the rest are left out and the
//     answer says truncated). A server that cannot be asked is reported
//     with its error, never fails the call.
//   - A copyset's members, leader, term and epoch are its leader's (the
//     replica that leads with the highest term), else those of the replica
//     with the highest term. A copyset no server reports is still listed,
//     with no replicas (remembered), when an earlier crawl of this server
//     found it, so that a copyset whose every replica is down shows up; it
//     is forgotten once a crawl reached every member it had and none hosts
//     it. The memory is this process's: a restarted server knows only what
//     it finds.
//   - A server answers while it opens its copysets from disk at start (and
//     while it shuts down): its answer then says loading, and the map marks
//     it so, since it may host replicas it did not list.

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/proto/chunkraft/clusterpb"
)

const (
	// clusterAskTimeout bounds one LocalCopysets call of a crawl.
	clusterAskTimeout = 2 * time.Second
	// clusterAskParallel is how many servers a crawl asks at once.
	clusterAskParallel = 16
	// clusterMaxServers is how many servers a crawl knows at most when the
	// request sets no max_servers; clusterMaxServersCap bounds what a
	// request may ask for.
	clusterMaxServers    = 256
	clusterMaxServersCap = 4096
)

// clusterMap serves the Cluster service.
type clusterMap struct {
	clusterpb.UnimplementedClusterServer
	copysets *copyset.Manager
	local    copyset.PeerID
	seeds    []string    // cluster_seeds, host:port
	conns    *connCache  // the server's connections to the other chunkservers
	ready    func() bool // every copyset on disk is open (nil: always)

	mu   sync.Mutex
	seen map[copyset.GroupID][]string // copysets earlier crawls found: their members then
}

// LocalCopysets reports every replica this server hosts.
func (m *clusterMap) LocalCopysets(context.Context, *clusterpb.LocalCopysetsRequest) (*clusterpb.LocalCopysetsResponse, error) {
	return &clusterpb.LocalCopysetsResponse{Peer: string(m.local), Replicas: m.localReplicas(), Loading: m.loading()}, nil
}

// loading reports whether this server may host replicas it does not list
// (still opening them, or closing them).
func (m *clusterMap) loading() bool { return m.ready != nil && !m.ready() }

func (m *clusterMap) localReplicas() []*clusterpb.Replica {
	nodes := m.copysets.List()
	out := make([]*clusterpb.Replica, 0, len(nodes))
	for _, n := range nodes {
		st := n.Status()
		g := n.Group()
		r := &clusterpb.Replica{
			Pool: g.Pool(), Copyset: g.Copyset(), Peer: string(st.Peer), Leader: string(st.Leader),
			IsLeader: st.State == raft.Leader, Term: st.Term, Epoch: st.Epoch, Broken: st.Broken != nil,
		}
		if peers, err := n.Peers(); err == nil {
			for _, p := range peers {
				r.Members = append(r.Members, string(p))
			}
		}
		out = append(out, r)
	}
	return out
}

// crawlServer is one server a crawl knows of.
type crawlServer struct {
	addr     string
	asked    bool
	replicas []*clusterpb.Replica
	loading  bool
	err      error
}

// ClusterMap crawls the cluster from this server (see the file comment).
func (m *clusterMap) ClusterMap(ctx context.Context, req *clusterpb.ClusterMapRequest) (*clusterpb.ClusterMapResponse, error) {
	var seeds []string
	for _, s := range req.GetSeeds() {
		_, addr, err := copyset.ParsePeer(s)
		if err != nil {
			return nil, grpcstatus.Errorf(codes.InvalidArgument, "seed: %v", err)
		}
		seeds = append(seeds, addr)
	}
	limit := clusterMaxServers
	if n := req.GetMaxServers(); n > 0 {
		limit = min(int(n), clusterMaxServersCap)
	}
	m.mu.Lock()
	remembered := maps.Clone(m.seen)
	m.mu.Unlock()

	known := map[string]*crawlServer{}
	var pending []*crawlServer
	truncated := false
	add := func(peer string) {
		_, addr, err := copyset.ParsePeer(peer)
		if err != nil || known[addr] != nil {
			return
		}
		if len(known) >= limit {
			truncated = true
			return
		}
		s := &crawlServer{addr: addr}
		known[addr] = s
		pending = append(pending, s)
	}
	add(string(m.local))
	for _, s := range slices.Concat(m.seeds, seeds) {
		add(s)
	}
	for _, members := range remembered {
		for _, p := range members {
			add(p)
		}
	}
	for len(pending) > 0 && ctx.Err() == nil {
		wave := pending
		pending = nil
		m.askAll(ctx, wave)
		for _, s := range wave {
			for _, r := range s.replicas {
				for _, p := range r.Members {
					add(p)
				}
				if r.Leader != "" {
					add(r.Leader)
				}
			}
		}
	}
	return m.assemble(known, remembered, truncated), nil
}

// askAll asks every server of wave for its replicas, clusterAskParallel at
// a time, and returns when all have answered or timed out.
func (m *clusterMap) askAll(ctx context.Context, wave []*crawlServer) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, clusterAskParallel)
	for _, s := range wave {
		if s.addr == m.local.Addr() {
			s.asked, s.replicas, s.loading = true, m.localReplicas(), m.loading()
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			continue // left unasked: assemble reports ctx's error
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			s.asked = true
			s.replicas, s.loading, s.err = m.ask(ctx, s.addr)
		}()
	}
	wg.Wait()
}

// ask calls LocalCopysets on addr within clusterAskTimeout: its replicas
// and whether it is loading.
func (m *clusterMap) ask(ctx context.Context, addr string) ([]*clusterpb.Replica, bool, error) {
	var resp *clusterpb.LocalCopysetsResponse
	err := m.conns.call(ctx, addr, clusterAskTimeout, func(ctx context.Context, cc *grpc.ClientConn) error {
		var err error
		resp, err = clusterpb.NewClusterClient(cc).LocalCopysets(ctx, &clusterpb.LocalCopysetsRequest{})
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("local copysets of %s: %w", addr, err)
	}
	return resp.GetReplicas(), resp.GetLoading(), nil
}

// assemble builds the answer from what the crawl found and updates the
// memory of copysets seen.
func (m *clusterMap) assemble(known map[string]*crawlServer, remembered map[copyset.GroupID][]string, truncated bool) *clusterpb.ClusterMapResponse {
	resp := &clusterpb.ClusterMapResponse{Truncated: truncated}
	type found struct {
		cs   *clusterpb.Copyset
		best *clusterpb.Replica // the leader with the highest term, else the replica with the highest term
	}
	groups := map[copyset.GroupID]*found{}
	for _, addr := range slices.Sorted(maps.Keys(known)) {
		s := known[addr]
		srv := &clusterpb.Server{Address: addr, Reachable: s.asked && s.err == nil, Loading: s.loading}
		switch {
		case !s.asked:
			srv.Error = "not asked: the crawl ran out of time"
		case s.err != nil:
			srv.Error = s.err.Error()
		}
		for _, r := range s.replicas {
			srv.Replicas++
			if r.IsLeader {
				srv.Leads++
			}
			g := copyset.NewGroupID(r.Pool, r.Copyset)
			f := groups[g]
			if f == nil {
				f = &found{cs: &clusterpb.Copyset{Pool: r.Pool, Copyset: r.Copyset}}
				groups[g] = f
			}
			f.cs.Replicas = append(f.cs.Replicas, r.Peer)
			if f.best == nil || better(r, f.best) {
				f.best = r
			}
		}
		resp.Servers = append(resp.Servers, srv)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen == nil {
		m.seen = map[copyset.GroupID][]string{}
	}
	for g, f := range groups {
		b := f.best
		f.cs.Members, f.cs.Term, f.cs.Epoch = b.Members, b.Term, b.Epoch
		if b.IsLeader {
			f.cs.Leader = b.Peer
		}
		slices.Sort(f.cs.Replicas)
		m.seen[g] = f.cs.Members
		resp.Copysets = append(resp.Copysets, f.cs)
	}
	for g, members := range remembered {
		if groups[g] != nil {
			continue
		}
		if gone(members, known) {
			delete(m.seen, g)
			continue
		}
		resp.Copysets = append(resp.Copysets, &clusterpb.Copyset{Pool: g.Pool(), Copyset: g.Copyset(), Members: members, Remembered: true})
	}
	slices.SortFunc(resp.Copysets, func(a, b *clusterpb.Copyset) int {
		return cmp.Or(cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.Copyset, b.Copyset))
	})
	return resp
}

// better reports whether replica a describes its copyset better than b: a
// leader over a follower, then the higher term.
func better(a, b *clusterpb.Replica) bool {
	if a.IsLeader != b.IsLeader {
		return a.IsLeader
	}
	return a.Term > b.Term
}

// gone reports whether every member of a copyset no server reported was
// asked and answered (so none hosts it any more).
func gone(members []string, known map[string]*crawlServer) bool {
	for _, p := range members {
		_, addr, err := copyset.ParsePeer(p)
		if err != nil {
			continue
		}
		if s := known[addr]; s == nil || !s.asked || s.err != nil {
			return false
		}
	}
	return true
}
