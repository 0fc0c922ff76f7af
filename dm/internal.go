package dm

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/chunkread"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
)

// callTimeout bounds one DMInternal call to another server.
const callTimeout = 10 * time.Second

type internalService struct {
	pb.UnimplementedDMInternalServer
	s *Service
}

func (is *internalService) List(ctx context.Context, req *pb.ListRequest) (*pb.ListResponse, error) {
	return is.s.listLocal(ctx, req.GetPool(), req.GetName()), nil
}

func (is *internalService) Check(ctx context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	return is.s.checkLocal(ctx, copyset.NewGroupID(req.GetPool(), req.GetCopyset()), req.GetStart()), nil
}

func (is *internalService) Propose(ctx context.Context, req *pb.ProposeRequest) (*pb.ProposeResponse, error) {
	return is.s.proposeLocal(ctx, copyset.NewGroupID(req.GetPool(), req.GetCopyset()), req.GetOp()), nil
}

func (is *internalService) Fence(ctx context.Context, req *pb.FenceRequest) (*pb.FenceResponse, error) {
	return is.s.fenceLocal(ctx, req), nil
}

func (is *internalService) Chunks(ctx context.Context, req *pb.ChunksRequest) (*pb.ChunksResponse, error) {
	return is.s.chunksLocal(ctx, copyset.NewGroupID(req.GetPool(), req.GetCopyset()), req), nil
}

func (is *internalService) SourceChunks(ctx context.Context, req *pb.ChunksRequest) (*pb.ChunksResponse, error) {
	return is.s.routeChunksReq(ctx, copyset.NewGroupID(req.GetPool(), req.GetCopyset()), proto.CloneOf(req)), nil
}

func (is *internalService) SourceFence(ctx context.Context, req *pb.SourceFenceRequest) (*pb.SourceFenceResponse, error) {
	return is.s.sourceFence(ctx, req), nil
}

// ledKey is a copyset in ListResponse.led.
func ledKey(g copyset.GroupID) uint64 { return uint64(g.Pool())<<32 | uint64(g.Copyset()) }

// listLocal lists the shares (of pool, or all when 0; of task name, or
// all when empty) of the copysets this server leads, each past a read
// barrier (a leader just elected may not have applied what its
// predecessor committed); a copyset whose barrier fails within ctx is
// left out, as unanswered.
func (s *Service) listLocal(ctx context.Context, pool uint32, name string) *pb.ListResponse {
	out := &pb.ListResponse{}
	if s.copysets == nil {
		return out
	}
	for _, n := range s.copysets.List() {
		g := n.Group()
		if (pool != 0 && g.Pool() != pool) || !n.IsLeader() || n.Broken() != nil {
			continue
		}
		m, ok := MachineOf(n)
		if !ok {
			continue
		}
		if _, err := n.ReadBarrier(ctx); err != nil {
			continue
		}
		out.Led = append(out.Led, ledKey(g))
		for _, st := range m.List() {
			if name == "" || st.GetConfig().GetName() == name {
				l := &pb.Located{Pool: g.Pool(), Copyset: g.Copyset(), Leader: string(s.deps.Local), Subtask: st}
				if p := s.progressOf(g, st.GetConfig().GetName()); p != nil {
					p.fill(l, time.Now())
				}
				out.Subtasks = append(out.Subtasks, l)
			}
		}
	}
	return out
}

// refusal is why this server does not answer for a copyset: not hosted
// or not led here (notLeader, with the leader it knows), or no dm machine
// that works.
type refusal struct {
	msg       string
	notLeader bool
	leader    string
}

// led returns copyset g and its dm machine when this server leads it and
// it works, else why not.
func (s *Service) led(g copyset.GroupID) (*copyset.Node, *Machine, *refusal) {
	if s.copysets == nil {
		return nil, nil, &refusal{msg: errNoCopysets.Error()}
	}
	n := s.copysets.Get(g)
	switch {
	case n == nil:
		return nil, nil, &refusal{msg: fmt.Sprintf("copyset %d/%d is not hosted on %s", g.Pool(), g.Copyset(), s.deps.Local), notLeader: true}
	case n.Broken() != nil:
		return nil, nil, &refusal{msg: fmt.Sprintf("copyset %d/%d: %v", g.Pool(), g.Copyset(), n.Broken())}
	case !n.IsLeader():
		return nil, nil, &refusal{msg: fmt.Sprintf("copyset %d/%d is led by %q, not %s", g.Pool(), g.Copyset(), n.Leader(), s.deps.Local),
			notLeader: true, leader: string(n.Leader())}
	}
	m, ok := MachineOf(n)
	if !ok {
		return nil, nil, &refusal{msg: fmt.Sprintf("copyset %d/%d has no dm state machine", g.Pool(), g.Copyset())}
	}
	return n, m, nil
}

