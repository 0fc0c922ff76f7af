package disagg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/objstore"
	"github.com/chunkraft/chunkraft/proto/chunkraft/clusterpb"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
	vpb "github.com/chunkraft/chunkraft/proto/chunkraft/viewpb"
	dpb "github.com/chunkraft/chunkraft/proto/kvproto/disaggregated"
	"github.com/chunkraft/chunkraft/proto/kvproto/tikvpb"
)

// Config configures the disagg service (the chunkserver's disagg:
// section).
type Config struct {
	// LockCopyset is the copyset whose disagg machine holds the lock
	// table; its leader is the lock service's owner. Default pool 1
	// copyset 1.
	LockCopyset CopysetRef `yaml:"lock_copyset"`
	// Clones configures the locks of @s3 clone sources (clone.go).
	Clones CloneConfig `yaml:"clone_locks"`
	// Views bounds the read views (view.go).
	Views ViewConfig `yaml:"views"`
}

// CopysetRef names a copyset.
type CopysetRef struct {
	Pool    uint32 `yaml:"pool"`
	Copyset uint32 `yaml:"copyset"`
}

// DefaultConfig is the lock table on pool 1 copyset 1, clone sources
// locked (DefaultCloneConfig), the read views' default bounds.
func DefaultConfig() Config {
	return Config{LockCopyset: CopysetRef{Pool: 1, Copyset: 1}, Clones: DefaultCloneConfig(), Views: DefaultViewConfig()}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.LockCopyset.Pool == 0 || c.LockCopyset.Copyset == 0 {
		return fmt.Errorf("disagg.lock_copyset {pool: %d, copyset: %d}: pool and copyset must not be 0", c.LockCopyset.Pool, c.LockCopyset.Copyset)
	}
	if err := c.Clones.Validate(); err != nil {
		return err
	}
	return c.Views.Validate()
}

// Deps is what the disagg service needs of the process.
type Deps struct {
	// Config is the service's configuration (validated).
	Config Config
	// Objects is the server's object store: data files are checked and
	// lock and delete-mark objects written there.
	Objects objstore.Store
	// ObjectStore is its configuration (GetDisaggConfig).
	ObjectStore objstore.Config
	// Logger is the server's logger.
	Logger *slog.Logger
	// Dial returns a connection to the server at addr (the lock owner).
	Dial func(addr string) (*grpc.ClientConn, error)
	// Cluster returns the cluster map as this server crawls it (with the
	// request's seeds): where the lock copyset's leader is when this
	// server hosts no replica of it, and which copysets exist (the
	// owner's check of vanished copysets, vanished.go).
	Cluster func(ctx context.Context, req *clusterpb.ClusterMapRequest) (*clusterpb.ClusterMapResponse, error)
	// CloneOf returns the object an @s3 clone chunk of n reads from, ""
	// for a normal chunk, another clone or no chunk (the reconciler;
	// called after a read barrier on n's leader). nil: the copyset's
	// chunk store says (chunkread.Clones); tests give their own.
	CloneOf func(n *copyset.Node, chunk uint64) (string, error)
	// StoreID is the server's id in EstablishDisaggTask answers.
	StoreID uint64
}

// Service is the disagg service of one server: the lock service and
// GetDisaggConfig on tikvpb.Tikv, and DisaggInternal (the machine's spec
// is the package's Spec).
type Service struct {
	deps     Deps
	log      *slog.Logger
	group    copyset.GroupID
	copysets *copyset.Manager // set by Attach
	internal *internalService
	requests *prometheus.CounterVec
	// views is the read views' bookkeeping (view_tasks.go).
	views        *viewTasks
	viewRequests *prometheus.CounterVec

	settler *settler // the owner's decisions (settle.go)
	orphans prometheus.Counter

	mu         sync.Mutex
	reconciler *copyset.LeaderWorker // set by Start, stopped by Stop
	settling   *copyset.LeaderWorker // settleWork; set by Start, stopped by Stop
	lastOwner  copyset.PeerID        // the remote owner that last answered (owner_call.go)

	vanishedLooks atomic.Int64 // VanishedLooks
}

