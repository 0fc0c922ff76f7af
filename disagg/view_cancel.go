package disagg

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
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
	hosted := map[copyset.GroupID]copyset.PeerID{}
	for _, n := range s.copysets.List() {
		hosted[n.Group()] = ""
	}
	res := s.viewsRouter().RouteEach(ctx, copyset.Each{Hints: hosted, AllOfMap: true},
		func(ctx context.Context, drop dropper, to copyset.Target, groups []copyset.GroupID) []copyset.Reply {
			results, err := drop(ctx, key, groups)
			return dropReplies(to, groups, results, err)
		})
	s.forgetTask(key, "cancelled")
	if res.Err == nil {
		return nil
	}
	var left []string
	for _, g := range res.Pending() {
		left = append(left, fmt.Sprintf("copyset %d/%d: %v", g.Pool(), g.Copyset(), cmp.Or(res.Replies[g].Err(), res.Err)))
	}
	if res.MapErr != nil {
		left = append(left, res.MapErr.Error())
	}
	return fmt.Errorf("cancel task %s: %w: read views may be left (their leases drop them; a retry is idempotent): %s",
		key, res.Err, strings.Join(left, "; "))
}

// dropper has a server drop the views of task key on groups: this server
// itself (dropLed), else over DisaggViews.DropTask.
type dropper func(ctx context.Context, key string, groups []copyset.GroupID) ([]*vpb.DropTaskResult, error)

// cancelBackoff paces the rounds of a Cancel.
var cancelBackoff = copyset.Backoff{First: 20 * time.Millisecond, Max: 500 * time.Millisecond}

// viewsRouter routes the drops of a Cancel: a copyset this server leads
// to itself, a hosted one to the leader its replica knows, the others to
// the leader in the cluster map, each asked again (the leader its answer
// names, or the one known by then) until it answers.
func (s *Service) viewsRouter() *copyset.Router[dropper] {
	return &copyset.Router[dropper]{
		Self:    s.copysets.Local(),
		Replica: copyset.ReplicaOf(s.copysets),
		Local: func(ctx context.Context, key string, groups []copyset.GroupID) ([]*vpb.DropTaskResult, error) {
			return s.dropLed(ctx, key, groups), nil
		},
		Dial: func(p copyset.PeerID) (dropper, error) {
			if s.deps.Dial == nil {
				return nil, errors.New("no connections to other servers")
			}
			conn, err := s.deps.Dial(p.Addr())
			if err != nil {
				return nil, err
			}
			views := vpb.NewDisaggViewsClient(conn)
			return func(ctx context.Context, key string, groups []copyset.GroupID) ([]*vpb.DropTaskResult, error) {
				req := &vpb.DropTaskRequest{TaskKey: key}
				for _, g := range groups {
					req.Groups = append(req.Groups, uint64(g))
				}
				resp, err := views.DropTask(ctx, req)
				if err != nil {
					return nil, fmt.Errorf("drop task: %w", err)
				}
				return resp.GetResults(), nil
			}, nil
		},
		Map:     s.mapLeaders,
		Backoff: cancelBackoff,
	}
}

// mapLeaders is every copyset's leader in the cluster map (nil without
// one); what it read comes with an error when the map is not whole.
func (s *Service) mapLeaders(ctx context.Context, _ []copyset.GroupID) (map[copyset.GroupID]copyset.PeerID, error) {
	if s.deps.Cluster == nil {
		return nil, nil
	}
	cm, err := s.deps.Cluster(ctx, &clusterpb.ClusterMapRequest{})
	if err != nil {
		return nil, fmt.Errorf("%w (the copysets this server does not host were not asked)", err)
	}
	out := map[copyset.GroupID]copyset.PeerID{}
	for _, c := range cm.GetCopysets() {
		out[copyset.NewGroupID(c.GetPool(), c.GetCopyset())] = copyset.PeerID(c.GetLeader())
	}
	switch {
	case ctx.Err() != nil:
		return out, errors.New("the crawl was cut short (the copysets of the servers it did not ask were not asked)")
	case cm.GetTruncated():
		return out, errors.New("truncated: the copysets of the servers it left out were not asked")
	}
	return out, nil
}

// dropReplies are the replies of a drop on groups that to answered with
// results or err: a copyset to does not lead is asked again where its
// answer points, one it failed is asked again of the leader known by
// then.
func dropReplies(to copyset.Target, groups []copyset.GroupID, results []*vpb.DropTaskResult, err error) []copyset.Reply {
	at := to.Peer.Addr()
	out := make([]copyset.Reply, len(groups))
	if err != nil {
		for i := range out {
			out[i] = copyset.Redirect("", fmt.Errorf("leader %s: %w", at, err))
		}
		return out
	}
	byGroup := map[copyset.GroupID]*vpb.DropTaskResult{}
	for _, res := range results {
		byGroup[copyset.GroupID(res.GetGroup())] = res
	}
	for i, g := range groups {
		switch res := byGroup[g]; {
		case res == nil:
			out[i] = copyset.Redirect("", fmt.Errorf("leader %s did not answer for it", at))
		case res.GetNotLed():
			out[i] = copyset.Redirect(copyset.PeerID(res.GetLeader()), fmt.Errorf("%s does not lead it", at))
		case res.GetError() != "":
			out[i] = copyset.Redirect("", fmt.Errorf("leader %s: %s", at, res.GetError()))
		default:
			out[i] = copyset.Answered()
		}
	}
	return out
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
