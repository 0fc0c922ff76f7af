package chunkstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/chunkstore/datastore"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/disagg"
	"github.com/chunkraft/chunkraft/internal/chunkop"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// chunkService implements curve.chunkserver.ChunkService. Mutations go
// through raft (mutate); reads are served on the leader after a read
// barrier (read). Every request is validated before anything is proposed.
type chunkService struct {
	pb.UnimplementedChunkServiceServer
	copysets *copyset.Manager
	layout   datastore.Options // chunk geometry for request validation
	epochs   *epochMap
	fences   *fencer
	admit    *Admission
	sources  *cloneSource
	locks    *disagg.Service // clone source locks (clone_lock.go)
	metrics  *metrics
	log      *slog.Logger
}

// errCloneSource marks a failure to read a clone chunk's source (an
// unreachable chunkserver, a missing object store): FAILURE_UNKNOWN, not
// DISK_FAIL, since this replica's disk is fine.
var errCloneSource = errors.New("clone source")

func status(s pb.CHUNK_OP_STATUS) *pb.CHUNK_OP_STATUS { return &s }

// chunkResponse builds a response with status s.
func chunkResponse(s pb.CHUNK_OP_STATUS) *pb.ChunkResponse {
	return &pb.ChunkResponse{Status: status(s)}
}

// validateIO checks offset and size of a read or write against the chunk
// geometry: block aligned, non-empty, inside the chunk.
func (s *chunkService) validateIO(req *pb.ChunkRequest) error {
	if req.Offset == nil || req.Size == nil {
		return errors.New("offset and size are required")
	}
	off, size := uint64(req.GetOffset()), uint64(req.GetSize())
	bs, cs := uint64(s.layout.BlockSize), uint64(s.layout.ChunkSize)
	switch {
	case size == 0:
		return errors.New("size is 0")
	case off%bs != 0 || size%bs != 0:
		return fmt.Errorf("offset %d or size %d not a multiple of %d", off, size, bs)
	case off+size > cs:
		return fmt.Errorf("offset %d + size %d exceeds chunk size %d", off, size, cs)
	}
	return nil
}

// node returns the replica of the request's copyset or nil.
func (s *chunkService) node(pool, cs uint32) *copyset.Node {
	return s.copysets.Get(copyset.NewGroupID(pool, cs))
}

// redirectOr maps a not-leader error to REDIRECTED (with the leader hint)
// and any other error to fallback. An op whose outcome is unknown because
// this replica lost the leadership after appending it is REDIRECTED too:
// the client retries it on the new leader, as it does any redirected op.
func redirectOr(err error, fallback pb.CHUNK_OP_STATUS) (pb.CHUNK_OP_STATUS, string) {
	var nl *copyset.NotLeaderError
	if errors.As(err, &nl) {
		return pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_REDIRECTED, string(nl.Leader)
	}
	var ou *copyset.OutcomeUnknownError
	if errors.As(err, &ou) {
		return pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_REDIRECTED, string(ou.Leader)
	}
	return fallback, ""
}

func (s *chunkService) finish(op string, start time.Time, resp *pb.ChunkResponse, n int) *pb.ChunkResponse {
	if resp.GetStatus() != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
		n = 0
	}
	s.metrics.observe(op, resp.GetStatus().String(), start, n)
	return resp
}

func (s *chunkService) invalid(op string, req *pb.ChunkRequest, err error) *pb.ChunkResponse {
	s.log.Debug("invalid chunk request", "op", op, "pool", req.GetLogicPoolId(),
		"copyset", req.GetCopysetId(), "chunk", req.GetChunkId(), "err", err)
	return chunkResponse(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST)
}

// failed maps a propose or read-barrier error: REDIRECTED with the leader
// hint when this replica is not the leader, FAILURE_UNKNOWN (logged)
// otherwise.
func (s *chunkService) failed(req *pb.ChunkRequest, what string, err error) *pb.ChunkResponse {
	st, leader := redirectOr(err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_FAILURE_UNKNOWN)
	if st != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_REDIRECTED {
		s.log.Warn(what, "op", req.GetOpType(), "pool", req.GetLogicPoolId(),
			"copyset", req.GetCopysetId(), "chunk", req.GetChunkId(), "err", err)
	}
	resp := chunkResponse(st)
	if leader != "" {
		resp.Redirect = proto.String(leader)
	}
	return resp
}

