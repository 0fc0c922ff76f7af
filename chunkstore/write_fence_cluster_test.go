package chunkstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/chunkserver"
	"github.com/chunkraft/chunkraft/chunkserver/chunkservertest"
	"github.com/chunkraft/chunkraft/chunkserver/servertest"
	"github.com/chunkraft/chunkraft/chunkstore"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/copyset/copysettest"
	"github.com/chunkraft/chunkraft/internal/chunkop"
	"github.com/chunkraft/chunkraft/internal/testwait"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	commonpb "github.com/chunkraft/chunkraft/proto/curve/common"
)

const (
	fenced        = pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_EPOCH_TOO_OLD
	success       = pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS
	fencedSeries  = "copyset=1,pool=1"
	fencedMetric  = "chunkraft_copyset_write_fenced"
	cutoverOwner  = "mig:cutover"
	cutoverReason = "migrating copyset 1/1"
)

// mutations are every mutating ChunkService call, on copyset 1/1.
var mutations = []struct {
	name string
	call func(ctx context.Context, cl pb.ChunkServiceClient) (*pb.ChunkResponse, error)
}{
	{"WriteChunk", func(ctx context.Context, cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		return cl.WriteChunk(ctx, writeReq(1, 4096, block(9)))
	}},
	{"DeleteChunk", func(ctx context.Context, cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		return cl.DeleteChunk(ctx, readReq(1, 0, 4096))
	}},
	{"DeleteChunkSnapshotOrCorrectSn", func(ctx context.Context, cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		req := readReq(1, 0, 4096)
		req.CorrectedSn = proto.Uint64(2)
		return cl.DeleteChunkSnapshotOrCorrectSn(ctx, req)
	}},
	{"CreateCloneChunk", func(ctx context.Context, cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		return cl.CreateCloneChunk(ctx, cloneReq(7, "1/1/1:0@cs"))
	}},
	{"CreateS3CloneChunk", func(ctx context.Context, cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		resp, err := cl.CreateS3CloneChunk(ctx, &pb.CreateS3CloneChunkRequest{LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1),
			ChunkId: proto.Uint64(8), CorrectedSn: proto.Uint64(1), ChunkLocationInfo: proto.String("volume/object")})
		return &pb.ChunkResponse{Status: resp.GetStatus().Enum()}, err
	}},
	{"RecoverChunk", func(ctx context.Context, cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		return cl.RecoverChunk(ctx, readReq(1, 0, 4096))
	}},
}

// mustRefuseMutations: every mutation sent to server i answers
// EPOCH_TOO_OLD (a new leader answers OVERLOAD until it has prepared its
// term; that is retried), and the copyset's data stays as it was.
func mustRefuseMutations(t *testing.T, c *chunkservertest.Cluster, i int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	before := c.Read(t, 1, 0, 8192)
	for _, m := range mutations {
		var resp *pb.ChunkResponse
		testwait.Until(t, 10*time.Second, func() error {
			var err error
			if resp, err = m.call(ctx, c.Chunk(i)); err != nil {
				return err
			}
			if resp.GetStatus() == pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_OVERLOAD {
				return errors.New("the new leader is not writable yet")
			}
			return nil
		})
		if resp.GetStatus() != fenced {
			t.Fatalf("%s on server %d under a write fence: %v, want %v", m.name, i, resp.GetStatus(), fenced)
		}
	}
	if after := c.Read(t, 1, 0, 8192); !bytes.Equal(after, before) {
		t.Fatal("refused mutations changed chunk 1")
	}
}

// copysetFence is server i's GetCopysetStatus write fence trailers ("" when
// it reports none).
func copysetFence(t *testing.T, c *chunkservertest.Cluster, i int) (owner, since string) {
	t.Helper()
	var trailer metadata.MD
	_, err := pb.NewCopysetServiceClient(c.Conns[i]).GetCopysetStatus(context.Background(), &pb.CopysetStatusRequest{
		LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1), QueryHash: proto.Bool(false),
		Peer: &commonpb.Peer{Address: proto.String(string(c.Servers[i].Local()))}}, grpc.Trailer(&trailer))
	if err != nil {
		t.Fatal(err)
	}
	first := func(k string) string {
		if v := trailer.Get(k); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	return first(chunkserver.WriteFenceTrailerKey), first(chunkserver.WriteFenceSinceTrailerKey)
}

