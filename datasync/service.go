package datasync

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/kinds"
	"github.com/chunkraft/chunkraft/internal/objstore"
	"github.com/chunkraft/chunkraft/proto/chunkraft/clusterpb"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/syncstatepb"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
)

// DefaultCheckPeriod is how often a leader looks at its copysets'
// sub-tasks; a RUNNING sub-task with no packet for twice that is
// reassigned (upstream SyncTool's check period).
const DefaultCheckPeriod = 10 * time.Second

// DefaultSendInterval is Deps.SendInterval when unset: upstream
// DataCollector's long interval (sync_task_long_interval_ms), its pace
// once a sub-task has caught up with its table's binlog.
const DefaultSendInterval = 5 * time.Second

// Deps is what the sync service needs of the process.
type Deps struct {
	// Local is this server's peer id.
	Local copyset.PeerID
	// Cluster returns the cluster map (every server and copyset).
	Cluster func(ctx context.Context) (*clusterpb.ClusterMapResponse, error)
	// Dial returns a connection to the chunkserver at addr (the caller's:
	// it closes them after Stop).
	Dial func(addr string) (*grpc.ClientConn, error)
	// ObjectStore is the server's object store configuration: s3:// dests
	// use its endpoint and credentials.
	ObjectStore objstore.Config
	// CheckPeriod is DefaultCheckPeriod unless set.
	CheckPeriod time.Duration
	// SendInterval paces a tailing export that has caught up with its
	// copyset's log (ExportOptions.Linger and Idle): a binlog packet that
	// is not full waits this long for more entries, and an idle sub-task
	// sends an empty packet (a heartbeat) this often. Each packet is a
	// durable write on the dest and a replicated Advance, so it trades
	// freshness for the cost to the chunk path. DefaultSendInterval unless
	// set; at most half of CheckPeriod is used.
	SendInterval time.Duration
	// SnapshotExports bounds the snapshot phases the server's collectors
	// export at once (SnapshotGate); DefaultSnapshotExports unless set.
	SnapshotExports int
	// Logger is the server's logger.
	Logger *slog.Logger
}

// Service is the sync service of one server: the sync machine's spec, the
// DataCollector and SyncTool RPCs, SyncInternal, and the leader worker
// that runs the collectors of the copysets this server leads.
type Service struct {
	deps     Deps
	log      *slog.Logger
	copysets *copyset.Manager // set by Attach
	dests    *destCache
	metrics  *metrics
	gate     *SnapshotGate

	worker copyset.WorkerSlot

	collecting  atomic.Int64 // Collecting
	leaderWaits atomic.Int64 // LeaderWaits
}

// New returns the service; Attach, Register and Start wire it.
func New(deps Deps) *Service {
	if deps.CheckPeriod <= 0 {
		deps.CheckPeriod = DefaultCheckPeriod
	}
	if deps.SendInterval <= 0 {
		deps.SendInterval = DefaultSendInterval
	}
	if deps.SnapshotExports <= 0 {
		deps.SnapshotExports = DefaultSnapshotExports
	}
	return &Service{deps: deps, log: deps.Logger.With("component", "sync"), dests: newDestCache(deps.ObjectStore),
		metrics: newMetrics(), gate: NewSnapshotGate(deps.SnapshotExports)}
}

// Spec is the sync machine's spec.
func (s *Service) Spec() copyset.MachineSpec { return Spec() }

// Attach gives the service the copyset manager.
func (s *Service) Attach(m *copyset.Manager) { s.copysets = m }

// Register registers DataCollector, SyncTool and SyncInternal on g.
func (s *Service) Register(g grpc.ServiceRegistrar) {
	dspb.RegisterDataCollectorServer(g, &collectorService{s: s})
	dspb.RegisterSyncToolServer(g, &toolService{s: s})
	pb.RegisterSyncInternalServer(g, &internalService{s: s})
}

// Start starts the collectors' leader worker.
func (s *Service) Start() error {
	return s.worker.Start(s.copysets, s.lead, copyset.LeaderWorkerOptions{Name: "sync", RetryDelay: time.Second})
}

// Stop stops the collectors and closes the destinations.
func (s *Service) Stop() {
	s.worker.Stop()
	s.dests.close()
}

// MachineOf returns the sync machine of n.
func MachineOf(n *copyset.Node) (*Machine, bool) { return copyset.MachineOf[*Machine](n, kinds.Sync) }

// nowMs is the proposer's clock (ops carry it; Apply never reads one).
func nowMs() int64 { return time.Now().UnixMilli() }
