package chunkserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/chunkraft/chunkraft/chunkstore"
	"github.com/chunkraft/chunkraft/chunkstore/datastore"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/copyset/sharedlog"
	"github.com/chunkraft/chunkraft/datasync"
	"github.com/chunkraft/chunkraft/disagg"
	"github.com/chunkraft/chunkraft/dm"
	"github.com/chunkraft/chunkraft/integrity"
	"github.com/chunkraft/chunkraft/internal/grpcbuf"
	"github.com/chunkraft/chunkraft/internal/objstore"
	"github.com/chunkraft/chunkraft/proto/chunkraft/clusterpb"
	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Server is one chunkserver process: a gRPC listener serving every seed
// service and the raft traffic of all copysets, an HTTP listener for
// metrics, health and pprof, and the copysets on its data dir.
type Server struct {
	cfg      Config
	log      *slog.Logger
	local    copyset.PeerID
	grpc     *grpc.Server
	health   *health.Server
	trans    *copyset.TransportManager
	copysets *copyset.Manager
	metrics  *metrics
	admit    *chunkstore.Admission // the chunk store's, read by the host's status and runtime config
	shared   *sharedlog.Log        // nil unless raft.log_store is shared
	objects  objstore.Store        // clone sources and disagg's lock objects
	stale    *staleSweep           // deletes replicas their copyset no longer has (stale_sweep.go)
	cluster  *clusterMap           // the cluster map service (cluster_map.go)
	ready    atomic.Bool
	chunks   *chunkstore.Store  // ChunkService, the chunk, fence and view machines, Fences
	scans    *integrity.Service // IntegrityService, ScanService, scan worker, /integrity
	syncs    *datasync.Service  // DataCollector, SyncTool, SyncInternal, the export collectors
	disagg   *disagg.Service    // tikvpb.Tikv's lock service and GetDisaggConfig, DisaggInternal, read views
	// tenants are the services on the copysets, driven in this order
	// (tenant.go): chunks, scans, syncs, disagg, then any a test adds.
	tenants []Tenant
	peers   *connCache    // connections to the other chunkservers (conncache.go)
	rt      *runtimeState // ConfigService, ChunkServerStatus (config_runtime.go)
	tls     *serverTLS    // nil: plaintext (tls.go)
}

// New builds a server from a validated configuration. Nothing listens yet.
// Raft's own log lines go to log too (adapted from hclog, with the
// copyset's pool and copyset, filtered by raft.log_level).
func New(cfg Config, log *slog.Logger) (*Server, error) {
	return NewWithSeams(cfg, log, Seams{})
}

// Seams are what tests replace: where raft logs go (nil: the server's
// logger; else JSON lines on the writer), the chunk stores' file system (a
// datastore.FaultFS injects disk faults; nil: the OS).
type Seams struct {
	RaftLog io.Writer
	FS      datastore.FS
	// RaftDial is appended to the raft transport's dial options (a fault
	// layer's interceptors in tests).
	RaftDial []grpc.DialOption
	// Tenants are hosted after the server's own (tests).
	Tenants []Tenant
}

// streamWorkers is the number of gRPC stream workers (see NewWithSeams).
const streamWorkers = 1024

