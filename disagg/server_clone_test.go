package disagg_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/chunkserver"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/disagg"
	"github.com/chunkraft/chunkraft/internal/testwait"
	disaggpb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// fastCloneLocks makes the reconciler look every 50ms and release locks
// older than 3s (the test checks a lock it just took within that).
func fastCloneLocks(c *chunkserver.Config) {
	c.Disagg.Clones.Grace, c.Disagg.Clones.Interval = 3*time.Second, 50*time.Millisecond
}

// internalCall runs call on the lock owner (retrying not_owner; a
// stopped server is not asked).
func (c *testCluster) internalCall(t *testing.T, call func(cl disaggpb.DisaggInternalClient) (notOwner bool, err error)) {
	t.Helper()
	c.onOwner(t, func(i int) string {
		if !c.Running(i) {
			return "not_owner"
		}
		notOwner, err := call(disaggpb.NewDisaggInternalClient(c.Conns[i]))
		if err != nil {
			t.Fatalf("DisaggInternal on %d: %v", i, err)
		}
		if notOwner {
			return "not_owner"
		}
		return "done"
	})
}

func (c *testCluster) gc(t *testing.T, prefix string, grace time.Duration) *disaggpb.GcResponse {
	t.Helper()
	var resp *disaggpb.GcResponse
	c.internalCall(t, func(cl disaggpb.DisaggInternalClient) (bool, error) {
		var err error
		resp, err = cl.Gc(t.Context(), &disaggpb.GcRequest{Prefix: prefix, GraceMs: grace.Milliseconds()})
		return resp.GetNotOwner(), err
	})
	return resp
}

func (c *testCluster) cloneLocks(t *testing.T, name string) []string {
	t.Helper()
	var holders []string
	c.internalCall(t, func(cl disaggpb.DisaggInternalClient) (bool, error) {
		resp, err := cl.List(t.Context(), &disaggpb.ListRequest{Prefix: name})
		holders = nil
		for _, f := range resp.GetFiles() {
			if f.GetKey() != name {
				continue
			}
			for _, l := range f.GetCloneLocks() {
				holders = append(holders, disagg.CloneHolder(l.GetPool(), l.GetCopyset(), l.GetChunk()))
			}
		}
		return resp.GetNotOwner(), err
	})
	return holders
}

// waitUnlocked waits until no clone lock holds name (the reconciler).
func (c *testCluster) waitUnlocked(t *testing.T, name string) {
	t.Helper()
	testwait.Until(t, 30*time.Second, func() error {
		if held := c.cloneLocks(t, name); len(held) > 0 {
			return fmt.Errorf("the clone lock on %s was never released: %v", name, held)
		}
		return nil
	})
}

// s3Clone creates clone chunk id of object name on the leader; the gRPC
// error, if any.
func (c *testCluster) s3Clone(t *testing.T, id uint64, name string) error {
	t.Helper()
	var resp *pb.CreateS3CloneChunkResponse
	var err error
	testwait.Until(t, 10*time.Second, func() error {
		l := c.Leader(t)
		resp, err = c.Chunk(l).CreateS3CloneChunk(t.Context(), &pb.CreateS3CloneChunkRequest{
			LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(id), ChunkLocationInfo: proto.String(name)})
		if err == nil && resp.GetStatus() == pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_REDIRECTED {
			return fmt.Errorf("CreateS3CloneChunk %d: server %d redirects to %q", id, l, resp.GetRedirect())
		}
		return nil
	})
	if err == nil && resp.GetStatus() != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
		t.Fatalf("CreateS3CloneChunk %d: %v", id, resp.GetStatus())
	}
	return err
}

