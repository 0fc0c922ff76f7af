// The copyset load check behind ChunkServerStatus's copysetLoadFin: after
// startup, wait until every copyset found on disk has caught up with its
// leader (loadCheck, probeLeader).

package chunkserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chunkraft/chunkraft/copyset"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	commonpb "github.com/chunkraft/chunkraft/proto/curve/common"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Load check defaults: a copyset whose leader cannot be found or asked in
// loadRetries consecutive rounds, loadInterval apart, counts as loaded
// (Curve's check_retrytimes), so a server whose peers are all down still
// finishes loading.
const (
	loadRetries  = 5
	loadInterval = 500 * time.Millisecond
	probeTimeout = 2 * time.Second
)

// loadState is the server's copyset load check: started once the copysets
// on disk are open, stopped on shutdown.
type loadState struct {
	margin uint64
	fin    atomic.Bool

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// startLoadCheck runs the load check in the background; when it finds
// every copyset on disk caught up, copysetLoadFin turns true.
func (rt *runtimeState) startLoadCheck() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	rt.load.mu.Lock()
	rt.load.cancel, rt.load.done = cancel, done
	rt.load.mu.Unlock()
	c := &loadCheck{
		local: rt.local, margin: rt.load.margin, retries: loadRetries, interval: loadInterval,
		probe: rt.probeLeader, log: rt.log.With("component", "load-check"),
	}
	var replicas []loadReplica
	for _, n := range rt.copysets.List() {
		replicas = append(replicas, n)
	}
	go func() {
		defer close(done)
		if c.run(ctx, replicas) {
			rt.load.fin.Store(true)
			c.log.Info("copysets caught up with their leaders", "count", len(replicas), "margin", c.margin)
		}
	}()
}

// stopLoadCheck stops the load check and clears copysetLoadFin.
func (rt *runtimeState) stopLoadCheck() {
	rt.load.mu.Lock()
	cancel, done := rt.load.cancel, rt.load.done
	rt.load.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	rt.load.fin.Store(false)
}

// loadReplica is what the load check needs of a local copyset replica
// (*copyset.Node).
type loadReplica interface {
	Group() copyset.GroupID
	Status() copyset.Status
}

// leaderProbe asks the leader of g for its committed index.
type leaderProbe func(ctx context.Context, g copyset.GroupID, leader copyset.PeerID) (committed uint64, err error)

// loadCheck decides when the copysets a server loaded at startup have
// caught up, as Curve's CopysetNodeManager does with finishload_margin:
// each round, every replica not yet caught up looks up its leader; when
// this server leads the copyset it compares its own committed index,
// otherwise it asks the leader (GetCopysetStatus over gRPC). A replica is
// caught up once leader committed - local applied <= margin. A replica
// without a known or reachable leader in retries consecutive rounds counts
// as caught up (the check gives up, as upstream does), and so does a broken
// replica (it will not catch up; DeleteBrokenCopyset is for it). Unlike
// upstream, a replica that needs a snapshot install is waited for (its
// applied index jumps once the install finishes).
type loadCheck struct {
	local    copyset.PeerID
	margin   uint64
	retries  int
	interval time.Duration
	probe    leaderProbe
	log      *slog.Logger
}

// run checks the replicas every interval until all are caught up (true)
// or ctx ends (false).
func (c *loadCheck) run(ctx context.Context, replicas []loadReplica) bool {
	fails := make([]int, len(replicas))
	pending := make([]int, len(replicas))
	for i := range pending {
		pending[i] = i
	}
	for {
		next := pending[:0]
		for _, i := range pending {
			if !c.caughtUp(ctx, replicas[i], &fails[i]) {
				next = append(next, i)
			}
		}
		pending = next
		if len(pending) == 0 {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(c.interval):
		}
	}
}

// caughtUp runs one round of the check for r; fails counts the
// consecutive rounds without an answer from a leader.
func (c *loadCheck) caughtUp(ctx context.Context, r loadReplica, fails *int) bool {
	st := r.Status()
	g := r.Group()
	if st.Broken != nil {
		c.log.Warn("copyset replica is broken; not waiting for it", "pool", g.Pool(), "copyset", g.Copyset(), "err", st.Broken)
		return true
	}
	var committed uint64
	var err error
	switch {
	case st.Leader == "":
		err = errors.New("no leader known")
	case st.Leader == c.local:
		committed = st.CommittedIndex
	default:
		committed, err = c.probe(ctx, g, st.Leader)
	}
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		*fails++
		if *fails >= c.retries {
			c.log.Warn("no leader answered; counting copyset as loaded", "pool", g.Pool(), "copyset", g.Copyset(),
				"tries", *fails, "err", err)
			return true
		}
		return false
	}
	*fails = 0
	var lag uint64
	if committed > st.AppliedIndex {
		lag = committed - st.AppliedIndex
	}
	if lag <= c.margin {
		return true
	}
	c.log.Debug("copyset catching up", "pool", g.Pool(), "copyset", g.Copyset(),
		"leader_committed", committed, "applied", st.AppliedIndex, "margin", c.margin)
	return false
}

// probeLeader asks leader for its status of copyset g and returns its
// committed index.
func (rt *runtimeState) probeLeader(ctx context.Context, g copyset.GroupID, leader copyset.PeerID) (uint64, error) {
	var resp *pb.CopysetStatusResponse
	err := rt.conns.call(ctx, leader.Addr(), probeTimeout, func(ctx context.Context, cc *grpc.ClientConn) error {
		var err error
		resp, err = pb.NewCopysetServiceClient(cc).GetCopysetStatus(ctx, &pb.CopysetStatusRequest{
			LogicPoolId: proto.Uint32(g.Pool()), CopysetId: proto.Uint32(g.Copyset()),
			Peer: &commonpb.Peer{Address: proto.String(string(leader))}, QueryHash: proto.Bool(false),
		})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("copyset status from leader %s: %w", leader, err)
	}
	if resp.GetStatus() != pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_SUCCESS {
		return 0, fmt.Errorf("copyset status from leader %s: %v", leader, resp.GetStatus())
	}
	return uint64(resp.GetCommittedIndex()), nil
}
