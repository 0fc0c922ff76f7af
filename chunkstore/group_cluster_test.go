package chunkstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/chunkserver"
	"github.com/chunkraft/chunkraft/chunkserver/chunkservertest"
	"github.com/chunkraft/chunkraft/chunkstore"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/copyset/copysettest"
	"github.com/chunkraft/chunkraft/internal/testwait"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// checkpointKind is the test tenant's machine: the toy key-value machine,
// one op per group (it stamps its state with the index alone), standing
// for a tenant's checkpoint.
const checkpointKind copyset.Kind = 203

// checkpointTenant hosts the checkpoint machine on every copyset.
type checkpointTenant struct{}

func (checkpointTenant) Name() string { return "checkpoint" }
func (checkpointTenant) Specs() []copyset.MachineSpec {
	spec := copysettest.ToySpec(checkpointKind, "checkpoint")
	spec.Group = true
	return []copyset.MachineSpec{spec}
}
func (checkpointTenant) Attach(*copyset.Manager)            {}
func (checkpointTenant) Register(grpc.ServiceRegistrar)     {}
func (checkpointTenant) Collectors() []prometheus.Collector { return nil }
func (checkpointTenant) Start() error                       { return nil }
func (checkpointTenant) Stop()                              {}

// checkpoint is server i's checkpoint machine's state ("key=value" lines).
func checkpoint(t *testing.T, c *chunkservertest.Cluster, i int) string {
	t.Helper()
	m, ok := copyset.MachineOf[*copysettest.ToyKV](c.Node(i), checkpointKind)
	if !ok {
		t.Fatalf("server %d has no checkpoint machine", i)
	}
	return m.Dump()
}

// groupWrite is a WriteChunk request of the cluster's copyset for a group.
func groupWrite(chunk uint64, off uint32, data []byte) *pb.ChunkRequest {
	r := writeReq(chunk, off, data)
	r.OpType = pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE.Enum()
	return r
}

// TestGroupedChunkWrites: a tenant's chunk ops and its checkpoint op,
// proposed through the chunk store as one group, apply on every replica
// (each chunk op's status, the checkpoint's result), also on a replica
// that was down and catches up by a snapshot install.
func TestGroupedChunkWrites(t *testing.T) {
	c := chunkservertest.StartWithTenants(t, 3, func() []chunkserver.Tenant { return []chunkserver.Tenant{checkpointTenant{}} },
		func(cfg *chunkserver.Config) {
			cfg.Raft.SnapshotThreshold, cfg.Raft.TrailingLogs = 16, 4
			cfg.Raft.SnapshotInterval = 200 * time.Millisecond
		})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c.Write(t, 3, 1, 0, block(3), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	l := c.Leader(t)
	f := (l + 1) % 3
	stoppedAt := c.Node(f).Status().LastIndex
	c.Stop(f)
	del := &pb.ChunkRequest{OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE.Enum(), LogicPoolId: proto.Uint32(1),
		CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(3)}
	for i := range 24 { // past the snapshot threshold: f catches up by an install
		res, err := c.Servers[l].Chunks().ProposeGroup(ctx, c.Group,
			[]*pb.ChunkRequest{groupWrite(1, 0, block(byte(i))), groupWrite(2, 4096, block(byte(i+1))), del},
			[][]byte{copysettest.ToyOp(checkpointKind, "applied", fmt.Sprint(i))})
		if err != nil {
			t.Fatalf("group %d: %v", i, err)
		}
		if res.Index == 0 || len(res.Chunk) != 3 || len(res.Tail) != 1 {
			t.Fatalf("group %d: %+v", i, res)
		}
		for j, st := range res.Chunk {
			if st != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
				t.Fatalf("group %d, chunk op %d: %v", i, j, st)
			}
		}
	}
	// The leader's snapshot timer truncates its log past what f holds, so
	// that f can catch up only by an install.
	testwait.Until(t, 10*time.Second, func() error {
		if first := c.Node(l).Status().FirstIndex; first <= stoppedAt+1 {
			return fmt.Errorf("the leader's log starts at %d, the stopped follower's ends at %d", first, stoppedAt)
		}
		return nil
	})
	c.Start(f, nil)
	c.WaitSame(t, []uint64{1, 2, 3})
	c.WaitInstalled(t, f)
	for i := range c.Servers {
		if got := strings.TrimSpace(checkpoint(t, c, i)); got != "applied=23" {
			t.Fatalf("server %d checkpoint %q, want applied=23", i, got)
		}
	}
	if got := c.Read(t, 1, 0, 4096); !bytes.Equal(got, block(23)) {
		t.Fatal("chunk 1 is not the last group's write")
	}
	if got := c.Read(t, 2, 4096, 4096); !bytes.Equal(got, block(24)) {
		t.Fatal("chunk 2 is not the last group's write")
	}
	if _, found, err := chunksOf(t, c, l).ChunkMeta(3); err != nil || found {
		t.Fatalf("chunk 3 not deleted by the groups: found %v, %v", found, err)
	}
}