// waitFenceEverywhere waits until every running replica applied the write
// fence want (nil: none), then checks what the operator sees of it: the
// metric and the copyset status trailers of every server.
func waitFenceEverywhere(t *testing.T, c *chunkservertest.Cluster, want *chunkstore.WriteFence) {
	t.Helper()
	testwait.Until(t, 10*time.Second, func() error {
		for _, i := range c.Up() {
			f, ok := chunkstore.LocalWriteFence(c.Node(i))
			if ok != (want != nil) || want != nil && f != *want {
				return fmt.Errorf("server %d has write fence %+v (%v), want %+v", i, f, ok, want)
			}
		}
		return nil
	})
	for _, i := range c.Up() {
		gauge, owner, since := 0.0, "", ""
		if want != nil {
			gauge, owner, since = 1, want.Owner, fmt.Sprint(want.Since)
		}
		if v := servertest.Scrape(t, c.Servers[i].Gatherer())[fencedMetric][fencedSeries]; v != gauge {
			t.Fatalf("server %d: %s %v, want %v", i, fencedMetric, v, gauge)
		}
		if o, s := copysetFence(t, c, i); o != owner || s != since {
			t.Fatalf("server %d copyset status: write fence %q since %q, want %q since %q", i, o, s, owner, since)
		}
	}
}

// fenceCluster starts three servers hosting tenants beside their own,
// writes block 0 of chunk 1 (all 1s) through the copyset's leader and
// returns the cluster, the leader and a context for the test.
func fenceCluster(t *testing.T, tenants ...chunkserver.Tenant) (*chunkservertest.Cluster, int, context.Context) {
	t.Helper()
	c := chunkservertest.StartWithTenants(t, 3, func() []chunkserver.Tenant { return tenants })
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	c.Write(t, 1, 1, 0, block(1), success)
	return c, c.Leader(t), ctx
}