// NewWithSeams is New with the seams of hooks replaced.
func NewWithSeams(cfg Config, log *slog.Logger, hooks Seams) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	local, _, err := copyset.ParsePeer(cfg.Advertise)
	if err != nil {
		return nil, fmt.Errorf("advertise address: %w", err)
	}
	s := &Server{cfg: cfg, log: log, local: local}
	if s.tls, err = loadTLS(cfg.TLS); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	// One set of connections to the other chunkservers for every call this
	// server makes to them outside raft; clone sources read whole chunks.
	s.peers = newConnCache(s.tls.peerDial(), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(cfg.MaxMessageSize)))
	s.scans = integrity.New(integrity.Deps{Local: local, Dial: s.peers.get, Logger: log})
	s.syncs = datasync.New(datasync.Deps{Local: local, Dial: s.peers.get,
		Cluster: func(ctx context.Context) (*clusterpb.ClusterMapResponse, error) {
			return s.cluster.ClusterMap(ctx, &clusterpb.ClusterMapRequest{})
		},
		ObjectStore: cfg.ObjectStore, CheckPeriod: cfg.Sync.CheckPeriod, SendInterval: cfg.Sync.SendInterval,
		SnapshotExports: cfg.Sync.SnapshotExports, Logger: log})
	s.trans = copyset.NewTransportManager(raft.ServerAddress(local.Addr()), copyset.TransportOptions{
		Logger: log.With("component", "transport"),
		// Leaders run raft with a longer heartbeat timeout (below); each
		// peer's batcher beats for them as often as raft's fastest
		// heartbeat, and raft's own heartbeats wait for the next batch.
		LeaderBeatInterval:   cfg.Raft.HeartbeatTimeout / 5,
		HeartbeatBatchWindow: min(cfg.Raft.HeartbeatTimeout, cfg.Raft.LeaseTimeout()) / 5,
		DialOptions: append([]grpc.DialOption{
			s.tls.peerDial(),
			experimental.WithBufferPool(grpcbuf.Pool),
			grpc.WithDefaultCallOptions(
				grpc.MaxCallRecvMsgSize(cfg.MaxMessageSize),
				grpc.MaxCallSendMsgSize(cfg.MaxMessageSize)),
		}, hooks.RaftDial...),
	})
	if cfg.Raft.LogStore == "shared" {
		s.shared, err = sharedlog.Open(sharedlog.Options{
			Dir: filepath.Join(cfg.DataDir, "raftlog"), Shards: cfg.Raft.LogShards, SpareSegments: cfg.Raft.LogSpareSegments,
			Logger: log.With("component", "sharedlog"),
		})
		if err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	s.objects, err = objstore.Open(ctx, cfg.ObjectStore)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("object store: %w", err)
	}
	s.disagg = disagg.New(disagg.Deps{Config: cfg.Disagg, Objects: s.objects, ObjectStore: cfg.ObjectStore, Logger: log,
		Dial: s.peers.get, Cluster: func(ctx context.Context, req *clusterpb.ClusterMapRequest) (*clusterpb.ClusterMapResponse, error) {
			return s.cluster.ClusterMap(ctx, req)
		}, StoreID: disagg.StoreIDOf(string(local))})
	s.chunks, err = chunkstore.Open(chunkstore.Config{Local: local, DataDir: cfg.DataDir,
		ChunkFilePool: cfg.ChunkFilePool, ReadCacheBytes: cfg.ReadCacheBytes,
		MaxInflight: cfg.MaxInflight, MinFreeBytes: cfg.MinFreeBytes,
		Objects: s.objects, CloneSourceServers: cfg.CloneSourceServers, Locks: s.disagg,
		Dial: s.peers.get, FS: hooks.FS, Logger: log})
	if err != nil {
		return nil, err
	}
	s.admit = s.chunks.Admission()
	dms := dm.New(dm.Deps{Config: cfg.DM, Local: local, Dial: s.peers.get, Logger: log, Chunks: s.chunks, ObjectStore: cfg.ObjectStore,
		Cluster: func(ctx context.Context) (*clusterpb.ClusterMapResponse, error) {
			return s.cluster.ClusterMap(ctx, &clusterpb.ClusterMapRequest{})
		}})
	s.tenants = append([]Tenant{s.chunks, s.scans, s.syncs, s.disagg, dms}, hooks.Tenants...)
	var raftLog *slog.Logger // nil: the manager's, which is log
	if hooks.RaftLog != nil {
		raftLog = slog.New(slog.NewJSONHandler(hooks.RaftLog, nil))
	}
	s.copysets, err = copyset.NewManager(copyset.ManagerOptions{
		SharedLog:     s.shared,
		Dir:           cfg.DataDir,
		Local:         local,
		Transports:    s.trans,
		Machines:      s.machineSpecs(),
		LeaderPrepare: s.chunks.LeaderPrepare,
		Raft: copyset.RaftOptions{
			HeartbeatTimeout:   cfg.Raft.HeartbeatTimeout,
			ElectionTimeout:    cfg.Raft.ElectionTimeout,
			LeaderLeaseTimeout: cfg.Raft.LeaseTimeout(),
			// raft's heartbeats go every tenth to fifth of it (at most 0.4x
			// the lease timeout), plus up to a batch window (0.2x): well
			// within the lease timeout its contact times are checked against.
			LeaderHeartbeatTimeout: cfg.Raft.LeaseTimeout() * 2,
			CommitTimeout:          cfg.Raft.CommitTimeout,
			MaxAppendEntries:       cfg.Raft.MaxAppendEntries,
			MaxInflightEntries:     cfg.Raft.MaxInflightEntries,
			LogLevel:               cfg.Raft.LogLevel,
			SnapshotThreshold:      cfg.Raft.SnapshotThreshold,
			SnapshotInterval:       cfg.Raft.SnapshotInterval,
			TrailingLogs:           cfg.Raft.TrailingLogs,
			SnapshotBytes:          cfg.Raft.SnapshotBytes,
			TrailingBytes:          cfg.Raft.TrailingBytes,
			MaxPinnedEntries:       cfg.Raft.MaxPinnedEntries,
			MaxPinnedBytes:         cfg.Sync.MaxRetainedBytes,
			NoReadLease:            !cfg.Raft.ReadLease,
			Logger:                 raftLog,
		},
		Logger: log,
	})
	if err != nil {
		s.trans.Close()
		if s.shared != nil {
			s.shared.Close()
		}
		return nil, err
	}
	s.metrics = newMetrics(s.countCopysets)
	s.metrics.reg.MustRegister(newCopysetCollector(s.copysets), newLogPinCollector(s.copysets, cfg.Raft.MaxPinnedEntries, cfg.Sync.MaxRetainedBytes))
	for _, t := range s.tenants {
		t.Attach(s.copysets)
		s.metrics.reg.MustRegister(t.Collectors()...)
	}
	registerSharedLogMetrics(s.metrics.reg, s.shared)
	s.metrics.reg.MustRegister(newRaftCollector(s.trans))
	rpcs := grpcprom.NewServerMetrics()
	s.metrics.reg.MustRegister(rpcs)

	s.grpc = grpc.NewServer(append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(cfg.MaxMessageSize),
		grpc.MaxSendMsgSize(cfg.MaxMessageSize),
		grpc.MaxConcurrentStreams(maxStreams(cfg.MaxConcurrentStreams)),
		// Calls run on long-lived workers (a fresh goroutine when all are
		// busy): no goroutine creation and stack growth per request. Raft
		// streams (two AppendEntries pipelines per copyset, heartbeats)
		// hold a worker for their lifetime, so the workers must outnumber
		// them plus the requests in flight: with a few per core, every
		// unary call starts a goroutine and grows its stack (9% of the
		// servers' CPU in a read benchmark: docs/performance.md, "gRPC
		// stream workers"). An idle worker is a parked goroutine.
		grpc.NumStreamWorkers(streamWorkers),
		// Needed although grpcbuf sets gRPC's default pool: grpc's default
		// server options captured the old default at grpc's own init.
		experimental.BufferPool(grpcbuf.Pool),
		// The standard per-method RPC counters (grpc_server_*) first, so
		// that they count what the other interceptors refuse too.
		grpc.ChainUnaryInterceptor(rpcs.UnaryServerInterceptor(), chunkstore.RecyclePooled),
		grpc.ChainStreamInterceptor(rpcs.StreamServerInterceptor()),
	}, s.tls.serverOptions(cfg.TLS.adminOU())...)...)
	copysets := &copysetService{copysets: s.copysets, admit: s.admit, log: log, conns: s.peers}
	s.stale = newStaleSweep(copysets, cfg.StaleReplicaCheck, s.metrics.reg, log)
	s.setupRuntime()
	s.registerPoolKey()
	s.cluster = &clusterMap{copysets: s.copysets, local: local, seeds: cfg.ClusterSeeds, conns: s.peers, ready: s.ready.Load}
	s.health = health.NewServer()
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	s.registerServices(curveServices{
		copysets: copysets,
		cli:      &cliService2{copysets: s.copysets, ready: &s.ready, conns: s.peers},
	})
	rpcs.InitializeMetrics(s.grpc) // every method's counters at 0 from the start
	return s, nil
}

