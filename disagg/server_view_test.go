package disagg_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/crc32"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/chunkserver"
	"github.com/chunkraft/chunkraft/chunkserver/servertest"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/disagg"
	"github.com/chunkraft/chunkraft/internal/testwait"
	vpb "github.com/chunkraft/chunkraft/proto/chunkraft/viewpb"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	kvcop "github.com/chunkraft/chunkraft/proto/kvproto/coprocessor"
	kvdisagg "github.com/chunkraft/chunkraft/proto/kvproto/disaggregated"
	kvmeta "github.com/chunkraft/chunkraft/proto/kvproto/metapb"
)

func chunkKeyBE(id uint64) []byte { return binary.BigEndian.AppendUint64(nil, id) }

// viewCluster is a 3-server cluster with short view leases checks.
func viewCluster(t *testing.T) *testCluster {
	return startTestCluster(t, 3, func(c *chunkserver.Config) {
		c.Disagg.Views.LeaseCheck = 20 * time.Millisecond
		c.Disagg.Views.MaxPreimageBytes = 1 << 20
	})
}

// establish calls EstablishDisaggTask for chunks [lo, hi) of the copyset
// on server i.
func (c *testCluster) establish(t *testing.T, i int, task int64, epoch uint64, lo, hi uint64, timeoutS int64) *kvdisagg.EstablishDisaggTaskResponse {
	t.Helper()
	req := &kvdisagg.EstablishDisaggTaskRequest{Meta: &kvdisagg.DisaggTaskMeta{StartTs: 7, TaskId: task}, TimeoutS: timeoutS,
		Regions: []*kvcop.RegionInfo{{RegionId: uint64(c.Group), RegionEpoch: &kvmeta.RegionEpoch{ConfVer: epoch},
			Ranges: []*kvcop.KeyRange{{Start: chunkKeyBE(lo), End: chunkKeyBE(hi)}}}}}
	resp, err := c.tikv(i).EstablishDisaggTask(t.Context(), req)
	if err != nil {
		t.Fatalf("establish: %v", err)
	}
	return resp
}

// segmentOf decodes the one segment of an Establish answer.
func segmentOf(t *testing.T, resp *kvdisagg.EstablishDisaggTaskResponse) *vpb.Segment {
	t.Helper()
	if resp.GetError() != nil || len(resp.GetTables()) != 1 {
		t.Fatalf("establish answered %v", resp)
	}
	var tb vpb.Table
	if err := proto.Unmarshal(resp.GetTables()[0], &tb); err != nil || tb.GetTableId() != 1 || len(tb.GetSegments()) != 1 {
		t.Fatalf("table %v: %v", &tb, err)
	}
	return tb.GetSegments()[0]
}

// fetch runs FetchDisaggPages of segment 1/1 on server i: the pages by
// id, or the error packet's message.
func (c *testCluster) fetch(t *testing.T, i int, task int64, ids []uint64) (map[uint64][]byte, string) {
	t.Helper()
	return c.fetchSegment(t, i, task, c.Group, ids)
}

// fetchSegment is fetch of copyset g's segment.
func (c *testCluster) fetchSegment(t *testing.T, i int, task int64, g copyset.GroupID, ids []uint64) (map[uint64][]byte, string) {
	t.Helper()
	st, err := c.tikv(i).FetchDisaggPages(t.Context(), &kvdisagg.FetchDisaggPagesRequest{
		SnapshotId: &kvdisagg.DisaggTaskMeta{StartTs: 7, TaskId: task}, TableId: int64(g.Pool()), SegmentId: uint64(g.Copyset()), PageIds: ids})
	if err != nil {
		t.Fatal(err)
	}
	pages := map[uint64][]byte{}
	for {
		p, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return pages, ""
		}
		if err != nil {
			t.Fatalf("fetch stream: %v", err)
		}
		if e := p.GetError(); e != nil {
			if _, err := st.Recv(); !errors.Is(err, io.EOF) {
				t.Fatalf("more after the error packet: %v", err)
			}
			return nil, e.GetMsg()
		}
		for _, b := range p.GetPages() {
			var pg vpb.Page
			if err := proto.Unmarshal(b, &pg); err != nil {
				t.Fatal(err)
			}
			if crc32.Checksum(pg.GetData(), crc32.MakeTable(crc32.Castagnoli)) != pg.GetCrc32C() {
				t.Fatalf("page %d: crc mismatch", pg.GetPageId())
			}
			pages[pg.GetPageId()] = pg.GetData()
		}
	}
}

