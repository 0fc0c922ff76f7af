package dm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/chunkraft/chunkraft/chunkstore"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/datasync/dest"
	"github.com/chunkraft/chunkraft/datasync/restore"
	"github.com/chunkraft/chunkraft/internal/chunkread"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	dmpb "github.com/chunkraft/chunkraft/proto/dm/pb"
)

// The control path (DMControl): dm-master's role, answered by any server.
// A task is started only when every check passes on every target copyset
// (the source has the copyset, the target copyset exists, has a leader,
// holds no chunk and no other task's share of that name): a start that
// fails a check proposes nothing.

// leaderWait bounds how long a control call waits for a copyset's leader.
const leaderWait = 10 * time.Second

type controlService struct {
	pb.UnimplementedDMControlServer
	s *Service
}

func refused(format string, args ...any) *pb.ControlResponse {
	return &pb.ControlResponse{Result: false, Msg: fmt.Sprintf(format, args...)}
}

// StartTask checks a task file and, unless check_only, starts the task's
// share on every target copyset.
func (c *controlService) StartTask(ctx context.Context, req *pb.StartTaskRequest) (*pb.ControlResponse, error) {
	s := c.s
	cfg, err := ParseTaskYAML([]byte(req.GetTask()))
	if err != nil {
		return refused("%v", err), nil
	}
	targets, err := s.targets(ctx, cfg)
	if err != nil {
		return refused("task %q: %v", cfg.GetName(), err), nil
	}
	// What the source has of each copyset: an export's packets, or a
	// source cluster's copysets (its relay task exports them once made).
	var (
		packets map[uint32][]string
		onSrc   map[uint32]bool
	)
	if len(cfg.GetSource().GetCluster()) > 0 {
		onSrc, err = s.sourceClusterCopysets(ctx, cfg)
	} else {
		packets, err = s.sourceCopysets(ctx, cfg)
	}
	if err != nil {
		return refused("task %q: %v", cfg.GetName(), err), nil
	}
	var (
		markers   map[uint32]*markerStart
		badMarker map[uint32]string
	)
	if cfg.GetMode() == pb.Mode_INCREMENTAL {
		if markers, badMarker, err = s.markerStarts(ctx, cfg, targets, packets); err != nil {
			return refused("task %q: %v", cfg.GetName(), err), nil
		}
	}
	now := time.Now().UnixMilli()
	starts := make([]*pb.Op, len(targets))
	resp := &pb.ControlResponse{Result: true}
	var problems []string
	for i, g := range targets {
		r := &pb.CopysetResult{Pool: g.Pool(), Copyset: g.Copyset(), Result: true}
		resp.Copysets = append(resp.Copysets, r)
		n := len(packets[g.Copyset()])
		if n == 0 && !onSrc[g.Copyset()] {
			r.Result, r.Msg = false, fmt.Sprintf("the source has no copyset %d/%d", cfg.GetSource().GetPool(), g.Copyset())
			problems = append(problems, fmt.Sprintf("copyset %d/%d: %s", g.Pool(), g.Copyset(), r.Msg))
			continue
		}
		if msg, ok := badMarker[g.Copyset()]; ok {
			r.Result, r.Msg = false, msg
			problems = append(problems, fmt.Sprintf("copyset %d/%d: %s", g.Pool(), g.Copyset(), r.Msg))
			continue
		}
		start := &pb.Start{Config: cfg, Copyset: g.Copyset(), SourceCopyset: g.Copyset(),
			Stage: dmpb.Stage_Running, Unit: dmpb.UnitType_Load, NowMs: now}
		mk := markers[g.Copyset()]
		if mk != nil {
			start.Unit, start.Checkpoint, start.Clones, start.Digest = dmpb.UnitType_Sync, mk.checkpoint, mk.clones, mk.digest
		}
		starts[i] = &pb.Op{Op: &pb.Op_Start{Start: start}}
	}
	// Every target copyset is checked at once.
	checks := make([]*pb.CheckResponse, len(targets))
	var wg sync.WaitGroup
	for i, g := range targets {
		if starts[i] != nil {
			wg.Go(func() { checks[i] = s.routeCheck(ctx, g, starts[i].GetStart()) })
		}
	}
	wg.Wait()
	for i, g := range targets {
		r, chk := resp.Copysets[i], checks[i]
		if chk == nil {
			continue // refused above
		}
		mk, n := markers[g.Copyset()], len(packets[g.Copyset()])
		switch {
		case chk.GetCode() != 0:
			r.Result, r.Msg = false, chk.GetMsg()
		case chk.GetSubtask() != nil:
			r.Msg = fmt.Sprintf("already started: %v, %s", chk.GetSubtask().GetStage(), CheckpointString(chk.GetSubtask().GetCheckpoint()))
			starts[i] = nil // nothing to do there
		case mk != nil:
			r.Msg = fmt.Sprintf("would apply copyset %d/%d of %s from %s (the restore left it at index %d; %d clone chunks)",
				cfg.GetSource().GetPool(), g.Copyset(), sourceOf(cfg), CheckpointString(mk.checkpoint), mk.until, len(mk.clones))
		case chk.GetChunks() > 0:
			r.Result, r.Msg = false, fmt.Sprintf("holds %d chunks: task-mode %s migrates into empty copysets", chk.GetChunks(), ModeName(cfg.GetMode()))
		case onSrc != nil:
			r.Msg = fmt.Sprintf("would apply copyset %d/%d of the source cluster, exported to %s", cfg.GetSource().GetPool(), g.Copyset(), sourceOf(cfg))
		default:
			r.Msg = fmt.Sprintf("would apply copyset %d/%d of %s (%d packets so far)", cfg.GetSource().GetPool(), g.Copyset(), sourceOf(cfg), n)
		}
		if !r.Result {
			problems = append(problems, fmt.Sprintf("copyset %d/%d: %s", g.Pool(), g.Copyset(), r.Msg))
		}
	}
	if len(problems) > 0 {
		resp.Result, resp.Msg = false, fmt.Sprintf("task %q: %s; nothing was started", cfg.GetName(), strings.Join(problems, "; "))
		return resp, nil
	}
	if req.GetCheckOnly() {
		resp.Msg = fmt.Sprintf("task %q: the check passed on %d copysets; nothing was started", cfg.GetName(), len(targets))
		return resp, nil
	}
	if onSrc != nil {
		if err := s.createRelayTask(ctx, cfg); err != nil {
			resp.Result, resp.Msg = false, fmt.Sprintf("task %q: %v; nothing was started", cfg.GetName(), err)
			return resp, nil
		}
	}
	// Started on every target copyset at once: each sets its fence, checks
	// itself again and proposes its share.
	proposed := make([]*pb.ProposeResponse, len(targets))
	for i, g := range targets {
		if starts[i] != nil {
			wg.Go(func() { proposed[i] = s.routePropose(ctx, g, starts[i]) })
		}
	}
	wg.Wait()
	for i, p := range proposed {
		r := resp.Copysets[i]
		switch {
		case p == nil:
		case p.GetCode() != 0:
			r.Result, r.Msg = false, p.GetMsg()
			resp.Result = false
		default:
			r.Msg = fmt.Sprintf("started: %v", p.GetSubtask().GetStage())
		}
	}
	if !resp.Result {
		resp.Msg = fmt.Sprintf("task %q: started on some copysets only; start-task again finishes it (a started copyset keeps its share)", cfg.GetName())
	}
	s.log.Info("dm task started", "task", cfg.GetName(), "copysets", len(targets), "result", resp.Result)
	return resp, nil
}

