package datasync

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/proto/chunkraft/clusterpb"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/syncstatepb"
)

// SyncInternal: a SyncTool anywhere reaches a copyset's sync machine
// through the copyset's leader. Propose is answered only by the leader
// (not_leader names the leader it knows); List by every server for the
// copysets it leads.

// callTimeout bounds one SyncInternal call to another server.
const callTimeout = 10 * time.Second

type internalService struct {
	pb.UnimplementedSyncInternalServer
	s *Service
}

func (is *internalService) Propose(ctx context.Context, req *pb.ProposeRequest) (*pb.ProposeResponse, error) {
	return is.s.proposeLocal(ctx, copyset.NewGroupID(req.GetPool(), req.GetCopyset()), req.GetOp()), nil
}

func (is *internalService) List(ctx context.Context, req *pb.ListRequest) (*pb.ListResponse, error) {
	return is.s.listLocal(ctx, req.GetPool(), req.GetCopyset()), nil
}

// proposeLocal replicates op on copyset g if this server leads it.
func (s *Service) proposeLocal(ctx context.Context, g copyset.GroupID, op *pb.Op) *pb.ProposeResponse {
	fail := func(format string, args ...any) *pb.ProposeResponse {
		return &pb.ProposeResponse{Code: -1, Msg: fmt.Sprintf(format, args...)}
	}
	n := s.copysets.Get(g)
	switch {
	case n == nil:
		return &pb.ProposeResponse{Code: -1, Msg: fmt.Sprintf("copyset %s is not hosted on %s", csName(g), s.deps.Local), NotLeader: true}
	case n.Broken() != nil:
		return fail("copyset %s: %v", csName(g), n.Broken())
	case !n.IsLeader():
		return &pb.ProposeResponse{Code: -1, Msg: fmt.Sprintf("copyset %s is led by %q, not %s", csName(g), n.Leader(), s.deps.Local),
			NotLeader: true, Leader: string(n.Leader())}
	}
	if _, ok := MachineOf(n); !ok {
		return fail("copyset %s has no sync state machine", csName(g))
	}
	b, err := EncodeOp(op)
	if err != nil {
		return fail("%v", err)
	}
	_, r, err := copyset.ProposeAs[Result](ctx, n, b)
	if err != nil {
		// An op appended before the leadership was lost may still commit;
		// it is answered not_leader all the same, so that propose and
		// proposeWaiting retry it on the new leader: a removal is
		// idempotent and a put's retry recognises its own commit
		// (committedBefore).
		if leader, lost := copyset.LeaderLost(err); lost {
			return &pb.ProposeResponse{Code: -1, Msg: err.Error(), NotLeader: true, Leader: string(leader)}
		}
		return fail("copyset %s: %v", csName(g), err)
	}
	out := &pb.ProposeResponse{Record: r.Record, Removed: uint32(r.Removed)}
	if r.Err != nil {
		out.Code, out.Msg = -1, r.Err.Error()
	}
	return out
}

// listLocal lists the sub-tasks and retained logs of the copysets this
// server leads (of pool, or all when 0; of copyset cs when not 0). A
// copyset is listed only past a read barrier (copyset.Node.ReadBarrier):
// a leader just elected may not have applied what its predecessor
// committed (a sub-task deleted there would be listed again); one whose
// barrier fails within ctx is left out, as unanswered.
func (s *Service) listLocal(ctx context.Context, pool, cs uint32) *pb.ListResponse {
	out := &pb.ListResponse{}
	for _, n := range s.copysets.List() {
		g := n.Group()
		if (pool != 0 && g.Pool() != pool) || (cs != 0 && g.Copyset() != cs) || !n.IsLeader() || n.Broken() != nil {
			continue
		}
		m, ok := MachineOf(n)
		if !ok {
			continue
		}
		if _, err := n.ReadBarrier(ctx); err != nil {
			continue
		}
		led := &pb.LedCopyset{Pool: g.Pool(), Copyset: g.Copyset()}
		if first, err := oldestEntry(n); err == nil {
			led.OldestIndex = first.Index
			if !first.AppendedAt.IsZero() {
				led.OldestMs = first.AppendedAt.UnixMilli()
			}
		}
		out.Copysets = append(out.Copysets, led)
		for _, r := range m.List() {
			out.SubTasks = append(out.SubTasks, &pb.Located{Pool: g.Pool(), Copyset: g.Copyset(), Leader: string(s.deps.Local), SubTask: r})
		}
	}
	slices.SortFunc(out.Copysets, func(a, b *pb.LedCopyset) int {
		return cmpGroup(a.GetPool(), a.GetCopyset(), b.GetPool(), b.GetCopyset())
	})
	return out
}

func cmpGroup(p1, c1, p2, c2 uint32) int { return cmp.Or(cmp.Compare(p1, p2), cmp.Compare(c1, c2)) }

