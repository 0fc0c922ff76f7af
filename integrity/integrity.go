package integrity

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/chunkread"
	"github.com/chunkraft/chunkraft/internal/kinds"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
)

// Deps is what the server gives the integrity service: everything it uses
// of the process, and nothing else.
type Deps struct {
	// Local is this server's peer id.
	Local copyset.PeerID
	// Store returns the chunk store a copyset's integrity machine scans,
	// found among the machines opened before it on that copyset; nil:
	// chunkread.In, the chunk machine's (a test's toy store otherwise).
	Store func(opened copyset.Machines) (chunkread.Chunks, error)
	// Dial returns a client connection to the chunkserver at addr
	// (host:port), for the scan maps a follower sends its leader. The
	// connections are the caller's: it closes them after Stop.
	Dial func(addr string) (*grpc.ClientConn, error)
	// Logger is the server's logger.
	Logger *slog.Logger
}

// Service is a server's integrity scans: the kinds.Integrity machine of
// every copyset (Spec), IntegrityService and ScanService (Register),
// GET /integrity (ServeHTTP), the leader-side scan worker and the
// follower-side sender of scan maps (Start, Stop), and their metrics
// (Collectors).
type Service struct {
	deps     Deps
	copysets *copyset.Manager // set by Attach
	log      *slog.Logger
	settings atomic.Pointer[ScanSettings]
	reports  chan *pb.ScanMap

	mu    sync.Mutex
	tasks map[copyset.GroupID]*scanTask     // the range being scanned, per copyset led
	wakes map[copyset.GroupID]chan struct{} // the runs of the scan worker, per copyset led

	runMu  sync.Mutex
	worker *copyset.LeaderWorker
	cancel context.CancelFunc // the sender's
	wg     sync.WaitGroup

	// gate is held by the one step of any job this server takes at a time
	// (stepGated); it guards what follows.
	gate     chan struct{}
	last     time.Time      // when the last range started
	failures map[jobKey]int // failed steps in a row, per job

	rangesTotal prometheus.Counter
	mismatches  *prometheus.CounterVec
}

type jobKey struct {
	g  copyset.GroupID
	id int32
}

// scanTask collects the followers' maps of the range being scanned.
type scanTask struct {
	chunk   uint64
	offset  uint64
	maps    map[copyset.PeerID]*pb.ScanMap
	changed chan struct{}
}

// New builds the service with the default scan settings. Its machine spec
// (Spec) goes into the options of the copyset Manager, which is then handed
// to Attach.
func New(deps Deps) *Service {
	in := &Service{
		deps: deps, log: deps.Logger.With("component", "integrity"),
		reports: make(chan *pb.ScanMap, 4096),
		tasks:   map[copyset.GroupID]*scanTask{}, wakes: map[copyset.GroupID]chan struct{}{},
		gate: make(chan struct{}, 1), failures: map[jobKey]int{},
		rangesTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chunkraft_scan_ranges_total",
			Help: "Chunk ranges whose replicas this server compared as leader of an integrity scan.",
		}),
		mismatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chunkraft_scan_mismatches_total",
			Help: "Replica mismatches found by integrity scans led by this server, by reason.",
		}, []string{"reason"}),
	}
	for _, r := range mismatchReasons {
		in.mismatches.WithLabelValues(r) // 0 from start-up: increase() sees the first
	}
	def := DefaultScanSettings()
	in.settings.Store(&def)
	return in
}

// Spec is the integrity machine's spec. It keeps integrity.jsonl in the
// copyset data dir itself (where it was before machines had directories)
// and must come after the spec of the machine Deps.Store finds.
func (in *Service) Spec() copyset.MachineSpec {
	return copyset.MachineSpec{Kind: kinds.Integrity, Name: "integrity",
		Open: func(env copyset.MachineEnv, opened copyset.Machines) (copyset.StateMachine, error) {
			lookup := in.deps.Store
			if lookup == nil {
				lookup = func(opened copyset.Machines) (chunkread.Chunks, error) { return chunkread.In(opened) }
			}
			store, err := lookup(opened)
			if err != nil {
				return nil, err
			}
			g := env.Group
			return openMachine(g, env.DataDir, store, in,
				in.deps.Logger.With("component", "integrity", "pool", g.Pool(), "copyset", g.Copyset()))
		}}
}

