package dm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/chunkraft/chunkraft/chunkstore"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/objstore"
	"github.com/chunkraft/chunkraft/proto/chunkraft/clusterpb"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	dmpb "github.com/chunkraft/chunkraft/proto/dm/pb"
)

// Config configures the dm service (the chunkserver's dm: section).
type Config struct {
	// ResumeBackoffMin and ResumeBackoffMax bound the wait before a
	// share paused by a resumable error is resumed: from the minimum,
	// doubling up to the maximum (upstream's 1 s to 5 min).
	ResumeBackoffMin time.Duration `yaml:"resume_backoff_min" toml:"resume-backoff-min"`
	ResumeBackoffMax time.Duration `yaml:"resume_backoff_max" toml:"resume-backoff-max"`
	// CheckInterval is how often paused shares are looked at for
	// auto-resume (upstream's 5 s).
	CheckInterval time.Duration `yaml:"check_interval" toml:"check-interval"`
}

// DefaultConfig is upstream's auto-resume: 1 s doubling to 5 min, looked
// at every 5 s.
func DefaultConfig() Config {
	return Config{ResumeBackoffMin: time.Second, ResumeBackoffMax: 5 * time.Minute, CheckInterval: 5 * time.Second}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.ResumeBackoffMin <= 0 || c.ResumeBackoffMax < c.ResumeBackoffMin:
		return fmt.Errorf("dm.resume_backoff_min %v, dm.resume_backoff_max %v: want 0 < min <= max", c.ResumeBackoffMin, c.ResumeBackoffMax)
	case c.CheckInterval <= 0:
		return fmt.Errorf("dm.check_interval %v: want more than 0", c.CheckInterval)
	}
	return nil
}

// Deps is what the dm service needs of the process.
type Deps struct {
	// Config is the service's configuration (validated).
	Config Config
	// Local is this server's peer ID (the worker's name).
	Local copyset.PeerID
	// Dial returns a connection to the server at addr.
	Dial func(addr string) (*grpc.ClientConn, error)
	// Cluster returns the cluster map as this server crawls it: which
	// servers to ask for the shares of the copysets they lead.
	Cluster func(ctx context.Context) (*clusterpb.ClusterMapResponse, error)
	// Logger is the server's logger.
	Logger *slog.Logger
	// Chunks is the server's chunk store: the appliers write the target
	// copysets' chunks through it (its admission and checks).
	Chunks *chunkstore.Store
	// ObjectStore is the server's object store configuration: the
	// endpoint and credentials of an s3:// source.
	ObjectStore objstore.Config
}

// Service is the dm tenant: the dm machine on every copyset, the
// pb.Worker service and DMInternal between servers.
type Service struct {
	deps     Deps
	log      *slog.Logger
	copysets *copyset.Manager
	metrics  *metrics
	applying atomic.Int64 // appliers running on this server
	worker   copyset.WorkerSlot
	// reads holds a slot while an applier reads and checks a packet
	// (applier.fetch): packetReads at once on this server.
	reads chan struct{}

	startMu sync.Mutex
	starts  map[startKey]int // Starts in flight on this server (fence.go)

	progMu sync.Mutex
	progs  map[progressKey]*progress // the appliers' progress (progress.go)
}

// New returns the dm service; Attach gives it the copysets.
func New(d Deps) *Service {
	return &Service{deps: d, log: d.Logger.With("component", "dm"), metrics: newMetrics(), reads: make(chan struct{}, packetReads)}
}

// Name implements the host's Tenant.
func (s *Service) Name() string { return "dm" }

// Specs implements the host's Tenant: the dm machine.
func (s *Service) Specs() []copyset.MachineSpec { return []copyset.MachineSpec{Spec()} }

// Attach implements the host's Tenant.
func (s *Service) Attach(m *copyset.Manager) { s.copysets = m }

// Register implements the host's Tenant: pb.Worker, DMControl and
// DMInternal.
func (s *Service) Register(g grpc.ServiceRegistrar) {
	dmpb.RegisterWorkerServer(g, &workerService{s: s})
	pb.RegisterDMControlServer(g, &controlService{s: s})
	pb.RegisterDMInternalServer(g, &internalService{s: s})
}

// Collectors implements the host's Tenant.
func (s *Service) Collectors() []prometheus.Collector { return s.metrics.collectors(s) }

// Start implements the host's Tenant: the appliers' leader worker.
func (s *Service) Start() error {
	return s.worker.Start(s.copysets, s.lead, copyset.LeaderWorkerOptions{Name: "dm", RetryDelay: time.Second})
}

// Stop implements the host's Tenant: it stops the appliers and waits.
func (s *Service) Stop() { s.worker.Stop() }

// Applying returns how many appliers this server runs now: one per
// Running share of each copyset it leads.
func (s *Service) Applying() int { return int(s.applying.Load()) }

// errNoCopysets: the service is not attached (a server still starting).
var errNoCopysets = errors.New("dm: the server's copysets are not loaded yet")