func gcNames(objs []*disaggpb.GcObject) string {
	var out []string
	for _, o := range objs {
		s := o.GetName()
		if o.GetLockBy() != "" {
			s += " by " + o.GetLockBy()
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

// @s3 clone sources through the lock table and disagg gc, on a 3-server
// cluster over S3: a clone holds its source's lock from its creation; gc
// marks and later removes only what no clone reads; a marked source
// refuses a new clone; the reconciler releases the lock of a recovered
// clone, a deleted one and one whose creation failed after its lock.
func TestDisaggCloneSourceLocks(t *testing.T) {
	c, st, _ := s3Cluster(t, 3, fastCloneLocks)
	for _, name := range []string{"img/a", "img/b", "img/c", "img/d", "other/x"} {
		putObject(t, st, name)
	}
	if err := c.s3Clone(t, 5, "img/a"); err != nil {
		t.Fatal(err)
	}
	if err := c.s3Clone(t, 6, "img/d"); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.cloneLocks(t, "img/a"), " "); got != "clone:1/1/5" {
		t.Fatalf("clone locks of img/a: %q", got)
	}

	// gc marks what no clone reads, keeps the sources; no grace yet.
	r := c.gc(t, "img/", time.Hour)
	if gcNames(r.GetMarked()) != "img/b, img/c" || gcNames(r.GetLocked()) != "img/a by clone:1/1/5, img/d by clone:1/1/6" || len(r.GetRemoved()) != 0 {
		t.Fatalf("first gc: %v", r)
	}
	// A marked source refuses a new clone: nothing is created.
	err := c.s3Clone(t, 7, "img/b")
	if grpcstatus.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "object is mark deleted, name=img/b") {
		t.Fatalf("clone of a marked source: %v", err)
	}
	if sns := c.Info(t, 7); len(sns) != 0 {
		t.Fatalf("chunk 7 exists after a refused clone: %v", sns)
	}
	// A source name the lock table cannot hold is refused too.
	if err := c.s3Clone(t, 7, strings.Repeat("n/", 300)+"x"); grpcstatus.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "at most 512") {
		t.Fatalf("clone of a long name: %v", err)
	}
	// Within the grace the marks wait; after it they go, objects and all.
	if r := c.gc(t, "img/", time.Hour); gcNames(r.GetWaiting()) != "img/b, img/c" || len(r.GetMarked())+len(r.GetRemoved()) != 0 {
		t.Fatalf("gc within the grace: %v", r)
	}
	if r := c.gc(t, "img/", 0); gcNames(r.GetRemoved()) != "img/b, img/c" || len(r.GetLocked()) != 2 {
		t.Fatalf("gc after the grace: %v", r)
	}
	if got := strings.Join(objectNames(t, st, ""), " "); got != "img/a img/d other/x" {
		t.Fatalf("objects after gc: %s", got)
	}

	// Recover clone 5 fully, delete clone 6: their locks go.
	c.Do(t, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, func(cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		return cl.RecoverChunk(t.Context(), &pb.ChunkRequest{OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_RECOVER.Enum(), LogicPoolId: proto.Uint32(1),
			CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(5), Offset: proto.Uint32(0), Size: proto.Uint32(16 << 20)})
	})
	c.Do(t, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, func(cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		return cl.DeleteChunk(t.Context(), &pb.ChunkRequest{OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE.Enum(), LogicPoolId: proto.Uint32(1),
			CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(6)})
	})
	c.waitUnlocked(t, "img/a")
	c.waitUnlocked(t, "img/d")
	if r := c.gc(t, "img/", 0); gcNames(r.GetMarked()) != "img/a, img/d" {
		t.Fatalf("gc after recover and delete: %v", r)
	}
	if r := c.gc(t, "img/", 0); gcNames(r.GetRemoved()) != "img/a, img/d" {
		t.Fatalf("gc removing the released sources: %v", r)
	}
	if got := strings.Join(objectNames(t, st, ""), " "); got != "other/x" {
		t.Fatalf("objects at the end: %s", got)
	}

	// A lock left by a creation that failed after it (the lock taken, the
	// chunk never created) is released by the reconciler after the grace.
	c.internalCall(t, func(cl disaggpb.DisaggInternalClient) (bool, error) {
		resp, err := cl.LockClone(t.Context(), &disaggpb.LockCloneRequest{Name: "other/x", Pool: 1, Copyset: 1, Chunk: 9})
		return resp.GetNotOwner(), err
	})
	// And a creation that failed after its lock: chunk 5 exists (a normal
	// chunk now), so the clone is refused with CHUNK_EXIST.
	c.Do(t, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_CHUNK_EXIST, func(cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		resp, err := cl.CreateS3CloneChunk(t.Context(), &pb.CreateS3CloneChunkRequest{LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1),
			ChunkId: proto.Uint64(5), ChunkLocationInfo: proto.String("other/x")})
		return &pb.ChunkResponse{Status: resp.GetStatus().Enum(), Redirect: resp.Redirect}, err
	})
	if got := strings.Join(c.cloneLocks(t, "other/x"), " "); !strings.Contains(got, "clone:1/1/5") {
		t.Fatalf("clone locks of other/x: %q", got)
	}
	c.waitUnlocked(t, "other/x")
	if r := c.gc(t, "other/", 0); gcNames(r.GetMarked()) != "other/x" {
		t.Fatalf("gc of other/: %v", r)
	}
}