func (c *testCluster) epoch(t *testing.T, i int) uint64 {
	return c.Servers[i].Copysets().Get(c.Group).Status().Epoch
}

// viewFilesOn lists the read-view files in server i's copyset dir.
func (c *testCluster) viewFilesOn(t *testing.T, i int) []string {
	t.Helper()
	ents, err := os.ReadDir(strings.TrimSuffix(c.ChunkPath(i, 0), "/chunk_0"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if n := e.Name(); strings.Contains(n, "view_") || strings.Contains(n, "vbase") {
			out = append(out, n)
		}
	}
	return out
}

// waitNoViewFiles waits until no server keeps read-view files.
func (c *testCluster) waitNoViewFiles(t *testing.T) {
	t.Helper()
	testwait.Until(t, 10*time.Second, func() error {
		left := []string{}
		for i := range c.Servers {
			left = append(left, c.viewFilesOn(t, i)...)
		}
		if len(left) > 0 {
			return fmt.Errorf("read-view files left: %v", left)
		}
		return nil
	})
}

func deleteReq(chunk uint64) *pb.ChunkRequest {
	return &pb.ChunkRequest{OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE.Enum(), LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1),
		ChunkId: proto.Uint64(chunk), Sn: proto.Uint64(1)}
}

// TestDisaggViewAsOfEstablish: a view lists the blocks with data at
// Establish; after every one is overwritten and a chunk deleted, Fetch
// returns exactly the bytes as of Establish, from the leader after a
// leader change too; the segment cannot be fetched twice and its view's
// files are gone on every replica; the documented errors.
func TestDisaggViewAsOfEstablish(t *testing.T) {
	c := viewCluster(t)
	orig := map[uint64][]byte{}
	for _, w := range []struct {
		chunk uint64
		off   uint32
		n     int
	}{{1, 0, 4}, {2, 8192, 1}, {5, 0, 1}} {
		data := bytes.Repeat([]byte{byte(w.chunk*16 + uint64(w.off/4096))}, w.n*4096)
		for i := range data {
			data[i] += byte(i / 4096)
		}
		c.Write(t, w.chunk, 1, w.off, data, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
		for k := range w.n {
			orig[disagg.PageID(w.chunk, w.off/4096+uint32(k))] = data[k*4096 : (k+1)*4096]
		}
	}
	delete(orig, disagg.PageID(5, 0)) // outside the range
	l := c.Leader(t)
	ep := c.epoch(t, l)

	// The documented errors of Establish.
	if r := c.establish(t, l, 1, ep+1, 1, 5, 60); r.GetError().GetErrorRegion() == nil || r.GetError().GetErrorRegion().GetRegionIds()[0] != uint64(c.Group) {
		t.Fatalf("wrong epoch: %v", r)
	}
	if r := c.establish(t, (l+1)%3, 1, ep, 1, 5, 60); r.GetError().GetErrorRegion() == nil {
		t.Fatalf("not the leader: %v", r)
	}
	bad := &kvdisagg.EstablishDisaggTaskRequest{Meta: &kvdisagg.DisaggTaskMeta{TaskId: 1},
		Regions: []*kvcop.RegionInfo{{RegionId: uint64(c.Group), RegionEpoch: &kvmeta.RegionEpoch{ConfVer: ep}, Ranges: []*kvcop.KeyRange{{Start: []byte("x")}}}}}
	if r, err := c.tikv(l).EstablishDisaggTask(t.Context(), bad); err != nil || r.GetError().GetErrorOther() == nil {
		t.Fatalf("a bad range key: %v %v", r, err)
	}

	seg := segmentOf(t, c.establish(t, l, 1, ep, 1, 5, 60))
	if len(seg.GetPageIds()) != len(orig) || seg.GetConfVer() != ep || seg.GetRegionId() != uint64(c.Group) {
		t.Fatalf("segment %v, want %d pages", seg, len(orig))
	}
	for _, id := range seg.GetPageIds() {
		if orig[id] == nil {
			t.Fatalf("page %d listed, not written before establish", id)
		}
	}
	again := segmentOf(t, c.establish(t, l, 1, ep, 1, 5, 60)) // a retry: the same view
	if again.GetViewSeq() != seg.GetViewSeq() {
		t.Fatalf("retried establish: view %d, first %d", again.GetViewSeq(), seg.GetViewSeq())
	}

	// Overwrite every block, delete chunk 2.
	c.Write(t, 1, 1, 0, bytes.Repeat([]byte{0xee}, 4*4096), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	c.Write(t, 2, 1, 8192, bytes.Repeat([]byte{0xdd}, 4096), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	c.Do(t, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, func(cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		return cl.DeleteChunk(context.Background(), deleteReq(2))
	})

	// A new leader serves the same bytes.
	if err := c.Servers[l].Copysets().Get(c.Group).TransferLeaderAny(t.Context()); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, func() error {
		if c.Leader(t) == l {
			return fmt.Errorf("server %d still leads", l)
		}
		return nil
	})
	l = c.Leader(t)

	// A follower answers 503 naming the leader (once it has heard from
	// it), before it looks at the snapshot id: the segment stays.
	for _, task := range []int64{1, 99} {
		want := fmt.Sprintf("copyset %d/%d is not led here; leader %s", c.Group.Pool(), c.Group.Copyset(), c.Cfgs[l].Listen)
		testwait.Until(t, 10*time.Second, func() error {
			if _, msg := c.fetch(t, (l+1)%3, task, seg.GetPageIds()); msg != want {
				return fmt.Errorf("fetch of task %d on a follower: %q, want %q", task, msg, want)
			}
			return nil
		})
	}
	if _, msg := c.fetch(t, l, 99, nil); !strings.Contains(msg, "not found") {
		t.Fatalf("unknown snapshot id: %q", msg)
	}
	if _, msg := c.fetch(t, l, 1, []uint64{disagg.PageID(5, 0)}); !strings.Contains(msg, "not in segment") {
		t.Fatalf("a page outside the view: %q", msg)
	}
	pages, msg := c.fetch(t, l, 1, seg.GetPageIds())
	if msg != "" || len(pages) != len(orig) {
		t.Fatalf("fetch: %d pages, error %q", len(pages), msg)
	}
	for id, want := range orig {
		if !bytes.Equal(pages[id], want) {
			t.Fatalf("page %d differs from its content at establish", id)
		}
	}
	if _, msg := c.fetch(t, l, 1, seg.GetPageIds()); msg == "" {
		t.Fatal("a second fetch of the segment succeeded")
	}
	c.waitNoViewFiles(t)
}

// TestDisaggViewCancelLeaseBudget: cancel, an expired lease and a passed
// pre-image budget drop a view and free its files on every replica; the
// next Fetch answers why.
func TestDisaggViewCancelLeaseBudget(t *testing.T) {
	c := viewCluster(t)
	c.Write(t, 1, 1, 0, bytes.Repeat([]byte{1}, 1<<20), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	l := c.Leader(t)
	ep := c.epoch(t, l)
	overwrite := func(b byte, n int) {
		c.Write(t, 1, 1, 0, bytes.Repeat([]byte{b}, n), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	}

	segmentOf(t, c.establish(t, l, 1, ep, 0, 0, 60))
	overwrite(2, 64<<10)
	if len(c.viewFilesOn(t, l)) == 0 {
		t.Fatal("no pre-images kept")
	}
	for range 2 { // idempotent
		if _, err := c.tikv(l).CancelDisaggTask(t.Context(), &kvdisagg.CancelDisaggTaskRequest{Meta: &kvdisagg.DisaggTaskMeta{StartTs: 7, TaskId: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	c.waitNoViewFiles(t)
	if _, msg := c.fetch(t, l, 1, nil); !strings.Contains(msg, "cancelled") {
		t.Fatalf("fetch after cancel: %q", msg)
	}

	segmentOf(t, c.establish(t, l, 2, ep, 0, 0, 1))
	overwrite(3, 64<<10)
	c.waitNoViewFiles(t) // the lease of 1 s expired
	if _, msg := c.fetch(t, l, 2, nil); !strings.Contains(msg, "lease expired") {
		t.Fatalf("fetch after the lease: %q", msg)
	}

	segmentOf(t, c.establish(t, l, 3, ep, 0, 0, 60))
	overwrite(4, 1<<20+4096) // past the 1 MiB budget
	testwait.Until(t, 10*time.Second, func() error {
		if _, msg := c.fetch(t, l, 3, nil); !strings.Contains(msg, "budget") {
			return fmt.Errorf("fetch of an over-budget view: %q", msg)
		}
		return nil
	})
	c.waitNoViewFiles(t)
}

// TestDisaggViewSnapshotInstall: a follower that was down while a view
// was established, its blocks overwritten and one of its chunks deleted
// catches up by a snapshot install; made leader, it serves the bytes as of
// establish.
func TestDisaggViewSnapshotInstall(t *testing.T) {
	c := startTestCluster(t, 3, func(cfg *chunkserver.Config) {
		cfg.Raft.SnapshotThreshold, cfg.Raft.TrailingLogs = 32, 8
		cfg.Raft.SnapshotInterval = 200 * time.Millisecond
	})
	orig := map[uint64][]byte{}
	for id := uint64(1); id <= 2; id++ {
		for b := range uint32(4) {
			data := servertest.Block(byte(id*16) + byte(b))
			c.Write(t, id, 1, b*4096, data, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
			orig[disagg.PageID(id, b)] = data
		}
	}
	l := c.Leader(t)
	f := (l + 1) % 3
	c.Stop(f) // the view comes to it only in the snapshot
	seg := segmentOf(t, c.establish(t, l, 1, c.epoch(t, l), 1, 3, 600))
	for i := range 60 {
		c.Write(t, uint64(1+i%2), 1, uint32(i%4)*4096, servertest.Block(byte(0xb0+i)), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	}
	c.Do(t, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, func(cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		return cl.DeleteChunk(context.Background(), deleteReq(2))
	})
	for i, srv := range c.Servers {
		if i == f {
			continue
		}
		if err := srv.Copysets().Get(c.Group).Snapshot(context.Background()); err != nil && !strings.Contains(err.Error(), "nothing new") {
			t.Fatal(err)
		}
	}
	c.Start(f, nil)
	c.WaitInstalled(t, f)
	c.WaitSame(t, []uint64{1})
	nf := c.Servers[f].Copysets().Get(c.Group)
	testwait.Until(t, 20*time.Second, func() error {
		if nf.IsLeader() {
			return nil
		}
		if n := c.Servers[c.Leader(t)].Copysets().Get(c.Group); n.IsLeader() && n != nf {
			_ = n.TransferLeader(t.Context(), nf.Status().Peer)
		}
		return errors.New("the follower did not take the lead")
	})
	pages, msg := c.fetch(t, f, 1, seg.GetPageIds())
	if msg != "" || len(pages) != len(orig) {
		t.Fatalf("fetch from the installed follower: %d pages, error %q", len(pages), msg)
	}
	for id, want := range orig {
		if !bytes.Equal(pages[id], want) {
			t.Fatalf("page %d differs from its content at establish", id)
		}
	}
}

// A task established one copyset at a time (as chunkctl does): the second
// Establish adds a view on its copyset and answers that copyset's segment,
// a retry answers its own copyset's, and once one segment was fetched (its
// view gone) the others are still answered and fetched.
func TestDisaggViewTaskAcrossCopysets(t *testing.T) {
	c, l, second := viewClusterTwoCopysets(t)
	establish := func(g copyset.GroupID) *vpb.Segment {
		t.Helper()
		sg := segmentOf(t, c.establishOn(t, l, 9, g))
		if sg.GetSegmentId() != uint64(g.Copyset()) {
			t.Fatalf("Establish on %s answered segment %d", g, sg.GetSegmentId())
		}
		return sg
	}
	first := establish(c.Group)
	establish(second)
	if again := establish(c.Group); again.GetViewSeq() != first.GetViewSeq() || len(again.GetPageIds()) != 1 {
		t.Fatalf("a retry on %s: view %d with %d pages, want view %d with 1", c.Group, again.GetViewSeq(), len(again.GetPageIds()), first.GetViewSeq())
	}
	pages, msg := c.fetch(t, l, 9, first.GetPageIds())
	if msg != "" || !bytes.Equal(pages[first.GetPageIds()[0]], bytes.Repeat([]byte{7}, 4096)) {
		t.Fatalf("fetch of %s: %q, %d pages", c.Group, msg, len(pages))
	}
	establish(second) // the task's fetched segment on 1/1 is gone; 1/2's is still answered
}