// TestGroupAdmission: a tenant's group passes ChunkService's checks
// before anything is proposed: each refusal is a StatusError with the
// status a client would get, and neither the chunks nor the checkpoint
// change.
func TestGroupAdmission(t *testing.T) {
	c := chunkservertest.StartWithTenants(t, 3, func() []chunkserver.Tenant { return []chunkserver.Tenant{checkpointTenant{}} })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c.Write(t, 1, 1, 0, block(1), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	l := c.Leader(t)
	store := c.Servers[l].Chunks()
	ckpt := [][]byte{copysettest.ToyOp(checkpointKind, "applied", "1")}
	write := func() []*pb.ChunkRequest { return []*pb.ChunkRequest{groupWrite(1, 0, block(9))} }
	refused := func(what string, want pb.CHUNK_OP_STATUS, on *chunkstore.Store, reqs []*pb.ChunkRequest, tail [][]byte) *chunkstore.StatusError {
		t.Helper()
		before := c.Node(l).AppliedIndex()
		_, err := on.ProposeGroup(ctx, c.Group, reqs, tail)
		var se *chunkstore.StatusError
		if !errors.As(err, &se) || se.Status != want {
			t.Fatalf("%s: %v, want a StatusError %v", what, err, want)
		}
		if after := c.Node(l).AppliedIndex(); after != before {
			t.Fatalf("%s: applied index %d -> %d: something was proposed", what, before, after)
		}
		return se
	}

	admit := store.Admission()
	admit.SetMaxInflight(0)
	refused("over the in-flight limit", pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_OVERLOAD, store, write(), ckpt)
	admit.SetMaxInflight(5000)
	admit.SetDiskFree(func(string) (uint64, error) { return 0, nil })
	refused("below the free-space floor", pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_NOSPACE, store, write(), ckpt)
	admit.SetDiskFree(nil)

	f := (l + 1) % 3
	se := refused("on a follower", pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_REDIRECTED, c.Servers[f].Chunks(), write(), ckpt)
	if se.Leader != string(c.Servers[l].Local()) {
		t.Fatalf("redirect names %q, want the leader %s", se.Leader, c.Servers[l].Local())
	}

	up, err := c.Chunk(l).UpdateEpoch(ctx, &pb.UpdateEpochRequest{FileId: proto.Uint64(5), Epoch: proto.Uint64(2)})
	if err != nil || up.GetStatus() != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
		t.Fatalf("update epoch: %v %v", up.GetStatus(), err)
	}
	stale := write()
	stale[0].FileId, stale[0].Epoch = proto.Uint64(5), proto.Uint64(1)
	refused("a stale epoch", pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_EPOCH_TOO_OLD, store, stale, ckpt)

	bad := []struct {
		what string
		reqs []*pb.ChunkRequest
		tail [][]byte
		says string
	}{
		{"no chunk op", nil, ckpt, "without chunk ops"},
		{"a read", []*pb.ChunkRequest{readReq(1, 0, 4096)}, ckpt, "cannot be grouped"},
		{"another copyset", func() []*pb.ChunkRequest { r := write(); r[0].CopysetId = proto.Uint32(2); return r }(), ckpt, "not the group's"},
		{"a short write", func() []*pb.ChunkRequest { r := write(); r[0].Data = r[0].Data[:100]; return r }(), ckpt, "data length"},
		{"two checkpoints", write(), append(ckpt, ckpt[0]), "invalid grouped proposal"},
		{"an unknown kind", write(), [][]byte{copysettest.ToyOp(250, "x", "y")}, "invalid grouped proposal"},
	}
	for _, b := range bad {
		se := refused(b.what, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST, store, b.reqs, b.tail)
		if !strings.Contains(se.Error(), b.says) {
			t.Fatalf("%s: %v, want it to say %q", b.what, se, b.says)
		}
	}
	if got := checkpoint(t, c, l); got != "" {
		t.Fatalf("checkpoint %q after refused groups", got)
	}
	if got := c.Read(t, 1, 0, 4096); !bytes.Equal(got, block(1)) {
		t.Fatal("a refused group changed chunk 1")
	}
}