// proposeLocal replicates op on copyset g if this server leads it.
func (s *Service) proposeLocal(ctx context.Context, g copyset.GroupID, op *pb.Op) *pb.ProposeResponse {
	fail := func(format string, args ...any) *pb.ProposeResponse {
		return &pb.ProposeResponse{Code: -1, Msg: fmt.Sprintf(format, args...)}
	}
	n, _, no := s.led(g)
	if no != nil {
		return &pb.ProposeResponse{Code: -1, Msg: no.msg, NotLeader: no.notLeader, Leader: no.leader}
	}
	b, err := EncodeOp(op)
	if err != nil {
		return fail("%v", err)
	}
	if st := op.GetStart(); st != nil {
		// The target copyset is the task's from before its share exists:
		// no client write lands after the fence (see fence.go).
		name := st.GetConfig().GetName()
		done := s.starting(g, name)
		defer done()
		if _, err := s.deps.Chunks.SetWriteFence(ctx, g, fenceOwner(name), fenceReason(name)); err != nil {
			if leader, lost := copyset.LeaderLost(err); lost {
				return &pb.ProposeResponse{Code: -1, Msg: err.Error(), NotLeader: true, Leader: string(leader)}
			}
			return fail("copyset %d/%d: %v", g.Pool(), g.Copyset(), err)
		}
		if err := s.checkFencedStart(n, g, st); err != nil {
			// Nothing was started: the fence goes (the leader worker lifts
			// it if this fails).
			if lerr := s.deps.Chunks.LiftWriteFence(ctx, g, fenceOwner(name)); lerr != nil {
				s.log.Warn("dm: lift the write fence of a start refused", "task", name, "pool", g.Pool(), "copyset", g.Copyset(), "error", lerr)
			}
			return fail("%v", err)
		}
	}
	_, r, err := copyset.ProposeAs[Result](ctx, n, b)
	if err != nil {
		// Retried on the leader: a Start, SetStage or Delete finds its own
		// commit; an Advance from the old checkpoint is refused.
		if leader, lost := copyset.LeaderLost(err); lost {
			return &pb.ProposeResponse{Code: -1, Msg: err.Error(), NotLeader: true, Leader: string(leader)}
		}
		return fail("copyset %d/%d: %v", g.Pool(), g.Copyset(), err)
	}
	out := &pb.ProposeResponse{Subtask: r.SubTask}
	if r.Err != nil {
		out.Code, out.Msg = -1, r.Err.Error()
	} else if d := op.GetDelete(); d != nil {
		// The task is gone: its fence goes too (the leader worker lifts
		// a fence left behind by a failure here).
		if err := s.deps.Chunks.LiftWriteFence(ctx, g, fenceOwner(d.GetName())); err != nil {
			s.log.Warn("dm: lift the write fence of a stopped task", "task", d.GetName(), "pool", g.Pool(), "copyset", g.Copyset(), "error", err)
		}
	}
	return out
}

// listing is the shares of a pool (or all pools) as the leaders of its
// copysets answered, and the copysets whose leader did not answer.
type listing struct {
	shares []*pb.Located
	// unanswered names the copysets of the cluster map (of the pool) that
	// no leader answered for, and why.
	unanswered []string
	// unansweredPool is the pool of each of unanswered.
	unansweredPool []uint32
}

// taskOnly keeps, of a task's listing, the copysets unanswered in the pool
// of its shares (a task's shares are all in its target pool); with no
// share found, every copyset unanswered may hold one.
func (l *listing) taskOnly() *listing {
	if len(l.shares) == 0 {
		return l
	}
	pool := l.shares[0].GetPool()
	var keep []string
	var pools []uint32
	for i, u := range l.unanswered {
		if l.unansweredPool[i] == pool {
			keep, pools = append(keep, u), append(pools, pool)
		}
	}
	l.unanswered, l.unansweredPool = keep, pools
	return l
}

