package disagg_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/chunkserver"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/chunkread"
	"github.com/chunkraft/chunkraft/internal/testwait"
	vpb "github.com/chunkraft/chunkraft/proto/chunkraft/viewpb"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	kvcop "github.com/chunkraft/chunkraft/proto/kvproto/coprocessor"
	kvdisagg "github.com/chunkraft/chunkraft/proto/kvproto/disaggregated"
	kvmeta "github.com/chunkraft/chunkraft/proto/kvproto/metapb"
)

// createCopyset creates copyset g on the servers members, its peers.
func (c *testCluster) createCopyset(t *testing.T, g copyset.GroupID, members ...int) {
	t.Helper()
	var peers []copyset.PeerID
	for _, i := range members {
		peers = append(peers, c.Servers[i].Local())
	}
	for _, i := range members {
		if _, err := c.Servers[i].Copysets().Create(t.Context(), g, peers); err != nil {
			t.Fatal(err)
		}
	}
}

// leadOn waits until server l leads g, moving the leadership to it, and
// has applied what was committed (a new copyset's epoch moves when it
// applies its first configuration).
func (c *testCluster) leadOn(t *testing.T, g copyset.GroupID, l int) {
	t.Helper()
	testwait.Until(t, 20*time.Second, func() error {
		if c.Servers[l].Copysets().Get(g).IsLeader() {
			return nil
		}
		var transfer error
		for i := range c.Servers {
			if !c.Running(i) || i == l {
				continue
			}
			if n := c.Servers[i].Copysets().Get(g); n != nil && n.IsLeader() {
				if err := n.TransferLeader(t.Context(), c.Servers[l].Local()); err != nil {
					transfer = fmt.Errorf("transfer %d/%d to server %d: %w", g.Pool(), g.Copyset(), l, err)
				}
			}
		}
		if transfer != nil {
			return transfer
		}
		return fmt.Errorf("server %d does not lead %d/%d", l, g.Pool(), g.Copyset())
	})
	if _, err := c.Servers[l].Copysets().Get(g).ReadBarrier(t.Context()); err != nil {
		t.Fatalf("server %d, copyset %d/%d: read barrier: %v", l, g.Pool(), g.Copyset(), err)
	}
}