// sourceOf names a task's source.
func sourceOf(cfg *pb.TaskConfig) string {
	if e := cfg.GetSource().GetExport(); e != "" {
		return e
	}
	return cfg.GetSource().GetRelay()
}

// targets returns the task's target copysets: those it lists, each of
// which must be in the cluster map, or every copyset of the target pool.
func (s *Service) targets(ctx context.Context, cfg *pb.TaskConfig) ([]copyset.GroupID, error) {
	cm, err := s.deps.Cluster(ctx)
	if err != nil {
		return nil, fmt.Errorf("cluster map: %w", err)
	}
	have := map[uint32]bool{}
	for _, c := range cm.GetCopysets() {
		if c.GetPool() == cfg.GetTargetPool() {
			have[c.GetCopyset()] = true
		}
	}
	ids := cfg.GetCopysets()
	if len(ids) == 0 {
		for id := range have {
			ids = append(ids, id)
		}
		slices.Sort(ids)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("target pool %d has no copysets", cfg.GetTargetPool())
	}
	var out []copyset.GroupID
	for _, id := range ids {
		if !have[id] {
			return nil, fmt.Errorf("copyset %d/%d does not exist", cfg.GetTargetPool(), id)
		}
		out = append(out, copyset.NewGroupID(cfg.GetTargetPool(), id))
	}
	return out, nil
}

