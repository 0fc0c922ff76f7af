package chunkserver

import (
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/chunkraft/chunkraft/chunkstore"
	"github.com/chunkraft/chunkraft/chunkstore/datastore"
	"github.com/chunkraft/chunkraft/datasync"
	"github.com/chunkraft/chunkraft/disagg"
	"github.com/prometheus/client_golang/prometheus"
)

// LoopbackConfig is the configuration of an in-process server in tests:
// the defaults with listen as its address, dataDir as its data dir, no
// metrics listener, no chunk file pool, short raft timeouts and a one
// second sync send interval.
func LoopbackConfig(listen, dataDir string) Config {
	cfg := DefaultConfig()
	cfg.Listen, cfg.MetricsListen, cfg.DataDir = listen, "", dataDir
	cfg.ChunkFilePool = 0
	// Short enough that elections are quick, long enough that a loaded
	// 2-core CI machine (two test binaries, a cluster each) seldom stalls a
	// leader past its lease.
	cfg.Raft.HeartbeatTimeout, cfg.Raft.ElectionTimeout = 500*time.Millisecond, 500*time.Millisecond
	cfg.Raft.LeaderLeaseTimeout = 250 * time.Millisecond
	cfg.Sync.SendInterval = time.Second // tests wait for exports to catch up
	return cfg
}

// NewQuiet is NewWithSeams with every log line discarded and the chunk
// stores on fs.
func NewQuiet(cfg Config, fs datastore.FS) (*Server, error) {
	return NewQuietSeams(cfg, Seams{FS: fs})
}

// NewQuietSeams is NewWithSeams with every log line discarded (raft's
// too).
func NewQuietSeams(cfg Config, seams Seams) (*Server, error) {
	seams.RaftLog = io.Discard
	return NewWithSeams(cfg, slog.New(slog.DiscardHandler), seams)
}

// Gatherer is the server's metrics registry, for tests that read metrics
// without the metrics listener.
func (s *Server) Gatherer() prometheus.Gatherer { return s.metrics.reg }

// Syncs is the server's sync service (datasync), for tests that watch its
// collectors.
func (s *Server) Syncs() *datasync.Service { return s.syncs }

// Disagg is the server's disagg service, for tests that watch its owner
// calls.
func (s *Server) Disagg() *disagg.Service { return s.disagg }

// HTTPHandler is the handler the metrics listener serves (/metrics,
// /integrity, ...), for tests that call it without the listener.
func (s *Server) HTTPHandler() http.Handler { return s.httpHandler() }

// Chunks is the server's chunk store tenant, for tests that look at its
// fences and admission.
func (s *Server) Chunks() *chunkstore.Store { return s.chunks }