// notWritable maps a WaitWritable error: REDIRECTED on a follower, else
// OVERLOAD, which clients retry on the same leader (a new leader that has
// not learned its copyset's fences yet).
func (s *chunkService) notWritable(req *pb.ChunkRequest, err error) *pb.ChunkResponse {
	if st, _ := redirectOr(err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_OVERLOAD); st == pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_REDIRECTED {
		return s.failed(req, "", err)
	}
	s.log.Warn("leader not writable yet", "pool", req.GetLogicPoolId(), "copyset", req.GetCopysetId(), "err", err)
	return chunkResponse(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_OVERLOAD)
}

// applyErrStatus maps the error copyset.ProposeAs returns for an op that
// committed but did not apply to a chunkResult on this leader: the store's
// status for a *copyset.FatalError that has one, else DISK_FAIL.
func applyErrStatus(err error) pb.CHUNK_OP_STATUS {
	var fe *copyset.FatalError
	if errors.As(err, &fe) {
		if st := storeStatus(fe.Err); st != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
			return st
		}
	}
	return pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_DISK_FAIL
}

// propose replicates a chunk op on n, whose chunk machine is m (nil:
// none found), and turns the outcome into a response.
func (s *chunkService) propose(ctx context.Context, n *copyset.Node, m *chunkMachine, req *pb.ChunkRequest, data []byte) *pb.ChunkResponse {
	op, err := chunkop.Encode(req, data, preImage(m, req, data))
	if err != nil {
		s.log.Error("encode chunk op", "err", err)
		return chunkResponse(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_FAILURE_UNKNOWN)
	}
	index, res, err := copyset.ProposeAs[chunkResult](ctx, n, op)
	st := res.status
	switch {
	case err != nil && index == 0:
		return s.failed(req, "chunk op not committed", err)
	case err != nil:
		st = applyErrStatus(err)
	}
	b := &committedResponse{status: st, index: index}
	b.resp.Status, b.resp.AppliedIndex = &b.status, &b.index
	return &b.resp
}

// committedResponse is the response to a committed op with the values its
// optional fields point to, in one allocation.
type committedResponse struct {
	resp   pb.ChunkResponse
	status pb.CHUNK_OP_STATUS
	index  uint64
}

// preImage is the pre-image a write carries for the read views of its
// chunk (datastore.PreImage): the blocks a live view has not saved, read
// from this replica's store now, so that no replica has to sync its
// capture before it overwrites them, from m, the copyset's chunk machine.
// Nil for other ops, without m, and when there is nothing to carry.
func preImage(m *chunkMachine, req *pb.ChunkRequest, data []byte) *chunkop.PreImage {
	if m == nil || req.GetOpType() != pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE {
		return nil
	}
	p := m.store.PreImageFor(req.GetChunkId(), req.GetOffset(), len(data))
	if p == nil {
		return nil
	}
	return &chunkop.PreImage{ViewSeq: p.ViewSeq, Lo: p.Lo, Data: p.Data}
}

// mutate runs the checks every mutating request passes, in order, and
// proposes it: the in-flight limit (OVERLOAD), validation
// (INVALID_REQUEST), then writable's. Nothing is proposed when one fails. prepare, if set, runs on the leader
// after the checks and may replace the data to propose (RecoverChunk).
func (s *chunkService) mutate(ctx context.Context, op string, req *pb.ChunkRequest, data []byte, valid func() error,
	prepare func(n *copyset.Node) ([]byte, *pb.ChunkResponse)) *pb.ChunkResponse {
	start := time.Now()
	if !s.admit.enter() {
		return s.finish(op, start, chunkResponse(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_OVERLOAD), 0)
	}
	defer s.admit.leave()
	if valid != nil {
		if err := valid(); err != nil {
			return s.finish(op, start, s.invalid(op, req, err), 0)
		}
	}
	n := s.node(req.GetLogicPoolId(), req.GetCopysetId())
	m, resp := s.writable(ctx, n, "", req)
	if resp != nil {
		return s.finish(op, start, resp, 0)
	}
	if prepare != nil {
		if data, resp = prepare(n); resp != nil {
			return s.finish(op, start, resp, 0)
		}
	}
	return s.finish(op, start, s.propose(ctx, n, m, req, data), len(data))
}