// sourceCopysets lists the packets of each copyset of the task's source.
func (s *Service) sourceCopysets(ctx context.Context, cfg *pb.TaskConfig) (map[uint32][]string, error) {
	src, err := s.openLocation(ctx, sourceOf(cfg))
	if err != nil {
		return nil, fmt.Errorf("source: %w", err)
	}
	defer src.Close()
	m, err := restore.ExportCopysets(ctx, src, cfg.GetSource().GetPool())
	if err != nil {
		return nil, fmt.Errorf("source %s: %w", src, err)
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("source %s has no packets of pool %d", src, cfg.GetSource().GetPool())
	}
	return m, nil
}

// openLocation opens a location (file://, s3://) on the server's object
// store.
func (s *Service) openLocation(ctx context.Context, loc string) (dest.Dest, error) {
	u, err := dest.Parse(loc)
	if err != nil {
		return nil, err
	}
	return dest.Open(ctx, u, s.deps.ObjectStore)
}

// checkLocal answers Check on copyset g, which this server must lead.
func (s *Service) checkLocal(ctx context.Context, g copyset.GroupID, start *pb.Start) *pb.CheckResponse {
	fail := func(format string, args ...any) *pb.CheckResponse {
		return &pb.CheckResponse{Code: -1, Msg: fmt.Sprintf(format, args...)}
	}
	n, m, no := s.led(g)
	if no != nil {
		return &pb.CheckResponse{Code: -1, Msg: no.msg, NotLeader: no.notLeader, Leader: no.leader}
	}
	if err := ValidateOp(&pb.Op{Op: &pb.Op_Start{Start: start}}); err != nil {
		return fail("%v", err)
	}
	if _, err := n.ReadBarrier(ctx); err != nil {
		if leader, lost := copyset.LeaderLost(err); lost {
			return &pb.CheckResponse{Code: -1, Msg: err.Error(), NotLeader: true, Leader: string(leader)}
		}
		return fail("copyset %d/%d: %v", g.Pool(), g.Copyset(), err)
	}
	name := start.GetConfig().GetName()
	if f, ok := chunkstore.LocalWriteFence(n); ok && f.Owner != fenceOwner(name) {
		return fail("copyset %d/%d is write-fenced by %s since index %d (%s)", g.Pool(), g.Copyset(), f.Owner, f.Since, f.Reason)
	}
	st, err := chunkread.Of(n)
	if err != nil {
		return fail("%v", err)
	}
	out := &pb.CheckResponse{Chunks: uint64(len(st.ListChunks()))}
	sh := m.Get(name)
	if want := start.GetDigest(); want != "" && sh == nil {
		if err := checkDigest(g, st, want); err != nil {
			return fail("%v", err)
		}
	}
	if sh != nil {
		r, _ := applyStart(&pb.State{Subtasks: []*pb.SubTask{sh}}, 0, start)
		if r.Err != nil {
			return fail("copyset %d/%d: %v", g.Pool(), g.Copyset(), r.Err)
		}
		out.Subtask = sh
	} else if len(m.List()) >= MaxTasks {
		return fail("copyset %d/%d: %v: %d", g.Pool(), g.Copyset(), ErrTooManyTasks, MaxTasks)
	}
	return out
}