// viewClusterTwoCopysets is viewCluster with a block of 7s at the start
// of chunk 1 of 1/1, and copyset second (1/2) on every server; server l
// leads both.
func viewClusterTwoCopysets(t *testing.T) (c *testCluster, l int, second copyset.GroupID) {
	t.Helper()
	c = viewCluster(t)
	c.Write(t, 1, 1, 0, bytes.Repeat([]byte{7}, 4096), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	l = c.Leader(t)
	second = copyset.NewGroupID(1, 2)
	c.createCopyset(t, second, 0, 1, 2)
	c.leadOn(t, second, l)
	return c, l, second
}

// establishOn calls EstablishDisaggTask of task on server i for every
// chunk of the copysets gs, with their epochs as server i has them.
// establishOn runs EstablishDisaggTask of task on copysets gs on server i,
// which the test means to lead them: when an election moved one away (a
// loaded machine flaps the harness's short elections), leadership is
// moved back and the call made again, for up to 20 s.
func (c *testCluster) establishOn(t *testing.T, i int, task int64, gs ...copyset.GroupID) *kvdisagg.EstablishDisaggTaskResponse {
	t.Helper()
	var resp *kvdisagg.EstablishDisaggTaskResponse
	// At the timeout the last answer is the caller's to judge.
	_ = testwait.For(20*time.Second, func() error {
		var err error
		if resp, err = c.tikv(i).EstablishDisaggTask(t.Context(), c.establishReq(i, task, gs...)); err != nil {
			t.Fatalf("establish: %v", err)
		}
		if msg := resp.GetError().GetErrorRegion().GetMsg(); strings.Contains(msg, "is not led here") {
			for _, g := range gs {
				c.leadOn(t, g, i)
			}
			return errors.New(msg)
		}
		return nil
	})
	return resp
}

func (c *testCluster) establishReq(i int, task int64, gs ...copyset.GroupID) *kvdisagg.EstablishDisaggTaskRequest {
	req := &kvdisagg.EstablishDisaggTaskRequest{Meta: viewMeta(task), TimeoutS: 60}
	for _, g := range gs {
		ep := c.Servers[i].Copysets().Get(g).Status().Epoch
		req.Regions = append(req.Regions, &kvcop.RegionInfo{RegionId: uint64(g), RegionEpoch: &kvmeta.RegionEpoch{ConfVer: ep}})
	}
	return req
}

func viewMeta(task int64) *kvdisagg.DisaggTaskMeta {
	return &kvdisagg.DisaggTaskMeta{StartTs: 7, TaskId: task}
}

func (c *testCluster) cancelTask(t *testing.T, i int, task int64) error {
	t.Helper()
	_, err := c.tikv(i).CancelDisaggTask(t.Context(), &kvdisagg.CancelDisaggTaskRequest{Meta: viewMeta(task)})
	return err
}

// taskViews counts the views of task in server i's replica of g.
func (c *testCluster) taskViews(t *testing.T, i int, g copyset.GroupID, task int64) int {
	t.Helper()
	n := c.Servers[i].Copysets().Get(g)
	if n == nil {
		return 0
	}
	st, err := chunkread.Of(n)
	ok := err == nil
	if !ok {
		t.Fatalf("server %d: copyset %d/%d keeps no views", i, g.Pool(), g.Copyset())
	}
	views := 0
	for _, v := range st.Views() {
		var m kvdisagg.DisaggTaskMeta
		if err := proto.Unmarshal(v.Info.GetTaskMeta(), &m); err != nil {
			t.Fatal(err)
		}
		if proto.Equal(&m, viewMeta(task)) {
			views++
		}
	}
	return views
}

// waitTaskViews waits until every running replica of g keeps want views
// of task.
func (c *testCluster) waitTaskViews(t *testing.T, g copyset.GroupID, task int64, want int) {
	t.Helper()
	testwait.Until(t, 10*time.Second, func() error {
		var have []int
		ok := true
		for i := range c.Servers {
			if !c.Running(i) || c.Servers[i].Copysets().Get(g) == nil {
				continue
			}
			v := c.taskViews(t, i, g, task)
			have = append(have, v)
			ok = ok && v == want
		}
		if !ok {
			return fmt.Errorf("copyset %d/%d: replicas keep %v views of task %d, want %d each", g.Pool(), g.Copyset(), have, task, want)
		}
		return nil
	})
}

// TestDisaggViewCancelEverywhere: a CancelDisaggTask received by one
// server drops the task's views on every copyset that has one: one it
// leads, one it hosts and another server leads, one it does not host; a
// second cancel is a no-op. With the only replica of one of the task's
// copysets down, the cancel answers UNAVAILABLE naming it within
// disagg.views.cancel_timeout and drops the other views; once the replica
// is back, the retry drops its view.
func TestDisaggViewCancelEverywhere(t *testing.T) {
	c := startTestCluster(t, 3, func(cfg *chunkserver.Config) {
		cfg.Disagg.Views.LeaseCheck = 20 * time.Millisecond
		cfg.Disagg.Views.CancelTimeout = time.Second
	})
	a := c.Leader(t)
	b, o := (a+1)%3, (a+2)%3
	second, third := copyset.NewGroupID(1, 2), copyset.NewGroupID(1, 3)
	c.createCopyset(t, second, 0, 1, 2)
	c.leadOn(t, second, b)
	c.createCopyset(t, third, o) // not on a
	c.leadOn(t, third, o)

	segmentOf(t, c.establishOn(t, a, 1, c.Group))
	for _, e := range []struct {
		i int
		g copyset.GroupID
	}{{b, second}, {o, third}} {
		if r := c.establishOn(t, e.i, 1, e.g); r.GetError() != nil || len(r.GetTables()) != 1 {
			t.Fatalf("establish on %d/%d: %v", e.g.Pool(), e.g.Copyset(), r)
		}
	}
	groups := []copyset.GroupID{c.Group, second, third}
	for _, g := range groups {
		c.waitTaskViews(t, g, 1, 1)
	}
	for range 2 { // idempotent
		if err := c.cancelTask(t, a, 1); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range groups {
		c.waitTaskViews(t, g, 1, 0)
	}
	c.leadOn(t, second, b) // (an election may have moved it)
	if _, msg := c.fetchSegment(t, b, 1, second, nil); !strings.Contains(msg, "cancelled") {
		t.Fatalf("fetch on the leader of 1/2 after the cancel: %q", msg)
	}
	if err := c.cancelTask(t, b, 1); err != nil {
		t.Fatalf("a cancel of a cancelled task: %v", err)
	}

	segmentOf(t, c.establishOn(t, a, 2, c.Group))
	segmentOf(t, c.establishOn(t, o, 2, third))
	c.waitTaskViews(t, third, 2, 1)
	c.Stop(o)
	start := time.Now()
	err := c.cancelTask(t, a, 2)
	if grpcstatus.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "1/3") {
		t.Fatalf("cancel with the leader of 1/3 down: %v, want UNAVAILABLE naming 1/3", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("cancel with the leader of 1/3 down took %v", d)
	}
	c.waitTaskViews(t, c.Group, 2, 0)
	c.Start(o, nil)
	c.leadOn(t, third, o)
	if got := c.taskViews(t, o, third, 2); got != 1 {
		t.Fatalf("1/3 keeps %d views of task 2 while its leader was down, want 1", got)
	}
	// Retried until it succeeds: server a's connection to o may still be
	// in its reconnect backoff.
	testwait.Until(t, 15*time.Second, func() error {
		err := c.cancelTask(t, a, 2)
		if err != nil && grpcstatus.Code(err) != codes.Unavailable {
			t.Fatalf("the cancel retried: %v", err)
		}
		if err != nil {
			return fmt.Errorf("the cancel retried: %w", err)
		}
		return nil
	})
	c.waitTaskViews(t, third, 2, 0)
}

// TestDisaggViewConcurrentEstablish: concurrent Establish calls of one
// task on the same copysets register one view per copyset, and every call
// answers it.
func TestDisaggViewConcurrentEstablish(t *testing.T) {
	c, l, second := viewClusterTwoCopysets(t)
	const calls = 8
	resps := make([]*kvdisagg.EstablishDisaggTaskResponse, calls)
	errs := make([]error, calls)
	var wg sync.WaitGroup
	for k := range calls {
		wg.Go(func() {
			resps[k], errs[k] = c.tikv(l).EstablishDisaggTask(t.Context(), c.establishReq(l, 3, c.Group, second))
		})
	}
	wg.Wait()
	seqs := map[uint64]uint64{} // region id -> view seq
	for k, resp := range resps {
		if errs[k] != nil || resp.GetError() != nil || len(resp.GetTables()) != 1 {
			t.Fatalf("establish %d: %v %v", k, resp, errs[k])
		}
		var tb vpb.Table
		if err := proto.Unmarshal(resp.GetTables()[0], &tb); err != nil || len(tb.GetSegments()) != 2 {
			t.Fatalf("establish %d: table %v: %v", k, &tb, err)
		}
		for _, sg := range tb.GetSegments() {
			if seq, ok := seqs[sg.GetRegionId()]; ok && seq != sg.GetViewSeq() {
				t.Fatalf("establish %d: region %d view %d, another call answered view %d", k, sg.GetRegionId(), sg.GetViewSeq(), seq)
			}
			seqs[sg.GetRegionId()] = sg.GetViewSeq()
		}
	}
	for _, g := range []copyset.GroupID{c.Group, second} {
		if n := c.taskViews(t, l, g, 3); n != 1 {
			t.Fatalf("the leader of %d/%d keeps %d views of the task, want 1", g.Pool(), g.Copyset(), n)
		}
		c.waitTaskViews(t, g, 3, 1)
	}
}