// writable runs the checks a mutation of owner ("": a client; a write
// fence's owner: Store.ProposeGroupAs) passes on n, its copyset's replica
// here (nil: not hosted), once validated, in order: the copyset
// (COPYSET_NOTEXIST), a broken replica (DISK_FAIL), a leader that knows
// its copyset's fences (REDIRECTED on a follower, OVERLOAD while a new
// leader cannot yet: fence.go), the epoch fence of every request and the
// copyset's write fence (EPOCH_TOO_OLD; write_fence.go), free space
// (NOSPACE). It returns the copyset's chunk machine (nil: none found) and
// nil when all pass, else the refusal.
func (s *chunkService) writable(ctx context.Context, n *copyset.Node, owner string, reqs ...*pb.ChunkRequest) (*chunkMachine, *pb.ChunkResponse) {
	if n == nil {
		return nil, chunkResponse(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_COPYSET_NOTEXIST)
	}
	if n.Broken() != nil {
		return nil, chunkResponse(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_DISK_FAIL)
	}
	if err := n.WaitWritable(ctx); err != nil {
		return nil, s.notWritable(reqs[0], err)
	}
	for _, req := range reqs {
		if req.FileId != nil && req.Epoch != nil && !s.epochs.allowed(req.GetFileId(), req.GetEpoch()) {
			return nil, chunkResponse(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_EPOCH_TOO_OLD)
		}
	}
	m, _ := chunkMachineOf(n)
	if m != nil && m.gate.Load().blocks(owner) {
		return m, chunkResponse(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_EPOCH_TOO_OLD)
	}
	if s.admit.ReadOnly() {
		return m, chunkResponse(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_NOSPACE)
	}
	return m, nil
}

// read runs the checks of a read and a read barrier on the leader, then
// fn against the copyset's store; fn's response gets the applied index.
func (s *chunkService) read(ctx context.Context, op string, req *pb.ChunkRequest, valid func() error,
	fn func(n *copyset.Node) *pb.ChunkResponse) *pb.ChunkResponse {
	start := time.Now()
	if !s.admit.enter() {
		return s.finish(op, start, chunkResponse(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_OVERLOAD), 0)
	}
	defer s.admit.leave()
	if err := valid(); err != nil {
		return s.finish(op, start, s.invalid(op, req, err), 0)
	}
	n := s.node(req.GetLogicPoolId(), req.GetCopysetId())
	if n == nil {
		return s.finish(op, start, chunkResponse(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_COPYSET_NOTEXIST), 0)
	}
	if n.Broken() != nil {
		return s.finish(op, start, chunkResponse(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_DISK_FAIL), 0)
	}
	applied, err := n.ReadBarrier(ctx)
	if err != nil {
		return s.finish(op, start, s.failed(req, "read barrier failed", err), 0)
	}
	resp := fn(n)
	resp.AppliedIndex = proto.Uint64(applied)
	return s.finish(op, start, resp, len(resp.GetData()))
}

// storeFailed maps a store error of a read to a response, logging the
// unexpected ones (a checksum failure names chunk and block).
func (s *chunkService) storeFailed(req *pb.ChunkRequest, err error) *pb.ChunkResponse {
	st := storeStatus(err)
	if errors.Is(err, errCloneSource) {
		st = pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_FAILURE_UNKNOWN // the source failed, not this disk
	}
	if st != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_CHUNK_NOTEXIST {
		s.log.Error("chunk read failed", "op", req.GetOpType(), "pool", req.GetLogicPoolId(),
			"copyset", req.GetCopysetId(), "chunk", req.GetChunkId(), "status", st, "err", err)
	}
	return chunkResponse(st)
}

// validWrite checks a WriteChunk request.
func (s *chunkService) validWrite(req *pb.ChunkRequest) error {
	if err := s.validateIO(req); err != nil {
		return err
	}
	if uint64(len(req.GetData())) != uint64(req.GetSize()) {
		return fmt.Errorf("data length %d != size %d", len(req.GetData()), req.GetSize())
	}
	if req.GetSn() == 0 {
		return errors.New("sn is 0")
	}
	return nil
}

// WriteChunk writes req.data at req.offset of the chunk, creating it; a
// newer sn first preserves the chunk's old data in a COW snapshot.
func (s *chunkService) WriteChunk(ctx context.Context, req *pb.ChunkRequest) (*pb.ChunkResponse, error) {
	req.OpType = pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE.Enum() // the RPC names the op, not the request's field
	return s.mutate(ctx, "write", req, req.GetData(), func() error { return s.validWrite(req) }, nil), nil
}

