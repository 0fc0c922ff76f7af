package chunkstore

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/chunkraft/chunkraft/chunkstore/datastore"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/disagg"
	"github.com/chunkraft/chunkraft/internal/kinds"
	"github.com/chunkraft/chunkraft/internal/objstore"
	"github.com/chunkraft/chunkraft/proto/chunkraft/raftpb"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// Config is what the chunk store takes of the server.
type Config struct {
	// Local is this server's peer id.
	Local copyset.PeerID
	// DataDir is the server's data dir: the epoch map and the chunk file
	// pool live there; each copyset's chunks in its own dir.
	DataDir string
	// ChunkFilePool is how many preallocated chunk files the server keeps
	// (0: none).
	ChunkFilePool int
	// ReadCacheBytes sizes the block cache shared by all copysets (0: off).
	ReadCacheBytes int64
	// MaxInflight bounds the chunk requests served at once (OVERLOAD);
	// MinFreeBytes is the free space below which mutations get NOSPACE.
	MaxInflight  int
	MinFreeBytes uint64
	// Objects is the server's object store (<object>@s3 clone sources).
	Objects objstore.Store
	// CloneSourceServers are asked for the leaders of source copysets not
	// hosted here.
	CloneSourceServers []string
	// Locks is the clone source lock service (package disagg).
	Locks *disagg.Service
	// Dial returns a connection to another server (the caller's: it closes
	// them after Stop).
	Dial func(addr string) (*grpc.ClientConn, error)
	// FS is the chunk files' file system (nil: the OS; a fault layer in
	// tests).
	FS datastore.FS
	// Logger is the server's logger.
	Logger *slog.Logger
}

// Store is the chunk store of a server as a tenant of its copysets: the
// chunk machine of every copyset with the write fence, epoch fence and
// read-view machines that apply to it, Curve's ChunkService, the Fences service between
// servers, the admission of chunk requests, and what every copyset's
// chunks share (the chunk file pool, the block cache, the clone source
// reader).
type Store struct {
	cfg      Config
	log      *slog.Logger
	layout   datastore.Options
	epochs   *epochMap
	fences   *fencer
	admit    *Admission
	sources  *cloneSource
	pool     *datastore.FilePool // nil without one
	cache    *datastore.BlockCache
	metrics  *metrics
	service  *chunkService
	copysets *copyset.Manager // set by Attach

	stopPool context.CancelFunc
	poolWG   sync.WaitGroup
}

// Open opens what every copyset's chunks share. Nothing runs yet.
func Open(cfg Config) (*Store, error) {
	epochs, err := openEpochMap(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, log: cfg.Logger, epochs: epochs,
		layout: datastore.Options{Logger: cfg.Logger.With("component", "datastore"), FS: cfg.FS}}
	s.fences = &fencer{epochs: epochs, local: cfg.Local, dial: cfg.Dial, log: cfg.Logger.With("component", "fences")}
	s.admit = &Admission{maxInflight: int64(cfg.MaxInflight), dataDir: cfg.DataDir, minFree: cfg.MinFreeBytes, diskFree: statfsFree}
	if cfg.ChunkFilePool > 0 {
		pool, err := datastore.OpenFilePool(datastore.PoolOptions{
			Dir: filepath.Join(cfg.DataDir, "chunkfilepool"), Count: cfg.ChunkFilePool,
			ChunkSize: datastore.DefaultChunkSize, PageSize: datastore.DefaultPageSize, BlockSize: datastore.DefaultBlockSize,
			Logger: cfg.Logger.With("component", "chunkfilepool"),
		})
		if err != nil {
			return nil, err
		}
		s.pool, s.layout.Pool = pool, pool
	}
	if cfg.ReadCacheBytes > 0 {
		cache, err := datastore.NewBlockCache(cfg.ReadCacheBytes)
		if err != nil {
			return nil, err
		}
		s.cache, s.layout.Cache = cache, cache
	}
	s.sources = &cloneSource{objects: cfg.Objects, seeds: cfg.CloneSourceServers, dial: cfg.Dial}
	s.metrics = newMetrics()
	ds := datastore.Options{ChunkSize: datastore.DefaultChunkSize, PageSize: datastore.DefaultPageSize, BlockSize: datastore.DefaultBlockSize}
	s.service = &chunkService{layout: ds, epochs: epochs, fences: s.fences, admit: s.admit, sources: s.sources,
		locks: cfg.Locks, metrics: s.metrics, log: cfg.Logger}
	s.sources.local = s.service.localRead
	return s, nil
}

