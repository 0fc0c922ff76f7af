package dm

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"

	"google.golang.org/grpc"

	"github.com/chunkraft/chunkraft/chunkstore"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/datasync"
	"github.com/chunkraft/chunkraft/internal/chunkread"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
)

// The fences of a cutover (cutover.go), as DMInternal serves them: Fence
// on the leader of one copyset, SourceFence on any server for the
// copysets of a pool. A cutover fences its source copysets under the owner
// cutoverOwner(task), which no dm machine of the source cluster knows (the
// leader worker lifts only "dm:" fences without a share): the source stays
// fenced after the cutover commits, until someone lifts it.

// cutoverPrefix begins the owner of a cutover's source fence.
const cutoverPrefix = "dm-cutover:"

// cutoverOwner is the owner of task name's source fences.
func cutoverOwner(name string) string { return cutoverPrefix + name }

// cutoverReason is the reason of task name's source fences.
func cutoverReason(name string) string {
	return "dm task " + name + " cut this pool over to its target cluster: writes go there"
}

// fenceLocal answers Fence on copyset (pool, copyset), which this server
// must lead: the op on its write fence, then the fence, the relay task's
// covered index and, asked for, the digest of its chunks.
func (s *Service) fenceLocal(ctx context.Context, req *pb.FenceRequest) *pb.FenceResponse {
	g := copyset.NewGroupID(req.GetPool(), req.GetCopyset())
	out := &pb.FenceResponse{Copyset: g.Copyset()}
	fail := func(err error) *pb.FenceResponse {
		out.Code, out.Msg = -1, fmt.Sprintf("copyset %d/%d: %v", g.Pool(), g.Copyset(), err)
		if leader, lost := copyset.LeaderLost(err); lost {
			out.NotLeader, out.Leader = true, string(leader)
		}
		return out
	}
	n, _, no := s.led(g)
	if no != nil {
		return &pb.FenceResponse{Code: -1, Msg: no.msg, NotLeader: no.notLeader, Leader: no.leader, Copyset: g.Copyset()}
	}
	owner := req.GetOwner()
	if req.GetOp() != pb.FenceOp_FENCE_GET && !strings.HasPrefix(owner, fencePrefix) && !strings.HasPrefix(owner, cutoverPrefix) {
		return fail(fmt.Errorf("owner %q: the dm service sets and lifts only its own fences (%s*, %s*)", owner, fencePrefix, cutoverPrefix))
	}
	var err error
	switch req.GetOp() {
	case pb.FenceOp_FENCE_SET:
		_, err = s.deps.Chunks.SetWriteFence(ctx, g, owner, req.GetReason())
	case pb.FenceOp_FENCE_LIFT:
		err = s.deps.Chunks.LiftWriteFence(ctx, g, owner)
	default:
		_, err = n.ReadBarrier(ctx)
	}
	if err != nil {
		return fail(err)
	}
	if f, ok := chunkstore.LocalWriteFence(n); ok {
		out.Held, out.Owner, out.Since = true, f.Owner, f.Since
	}
	if task := req.GetRelayTask(); task != "" {
		if m, ok := datasync.MachineOf(n); ok {
			if st := m.Get(g.Pool(), g.Copyset(), task); st != nil {
				out.CoveredIndex, _ = datasync.Covered(st)
			}
		}
	}
	if req.GetDigest() {
		st, err := chunkread.Of(n)
		if err != nil {
			return fail(err)
		}
		if out.Digest, out.Chunks, err = digest(st); err != nil {
			return fail(err)
		}
	}
	return out
}