// router routes DMInternal calls to the leaders of copysets, waiting for
// one while an election goes on (up to leaderWait), finding it in this
// server's replica, the last answer's hint or the cluster map.
func (s *Service) router() *copyset.Router[pb.DMInternalClient] {
	return &copyset.Router[pb.DMInternalClient]{
		Self:    s.deps.Local,
		Replica: copyset.ReplicaOf(s.copysets),
		Dial: func(p copyset.PeerID) (pb.DMInternalClient, error) {
			conn, err := s.deps.Dial(p.Addr())
			if err != nil {
				return nil, err
			}
			return pb.NewDMInternalClient(conn), nil
		},
		Map: func(ctx context.Context, groups []copyset.GroupID) (map[copyset.GroupID]copyset.PeerID, error) {
			out := map[copyset.GroupID]copyset.PeerID{}
			cm, err := s.deps.Cluster(ctx)
			if err != nil {
				return out, nil
			}
			for _, c := range cm.GetCopysets() {
				if c.GetLeader() != "" {
					out[copyset.NewGroupID(c.GetPool(), c.GetCopyset())] = copyset.PeerID(c.GetLeader())
				}
			}
			return out, nil
		},
		Backoff: copyset.Backoff{First: 100 * time.Millisecond, Max: time.Second},
	}
}

// onLeader runs call on copyset g's leader (in process when it is this
// server) until it answers as the leader or leaderWait passes; call says
// whether the answer was not the leader's and which leader it names.
func (s *Service) onLeader(ctx context.Context, g copyset.GroupID, call func(ctx context.Context, c pb.DMInternalClient, local bool) (notLeader bool, leader, msg string)) error {
	wctx, cancel := context.WithTimeout(ctx, leaderWait)
	defer cancel()
	rep := s.router().Route(wctx, g, s.deps.Local, func(_ context.Context, c pb.DMInternalClient, to copyset.Target) copyset.Reply {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		if nl, leader, msg := call(cctx, c, to.Local); nl {
			return copyset.Redirect(copyset.PeerID(leader), errors.New(msg))
		}
		return copyset.Answered()
	})
	if !rep.Done() {
		return fmt.Errorf("copyset %d/%d: no leader answered: %v", g.Pool(), g.Copyset(), rep.Err())
	}
	return nil
}

// leaderAnswer is what routeTo needs of a DMInternal answer.
type leaderAnswer interface {
	GetNotLeader() bool
	GetLeader() string
	GetMsg() string
}

// routeTo runs a DMInternal call on copyset g's leader: local in process
// when this server leads it, else remote; a failed call counts as not the
// leader's answer (retried), and failed(msg) is the answer when no leader
// answered within leaderWait.
func routeTo[R leaderAnswer](ctx context.Context, s *Service, g copyset.GroupID, local func(ctx context.Context) R,
	remote func(ctx context.Context, c pb.DMInternalClient) (R, error), failed func(msg string, notLeader bool) R) R {
	var resp R
	err := s.onLeader(ctx, g, func(ctx context.Context, c pb.DMInternalClient, isLocal bool) (bool, string, string) {
		if isLocal {
			resp = local(ctx)
		} else {
			var err error
			if resp, err = remote(ctx, c); err != nil {
				resp = failed(err.Error(), true)
			}
		}
		return resp.GetNotLeader(), resp.GetLeader(), resp.GetMsg()
	})
	if err != nil {
		return failed(err.Error(), false)
	}
	return resp
}