// Name implements the host's Tenant.
func (s *Store) Name() string { return "chunkstore" }

// Specs are the chunk store's machines, in the order they open: the chunk
// machine first (the write fence and view machines apply to it, other
// tenants' machines read it through chunkread.In), the write fence, the
// epoch fences, whose tables feed the server's epoch map, and the read
// views. The chunk and fence machines keep their files in the copyset
// data dir itself (their layout predates machine directories and must not
// change). Only the chunk machine batches: it stamps (index, position).
func (s *Store) Specs() []copyset.MachineSpec {
	return []copyset.MachineSpec{
		{Kind: kinds.Chunk, Name: "chunk", Batch: true,
			Open: func(env copyset.MachineEnv, _ copyset.Machines) (copyset.StateMachine, error) {
				opts := s.layout
				opts.Dir = env.DataDir
				store, err := datastore.Open(opts)
				if err != nil {
					return nil, err
				}
				return &chunkMachine{store: store, sources: s.sources, log: env.Logger}, nil
			}},
		writeFenceSpec(),
		{Kind: kinds.Fence, Name: "fence",
			Open: func(env copyset.MachineEnv, _ copyset.Machines) (copyset.StateMachine, error) {
				return openFenceMachine(env.DataDir, s.epochs, env.Logger)
			}},
		viewSpec(),
	}
}

// LeaderPrepare is the copyset manager's LeaderPrepare: a new leader
// commits the fences its members know before it serves (fence.go).
func (s *Store) LeaderPrepare(ctx context.Context, n *copyset.Node) error {
	return s.fences.prepare(ctx, n)
}

// Attach implements the host's Tenant.
func (s *Store) Attach(m *copyset.Manager) {
	s.copysets = m
	s.fences.copysets = m
	s.sources.copysets = m
	s.service.copysets = m
}

// Register implements the host's Tenant: ChunkService and Fences.
func (s *Store) Register(g grpc.ServiceRegistrar) {
	pb.RegisterChunkServiceServer(g, s.service)
	raftpb.RegisterFencesServer(g, s.fences)
}

// Collectors implements the host's Tenant.
func (s *Store) Collectors() []prometheus.Collector {
	return append(s.metrics.collectors(), s.statsCollectors()...)
}

// Start implements the host's Tenant: the chunk file pool formats in the
// background until Stop.
func (s *Store) Start() error {
	if s.pool == nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stopPool = cancel
	s.poolWG.Add(1)
	go func() {
		defer s.poolWG.Done()
		if err := s.pool.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			s.log.Error("chunk file pool", "err", err)
		}
	}()
	return nil
}

// Stop implements the host's Tenant: after the copysets closed, the pool
// stops and the block cache is released.
func (s *Store) Stop() {
	if s.stopPool != nil {
		s.stopPool()
		s.poolWG.Wait()
		s.stopPool = nil
	}
	if s.cache != nil {
		s.cache.Close()
		s.cache = nil
	}
}

// Admission is the chunk requests' admission (OVERLOAD, NOSPACE), which
// the host's runtime configuration and copyset status read and change.
func (s *Store) Admission() *Admission { return s.admit }

// SetPoolTarget changes the chunk file pool's target; an error without a
// pool (that needs a restart).
func (s *Store) SetPoolTarget(n int) error {
	if s.pool == nil {
		return errors.New("the server has no chunk file pool")
	}
	return s.pool.SetTarget(n)
}

// Pool is the server's chunk file pool; nil without one.
func (s *Store) Pool() *datastore.FilePool { return s.pool }

// EpochAllowed reports whether a request of epoch for file passes the
// server's fences (tests and status).
func (s *Store) EpochAllowed(file, epoch uint64) bool { return s.epochs.allowed(file, epoch) }