// digest is a digest of every chunk of a store as a client reads it: id,
// sn, corrected sn, data (clone chunks read through), and the COW
// snapshot's sn and copied blocks. Where the store keeps its chunks and
// how it got them (a client's writes, a migration's replay) do not count.
func digest(st chunkread.Images) (string, uint64, error) {
	h := sha256.New()
	var buf chunkread.ImageBuffers
	var n uint64
	num := func(v uint64) { h.Write(binary.BigEndian.AppendUint64(nil, v)) }
	for _, id := range st.ListChunks() {
		img, err := st.ChunkImage(id, &buf)
		if errors.Is(err, chunkread.ErrChunkGone) {
			continue
		}
		if err != nil {
			return "", 0, fmt.Errorf("chunk %d: %w", id, err)
		}
		n++
		num(id)
		num(img.Sn)
		num(img.CorrectedSn)
		num(uint64(len(img.Data)))
		h.Write(img.Data)
		num(img.SnapSn)
		bs := int(img.BlockSize)
		for i, copied := range img.SnapCopied {
			if !copied || (i+1)*bs > len(img.SnapData) {
				continue
			}
			num(uint64(i))
			h.Write(img.SnapData[i*bs : (i+1)*bs])
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:16]), n, nil
}

// routeFence runs Fence on copyset g's leader in this cluster.
func (s *Service) routeFence(ctx context.Context, g copyset.GroupID, req *pb.FenceRequest) *pb.FenceResponse {
	req.Pool, req.Copyset = g.Pool(), g.Copyset()
	return routeTo(ctx, s, g, func(ctx context.Context) *pb.FenceResponse { return s.fenceLocal(ctx, req) },
		func(ctx context.Context, c pb.DMInternalClient) (*pb.FenceResponse, error) { return c.Fence(ctx, req) },
		func(msg string, notLeader bool) *pb.FenceResponse {
			return &pb.FenceResponse{Code: -1, Msg: msg, NotLeader: notLeader, Copyset: g.Copyset()}
		})
}

// sourceFence answers SourceFence: Fence on each copyset of the pool
// (those listed, or every one in the cluster map), at once.
func (s *Service) sourceFence(ctx context.Context, req *pb.SourceFenceRequest) *pb.SourceFenceResponse {
	ids := req.GetCopysets()
	if len(ids) == 0 {
		cm, err := s.deps.Cluster(ctx)
		if err != nil {
			return &pb.SourceFenceResponse{Code: -1, Msg: fmt.Sprintf("cluster map: %v", err)}
		}
		for _, c := range cm.GetCopysets() {
			if c.GetPool() == req.GetPool() {
				ids = append(ids, c.GetCopyset())
			}
		}
		if len(ids) == 0 {
			return &pb.SourceFenceResponse{Code: -1, Msg: fmt.Sprintf("pool %d has no copysets", req.GetPool())}
		}
	}
	out := &pb.SourceFenceResponse{Copysets: make([]*pb.FenceResponse, len(ids))}
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			out.Copysets[i] = s.routeFence(ctx, copyset.NewGroupID(req.GetPool(), id), &pb.FenceRequest{Op: req.GetOp(),
				Owner: req.GetOwner(), Reason: req.GetReason(), RelayTask: req.GetRelayTask(), Digest: req.GetDigest()})
		})
	}
	wg.Wait()
	var bad []string
	for _, r := range out.Copysets {
		if r.GetCode() != 0 {
			bad = append(bad, r.GetMsg())
		}
	}
	if len(bad) > 0 {
		out.Code, out.Msg = -1, strings.Join(bad, "; ")
	}
	return out
}

// onSourceFence asks the task's source cluster for SourceFence on the
// source copysets ids.
func (s *Service) onSourceFence(ctx context.Context, cfg *pb.TaskConfig, ids []uint32, op pb.FenceOp, digest bool) (map[uint32]*pb.FenceResponse, error) {
	req := &pb.SourceFenceRequest{Pool: cfg.GetSource().GetPool(), Copysets: ids, Op: op, Owner: cutoverOwner(cfg.GetName()),
		Reason: cutoverReason(cfg.GetName()), RelayTask: relayTaskName(cfg.GetName()), Digest: digest}
	var resp *pb.SourceFenceResponse
	err := s.onSource(ctx, cfg, func(ctx context.Context, cc *grpc.ClientConn) error {
		var err error
		resp, err = pb.NewDMInternalClient(cc).SourceFence(ctx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	if resp.GetCode() != 0 {
		return nil, fmt.Errorf("source cluster: %s", resp.GetMsg())
	}
	out := map[uint32]*pb.FenceResponse{}
	for _, r := range resp.GetCopysets() {
		out[r.GetCopyset()] = r
	}
	return out, nil
}