// New returns the service; Attach and Register wire it.
func New(deps Deps) *Service {
	g := copyset.NewGroupID(deps.Config.LockCopyset.Pool, deps.Config.LockCopyset.Copyset)
	s := &Service{deps: deps, log: deps.Logger.With("component", "disagg"), group: g, requests: newRequestsMetric(),
		views: newViewTasks(), viewRequests: newViewRequestsMetric(), settler: newSettler(), orphans: newOrphansMetric()}
	s.internal = &internalService{s: s}
	return s
}

// Attach gives the service the copyset manager.
func (s *Service) Attach(m *copyset.Manager) { s.copysets = m }

// Register registers tikvpb.Tikv (the lock service and GetDisaggConfig;
// every other method Unimplemented) and DisaggInternal on g.
func (s *Service) Register(g grpc.ServiceRegistrar) {
	tikvpb.RegisterTikvServer(g, &tikvService{s: s})
	pb.RegisterDisaggInternalServer(g, s.internal)
	vpb.RegisterDisaggViewsServer(g, &viewsService{s: s})
}

// owner returns the lock copyset's node and machine when this server
// leads it; else the leader it knows.
func (s *Service) owner() (*copyset.Node, *Machine, copyset.PeerID, bool) {
	n := s.copysets.Get(s.group)
	if n == nil {
		return nil, nil, "", false
	}
	if !n.IsLeader() || n.Broken() != nil {
		return nil, nil, n.Leader(), false
	}
	m, ok := MachineOf(n)
	return n, m, "", ok
}

// propose replicates op on the lock copyset through n. ok is false when
// the outcome is not a decision this server can report: not the leader
// any more, leadership lost or the commit not confirmed (the client
// retries on the owner, and a retry is idempotent). err is the caller's
// cancellation, or InvalidArgument for an op admission refuses.
func (s *Service) propose(ctx context.Context, n *copyset.Node, op *pb.Op) (res Result, ok bool, err error) {
	b, err := encodeOp(op)
	if err != nil {
		return Result{}, false, status.Error(codes.InvalidArgument, err.Error())
	}
	index, r, err := copyset.ProposeAs[Result](ctx, n, b)
	switch {
	case err == nil:
		return r, true, nil
	case index != 0:
		s.log.Warn("disagg proposal failed on apply: answering not_owner", "err", err)
		return Result{}, false, nil
	case ctx.Err() != nil:
		return Result{}, false, status.FromContextError(ctx.Err()).Err()
	}
	// Not the leader, or the leadership lost after the op was appended
	// (it may still commit: the client's retry on the owner is
	// idempotent), is a plain not_owner.
	var (
		nl *copyset.NotLeaderError
		ou *copyset.OutcomeUnknownError
	)
	if !errors.As(err, &nl) && !errors.As(err, &ou) {
		s.log.Warn("disagg proposal not confirmed: answering not_owner", "err", err)
	}
	return Result{}, false, nil
}

func notOwner() *dpb.S3LockResult {
	return &dpb.S3LockResult{Error: &dpb.S3LockResult_NotOwner{NotOwner: &dpb.NotOwner{}}}
}

func conflict(reason string) *dpb.S3LockResult {
	return &dpb.S3LockResult{Error: &dpb.S3LockResult_Conflict{Conflict: &dpb.Conflict{Reason: reason}}}
}

func success() *dpb.S3LockResult {
	return &dpb.S3LockResult{Error: &dpb.S3LockResult_Success{Success: &dpb.Success{}}}
}

// parseKey is upstream's first check: a key that is not a data file key
// is a gRPC error (upstream's RUNTIME_CHECK, INTERNAL).
func parseKey(key []byte) (Key, error) {
	k, err := ParseKey(string(key))
	if err != nil {
		return Key{}, status.Error(codes.Internal, err.Error())
	}
	return k, nil
}