// disagg gc's bad input is refused with nothing changed; a data file key
// is marked as tryMarkDelete marks it (its .del object), a DTFile with
// the objects under it, and an upstream lock object keeps its file.
func TestDisaggGcDataFiles(t *testing.T) {
	c, st, _ := s3Cluster(t, 3)
	const dat, dmf, locked = "s1/data/dat_1_0", "s1/data/t_5/dmf_9", "s1/data/dat_2_0"
	long := "s1/" + strings.Repeat(strings.Repeat("l", 200)+"/", 3) + "x" // longer than the table holds: skipped
	for _, name := range []string{dat, dmf + "/meta", dmf + "/1.dat", locked, long} {
		putObject(t, st, name)
	}
	expect(t, "lock", c.addLock(t, -1, locked, 4, 1), "success")
	for _, bad := range []struct {
		req  *disaggpb.GcRequest
		want string
	}{
		{&disaggpb.GcRequest{Prefix: ""}, "gc needs a prefix"},
		{&disaggpb.GcRequest{Prefix: "s1/", GraceMs: -1}, "must not be negative"},
		{&disaggpb.GcRequest{Prefix: "lock/"}, "never collected"},
		{&disaggpb.GcRequest{Prefix: "/abs"}, "invalid object name"},
	} {
		c.onOwner(t, func(i int) string {
			resp, err := disaggpb.NewDisaggInternalClient(c.Conns[i]).Gc(t.Context(), bad.req)
			if resp.GetNotOwner() {
				return "not_owner"
			}
			if grpcstatus.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), bad.want) {
				t.Errorf("gc %v: %v, want InvalidArgument %q", bad.req, err, bad.want)
			}
			return "done"
		})
	}
	r := c.gc(t, "s1/", 0)
	if gcNames(r.GetMarked()) != dat+", "+dmf || gcNames(r.GetLocked()) != locked+" by lock/s1/dat_2_0.lock_s4_1" || r.GetSkipped() != 1 {
		t.Fatalf("gc: %v", r)
	}
	if got := strings.Join(objectNames(t, st, "s1/"), " "); !strings.Contains(got, dat+".del") || !strings.Contains(got, dmf+".del") {
		t.Fatalf("no .del objects: %s", got)
	}
	expect(t, "tryAddLock on a gc-marked file", c.addLock(t, -1, dat, 4, 2), "conflict: data file is mark deleted")
	r = c.gc(t, "s1/", 0)
	if gcNames(r.GetRemoved()) != dat+", "+dmf || r.GetSkipped() != 3 {
		t.Fatalf("second gc: %v", r)
	}
	if got := strings.Join(objectNames(t, st, ""), " "); got != "lock/s1/dat_2_0.lock_s4_1 "+locked+" "+long {
		t.Fatalf("objects at the end: %s", got)
	}
}

// With clone locks disabled an @s3 clone is created without a lock.
func TestCloneLocksDisabled(t *testing.T) {
	c := startTestCluster(t, 1, func(c *chunkserver.Config) { c.Disagg.Clones.Disabled = true })
	if err := c.s3Clone(t, 3, "img/a"); err != nil {
		t.Fatal(err)
	}
	if got := c.cloneLocks(t, "img/a"); len(got) != 0 {
		t.Fatalf("locks with clone locks disabled: %v", got)
	}
}

