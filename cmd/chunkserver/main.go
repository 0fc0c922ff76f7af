// Command chunkserver runs one chunkraft chunkserver: the copysets on its
// data dir, the seed gRPC services and raft on one port, and metrics,
// health and pprof over HTTP. See `chunkserver --help`.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/chunkraft/chunkraft/chunkserver"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "chunkserver:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("chunkserver", flag.ContinueOnError)
	configPath := fs.String("config", "", "YAML config file; flags that are set override it (default: <data-dir>/chunkserver.yaml if present)")
	listen := fs.String("listen", "", "gRPC listen address host:port (default 127.0.0.1:8200)")
	advertise := fs.String("advertise", "", "address peers and clients use (default: --listen)")
	metrics := fs.String("metrics-listen", "", "HTTP address for /metrics, /healthz, /debug/pprof (default 127.0.0.1:9200)")
	dataDir := fs.String("data-dir", "", "data directory (default ./data)")
	logLevel := fs.String("log-level", "", "debug|info|warn|error (default info)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	// defaults < config file (--config, else <data-dir>/chunkserver.yaml if present) < flags
	cfg, cfgFile, err := chunkserver.LoadConfig(*configPath, *dataDir)
	if err != nil {
		return err
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "listen":
			cfg.Listen = *listen
		case "advertise":
			cfg.Advertise = *advertise
		case "metrics-listen":
			cfg.MetricsListen = *metrics
		case "data-dir":
			cfg.DataDir = *dataDir
		case "log-level":
			cfg.LogLevel = *logLevel
		}
	})
	if err := cfg.Validate(); err != nil {
		return err
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(cfg.GCPercent)
	}
	l, _ := chunkserver.ParseLogLevel(cfg.LogLevel)
	level := new(slog.LevelVar) // ConfigService log_level changes it at runtime
	level.Set(l)
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)

	srv, err := chunkserver.New(cfg, log)
	if err != nil {
		return err
	}
	srv.SetConfigFile(cfgFile)
	srv.SetLogLevelVar(level)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return srv.Run(ctx)
}
