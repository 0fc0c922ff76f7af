package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"

	"github.com/chunkraft/chunkraft/cli"
	"github.com/chunkraft/chunkraft/internal/buildinfo"
)

// Exit codes of chunkbench.
const (
	ExitOK       = 0 // the run completed and every operation succeeded
	ExitFailed   = 1 // the run could not be made, or some operations failed
	ExitMismatch = 2 // --verify found data that was not what was written
)

// ExitError carries chunkbench's exit code for a run that completed but
// did not go well. Msg may be empty when the report already said it all.
type ExitError struct {
	Code int
	Msg  string
}

func (e *ExitError) Error() string { return e.Msg }

// ExitCode maps the error returned by the command to the process exit code.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var e *ExitError
	if errors.As(err, &e) {
		return e.Code
	}
	return ExitFailed
}

// flags holds chunkbench's command line.
type flags struct {
	rw             string
	rwmixread      int
	bs             string
	iodepth        int
	runtime        time.Duration
	ops            int64
	rate           float64
	pool           uint32
	copysets       string
	span           string
	servers        string
	etcdEndpoints  string
	etcdConns      int
	prefill        bool
	verify         bool
	sn             uint64
	seed           uint64
	output         string
	timeout        time.Duration
	attemptTimeout time.Duration
	tls            cli.TLSFlags
}

// config turns the flags into a Config.
func (f *flags) config() (Config, error) {
	mode, err := ParseMode(f.rw)
	if err != nil {
		return Config{}, fmt.Errorf("--rw: %w", err)
	}
	bs, err := cli.ParseSize(f.bs)
	if err != nil {
		return Config{}, fmt.Errorf("--bs: %w", err)
	}
	if bs < MinBS || bs > MaxBS || bs%SectorSize != 0 {
		return Config{}, fmt.Errorf("--bs %s: want a multiple of 4 KiB from 4k to 4m", f.bs)
	}
	span, err := cli.ParseSize(f.span)
	if err != nil {
		return Config{}, fmt.Errorf("--span: %w", err)
	}
	if span == 0 {
		return Config{}, errors.New("--span: must be > 0")
	}
	css, err := cli.ParseIDList(f.copysets)
	if err != nil {
		return Config{}, fmt.Errorf("--copysets: %w", err)
	}
	switch f.output {
	case "text", "json":
	default:
		return Config{}, fmt.Errorf("-o %q: want text or json", f.output)
	}
	if f.runtime < 0 {
		return Config{}, errors.New("--runtime: must be >= 0")
	}
	if f.etcdEndpoints != "" && f.etcdConns < 1 {
		return Config{}, fmt.Errorf("--etcd-conns %d: want at least 1", f.etcdConns)
	}
	cfg := Config{
		Mode:      mode,
		RWMixRead: f.rwmixread,
		BS:        uint32(bs),
		IODepth:   f.iodepth,
		Runtime:   f.runtime,
		Ops:       f.ops,
		Rate:      f.rate,
		Pool:      f.pool,
		Copysets:  css,
		Span:      span,
		Sn:        f.sn,
		Prefill:   f.prefill,
		Verify:    f.verify,
		Seed:      f.seed,
	}
	return cfg, cfg.Validate()
}