// registerPoolKey makes chunk_file_pool change at runtime on a server
// that has a pool: the pool's target (datastore.FilePool.SetTarget), so
// that an operator can grow it before a burst of creations (a restore)
// and shrink it after. 0 (no pool) or a pool on a server started without
// one needs a restart.
func (s *Server) registerPoolKey() {
	if s.chunks.Pool() == nil {
		return
	}
	s.rt.registerRuntimeKey("chunk_file_pool", runtimeKey{
		check: func(next *Config) error {
			if next.ChunkFilePool < 1 {
				return errors.New("chunk_file_pool below 1 turns the chunk file pool off: that needs a restart")
			}
			return nil
		},
		apply: func(next *Config) {
			if err := s.chunks.SetPoolTarget(next.ChunkFilePool); err != nil {
				s.log.Error("chunk file pool target", "err", err)
			}
		},
	})
}

func (s *Server) countCopysets() (hosted, leading float64) {
	for _, n := range s.copysets.List() {
		hosted++
		if n.IsLeader() {
			leading++
		}
	}
	return hosted, leading
}

// Local returns this server's peer id.
func (s *Server) Local() copyset.PeerID { return s.local }

// Copysets returns the server's copyset manager.
func (s *Server) Copysets() *copyset.Manager { return s.copysets }

