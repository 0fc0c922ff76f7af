package disagg

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/proto/chunkraft/clusterpb"
	vpb "github.com/chunkraft/chunkraft/proto/chunkraft/viewpb"
	dpb "github.com/chunkraft/chunkraft/proto/kvproto/disaggregated"
)

// CancelDisaggTask across the cluster. A task's views are on the copysets
// it was established on, each registered by the copyset's leader, which
// can be any server; each view's info names the task (ViewInfo.task_key).
// The server a cancel reaches cannot tell which copysets it does not host
// have a view of the task, so it has the leader of every copyset it knows
// of drop the task's views there (DisaggViews.DropTask, one call per
// leader, all at once; itself without a call): of a copyset it hosts, the
// leader its replica knows; of the others, the leader in the cluster map.
// A leader finds the views by the task key after a read barrier. A
// copyset whose leader is not known or does not answer is asked again
// (the leader its answer names, or the one known by then) until
// disagg.views.cancel_timeout; then Cancel fails naming those copysets:
// their views stay until their leases drop them, and a retry is
// idempotent. A copyset whose every replica is down and which this
// server's cluster map never saw is not known to it.

// maxDropGroups bounds the copysets of one DropTask.
const maxDropGroups = 1 << 16

// Cancel is CancelDisaggTask: the task's views on every copyset are
// dropped (see above); idempotent. The error names the copysets where
// views may be left.
func (s *Service) Cancel(parent context.Context, meta *dpb.DisaggTaskMeta) error {
	if meta == nil {
		return nil
	}
	key := taskKey(meta)
	ctx, cancel := context.WithTimeout(parent, s.deps.Config.Views.CancelTimeout)
	defer cancel()
	r := &cancelRun{s: s, key: key, pending: map[copyset.GroupID]copyset.PeerID{}, failed: map[copyset.GroupID]error{},
		done: map[copyset.GroupID]bool{}, mapped: s.deps.Cluster == nil}
	for _, n := range s.copysets.List() {
		r.pending[n.Group()] = ""
	}
	err := r.run(ctx)
	s.forgetTask(key, "cancelled")
	return err
}

// cancelRun is one Cancel's fan-out.
type cancelRun struct {
	s       *Service
	key     string
	pending map[copyset.GroupID]copyset.PeerID // not done yet: the leader to ask ("" not known)
	failed  map[copyset.GroupID]error          // why a pending copyset is not done
	done    map[copyset.GroupID]bool
	mapped  bool  // the copysets of a whole cluster map are known
	mapErr  error // why not
}