// oldestEntry returns the oldest entry n's log still holds.
func oldestEntry(n *copyset.Node) (copyset.LogEntry, error) {
	first, _, err := n.LogBounds()
	if err != nil {
		return copyset.LogEntry{}, err
	}
	return n.LogEntry(first)
}

// client returns the SyncInternal client of the server with peer id (or
// address) peer.
func (s *Service) internalClient(peer string) (pb.SyncInternalClient, error) {
	addr := leaderAddr(peer)
	cc, err := s.deps.Dial(addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return pb.NewSyncInternalClient(cc), nil
}

// proposeEach proposes op(c) on every copyset c of css at once (at most
// proposeParallel at a time) and returns the answers in the order of css.
// A copyset without a leader is waited for (proposeWaiting).
func (s *Service) proposeEach(ctx context.Context, css []*clusterpb.Copyset, op func(c *clusterpb.Copyset) *pb.Op) []*pb.ProposeResponse {
	out := make([]*pb.ProposeResponse, len(css))
	sem := make(chan struct{}, proposeParallel)
	var wg sync.WaitGroup
	for i, c := range css {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			out[i] = s.proposeWaiting(ctx, c.GetPool(), c.GetCopyset(), c.GetLeader(), op(c))
		})
	}
	wg.Wait()
	return out
}

// removeEach proposes op, a removal (DeleteTask, DeleteAll), on every
// copyset of css at once and returns the sub-tasks removed and, per
// copyset that did not answer success, why.
func (s *Service) removeEach(ctx context.Context, css []*clusterpb.Copyset, op *pb.Op) (removed int, failed []string) {
	for i, resp := range s.proposeEach(ctx, css, func(*clusterpb.Copyset) *pb.Op { return op }) {
		if resp.GetCode() != 0 {
			failed = append(failed, fmt.Sprintf("copyset %d/%d: %s", css[i].GetPool(), css[i].GetCopyset(), resp.GetMsg()))
			continue
		}
		removed += int(resp.GetRemoved())
	}
	return removed, failed
}

// proposeParallel bounds the proposals of one proposeEach in flight.
const proposeParallel = 16

// propose replicates op on copyset (pool, cs) through its leader: this
// server if it leads (or leader, the leader the caller knows, is "" or
// this server), else the leader named, then the one a not_leader answer
// names (up to three hops, without waiting).
func (s *Service) propose(ctx context.Context, pool, cs uint32, leader string, op *pb.Op) *pb.ProposeResponse {
	return s.routePropose(ctx, s.router(pool, false), ctx, pool, cs, leader, op)
}

// leaderWait bounds how long a task-wide proposal (CreateSyncTask's puts,
// a DeleteSyncTask's removals) waits for a copyset without a leader (an
// election in progress, a leader just stepped down under load) to elect
// one, retrying every leaderRetry at first, at most every second.
const (
	leaderWait  = 10 * time.Second
	leaderRetry = 100 * time.Millisecond
)

// leaderBackoff paces the retries of a call waiting for a leader.
var leaderBackoff = copyset.Backoff{First: leaderRetry, Max: time.Second}

// router routes SyncInternal calls on the copysets of pool. A waiting
// router (task-wide calls) retries while the answer is not_leader, finding
// the leader again in the cluster map (or this server, when the map names
// none or fails) and counting in LeaderWaits; a router that does not wait
// answers after the first round with no leader named to follow.
func (s *Service) router(pool uint32, wait bool) *copyset.Router[pb.SyncInternalClient] {
	r := &copyset.Router[pb.SyncInternalClient]{
		Self:    s.deps.Local,
		Replica: copyset.ReplicaOf(s.copysets),
		Dial:    func(p copyset.PeerID) (pb.SyncInternalClient, error) { return s.internalClient(string(p)) },
	}
	if wait {
		r.Map = func(ctx context.Context, groups []copyset.GroupID) (map[copyset.GroupID]copyset.PeerID, error) {
			out := map[copyset.GroupID]copyset.PeerID{}
			for _, g := range groups {
				out[g] = s.deps.Local
			}
			css, _, err := s.poolCopysets(ctx, pool)
			if err != nil {
				return out, nil // this server answers what it knows
			}
			for _, c := range css {
				if c.GetLeader() != "" {
					out[copyset.NewGroupID(pool, c.GetCopyset())] = copyset.PeerID(c.GetLeader())
				}
			}
			return out, nil
		}
		r.Backoff = leaderBackoff
		r.Waited = func() { s.leaderWaits.Add(1) }
	}
	return r
}