// routeCheck asks copyset g's leader whether start may be proposed.
func (s *Service) routeCheck(ctx context.Context, g copyset.GroupID, start *pb.Start) *pb.CheckResponse {
	return routeTo(ctx, s, g, func(ctx context.Context) *pb.CheckResponse { return s.checkLocal(ctx, g, start) },
		func(ctx context.Context, c pb.DMInternalClient) (*pb.CheckResponse, error) {
			return c.Check(ctx, &pb.CheckRequest{Pool: g.Pool(), Copyset: g.Copyset(), Start: start})
		},
		func(msg string, notLeader bool) *pb.CheckResponse {
			return &pb.CheckResponse{Code: -1, Msg: msg, NotLeader: notLeader}
		})
}

// routePropose proposes op on copyset g's leader. A retry after an answer
// that was lost proposes the same op: a Start, SetStage or Delete applied
// twice finds its own result.
func (s *Service) routePropose(ctx context.Context, g copyset.GroupID, op *pb.Op) *pb.ProposeResponse {
	return routeTo(ctx, s, g, func(ctx context.Context) *pb.ProposeResponse { return s.proposeLocal(ctx, g, op) },
		func(ctx context.Context, c pb.DMInternalClient) (*pb.ProposeResponse, error) {
			return c.Propose(ctx, &pb.ProposeRequest{Pool: g.Pool(), Copyset: g.Copyset(), Op: op})
		},
		func(msg string, notLeader bool) *pb.ProposeResponse {
			return &pb.ProposeResponse{Code: -1, Msg: msg, NotLeader: notLeader}
		})
}

// OperateTask pauses, resumes or stops a task on every copyset that has a
// share of it.
func (c *controlService) OperateTask(ctx context.Context, req *pb.OperateTaskRequest) (*pb.ControlResponse, error) {
	s := c.s
	name := req.GetName()
	if name == "" {
		return refused("operate task: no task name"), nil
	}
	now := time.Now().UnixMilli()
	var op *pb.Op
	switch req.GetOp() {
	case dmpb.TaskOp_Pause:
		op = &pb.Op{Op: &pb.Op_SetStage{SetStage: &pb.SetStage{Name: name, Stage: dmpb.Stage_Paused, ByUser: true, NowMs: now}}}
	case dmpb.TaskOp_Resume:
		op = &pb.Op{Op: &pb.Op_SetStage{SetStage: &pb.SetStage{Name: name, Stage: dmpb.Stage_Running, ByUser: true, NowMs: now}}}
	case dmpb.TaskOp_Stop, dmpb.TaskOp_Delete:
		op = &pb.Op{Op: &pb.Op_Delete{Delete: &pb.Delete{Name: name}}}
	default:
		return refused("operate task %q: op %v: want Pause, Resume or Stop", name, req.GetOp()), nil
	}
	l, err := s.listAll(ctx, 0, name)
	if err != nil {
		return refused("operate task %q: %v", name, err), nil
	}
	l = l.taskOnly()
	if len(l.shares) == 0 {
		msg := msgNoSubTask(name)
		if len(l.unanswered) > 0 {
			msg += "; no leader answered for " + strings.Join(l.unanswered, ", ")
		}
		return refused("%s", msg), nil
	}
	// A stop during a cutover not committed lets the source take writes
	// again first; a committed cutover leaves the source fenced.
	if cfg := l.shares[0].GetSubtask().GetConfig(); op.GetDelete() != nil && len(cfg.GetSource().GetCluster()) > 0 {
		if cutoverUnderWay(l.shares) {
			var ids []uint32
			for _, sh := range l.shares {
				ids = append(ids, sh.GetSubtask().GetSourceCopyset())
			}
			if _, err := s.onSourceFence(ctx, cfg, ids, pb.FenceOp_FENCE_LIFT, false); err != nil {
				return refused("stop task %q: its cutover is under way and lifting the source's fences failed: %v; nothing was stopped", name, err), nil
			}
		}
	}
	resp := &pb.ControlResponse{Result: true}
	for _, sh := range l.shares {
		g := copyset.NewGroupID(sh.GetPool(), sh.GetCopyset())
		r := &pb.CopysetResult{Pool: g.Pool(), Copyset: g.Copyset(), Result: true}
		p := s.routePropose(ctx, g, op)
		switch {
		case p.GetCode() != 0:
			r.Result, r.Msg, resp.Result = false, p.GetMsg(), false
		case op.GetDelete() != nil:
			r.Msg = "stopped"
		default:
			r.Msg = p.GetSubtask().GetStage().String()
		}
		resp.Copysets = append(resp.Copysets, r)
	}
	if len(l.unanswered) > 0 {
		resp.Result = false
		resp.Msg = "no leader answered for " + strings.Join(l.unanswered, ", ") + ": their shares, if any, were not reached"
	}
	// A stopped task with a cluster source lets its relay task go.
	if cfg := l.shares[0].GetSubtask().GetConfig(); op.GetDelete() != nil && resp.Result && len(cfg.GetSource().GetCluster()) > 0 {
		if err := s.deleteRelayTask(ctx, cfg); err != nil {
			resp.Result, resp.Msg = false, fmt.Sprintf("task %q stopped, but %v: delete it on the source (chunkctl sync delete --pool %d --name %s)",
				name, err, cfg.GetSource().GetPool(), relayTaskName(name))
		}
	}
	s.log.Info("dm task operated", "task", name, "op", req.GetOp().String(), "copysets", len(resp.Copysets), "result", resp.Result)
	return resp, nil
}