// Ready reports whether the server has loaded its copysets and serves.
func (s *Server) Ready() bool { return s.ready.Load() }

// ScanSettings returns the integrity scan settings in effect.
func (s *Server) ScanSettings() integrity.ScanSettings { return s.scans.Settings() }

// SetScanSettings changes the integrity scan settings at runtime; they
// apply from the next range scanned.
func (s *Server) SetScanSettings(v integrity.ScanSettings) error { return s.scans.SetSettings(v) }

// Run listens, reopens the copysets on disk, serves until ctx is done and
// then shuts down gracefully: listeners close, copysets stop, data syncs.
func (s *Server) Run(ctx context.Context) error {
	lis, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.cfg.Listen, err)
	}
	return s.Serve(ctx, lis)
}

// Serve is Run on an existing listener (tests use port 0).
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	var httpSrv *http.Server
	httpErr := make(chan error, 1)
	if s.cfg.MetricsListen != "" {
		hl, err := net.Listen("tcp", s.cfg.MetricsListen)
		if err != nil {
			lis.Close()
			return fmt.Errorf("listen metrics %s: %w", s.cfg.MetricsListen, err)
		}
		httpSrv = &http.Server{Handler: s.httpHandler(), ReadHeaderTimeout: 10 * time.Second}
		go func() { httpErr <- httpSrv.Serve(hl) }()
	}
	grpcErr := make(chan error, 1)
	go func() { grpcErr <- s.grpc.Serve(lis) }()
	s.log.Info("chunkserver listening", "listen", lis.Addr().String(), "peer", s.local,
		"metrics", s.cfg.MetricsListen, "data_dir", s.cfg.DataDir)

	// Copysets load after the listener is up: peers of a restarting server
	// must reach it while its replicas catch up.
	var loadErr error
	for _, t := range s.tenants {
		if loadErr = t.Start(); loadErr != nil {
			loadErr = fmt.Errorf("start %s: %w", t.Name(), loadErr)
			break
		}
	}
	if loadErr == nil {
		loadErr = s.copysets.Load(ctx)
	}
	if loadErr == nil {
		s.ready.Store(true)
		s.rt.startLoadCheck()
		s.stale.start()
		s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
		s.log.Info("copysets loaded", "count", len(s.copysets.List()))
	}

	var runErr error
	if loadErr != nil {
		runErr = loadErr
	} else {
		select {
		case <-ctx.Done():
		case err := <-grpcErr:
			runErr = fmt.Errorf("grpc server: %w", err)
		case err := <-httpErr:
			runErr = fmt.Errorf("metrics server: %w", err)
		}
	}
	s.log.Info("chunkserver shutting down")
	s.ready.Store(false)
	s.health.Shutdown()
	// Copysets stop first: raft groups shut down and their transports close,
	// so inbound raft calls for them fail at once. Peers keep their pipeline
	// streams to us open, so a graceful gRPC stop gets a short grace only.
	s.rt.stopLoadCheck()
	s.stale.stop()
	closeErr := s.copysets.Close()
	for _, t := range s.tenants {
		t.Stop()
	}
	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(time.Second):
		s.grpc.Stop()
		<-stopped
	}
	if httpSrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := httpSrv.Shutdown(sctx); err != nil {
			s.log.Warn("metrics server shutdown", "err", err)
		}
		cancel()
	}
	err := errors.Join(runErr, closeErr, s.trans.Close(), s.objects.Close(), s.peers.close())
	if s.shared != nil {
		err = errors.Join(err, s.shared.Close())
	}
	s.log.Info("chunkserver stopped", "err", err)
	return err
}

func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "loading", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("/integrity", s.scans)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// machineSpecs are the state machines of every copyset, in the order they
// open: each tenant's in the order of s.tenants (the chunk store's first:
// the others read it through chunkread.In).
func (s *Server) machineSpecs() []copyset.MachineSpec {
	var specs []copyset.MachineSpec
	for _, t := range s.tenants {
		specs = append(specs, t.Specs()...)
	}
	return specs
}
