package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc/grpclog"

	"github.com/chunkraft/chunkraft/chunkserver"
	"github.com/chunkraft/chunkraft/internal/buildinfo"
	"github.com/chunkraft/chunkraft/internal/slogbridge"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	cmd := newCommand()
	cmd.SetArgs(gnuArgs(cmd, os.Args[1:]))
	err := cmd.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chunkserver:", strings.ReplaceAll(err.Error(), "\n", "; "))
		os.Exit(1)
	}
}

const longHelp = `chunkserver is the chunkraft storage daemon: run one per disk.

It hosts many copysets (each a hashicorp/raft group replicating a set of
16 MiB chunks on three servers) and serves, on one gRPC port (--listen), the
client services of Curve's chunkserver protocol (ChunkService, CopysetService,
CliService(2), ConfigService, ...) and the raft traffic of all its copysets.
An HTTP port (--metrics-listen) serves /metrics (Prometheus), /healthz,
/integrity and /debug/pprof/.

Everything lives under --data-dir: copysets/<groupId>/{raft,data}, the chunk
file pool, the shared raft log, epochs.json. On start the server reopens every
copyset found there; new copysets are created with chunkctl copyset create.

Configuration: defaults < config file < flags that are set. The file is
--config, or without it <data-dir>/chunkserver.yaml when that exists; it is
also where runtime changes (chunkctl config set) are persisted. Every key is
in the README's "Running a node by hand" section.

Logs are JSON lines on stderr (time, level, msg, attributes), raft's own
lines included. SIGTERM or SIGINT stops the server cleanly.`

// flags are the command-line settings; each one that is set overrides the
// config file.
type flags struct {
	config, listen, advertise, metrics, dataDir, logLevel string
}

func newCommand() *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:   "chunkserver [--config FILE] [--listen HOST:PORT] [--data-dir DIR] [flags]",
		Short: "Run a chunkraft chunkserver",
		Long:  longHelp,
		Example: `  chunkserver --listen 10.0.0.5:8200 --metrics-listen 10.0.0.5:9200 --data-dir /data/cs0
  chunkserver --config /etc/chunkraft/cs0.yaml --log-level debug`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return run(cmd.Context(), cmd.Flags(), f)
		},
	}
	buildinfo.SetCobraVersion(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "YAML config file; flags that are set override it (default: <data-dir>/chunkserver.yaml if present)")
	fl.StringVar(&f.listen, "listen", "", "gRPC listen address host:port (default 127.0.0.1:8200)")
	fl.StringVar(&f.advertise, "advertise", "", "address peers and clients use (default: --listen)")
	fl.StringVar(&f.metrics, "metrics-listen", "", "HTTP address for /metrics, /healthz, /debug/pprof (default 127.0.0.1:9200)")
	fl.StringVar(&f.dataDir, "data-dir", "", "data directory (default ./data)")
	fl.StringVar(&f.logLevel, "log-level", "", "debug|info|warn|error (default info)")
	return cmd
}

// gnuArgs rewrites the single-dash long forms Go's flag package accepted
// (-listen x, -data-dir=y) to GNU form, so that command lines written for
// earlier versions keep working. Anything else, and everything after "--",
// is left alone.
func gnuArgs(cmd *cobra.Command, args []string) []string {
	cmd.InitDefaultHelpFlag()
	cmd.InitDefaultVersionFlag()
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "-"), "=")
		if len(a) > 2 && a[0] == '-' && a[1] != '-' && len(name) > 1 && cmd.Flags().Lookup(name) != nil {
			a = "-" + a
		}
		out = append(out, a)
	}
	return out
}

func run(ctx context.Context, fs *pflag.FlagSet, f *flags) error {
	// defaults < config file (--config, else <data-dir>/chunkserver.yaml if present) < flags
	cfg, cfgFile, err := chunkserver.LoadConfig(f.config, f.dataDir)
	if err != nil {
		return err
	}
	fs.Visit(func(fl *pflag.Flag) {
		switch fl.Name {
		case "listen":
			cfg.Listen = f.listen
		case "advertise":
			cfg.Advertise = f.advertise
		case "metrics-listen":
			cfg.MetricsListen = f.metrics
		case "data-dir":
			cfg.DataDir = f.dataDir
		case "log-level":
			cfg.LogLevel = f.logLevel
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
	// One schema for every line: raft's (copyset.RaftOptions), gRPC's and
	// the standard log package's (slog.SetDefault) go through this handler.
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)
	grpclog.SetLoggerV2(slogbridge.GRPC(log))

	srv, err := chunkserver.New(cfg, log)
	if err != nil {
		return err
	}
	srv.SetConfigFile(cfgFile)
	srv.SetLogLevelVar(level)
	return srv.Run(ctx)
}