// exists reports whether object name is in the store.
func (s *Service) exists(ctx context.Context, name string) (bool, error) {
	_, err := s.deps.Objects.Stat(ctx, name)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, objstore.ErrNotExist):
		return false, nil
	}
	return false, status.Errorf(codes.Unavailable, "object store: %v", err)
}

// putEmpty writes the empty object name after a commit.
func (s *Service) putEmpty(ctx context.Context, name, what string) error {
	if err := s.deps.Objects.Put(ctx, name, bytes.NewReader(nil), 0); err != nil {
		s.log.Warn("disagg: committed, but writing its object failed", "object", name, "err", err)
		return status.Errorf(codes.Unavailable, "%s committed, but writing object %s failed (retry: it is idempotent): %v", what, name, err)
	}
	return nil
}

// TryAddLock is upstream tryAddLock: a non-data-file key is a gRPC error;
// not the owner → not_owner; else the decision (decideOnKey): the data
// file missing in the object store, or its delete mark present, is a
// conflict; else the lock object is written and the answer is success.
func (s *Service) TryAddLock(ctx context.Context, key []byte, lockStore, lockSeq uint64) (*dpb.S3LockResult, error) {
	k, err := parseKey(key)
	if err != nil {
		return nil, err
	}
	n, m, _, ok := s.owner()
	if !ok {
		return notOwner(), nil
	}
	return s.decideOnKey(ctx, n, m, k, false, lockStore, lockSeq)
}

// TryMarkDelete is upstream tryMarkDelete: a non-data-file key is a gRPC
// error; not the owner → not_owner; else the decision (decideOnKey): a
// lock object of the file in the object store, or a clone lock on it, is
// a conflict; else the .del object is written and the answer is success.
func (s *Service) TryMarkDelete(ctx context.Context, key []byte) (*dpb.S3LockResult, error) {
	k, err := parseKey(key)
	if err != nil {
		return nil, err
	}
	n, m, _, ok := s.owner()
	if !ok {
		return notOwner(), nil
	}
	return s.decideOnKey(ctx, n, m, k, true, 0, 0)
}

// DisaggConfig is GetDisaggConfig: the S3 object store's bucket, key
// prefix (upstream's root) and endpoint; with the local-directory store,
// UNIMPLEMENTED (upstream's answer outside storage mode).
func (s *Service) DisaggConfig() (*dpb.DisaggS3Config, error) {
	c := s.deps.ObjectStore
	if c.Kind != objstore.KindS3 {
		return nil, status.Errorf(codes.Unimplemented, "no S3 object store is configured (object_store.kind is %q)", c.Kind)
	}
	return &dpb.DisaggS3Config{Bucket: c.S3.Bucket, Root: c.S3.KeyPrefix(), Endpoint: c.S3.Endpoint}, nil
}

// tikvService is tikvpb.Tikv: the lock service, GetDisaggConfig and the
// read views (view_service.go); TiKV's own methods answer Unimplemented.
type tikvService struct {
	tikvpb.UnimplementedTikvServer
	s *Service
}

// OwnerHeader is the gRPC response header a not_owner answer of
// tryAddLock and tryMarkDelete carries when this server knows the owner:
// its address (host:port). Upstream's NotOwner has no field for it;
// clients that do not read headers lose nothing.
const OwnerHeader = "chunkraft-owner"

// hintOwner sets OwnerHeader on a not_owner answer r.
func (s *Service) hintOwner(ctx context.Context, r *dpb.S3LockResult) {
	if r.GetNotOwner() == nil {
		return
	}
	var owner copyset.PeerID
	if n := s.copysets.Get(s.group); n != nil {
		owner = n.Leader()
	}
	if owner == "" {
		s.mu.Lock()
		owner = s.lastOwner
		s.mu.Unlock()
	}
	if owner != "" {
		_ = grpc.SetHeader(ctx, metadata.Pairs(OwnerHeader, owner.Addr())) // a hint: the answer stands without it
	}
}