// UpdateTask replaces the config of a task paused on every copyset by the
// task file's, which may differ only where CanUpdate allows; nothing is
// proposed unless every share is Paused and the change is allowed.
func (c *controlService) UpdateTask(ctx context.Context, req *pb.StartTaskRequest) (*pb.ControlResponse, error) {
	s := c.s
	next, err := ParseTaskYAML([]byte(req.GetTask()))
	if err != nil {
		return refused("%v", err), nil
	}
	name := next.GetName()
	l, err := s.listAll(ctx, 0, name)
	if err != nil {
		return refused("update task %q: %v", name, err), nil
	}
	l = l.taskOnly()
	switch {
	case len(l.shares) == 0:
		msg := msgNoSubTask(name)
		if len(l.unanswered) > 0 {
			msg += "; no leader answered for " + strings.Join(l.unanswered, ", ")
		}
		return refused("%s", msg), nil
	case len(l.unanswered) > 0:
		return refused("update task %q: no leader answered for %s: an update needs every copyset; nothing was changed", name, strings.Join(l.unanswered, ", ")), nil
	}
	var why []string
	for _, sh := range l.shares {
		if st := sh.GetSubtask().GetStage(); st != dmpb.Stage_Paused {
			why = append(why, fmt.Sprintf("copyset %d/%d is %v: pause-task first, an update changes only a paused task", sh.GetPool(), sh.GetCopyset(), st))
		}
	}
	why = append(why, CanUpdate(l.shares[0].GetSubtask().GetConfig(), next)...)
	if len(why) > 0 {
		return refused("update task %q: %s; nothing was changed", name, strings.Join(why, "; ")), nil
	}
	resp := &pb.ControlResponse{Result: true}
	if req.GetCheckOnly() {
		resp.Msg = fmt.Sprintf("task %q may be updated on %d copysets; nothing was changed", name, len(l.shares))
		return resp, nil
	}
	op := &pb.Op{Op: &pb.Op_Update{Update: &pb.Update{Name: name, Config: next, NowMs: time.Now().UnixMilli()}}}
	for _, sh := range l.shares {
		r := &pb.CopysetResult{Pool: sh.GetPool(), Copyset: sh.GetCopyset(), Result: true, Msg: "updated"}
		if p := s.routePropose(ctx, copyset.NewGroupID(sh.GetPool(), sh.GetCopyset()), op); p.GetCode() != 0 {
			r.Result, r.Msg, resp.Result = false, p.GetMsg(), false
		}
		resp.Copysets = append(resp.Copysets, r)
	}
	if !resp.Result {
		resp.Msg = fmt.Sprintf("task %q: updated on some copysets only; update-task again finishes it", name)
	}
	s.log.Info("dm task updated", "task", name, "copysets", len(resp.Copysets), "result", resp.Result)
	return resp, nil
}