const longHelp = `chunkbench drives a running chunkraft cluster with chunk reads and writes
and reports throughput and latency (an HDR histogram of every successful
operation, in microseconds).

Each copyset of --copysets gets --span bytes of chunk space (chunks 1, 2, ...
of 16 MiB), cut into --bs blocks. Random workloads pick a random block per
operation; sequential ones (write, read) give each of the --iodepth workers its
own contiguous share and walk it in order. --iodepth is the number of requests
in flight: that many workers, each with one outstanding request.

Reads of chunks that were never written fail (CHUNK_NOTEXIST): --prefill
writes the whole span first (1 MiB writes, or --bs if larger).

--verify writes a self-describing pattern (run, pool, copyset, chunk, offset,
sequence number and a CRC-32C in every 4 KiB sector) and checks every read
against the writes this run made to the block: a block must hold the last
acknowledged write, or one that overlapped it, is still in flight or failed.
Use it with --prefill and randrw during failover drills.

Failed operations are counted by kind (a final status name such as
CHUNK_OP_STATUS_CHUNK_NOTEXIST, or the status the client kept getting until it
gave up such as CHUNK_OP_STATUS_REDIRECTED or CHUNK_OP_STATUS_OVERLOAD;
timeout; unavailable; canceled; other), and so are failed RPC attempts the
client retried past. Nothing is hidden.

Progress (ops/s, MB/s, p99 so far) goes to stderr once a second when stderr
is a terminal. The report goes to stdout: text, or with -o json exactly
  {"rw","bs","iodepth","seed","pool","copysets","runtime_s","ops","errors",
   "errors_by_kind","iops","mb_per_s","lat_us":{"mean","p50","p99","p999","max"}}
(ops = successful operations, bs in bytes, MB = 10^6 bytes; errors_by_kind
maps each kind above to its count, {} without errors; --seed with the
reported seed repeats the run's offsets); with -o json an example error of
each kind, the failed attempts and verification details go to stderr.

With --etcd-endpoints the target is an etcd cluster instead (etcd's v3 gRPC
KV service), to compare with chunkraft in the same run: every block is one
key, chunkbench/ and the block number zero-padded to 10 digits (block g of
copyset-major order, as above: --copysets and --span only size the key
space); writes (randwrite, write) Put the block's --bs bytes, reads (randread,
read) are linearizable Ranges of one key (serializable=false), randrw mixes
them. Requests go round robin over --etcd-conns connections to each endpoint
(members that do not lead forward to the leader); they are not retried, each
bounded by --timeout. --prefill Puts every key first, --verify works the same
way, the report is the same. Reads of keys nobody wrote fail
("etcd: key not found"); etcd's errors count by their message
("etcdserver: request timed out", ...).

Exit status: 0 the run completed without errors; 1 the run could not be made
or some operations failed; 2 --verify found mismatches.`

// NewCommand returns the chunkbench command. Errors are returned, not
// printed; map them to an exit status with ExitCode.
func NewCommand() *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:   "chunkbench [flags]",
		Short: "Benchmark chunk I/O against a chunkraft cluster",
		Long:  longHelp,
		Example: `  chunkbench --rw randwrite --bs 4k --iodepth 64 --runtime 10s
  chunkbench --rw randread --bs 4k --iodepth 64 --runtime 10s --prefill
  chunkbench --rw write --bs 1m --iodepth 8 --runtime 10s -o json
  chunkbench --rw randrw --rwmixread 70 --iodepth 64 --prefill --verify --runtime 60s
  chunkbench --etcd-endpoints 127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379 --rw randwrite --iodepth 64 --copysets 1-4 --span 4m`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return run(cmd, f)
		},
	}
	buildinfo.SetCobraVersion(cmd)
	servers := os.Getenv(cli.EnvServers)
	if strings.TrimSpace(servers) == "" {
		servers = cli.DefaultServers
	}
	fl := cmd.Flags()
	fl.StringVar(&f.rw, "rw", string(RandWrite), "workload: randwrite, randread, write, read or randrw")
	fl.IntVar(&f.rwmixread, "rwmixread", 70, "percentage of reads in randrw")
	fl.StringVar(&f.bs, "bs", "4k", "block size of every operation: 4k..4m, a multiple of 4k")
	fl.IntVar(&f.iodepth, "iodepth", 1, "requests in flight (workers, one outstanding request each)")
	fl.DurationVar(&f.runtime, "runtime", 0, "how long to run (default 10s unless --ops is given)")
	fl.Int64Var(&f.ops, "ops", 0, "operations to run (0: no limit); with --runtime, whichever ends first")
	fl.Float64Var(&f.rate, "rate", 0, "operations started per second at most, over all workers (0: as fast as they go), as fio's rate_iops")
	fl.Uint32Var(&f.pool, "pool", 1, "logical pool id")
	fl.StringVar(&f.copysets, "copysets", "1-16", "copysets to spread over: 7, 1-16, 1,3,8-10")
	fl.StringVar(&f.span, "span", "64m", "chunk space per copyset (chunks 1.. of 16 MiB), a multiple of 4k")
	fl.StringVar(&f.servers, "servers", servers, "chunkservers, host:port,...; $"+cli.EnvServers+" sets the default")
	fl.StringVar(&f.etcdEndpoints, "etcd-endpoints", "", "benchmark an etcd cluster instead: its client endpoints, host:port,... (one key per block)")
	fl.IntVar(&f.etcdConns, "etcd-conns", DefaultEtcdConns, "with --etcd-endpoints: gRPC connections per endpoint")
	fl.BoolVar(&f.prefill, "prefill", false, "write the whole span first (1 MiB writes) so reads hit written blocks")
	fl.BoolVar(&f.verify, "verify", false, "write self-describing patterns and check every read")
	fl.Uint64Var(&f.sn, "sn", 1, "sequence number writes are made under")
	fl.Uint64Var(&f.seed, "seed", 0, "seed of the random offsets (0: random)")
	fl.StringVarP(&f.output, "output", "o", "text", "report format: text or json")
	fl.DurationVar(&f.timeout, "timeout", cli.DefaultTimeout, "deadline of each operation, retries included")
	fl.DurationVar(&f.attemptTimeout, "attempt-timeout", cli.DefaultAttemptTimeout, "deadline of each single RPC attempt")
	cli.AddTLSFlags(fl, &f.tls)
	cli.StrictSubcommands(cmd)
	return cmd
}