func (t *tikvService) TryAddLock(ctx context.Context, req *dpb.TryAddLockRequest) (*dpb.TryAddLockResponse, error) {
	r, err := t.s.TryAddLock(ctx, req.GetDataFileKey(), req.GetLockStoreId(), req.GetLockSeq())
	t.s.countLock("lock", r, err)
	t.s.hintOwner(ctx, r)
	if err != nil {
		return nil, err
	}
	return &dpb.TryAddLockResponse{Result: r}, nil
}

func (t *tikvService) TryMarkDelete(ctx context.Context, req *dpb.TryMarkDeleteRequest) (*dpb.TryMarkDeleteResponse, error) {
	r, err := t.s.TryMarkDelete(ctx, req.GetDataFileKey())
	t.s.countLock("mark_delete", r, err)
	t.s.hintOwner(ctx, r)
	if err != nil {
		return nil, err
	}
	return &dpb.TryMarkDeleteResponse{Result: r}, nil
}

func (t *tikvService) GetDisaggConfig(context.Context, *dpb.GetDisaggConfigRequest) (*dpb.GetDisaggConfigResponse, error) {
	c, err := t.s.DisaggConfig()
	if err != nil {
		return nil, err
	}
	return &dpb.GetDisaggConfigResponse{S3Config: c}, nil
}

// internalService is DisaggInternal: List and Release on the owner.
type internalService struct {
	pb.UnimplementedDisaggInternalServer
	s *Service
}

func (is *internalService) List(ctx context.Context, req *pb.ListRequest) (*pb.ListResponse, error) {
	n, m, leader, ok := is.s.owner()
	if !ok {
		return &pb.ListResponse{NotOwner: true, Leader: string(leader)}, nil
	}
	if _, err := n.ReadBarrier(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return &pb.ListResponse{NotOwner: true, Leader: string(n.Leader())}, nil
	}
	files, applied := m.List(req.GetPrefix(), req.GetHolderPool(), req.GetHolderCopyset())
	resp := &pb.ListResponse{Applied: applied, Pool: is.s.group.Pool(), Copyset: is.s.group.Copyset(),
		Copysets: m.cloneCopysets(req.GetHolderPool(), req.GetHolderCopyset())}
	if req.GetHolderPool() == 0 {
		var err error
		if files, err = is.s.withObjects(ctx, req.GetPrefix(), files); err != nil {
			return nil, err
		}
		resp.Pending = m.pendings(req.GetPrefix())
	}
	resp.Files = files
	return resp, nil
}

// Release deletes the store's lock objects with seq <= up_to_seq (what
// upstream's GC of a store's superseded locks does): the objects are the
// locks, so no op goes through raft.
func (is *internalService) Release(ctx context.Context, req *pb.ReleaseRequest) (*pb.ReleaseResponse, error) {
	resp, err := is.release(ctx, req)
	result := "success"
	switch {
	case err != nil:
		result = "error"
	case resp.GetNotOwner():
		result = "not_owner"
	}
	is.s.requests.WithLabelValues("release", result).Inc()
	return resp, err
}

func (is *internalService) release(ctx context.Context, req *pb.ReleaseRequest) (*pb.ReleaseResponse, error) {
	s := is.s
	if _, _, leader, ok := s.owner(); !ok {
		return &pb.ReleaseResponse{NotOwner: true, Leader: string(leader)}, nil
	}
	objs, err := s.deps.Objects.List(ctx, LockPrefix)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "listing lock objects: %v", err)
	}
	var drop []string
	for _, o := range objs {
		if _, store, seq, ok := parseLockObject(o.Name); ok && store == req.GetLockStoreId() && seq <= req.GetUpToSeq() {
			drop = append(drop, o.Name)
		}
	}
	for i, name := range drop {
		if err := s.deps.Objects.Delete(ctx, name); err != nil {
			return nil, status.Errorf(codes.Unavailable, "released %d locks; deleting lock object %s: %v (run the release again)", i, name, err)
		}
	}
	slices.Sort(drop)
	return &pb.ReleaseResponse{Released: drop}, nil
}