// DeleteChunk removes the chunk and its snapshot (a missing chunk is
// success).
func (s *chunkService) DeleteChunk(ctx context.Context, req *pb.ChunkRequest) (*pb.ChunkResponse, error) {
	req.OpType = pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE.Enum()
	return s.mutate(ctx, "delete", req, nil, nil, nil), nil
}

// DeleteChunkSnapshotOrCorrectSn deletes the chunk's snapshot or records a
// corrected sn (Curve's rules); correctedSn is required.
func (s *chunkService) DeleteChunkSnapshotOrCorrectSn(ctx context.Context, req *pb.ChunkRequest) (*pb.ChunkResponse, error) {
	req.OpType = pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE_SNAP.Enum()
	return s.mutate(ctx, "delete_snapshot", req, nil, func() error {
		if req.CorrectedSn == nil {
			return errors.New("correctedSn is required")
		}
		return nil
	}, nil), nil
}

// CreateCloneChunk creates a clone chunk whose unwritten blocks read from
// location (a chunk of this cluster, @cs, or an object, @s3; an object is
// locked first, clone_lock.go).
func (s *chunkService) CreateCloneChunk(ctx context.Context, req *pb.ChunkRequest) (*pb.ChunkResponse, error) {
	req.OpType = pb.CHUNK_OP_TYPE_CHUNK_OP_CREATE_CLONE.Enum()
	return s.createClone(ctx, "create_clone", req)
}

func (s *chunkService) validClone(req *pb.ChunkRequest) error {
	if req.GetSize() != s.layout.ChunkSize {
		return fmt.Errorf("size %d != chunk size %d", req.GetSize(), s.layout.ChunkSize)
	}
	if req.GetSn() == 0 {
		return errors.New("sn is 0")
	}
	_, err := parseLocation(req.GetLocation())
	return err
}

// CreateS3CloneChunk creates a clone chunk of the object named by
// chunkLocationInfo (upstream answers INVALID_REQUEST; this works). The
// clone gets sn 1 and the request's correctedSn.
func (s *chunkService) CreateS3CloneChunk(ctx context.Context, req *pb.CreateS3CloneChunkRequest) (*pb.CreateS3CloneChunkResponse, error) {
	creq := &pb.ChunkRequest{
		OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_CREATE_CLONE.Enum(), LogicPoolId: req.LogicPoolId,
		CopysetId: req.CopysetId, ChunkId: req.ChunkId, Sn: proto.Uint64(1),
		CorrectedSn: proto.Uint64(req.GetCorrectedSn()), Size: proto.Uint32(s.layout.ChunkSize),
		Location: proto.String(req.GetChunkLocationInfo() + "@s3"),
	}
	resp, err := s.createClone(ctx, "create_s3_clone", creq)
	if err != nil {
		return nil, err
	}
	return &pb.CreateS3CloneChunkResponse{Status: resp.Status, Redirect: resp.Redirect}, nil
}