// listAll asks every reachable server of the cluster map for the shares of
// the copysets it leads (this server in process) and merges the answers:
// a copyset two servers answered for during an election keeps the newer
// share of each task.
func (s *Service) listAll(ctx context.Context, pool uint32, name string) (*listing, error) {
	cm, err := s.deps.Cluster(ctx)
	if err != nil {
		return nil, fmt.Errorf("cluster map: %w", err)
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		all  []*pb.Located
		led  = map[uint64]bool{}
		errs = map[string]error{}
	)
	for _, srv := range cm.GetServers() {
		if !srv.GetReachable() {
			continue
		}
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			defer cancel()
			var resp *pb.ListResponse
			var err error
			if srv.GetAddress() == s.deps.Local.Addr() {
				resp = s.listLocal(cctx, pool, name)
			} else {
				resp, err = s.listRemote(cctx, srv.GetAddress(), pool, name)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[srv.GetAddress()] = err
				return
			}
			all = append(all, resp.GetSubtasks()...)
			for _, k := range resp.GetLed() {
				led[k] = true
			}
		})
	}
	wg.Wait()
	slices.SortFunc(all, func(a, b *pb.Located) int {
		return cmp.Or(cmp.Compare(a.GetPool(), b.GetPool()), cmp.Compare(a.GetCopyset(), b.GetCopyset()),
			cmp.Compare(a.GetSubtask().GetConfig().GetName(), b.GetSubtask().GetConfig().GetName()),
			cmp.Compare(b.GetSubtask().GetUpdatedIndex(), a.GetSubtask().GetUpdatedIndex()))
	})
	all = slices.CompactFunc(all, func(a, b *pb.Located) bool {
		return a.GetPool() == b.GetPool() && a.GetCopyset() == b.GetCopyset() &&
			a.GetSubtask().GetConfig().GetName() == b.GetSubtask().GetConfig().GetName()
	})
	l := &listing{shares: all}
	for _, c := range cm.GetCopysets() {
		g := copyset.NewGroupID(c.GetPool(), c.GetCopyset())
		if (pool != 0 && g.Pool() != pool) || led[ledKey(g)] {
			continue
		}
		why := "no leader"
		if c.GetLeader() != "" {
			why = "leader " + c.GetLeader() + " did not answer"
			if err := errs[copyset.PeerID(c.GetLeader()).Addr()]; err != nil {
				why += ": " + err.Error()
			}
		}
		l.unanswered = append(l.unanswered, fmt.Sprintf("copyset %d/%d (%s)", g.Pool(), g.Copyset(), why))
		l.unansweredPool = append(l.unansweredPool, g.Pool())
	}
	return l, nil
}

// listRemote asks the server at addr for the shares of the copysets it
// leads.
func (s *Service) listRemote(ctx context.Context, addr string, pool uint32, name string) (*pb.ListResponse, error) {
	conn, err := s.deps.Dial(addr)
	if err != nil {
		return nil, err
	}
	return pb.NewDMInternalClient(conn).List(ctx, &pb.ListRequest{Pool: pool, Name: name})
}

// checkFencedStart checks, once the task's fence is set on copyset g (no
// client write lands after it), what a new share needs of the copyset's
// chunks: none for Load (task-mode all and full), exactly what the restore
// left for task-mode incremental (the restore marker's digest). A share
// that exists already (a Start again) needs nothing.
func (s *Service) checkFencedStart(n *copyset.Node, g copyset.GroupID, st *pb.Start) error {
	if m, ok := MachineOf(n); ok && m.Get(st.GetConfig().GetName()) != nil {
		return nil
	}
	imgs, err := chunkread.Of(n)
	if err != nil {
		return err
	}
	if want := st.GetDigest(); want != "" {
		return checkDigest(g, imgs, want)
	}
	if k := len(imgs.ListChunks()); k > 0 {
		return fmt.Errorf("copyset %d/%d holds %d chunks: task-mode %s migrates into empty copysets", g.Pool(), g.Copyset(), k, ModeName(st.GetConfig().GetMode()))
	}
	return nil
}