func run(cmd *cobra.Command, f *flags) error {
	cfg, err := f.config()
	if err != nil {
		return err
	}
	dial, err := f.tls.DialOptions()
	if err != nil {
		return err
	}
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	var (
		dev      IO
		attempts *AttemptCounter // chunkservers only: etcd requests are not retried
	)
	if f.etcdEndpoints != "" {
		eps, _, err := ParseEtcdEndpoints(f.etcdEndpoints)
		if err != nil {
			return fmt.Errorf("--etcd-endpoints: %w", err)
		}
		e, err := NewEtcdIO(cfg, EtcdOptions{Endpoints: eps, ConnsPerEndpoint: f.etcdConns, Timeout: f.timeout, DialOptions: dial})
		if err != nil {
			return err
		}
		defer e.Close()
		dev = e
		if f.output != "json" {
			fmt.Fprintf(stdout, "etcd %s  %d connections  %s\n", strings.Join(eps, ","), e.Conns(), e.Keyspace())
		}
	} else {
		servers, err := cli.ParsePeerList(f.servers)
		if err != nil {
			return fmt.Errorf("--servers: %w", err)
		}
		attempts = NewAttemptCounter()
		client, err := cli.New(cli.Options{
			Servers:        servers,
			Timeout:        f.timeout,
			AttemptTimeout: f.attemptTimeout,
			DialOptions:    append(dial, attempts.DialOption()),
		})
		if err != nil {
			return err
		}
		defer client.Close()
		dev = ClientIO(client)
		cfg.BeforeMeasure = attempts.Reset
	}

	cfg.Log = stderr
	if isTerminal(stderr) {
		cfg.Progress = stderr
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	res, err := Run(ctx, dev, cfg)
	if err != nil {
		return err
	}
	if attempts != nil {
		res.Attempts = attempts.Counts()
	}

	if f.output == "json" {
		if err := res.WriteJSON(stdout); err != nil {
			return err
		}
		// Nothing is hidden: what the schema has no room for goes to stderr.
		details := res.ErrorText()
		if v := res.Verify; v != nil {
			details += v.SummaryText() + v.DetailText()
		}
		if details != "" {
			fmt.Fprint(stderr, details)
		}
	} else if err := res.WriteText(stdout, cfg); err != nil {
		return err
	}
	if v := res.Verify; v != nil && v.Mismatches > 0 {
		return &ExitError{Code: ExitMismatch, Msg: fmt.Sprintf("verify: %d mismatches", v.Mismatches)}
	}
	if ctx.Err() != nil {
		return &ExitError{Code: ExitFailed, Msg: "interrupted"}
	}
	if res.Total.Errors > 0 {
		return &ExitError{Code: ExitFailed, Msg: fmt.Sprintf("%d of %d operations failed", res.Total.Errors, res.Total.Errors+res.Total.Ops)}
	}
	return nil
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}