// run asks rounds until every copyset is done or ctx ends.
func (r *cancelRun) run(ctx context.Context) error {
	wait := 20 * time.Millisecond
	for {
		r.resolve(ctx)
		r.round(ctx)
		if len(r.pending) == 0 && r.mapped {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return r.err(ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// resolve finds the leaders to ask: a hosted copyset's as its replica
// knows it, the others' from the cluster map (which also adds the
// copysets this server does not host, until one whole map was read).
func (r *cancelRun) resolve(ctx context.Context) {
	s := r.s
	unknown := !r.mapped
	for g, l := range r.pending {
		if l != "" {
			continue
		}
		if n := s.copysets.Get(g); n != nil {
			r.pending[g] = n.Leader()
			continue
		}
		unknown = true
	}
	if !unknown || s.deps.Cluster == nil {
		return
	}
	cm, err := s.deps.Cluster(ctx, &clusterpb.ClusterMapRequest{})
	switch {
	case err != nil:
		r.mapErr = fmt.Errorf("cluster map: %w (the copysets this server does not host were not asked)", err)
		return
	case ctx.Err() != nil:
		r.mapErr = errors.New("cluster map: the crawl was cut short (the copysets of the servers it did not ask were not asked)")
	case cm.GetTruncated():
		r.mapErr = errors.New("cluster map truncated: the copysets of the servers it left out were not asked")
	default:
		r.mapErr = nil
		r.mapped = true
	}
	for _, c := range cm.GetCopysets() {
		g := copyset.NewGroupID(c.GetPool(), c.GetCopyset())
		if l, ok := r.pending[g]; (ok && l == "") || (!ok && !r.done[g]) {
			r.pending[g] = copyset.PeerID(c.GetLeader())
		}
	}
}

// dropCall is one DropTask of a round.
type dropCall struct {
	leader  copyset.PeerID
	groups  []copyset.GroupID
	results []*vpb.DropTaskResult
	err     error
}

// round asks every known leader of the pending copysets at once.
func (r *cancelRun) round(ctx context.Context) {
	by := map[copyset.PeerID]*dropCall{}
	for g, l := range r.pending {
		if l == "" {
			r.failed[g] = errors.New("no leader known")
			continue
		}
		if by[l] == nil {
			by[l] = &dropCall{leader: l}
		}
		by[l].groups = append(by[l].groups, g)
	}
	var wg sync.WaitGroup
	for _, c := range by {
		wg.Go(func() { c.results, c.err = r.s.dropOn(ctx, c.leader, r.key, c.groups) })
	}
	wg.Wait()
	for _, c := range by {
		r.answered(c)
	}
}

// answered records what c's leader answered.
func (r *cancelRun) answered(c *dropCall) {
	at := c.leader.Addr()
	if c.err != nil {
		for _, g := range c.groups {
			r.failed[g] = fmt.Errorf("leader %s: %w", at, c.err)
			r.pending[g] = "" // ask who leads now
		}
		return
	}
	byGroup := map[copyset.GroupID]*vpb.DropTaskResult{}
	for _, res := range c.results {
		byGroup[copyset.GroupID(res.GetGroup())] = res
	}
	for _, g := range c.groups {
		res := byGroup[g]
		switch {
		case res == nil:
			r.failed[g] = fmt.Errorf("leader %s did not answer for it", at)
		case res.GetNotLed():
			r.failed[g] = fmt.Errorf("%s does not lead it", at)
			r.pending[g] = copyset.PeerID(res.GetLeader())
			if r.pending[g] == c.leader {
				r.pending[g] = ""
			}
		case res.GetError() != "":
			r.failed[g] = fmt.Errorf("leader %s: %s", at, res.GetError())
		default:
			delete(r.pending, g)
			delete(r.failed, g)
			r.done[g] = true
		}
	}
}

// err is the error of a run that ended (why) with copysets pending or the
// cluster map not read: one line naming each.
func (r *cancelRun) err(why error) error {
	var left []string
	for _, g := range slices.Sorted(maps.Keys(r.pending)) {
		left = append(left, fmt.Sprintf("copyset %d/%d: %v", g.Pool(), g.Copyset(), cmp.Or(r.failed[g], why)))
	}
	if r.mapErr != nil {
		left = append(left, r.mapErr.Error())
	}
	return fmt.Errorf("cancel task %s: %w: read views may be left (their leases drop them; a retry is idempotent): %s",
		r.key, why, strings.Join(left, "; "))
}

// dropOn has leader drop the views of task key on groups: this server
// itself, else over DisaggViews.DropTask.
func (s *Service) dropOn(ctx context.Context, leader copyset.PeerID, key string, groups []copyset.GroupID) ([]*vpb.DropTaskResult, error) {
	if leader == s.copysets.Local() {
		return s.dropLed(ctx, key, groups), nil
	}
	if s.deps.Dial == nil {
		return nil, errors.New("no connections to other servers")
	}
	conn, err := s.deps.Dial(leader.Addr())
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	req := &vpb.DropTaskRequest{TaskKey: key}
	for _, g := range groups {
		req.Groups = append(req.Groups, uint64(g))
	}
	resp, err := vpb.NewDisaggViewsClient(conn).DropTask(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("drop task: %w", err)
	}
	return resp.GetResults(), nil
}

// dropLed drops the views of task key on those of groups this server
// leads, after an Establish of the task running here; one result per
// group.
func (s *Service) dropLed(ctx context.Context, key string, groups []copyset.GroupID) []*vpb.DropTaskResult {
	out := make([]*vpb.DropTaskResult, len(groups))
	for i, g := range groups {
		out[i] = &vpb.DropTaskResult{Group: uint64(g)}
	}
	unlock, err := s.views.running.lock(ctx, key)
	if err != nil {
		for _, res := range out {
			res.Error = fmt.Sprintf("waiting for an Establish of the task: %v", err)
		}
		return out
	}
	defer unlock()
	for _, res := range out {
		n := s.copysets.Get(copyset.GroupID(res.Group))
		if n == nil {
			res.NotLed = true
			continue
		}
		var err error
		res.Dropped, err = s.dropTaskOn(ctx, n, key)
		var (
			nl *copyset.NotLeaderError
			ou *copyset.OutcomeUnknownError
		)
		switch {
		case errors.As(err, &nl):
			res.NotLed, res.Leader = true, string(nl.Leader)
		case errors.As(err, &ou): // a drop is idempotent: retried on the leader
			res.NotLed, res.Leader = true, string(ou.Leader)
		case err != nil:
			res.Error = err.Error()
		}
	}
	s.forgetTask(key, "cancelled")
	return out
}

// dropTaskOn drops the views of task key on n, which this server leads:
// after a read barrier, every view a leader registered is in its store.
func (s *Service) dropTaskOn(ctx context.Context, n *copyset.Node, key string) (uint32, error) {
	if _, err := n.ReadBarrier(ctx); err != nil {
		return 0, fmt.Errorf("copyset %s: read barrier: %w", n.Group(), err)
	}
	st, ok := s.viewStore(n)
	if !ok {
		return 0, nil
	}
	var dropped uint32
	for _, v := range st.Views() {
		if v.Info.GetTaskKey() != key {
			continue
		}
		if err := s.dropView(ctx, n, v.Seq, "cancelled"); err != nil {
			return dropped, err
		}
		dropped++
	}
	return dropped, nil
}

func (v *viewsService) DropTask(ctx context.Context, req *vpb.DropTaskRequest) (*vpb.DropTaskResponse, error) {
	if req.GetTaskKey() == "" {
		return nil, status.Error(codes.InvalidArgument, "no task key")
	}
	if len(req.GetGroups()) > maxDropGroups {
		return nil, status.Errorf(codes.InvalidArgument, "%d copysets, at most %d", len(req.GetGroups()), maxDropGroups)
	}
	groups := make([]copyset.GroupID, len(req.GetGroups()))
	for i, g := range req.GetGroups() {
		groups[i] = copyset.GroupID(g)
	}
	return &vpb.DropTaskResponse{Results: v.s.dropLed(ctx, req.GetTaskKey(), groups)}, nil
}