// TestWriteFenceRefusesClientWrites: once a copyset's write fence is set,
// every mutating ChunkService call is refused with EPOCH_TOO_OLD, on the
// leader and on the next leader, while reads go on; every replica, its
// metric and its copyset status show the fence; only its owner lifts it,
// and then writes pass again.
func TestWriteFenceRefusesClientWrites(t *testing.T) {
	c, l, ctx := fenceCluster(t)
	waitFenceEverywhere(t, c, nil)
	store := c.Servers[l].Chunks()

	since, err := store.SetWriteFence(ctx, c.Group, cutoverOwner, cutoverReason)
	if err != nil || since == 0 {
		t.Fatalf("set write fence: index %d, %v", since, err)
	}
	want := &chunkstore.WriteFence{Owner: cutoverOwner, Reason: cutoverReason, Since: since}
	mustRefuseMutations(t, c, l)
	if got := c.Read(t, 1, 0, 4096); !bytes.Equal(got, block(1)) {
		t.Fatal("a read under the fence does not return the data written before it")
	}
	if info := c.Info(t, 1); len(info) != 1 || info[0] != 1 {
		t.Fatalf("chunk info under the fence: %v", info)
	}
	waitFenceEverywhere(t, c, want)

	// The owner's set again answers the index; another owner's is refused,
	// naming the holder, and proposes nothing.
	if again, err := store.SetWriteFence(ctx, c.Group, cutoverOwner, "again"); err != nil || again != since {
		t.Fatalf("set again by the owner: index %d, %v; want %d", again, err, since)
	}
	before := c.Node(l).AppliedIndex()
	_, err = store.SetWriteFence(ctx, c.Group, "mig:other", "")
	var held *chunkstore.WriteFenceHeldError
	if !errors.As(err, &held) || held.Holder != cutoverOwner || held.Since != since || !strings.Contains(err.Error(), `"mig:cutover"`) {
		t.Fatalf("set by another owner: %v, want it refused naming %q", err, cutoverOwner)
	}
	if after := c.Node(l).AppliedIndex(); after != before {
		t.Fatalf("the refused set proposed something: applied index %d -> %d", before, after)
	}

	// The next leader refuses too, and answers the fence after a barrier.
	c.Stop(l)
	nl := c.Leader(t)
	mustRefuseMutations(t, c, nl)
	if f, ok, err := c.Servers[nl].Chunks().WriteFence(ctx, c.Group); err != nil || !ok || f != *want {
		t.Fatalf("the new leader's write fence: %+v %v %v, want %+v", f, ok, err, want)
	}
	f := (nl + 1) % 3
	if f == l {
		f = (nl + 2) % 3
	}
	var nle *copyset.NotLeaderError
	if _, _, err := c.Servers[f].Chunks().WriteFence(ctx, c.Group); !errors.As(err, &nle) || nle.Leader != c.Servers[nl].Local() {
		t.Fatalf("write fence read on a follower: %v, want a not-leader error naming %s", err, c.Servers[nl].Local())
	}
	c.Start(l, nil)
	waitFenceEverywhere(t, c, want)

	// Only the owner lifts it.
	nl = c.Leader(t)
	store = c.Servers[nl].Chunks()
	if err := store.LiftWriteFence(ctx, c.Group, "mig:other"); !errors.As(err, &held) || !held.Lift || held.Holder != cutoverOwner {
		t.Fatalf("lift by another owner: %v, want it refused", err)
	}
	mustRefuseMutations(t, c, nl)
	if err := store.LiftWriteFence(ctx, c.Group, cutoverOwner); err != nil {
		t.Fatalf("lift by the owner: %v", err)
	}
	if err := store.LiftWriteFence(ctx, c.Group, cutoverOwner); err != nil {
		t.Fatalf("lift of no fence: %v", err)
	}
	c.Write(t, 1, 1, 4096, block(2), success)
	waitFenceEverywhere(t, c, nil)
	c.WaitSame(t, []uint64{1})
}

// TestWriteFenceBadInput: an invalid owner or reason, a copyset not hosted
// here, a follower: clear errors, nothing proposed.
func TestWriteFenceBadInput(t *testing.T) {
	c, l, ctx := fenceCluster(t)
	store := c.Servers[l].Chunks()
	before := c.Node(l).AppliedIndex()
	for _, owner := range []string{"", "dm task", strings.Repeat("o", chunkstore.MaxFenceOwner+1), "mig:\n"} {
		if _, err := store.SetWriteFence(ctx, c.Group, owner, ""); !errors.Is(err, chunkstore.ErrInvalidWriteFence) {
			t.Fatalf("set with owner %q: %v, want ErrInvalidWriteFence", owner, err)
		}
		if err := store.LiftWriteFence(ctx, c.Group, owner); !errors.Is(err, chunkstore.ErrInvalidWriteFence) {
			t.Fatalf("lift with owner %q: %v, want ErrInvalidWriteFence", owner, err)
		}
	}
	if _, err := store.SetWriteFence(ctx, c.Group, "mig:a", strings.Repeat("r", chunkstore.MaxFenceReason+1)); !errors.Is(err, chunkstore.ErrInvalidWriteFence) {
		t.Fatalf("set with a long reason: %v, want ErrInvalidWriteFence", err)
	}
	if _, err := store.SetWriteFence(ctx, copyset.NewGroupID(1, 99), "mig:a", ""); !errors.Is(err, copyset.ErrNotHosted) {
		t.Fatalf("set on a copyset not hosted: %v, want ErrNotHosted", err)
	}
	var nle *copyset.NotLeaderError
	if _, err := c.Servers[(l+1)%3].Chunks().SetWriteFence(ctx, c.Group, "mig:a", ""); !errors.As(err, &nle) || nle.Leader != c.Servers[l].Local() {
		t.Fatalf("set on a follower: %v, want a not-leader error naming %s", err, c.Servers[l].Local())
	}
	if after := c.Node(l).AppliedIndex(); after != before {
		t.Fatalf("refused calls proposed something: applied index %d -> %d", before, after)
	}
	if _, ok, err := store.WriteFence(ctx, c.Group); ok || err != nil {
		t.Fatalf("a fence after refused calls: %v %v", ok, err)
	}
}