// Attach hands the service the Manager built with its Spec. Call it before
// Register, ServeHTTP, Collectors and Start.
func (in *Service) Attach(copysets *copyset.Manager) { in.copysets = copysets }

// Register registers IntegrityService and ScanService on g.
func (in *Service) Register(g grpc.ServiceRegistrar) {
	pb.RegisterIntegrityServiceServer(g, &integrityService{in: in})
	pb.RegisterScanServiceServer(g, &scanService{in: in})
}

// Collectors are the scan metrics, for the server's registry.
func (in *Service) Collectors() []prometheus.Collector {
	return []prometheus.Collector{in.rangesTotal, in.mismatches,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "chunkraft_scan_jobs_running",
			Help: "RUNNING integrity jobs of the copysets this server leads.",
		}, in.runningJobs)}
}

func (in *Service) runningJobs() float64 {
	var n float64
	for _, node := range in.copysets.List() {
		if m := MachineOf(node); m != nil && node.IsLeader() {
			for _, j := range m.Jobs() {
				if j.State == JobRunning {
					n++
				}
			}
		}
	}
	return n
}

// MachineOf returns the integrity machine of n, or nil.
func MachineOf(n *copyset.Node) *Machine {
	m, _ := copyset.MachineOf[*Machine](n, kinds.Integrity)
	return m
}

// Settings returns the scan settings in effect.
func (in *Service) Settings() ScanSettings { return *in.settings.Load() }

// SetSettings validates and installs new scan settings; they apply from
// the next range scanned.
func (in *Service) SetSettings(s ScanSettings) error {
	if err := s.Validate(); err != nil {
		return err
	}
	in.settings.Store(&s)
	in.mu.Lock()
	for _, ch := range in.wakes {
		wakeUp(ch)
	}
	in.mu.Unlock()
	return nil
}

// reportScan implements scanReporter: queue a map for the sender. A full
// queue drops it (the leader records the replica as missing).
func (in *Service) reportScan(_ copyset.GroupID, m *pb.ScanMap) {
	select {
	case in.reports <- m:
	default:
		in.log.Warn("integrity scan: report queue full, scan map dropped", "pool", m.GetLogicalPoolId(),
			"copyset", m.GetCopysetId(), "chunk", m.GetChunkId(), "index", m.GetIndex())
	}
}

// jobsChanged implements scanReporter: wake the worker's run on g, if
// this server leads it.
func (in *Service) jobsChanged(g copyset.GroupID) {
	in.mu.Lock()
	if ch := in.wakes[g]; ch != nil {
		wakeUp(ch)
	}
	in.mu.Unlock()
}

// wakeUp signals ch (capacity 1) without blocking.
func wakeUp(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Start runs the scan worker (a copyset.LeaderWorker: one run per copyset
// this server leads) and the sender until Stop.
func (in *Service) Start() error {
	in.runMu.Lock()
	defer in.runMu.Unlock()
	if in.cancel != nil {
		return nil
	}
	w, err := in.copysets.StartLeaderWorker(in.lead, copyset.LeaderWorkerOptions{Name: "integrity-scan", RetryDelay: stepRetryDelay})
	if err != nil {
		return fmt.Errorf("integrity: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in.worker, in.cancel = w, cancel
	in.wg.Add(1)
	go func() { defer in.wg.Done(); in.sendLoop(ctx) }()
	return nil
}

// Stop ends the worker and the sender and waits for them. Call it after
// the copysets closed (which stops the worker's runs): a proposal in
// flight then fails at once.
func (in *Service) Stop() {
	in.runMu.Lock()
	defer in.runMu.Unlock()
	if in.cancel == nil {
		return
	}
	in.worker.Stop()
	in.cancel()
	in.wg.Wait()
	in.worker, in.cancel = nil, nil
}