// RecoverChunk copies the still unwritten blocks of [offset, offset+size)
// of a clone chunk from its source and pastes them through raft (a paste
// never overwrites a block a client wrote). A range already complete, or a
// normal chunk, is SUCCESS without proposing.
func (s *chunkService) RecoverChunk(ctx context.Context, req *pb.ChunkRequest) (*pb.ChunkResponse, error) {
	paste := proto.Clone(req).(*pb.ChunkRequest)
	paste.OpType = pb.CHUNK_OP_TYPE_CHUNK_OP_PASTE.Enum()
	return s.mutate(ctx, "recover", paste, nil, func() error { return s.validateIO(req) },
		func(n *copyset.Node) ([]byte, *pb.ChunkResponse) {
			if _, err := n.ReadBarrier(ctx); err != nil {
				return nil, s.failed(req, "read barrier failed", err)
			}
			buf := make([]byte, req.GetSize())
			unwritten, err := s.readMerged(ctx, n, req.GetChunkId(), buf, req.GetOffset())
			if err != nil {
				return nil, s.storeFailed(req, err)
			}
			if unwritten == 0 {
				return nil, chunkResponse(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
			}
			return buf, nil
		}), nil
}

// readMerged fills buf with the chunk's data at off: written blocks from
// the local chunk, unwritten blocks of a clone chunk from its source. It
// returns how many blocks came from the source.
func (s *chunkService) readMerged(ctx context.Context, n *copyset.Node, chunk uint64, buf []byte, off uint32) (int, error) {
	store, err := chunkStoreOf(n)
	if err != nil {
		return 0, err
	}
	for attempt := 0; ; attempt++ {
		unwritten, err := store.ReadChunkClone(chunk, buf, off)
		if err != nil || len(unwritten) == 0 {
			return 0, err
		}
		info, err := store.GetChunkInfo(chunk)
		if err != nil {
			return 0, err
		}
		if info.Location == "" {
			if attempt < 2 {
				continue // became a normal chunk meanwhile: read again
			}
			return 0, fmt.Errorf("chunk %d: unwritten blocks but no clone location", chunk)
		}
		loc, err := parseLocation(info.Location)
		if err != nil {
			return 0, fmt.Errorf("chunk %d: %w", chunk, err)
		}
		blocks := 0
		for _, r := range unwritten {
			lo := r.Off - off
			if err := s.sources.fetch(ctx, loc, buf[lo:lo+r.Len], r.Off); err != nil {
				return 0, fmt.Errorf("%w: %w", errCloneSource, err)
			}
			blocks += int(r.Len / s.layout.BlockSize)
		}
		return blocks, nil
	}
}

// localRead is the cloneSource's read of a chunk whose copyset this server
// leads.
func (s *chunkService) localRead(ctx context.Context, n *copyset.Node, chunk uint64, p []byte, off uint32) error {
	if _, err := n.ReadBarrier(ctx); err != nil {
		return err
	}
	_, err := s.readMerged(ctx, n, chunk, p, off)
	if errors.Is(err, datastore.ErrChunkNotExist) {
		clear(p)
		return nil
	}
	return err
}

// ReadChunk reads req.size bytes at req.offset, linearizably. Unwritten
// blocks of a clone chunk are read from its source.
func (s *chunkService) ReadChunk(ctx context.Context, req *pb.ChunkRequest) (*pb.ChunkResponse, error) {
	return s.read(ctx, "read", req, func() error { return s.validateIO(req) }, func(n *copyset.Node) *pb.ChunkResponse {
		buf := make([]byte, req.GetSize())
		if _, err := s.readMerged(ctx, n, req.GetChunkId(), buf, req.GetOffset()); err != nil {
			return s.storeFailed(req, err)
		}
		resp := chunkResponse(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
		resp.Data = buf
		return resp
	}), nil
}

// ReadChunkSnapshot reads the chunk as of snapshot sn: the live chunk when
// sn is the chunk's sn, else blocks from its COW snapshot file.
func (s *chunkService) ReadChunkSnapshot(ctx context.Context, req *pb.ChunkRequest) (*pb.ChunkResponse, error) {
	valid := func() error {
		if err := s.validateIO(req); err != nil {
			return err
		}
		if req.GetSn() == 0 {
			return errors.New("sn is 0")
		}
		return nil
	}
	return s.read(ctx, "read_snapshot", req, valid, func(n *copyset.Node) *pb.ChunkResponse {
		buf := make([]byte, req.GetSize())
		store, err := chunkStoreOf(n)
		if err == nil {
			err = store.ReadChunkSnapshot(req.GetChunkId(), req.GetSn(), buf, req.GetOffset())
		}
		if err != nil {
			return s.storeFailed(req, err)
		}
		resp := chunkResponse(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
		resp.Data = buf
		return resp
	}), nil
}

// GetChunkInfo returns [sn] or [sn, snapSn] (empty when the chunk does not
// exist), linearizably on the leader.
func (s *chunkService) GetChunkInfo(ctx context.Context, req *pb.GetChunkInfoRequest) (*pb.GetChunkInfoResponse, error) {
	creq := &pb.ChunkRequest{LogicPoolId: req.LogicPoolId, CopysetId: req.CopysetId, ChunkId: req.ChunkId}
	var sns []uint64
	resp := s.read(ctx, "info", creq, func() error { return nil }, func(n *copyset.Node) *pb.ChunkResponse {
		store, err := chunkStoreOf(n)
		if err != nil {
			return s.storeFailed(creq, err)
		}
		info, err := store.GetChunkInfo(req.GetChunkId())
		switch {
		case errors.Is(err, datastore.ErrChunkNotExist):
		case err != nil:
			return s.storeFailed(creq, err)
		default:
			sns = append(sns, info.Sn)
			if info.SnapSn != 0 {
				sns = append(sns, info.SnapSn)
			}
		}
		return chunkResponse(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	})
	return &pb.GetChunkInfoResponse{Status: resp.Status, Redirect: resp.Redirect, ChunkSn: sns}, nil
}

// GetChunkHash returns the decimal crc32c of [offset, offset+length) of the
// chunk's data on this replica (any replica answers; no leader check, as
// upstream). Offsets are data offsets: upstream's include the meta page. A
// missing chunk hashes to "0".
//
// Beyond upstream, so that replicas can be compared right after a write: on
// the leader it first shares the commit index with the followers
// (Node.ShareCommit, nothing when they have it already), so they apply
// what the leader has at once rather than at the next heartbeat; and the
// hash is taken while no entry is being applied, with the response
// trailer AppliedTrailerKey giving the applied index it covers (replicas
// with equal indices must hash equal). A replica that keeps applying gets
// the hash of the moment and no trailer.
func (s *chunkService) GetChunkHash(ctx context.Context, req *pb.GetChunkHashRequest) (*pb.GetChunkHashResponse, error) {
	fail := func(st pb.CHUNK_OP_STATUS) (*pb.GetChunkHashResponse, error) {
		return &pb.GetChunkHashResponse{Status: status(st)}, nil
	}
	if uint64(req.GetOffset())+uint64(req.GetLength()) > uint64(s.layout.ChunkSize) {
		return fail(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST)
	}
	n := s.node(req.GetLogicPoolId(), req.GetCopysetId())
	if n == nil {
		return fail(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_COPYSET_NOTEXIST)
	}
	if n.Broken() != nil {
		return fail(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_DISK_FAIL)
	}
	ShareCommit(ctx, n, s.log)
	var hash string
	hashNow := func(m *chunkMachine) error {
		var err error
		hash, err = m.store.GetChunkHash(req.GetChunkId(), req.GetOffset(), req.GetLength())
		return err
	}
	applied, err := atRest(ctx, n, chunkHashAttempts, hashNow)
	switch {
	case errors.Is(err, errKeptApplying):
		var m *chunkMachine
		if m, err = chunkMachineOf(n); err == nil {
			err = hashNow(m)
		}
	case err == nil:
		SetAppliedTrailer(ctx, applied)
	}
	if err != nil {
		s.log.Error("chunk hash", "pool", req.GetLogicPoolId(), "copyset", req.GetCopysetId(),
			"chunk", req.GetChunkId(), "err", err)
		return fail(storeStatus(err))
	}
	return &pb.GetChunkHashResponse{Status: status(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS), Hash: proto.String(hash)}, nil
}

// chunkHashAttempts bounds how often GetChunkHash tries to hash a chunk
// while no entry is being applied.
const chunkHashAttempts = 5

// UpdateEpoch raises the server's fence for a file; a lower epoch than the
// stored one is EPOCH_TOO_OLD. The fence is then committed in the log of
// every copyset this server hosts (fence.go); SUCCESS once it is, else
// FAILURE_UNKNOWN (logged: the fence holds on this server, a retry
// finishes spreading it).
func (s *chunkService) UpdateEpoch(ctx context.Context, req *pb.UpdateEpochRequest) (*pb.UpdateEpochResponse, error) {
	if req.FileId == nil || req.Epoch == nil {
		return &pb.UpdateEpochResponse{Status: status(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST)}, nil
	}
	err := s.epochs.update(req.GetFileId(), req.GetEpoch())
	switch {
	case err == nil:
		if err := s.fences.propagate(ctx, fenceTable{req.GetFileId(): req.GetEpoch()}); err != nil {
			s.log.Error("update epoch: fence not committed in every copyset", "file", req.GetFileId(),
				"epoch", req.GetEpoch(), "err", err)
			return &pb.UpdateEpochResponse{Status: status(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_FAILURE_UNKNOWN)}, nil
		}
		return &pb.UpdateEpochResponse{Status: status(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)}, nil
	case errors.Is(err, errEpochTooOld):
		return &pb.UpdateEpochResponse{Status: status(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_EPOCH_TOO_OLD)}, nil
	default:
		s.log.Error("update epoch", "file", req.GetFileId(), "err", err)
		return &pb.UpdateEpochResponse{Status: status(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_DISK_FAIL)}, nil
	}
}