// routePropose proposes op on copyset (pool, cs) through r until ctx ends,
// each attempt under calls, and returns the last answer. A Propose call
// to another server that fails is a not_leader answer without a leader:
// as far as this server knows, the copyset has none (a waiting router
// waits for one).
func (s *Service) routePropose(ctx context.Context, r *copyset.Router[pb.SyncInternalClient], calls context.Context, pool, cs uint32, leader string, op *pb.Op) *pb.ProposeResponse {
	g := copyset.NewGroupID(pool, cs)
	hint := copyset.PeerID(leader)
	if hint == "" {
		hint = s.deps.Local
	}
	var resp *pb.ProposeResponse
	rep := r.Route(ctx, g, hint, func(_ context.Context, c pb.SyncInternalClient, to copyset.Target) copyset.Reply {
		if to.Local {
			resp = s.proposeLocal(calls, g, op)
		} else {
			cctx, cancel := context.WithTimeout(calls, callTimeout)
			var err error
			resp, err = c.Propose(cctx, &pb.ProposeRequest{Pool: pool, Copyset: cs, Op: op})
			cancel()
			if err != nil {
				resp = &pb.ProposeResponse{Code: -1, Msg: fmt.Sprintf("copyset %s: leader %s: %v", csName(g), to.Peer, err), NotLeader: true}
			}
		}
		if resp.GetNotLeader() {
			return copyset.Redirect(copyset.PeerID(resp.GetLeader()), errors.New(resp.GetMsg()))
		}
		return copyset.Answered()
	})
	if rep.Unreached() {
		resp = &pb.ProposeResponse{Code: -1, Msg: fmt.Sprintf("copyset %s: %v", csName(g), rep.Err()), NotLeader: true}
	}
	return resp
}

// proposeWaiting is propose for task-wide calls: while the answer is
// not_leader (nobody leads, or the leader named does not answer as one),
// it finds the copyset's leader again and retries, for at most leaderWait
// or until ctx ends (a waiting router), and then returns the last answer.
// A retried op is the same op: a removal is idempotent, and a put that
// did commit before its leader stepped down (answering not_leader, or not
// at all) is refused the second time ("why send a same task?") with the
// sub-task it made, which has the put's token: that answer is the put's
// success (committedBefore).
func (s *Service) proposeWaiting(ctx context.Context, pool, cs uint32, leader string, op *pb.Op) *pb.ProposeResponse {
	wctx, cancel := context.WithTimeout(ctx, leaderWait)
	defer cancel()
	// The wait ends new attempts, not one under way: each runs under ctx.
	resp := s.routePropose(wctx, s.router(pool, true), ctx, pool, cs, leader, op)
	if committedBefore(op, resp) {
		s.log.Info("sync put committed before its leader could answer; its retry found it", "pool", pool, "copyset", cs)
		return &pb.ProposeResponse{Record: resp.GetRecord()}
	}
	return resp
}

// committedBefore reports whether resp refuses put op only because the
// sub-task already has op's token. A task-wide put (CreateSyncTask's)
// carries a token new to that call, so the sub-task holding it is the
// call's own earlier attempt, which committed although its answer was lost
// (propose and proposeWaiting retry such answers). Two answers are retried
// without knowing whether the put committed: a local proposal whose leader
// lost the leadership after appending it (copyset.OutcomeUnknownError), and
// a Propose call to another server that failed (a timeout, a broken
// connection) after that server may have appended it; a ProposeResponse
// has no way to say which, so the retry's answer is what tells.
func committedBefore(op *pb.Op, resp *pb.ProposeResponse) bool {
	put := op.GetPut()
	return put != nil && resp.GetCode() != 0 && !resp.GetNotLeader() && resp.GetMsg() == ErrSameTask.Error() &&
		put.GetRequest().GetToken() != "" && resp.GetRecord().GetProgress().GetToken() == put.GetRequest().GetToken()
}

// waitForLeaders calls try (again: not the first call) until it reports
// done, pausing per leaderBackoff between calls, for at most leaderWait
// or until ctx ends; it reports whether try did. A call whose first try
// fails counts in LeaderWaits.
func (s *Service) waitForLeaders(ctx context.Context, try func(again bool) bool) bool {
	wctx, cancel := context.WithTimeout(ctx, leaderWait)
	defer cancel()
	again := false
	return leaderBackoff.Retry(wctx, func() bool {
		done := try(again)
		if !done && !again {
			s.leaderWaits.Add(1)
		}
		again = true
		return done
	})
}

// LeaderWaits returns how many times this server's task-wide calls
// (CreateSyncTask, DeleteSyncTask, TaskStatus clear_all) found no leader
// answering for a copyset and went on to wait for one. Tests wait on it
// to know that such a call is waiting.
func (s *Service) LeaderWaits() int64 { return s.leaderWaits.Load() }

// csName names copyset g in messages as pool/copyset ("1/3"), like the
// rest of the service's messages; g's String is the raw group id.
func csName(g copyset.GroupID) string { return fmt.Sprintf("%d/%d", g.Pool(), g.Copyset()) }