// TestWriteFenceOwnedWrites: under a fence, a tenant's group written as
// the fence's owner applies, one written as another owner or as a client
// is refused before it is proposed (EPOCH_TOO_OLD, naming the holder), and
// a chunk op that reaches the log after the fence without its owner (as a
// write admitted just before the fence would) is refused at the apply on
// every replica, where the owner's passes.
func TestWriteFenceOwnedWrites(t *testing.T) {
	c, l, ctx := fenceCluster(t, checkpointTenant{})
	store := c.Servers[l].Chunks()
	if _, err := store.SetWriteFence(ctx, c.Group, "mig:target", "until the migration commits"); err != nil {
		t.Fatal(err)
	}
	ckpt := func(v string) [][]byte { return [][]byte{copysettest.ToyOp(checkpointKind, "applied", v)} }

	res, err := store.ProposeGroupAs(ctx, c.Group, "mig:target", []*pb.ChunkRequest{groupWrite(1, 4096, block(2))}, ckpt("1"))
	if err != nil || len(res.Chunk) != 1 || res.Chunk[0] != success {
		t.Fatalf("the owner's group: %+v %v", res, err)
	}
	for _, as := range []string{"mig:other", ""} {
		before := c.Node(l).AppliedIndex()
		_, err := store.ProposeGroupAs(ctx, c.Group, as, []*pb.ChunkRequest{groupWrite(1, 8192, block(3))}, ckpt("2"))
		var se *chunkstore.StatusError
		if !errors.As(err, &se) || se.Status != fenced || !strings.Contains(err.Error(), `"mig:target"`) {
			t.Fatalf("a group as %q under mig:target's fence: %v, want EPOCH_TOO_OLD naming the holder", as, err)
		}
		if after := c.Node(l).AppliedIndex(); after != before {
			t.Fatalf("the refused group as %q proposed something: applied index %d -> %d", as, before, after)
		}
	}
	if _, err := store.ProposeGroup(ctx, c.Group, []*pb.ChunkRequest{groupWrite(1, 8192, block(3))}, ckpt("2")); err == nil {
		t.Fatal("a client's group passed the fence")
	}
	if _, err := store.ProposeGroupAs(ctx, c.Group, "dm bad", []*pb.ChunkRequest{groupWrite(1, 8192, block(3))}, ckpt("2")); err == nil {
		t.Fatal("a group as an invalid owner was proposed")
	}

	// Past admission: the apply decides alike on every replica.
	raw := func(owner string, off uint32, b byte) pb.CHUNK_OP_STATUS {
		t.Helper()
		op, err := chunkop.EncodeOwned(groupWrite(1, off, block(b)), block(b), nil, owner)
		if err != nil {
			t.Fatal(err)
		}
		_, res, err := c.Node(l).Propose(ctx, op)
		st, ok := chunkstore.ChunkOpStatus(res)
		if err != nil || !ok {
			t.Fatalf("raw chunk op as %q: %v %v", owner, res, err)
		}
		return st
	}
	if st := raw("", 12288, 4); st != fenced {
		t.Fatalf("a client's chunk op in the log after the fence: %v, want %v", st, fenced)
	}
	if st := raw("mig:other", 12288, 5); st != fenced {
		t.Fatalf("another owner's chunk op in the log after the fence: %v, want %v", st, fenced)
	}
	if st := raw("mig:target", 16384, 6); st != success {
		t.Fatalf("the owner's chunk op in the log after the fence: %v, want SUCCESS", st)
	}
	c.WaitSame(t, []uint64{1}) // every replica's chunk 1 is the leader's
	want := bytes.Join([][]byte{block(1), block(2), make([]byte, 8192), block(6)}, nil)
	if got := c.Read(t, 1, 0, uint32(len(want))); !bytes.Equal(got, want) {
		t.Fatal("chunk 1 is not the owner's writes alone")
	}
	if got := strings.TrimSpace(checkpoint(t, c, l)); got != "applied=1" {
		t.Fatalf("checkpoint %q, want the owner's group's alone", got)
	}

	// Lifted by its owner, the fence lets clients through again.
	if err := store.LiftWriteFence(ctx, c.Group, "mig:other"); err == nil {
		t.Fatal("another owner lifted the fence")
	}
	if _, ok, _ := store.WriteFence(ctx, c.Group); !ok {
		t.Fatal("the fence went with a refused lift")
	}
	if err := store.LiftWriteFence(ctx, c.Group, "mig:target"); err != nil {
		t.Fatal(err)
	}
	if _, err := store.ProposeGroup(ctx, c.Group, []*pb.ChunkRequest{groupWrite(1, 8192, block(3))}, ckpt("2")); err != nil {
		t.Fatalf("a client's group once lifted: %v", err)
	}
	c.Write(t, 1, 1, 12288, block(7), success)
}