// The lock owner on another server: the lock copyset (1/2 here) lives on
// servers 1 and 2 only, and server 0 leads the clone's copyset (1/1), so
// its creation finds the owner in the cluster map and locks over
// DisaggInternal.LockClone; the reconciler lists and releases the same
// way.
func TestDisaggCloneLockRemoteOwner(t *testing.T) {
	c, st, _ := s3Cluster(t, 3, fastCloneLocks, func(c *chunkserver.Config) { c.Disagg.LockCopyset = disagg.CopysetRef{Pool: 1, Copyset: 2} })
	lockGroup := copyset.NewGroupID(1, 2)
	peers := []copyset.PeerID{c.Servers[1].Local(), c.Servers[2].Local()}
	for _, i := range []int{1, 2} {
		if _, err := c.Servers[i].Copysets().Create(t.Context(), lockGroup, peers); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Until(t, 20*time.Second, func() error {
		l := c.Leader(t)
		if l == 0 {
			return nil
		}
		if err := c.Servers[l].Copysets().Get(c.Group).TransferLeader(t.Context(), c.Servers[0].Local()); err != nil {
			return fmt.Errorf("transfer 1/1 to server 0: %w", err)
		}
		return fmt.Errorf("server %d leads 1/1, not server 0", l)
	})
	putObject(t, st, "img/r")
	if err := c.s3Clone(t, 3, "img/r"); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.cloneLocks(t, "img/r"), " "); got != "clone:1/1/3" {
		t.Fatalf("clone locks of img/r: %q", got)
	}
	if c.Servers[0].Copysets().Get(lockGroup) != nil {
		t.Fatal("server 0 hosts the lock copyset")
	}
	c.Do(t, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, func(cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		return cl.DeleteChunk(t.Context(), &pb.ChunkRequest{OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE.Enum(), LogicPoolId: proto.Uint32(1),
			CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(3)})
	})
	c.waitUnlocked(t, "img/r")
}

// A clone lock whose copyset is gone from the cluster: copyset 1/2 lives
// on server 2 alone and holds a clone of img/v. While server 2 is down
// (the copyset unreachable, not gone) the lock stays past the grace;
// once server 2 is back without the copyset (its disk lost), the owner
// finds it absent from the cluster and releases the lock after the
// grace, and gc collects the source.
func TestDisaggCloneLockVanishedCopyset(t *testing.T) {
	c, st, _ := s3Cluster(t, 3, fastCloneLocks)
	g2 := copyset.NewGroupID(1, 2)
	if _, err := c.Servers[2].Copysets().Create(t.Context(), g2, []copyset.PeerID{c.Servers[2].Local()}); err != nil {
		t.Fatal(err)
	}
	putObject(t, st, "img/v")
	testwait.Until(t, 20*time.Second, func() error {
		resp, err := c.Chunk(2).CreateS3CloneChunk(t.Context(), &pb.CreateS3CloneChunkRequest{
			LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(2), ChunkId: proto.Uint64(5), ChunkLocationInfo: proto.String("img/v")})
		if err != nil || resp.GetStatus() != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
			return fmt.Errorf("CreateS3CloneChunk in 1/2: %v %v", resp.GetStatus(), err)
		}
		return nil
	})
	if got := strings.Join(c.cloneLocks(t, "img/v"), " "); got != "clone:1/2/5" {
		t.Fatalf("clone locks of img/v: %q", got)
	}
	// Server 2 down for two graces: its copyset cannot be asked, so the
	// lock stays, through a look of the owner begun after the two graces.
	c.Stop(2)
	looks := func() (n int64) {
		for _, i := range c.Up() {
			n += c.Servers[i].Disagg().VanishedLooks()
		}
		return n
	}
	end, since := time.Now().Add(2*3*time.Second), int64(-1)
	testwait.Until(t, 30*time.Second, func() error {
		now := looks()
		if got := strings.Join(c.cloneLocks(t, "img/v"), " "); got != "clone:1/2/5" {
			t.Fatalf("the lock of a copyset whose server is down went: %q", got)
		}
		switch {
		case time.Now().Before(end):
			return errors.New("two graces have not passed since server 2 stopped")
		case since < 0:
			since = now
		}
		if now < since+2 {
			return fmt.Errorf("the owner made %d looks at vanished copysets since the two graces passed, want 2", now-since)
		}
		return nil
	})
	if r := c.gc(t, "img/", 0); gcNames(r.GetLocked()) != "img/v by clone:1/2/5" || len(r.GetMarked()) != 0 {
		t.Fatalf("gc with the copyset's server down: %v", r)
	}
	// Back without the copyset: gone from the cluster.
	if err := os.RemoveAll(filepath.Join(c.Cfgs[2].DataDir, "copysets", g2.String())); err != nil {
		t.Fatal(err)
	}
	c.Start(2, nil)
	c.waitUnlocked(t, "img/v")
	if r := c.gc(t, "img/", 0); gcNames(r.GetMarked()) != "img/v" {
		t.Fatalf("gc after the copyset went: %v", r)
	}
}