// TestWriteFenceRace: writers keep writing while the fence is set. Every
// write acknowledged is before the fence's index and in the chunk; every
// write refused is not in the chunk, on any replica; none applies after
// the fence.
func TestWriteFenceRace(t *testing.T) {
	c, l, ctx := fenceCluster(t)
	const writers, blocks = 8, 256
	type outcome struct {
		acked     int    // blocks 0..acked-1 acknowledged
		index     uint64 // the last acknowledged write's index
		refusedAt uint64 // the refused write's applied index (0: refused at admission)
		err       error
	}
	out := make([]outcome, writers)
	started := make(chan struct{}, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := &out[w]
			for k := range blocks {
				if k == 2 {
					started <- struct{}{}
				}
				resp, err := c.Chunk(l).WriteChunk(ctx, writeReq(uint64(200+w), uint32(k*4096), block(byte(k+1))))
				switch {
				case err != nil:
					o.err = err
					return
				case resp.GetStatus() == success:
					o.acked, o.index = k+1, resp.GetAppliedIndex()
				case resp.GetStatus() == fenced:
					o.refusedAt = resp.GetAppliedIndex()
					return
				default:
					o.err = fmt.Errorf("block %d: %v", k, resp.GetStatus())
					return
				}
			}
			o.err = errors.New("never refused")
		}()
	}
	for range writers {
		<-started
	}
	since, err := c.Servers[l].Chunks().SetWriteFence(ctx, c.Group, cutoverOwner, "race")
	if err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	atApply := 0
	for w, o := range out {
		if o.err != nil {
			t.Fatalf("writer %d: %v", w, o.err)
		}
		if o.index >= since {
			t.Errorf("writer %d: block %d acknowledged at index %d, at or after the fence's %d", w, o.acked-1, o.index, since)
		}
		if o.refusedAt != 0 {
			atApply++
			if o.refusedAt <= since {
				t.Errorf("writer %d: refused at the apply of index %d, not after the fence's %d", w, o.refusedAt, since)
			}
		}
	}
	t.Logf("fence at index %d; of %d writers, %d were refused at the apply, the others at admission", since, writers, atApply)
	chunks := make([]uint64, writers)
	for w := range chunks {
		chunks[w] = uint64(200 + w)
	}
	c.WaitSame(t, chunks)
	for w, o := range out {
		got := c.Read(t, uint64(200+w), 0, uint32((o.acked+1)*4096))
		for k := range o.acked + 1 {
			want := block(byte(k + 1))
			if k == o.acked {
				want = make([]byte, 4096) // the refused write
			}
			if !bytes.Equal(got[k*4096:(k+1)*4096], want) {
				t.Fatalf("writer %d: block %d is not what its answer says (acknowledged %d blocks)", w, k, o.acked)
			}
		}
	}
}
