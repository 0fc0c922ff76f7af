package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/chunkraft/chunkraft/internal/buildinfo"
)

const (
	// EnvServers names the environment variable that sets the default of
	// --servers.
	EnvServers = "CHUNKCTL_SERVERS"
	// DefaultServers is the --servers default when EnvServers is unset: the
	// three servers scripts/cluster.sh starts.
	DefaultServers = "127.0.0.1:8200,127.0.0.1:8201,127.0.0.1:8202"
)

// app holds the global flags shared by all commands.
type app struct {
	servers        string
	output         string
	timeout        time.Duration
	attemptTimeout time.Duration
	tls            TLSFlags
}

// NewRootCommand returns the chunkctl command tree. Errors are returned, not
// printed (SilenceErrors): the caller prints one line and exits non-zero.
func NewRootCommand() *cobra.Command {
	a := &app{}
	root := &cobra.Command{
		Use:   "chunkctl",
		Short: "Administer a chunkraft cluster: copysets, peers, leaders, chunks, epochs, config, scans, health, sync exports",
		Long: `chunkctl talks to chunkraft chunkservers over gRPC.

Servers are given as host:port (peer ids host:port:0 are accepted too). Most
--copyset flags accept ranges: 7, 1-16, 1,3,8-10; cluster-wide commands
(cluster, server status, copyset list, leader balance) take --servers as seeds:
one reachable server is enough, they ask it for the cluster map (every server
and copyset found by following copyset memberships from server to server) and
look at every server in it, and without --copyset at every copyset it found
(cluster status: of every pool; the others: of --pool, default 1). Against
servers without the cluster map they look at --servers only and default to
--pool 1 --copyset 1-16, the copysets scripts/cluster.sh creates.
Offsets and sizes accept suffixes: 4096, 4k, 4KiB, 1m, 1MiB (binary units).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			return checkFormat(a.output)
		},
	}
	buildinfo.SetCobraVersion(root)
	servers := os.Getenv(EnvServers)
	if strings.TrimSpace(servers) == "" {
		servers = DefaultServers
	}
	pf := root.PersistentFlags()
	pf.StringVar(&a.servers, "servers", servers, "chunkservers to talk to, host:port,... (seeds of cluster-wide commands: one reachable server is enough); $"+EnvServers+" sets the default")
	pf.StringVarP(&a.output, "output", "o", formatTable, "output format: table or json")
	pf.DurationVar(&a.timeout, "timeout", DefaultTimeout, "deadline of each operation, retries included")
	pf.DurationVar(&a.attemptTimeout, "attempt-timeout", DefaultAttemptTimeout, "deadline of each single RPC attempt")
	AddTLSFlags(pf, &a.tls)

	root.AddCommand(newCopysetCommand(a), newLeaderCommand(a), newChunkCommand(a), newEpochCommand(a),
		newPeerCommand(a), newSnapshotCommand(a), newConfigCommand(a), newScanCommand(a),
		newServerCommand(a), newClusterCommand(a), newSyncCommand(a),
		newDisaggCommand(a), newDMCommand(a))
	StrictSubcommands(root)
	return root
}

// withClient runs fn with a client for --servers and closes it afterwards.
func (a *app) withClient(cmd *cobra.Command, fn func(ctx context.Context, c *Client) error) error {
	servers, err := ParsePeerList(a.servers)
	if err != nil {
		return fmt.Errorf("--servers: %w", err)
	}
	dial, err := a.tls.DialOptions()
	if err != nil {
		return err
	}
	c, err := New(Options{Servers: servers, Timeout: a.timeout, AttemptTimeout: a.attemptTimeout, DialOptions: dial})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	return fn(ctx, c)
}

func (a *app) printer(cmd *cobra.Command) *printer {
	return &printer{w: cmd.OutOrStdout(), format: a.output}
}

// copysetFlags are --pool and --copyset, the latter a single id or a range.
type copysetFlags struct {
	pool     uint32
	copyset  uint32
	copysets string
}

// addCopysetFlags adds required --pool and --copyset; with ranges, --copyset
// accepts an id list (see ParseIDList).
func addCopysetFlags(cmd *cobra.Command, f *copysetFlags, ranges bool) {
	cmd.Flags().Uint32Var(&f.pool, "pool", 0, "logical pool id")
	if ranges {
		cmd.Flags().StringVar(&f.copysets, "copyset", "", "copyset id or list/range (7, 1-16, 1,3,8-10)")
	} else {
		cmd.Flags().Var(idValue{&f.copyset}, "copyset", "copyset id")
	}
	_ = cmd.MarkFlagRequired("pool")
	_ = cmd.MarkFlagRequired("copyset")
}

// Defaults of the copyset range of cluster-wide commands: what
// scripts/cluster.sh creates.
const (
	DefaultPool     = 1
	DefaultCopysets = "1-16"
)

// addCopysetRangeFlags adds optional --pool (default DefaultPool) and a
// --copyset range (default DefaultCopysets).
func addCopysetRangeFlags(cmd *cobra.Command, f *copysetFlags) {
	cmd.Flags().Uint32Var(&f.pool, "pool", DefaultPool, "logical pool id")
	cmd.Flags().StringVar(&f.copysets, "copyset", DefaultCopysets, "copysets to look at: id or list/range (7, 1-16, 1,3,8-10)")
}

// list returns the copysets named by a range --copyset.
func (f *copysetFlags) list() ([]CopysetID, error) {
	ids, err := ParseIDList(f.copysets)
	if err != nil {
		return nil, fmt.Errorf("--copyset: %w", err)
	}
	out := make([]CopysetID, len(ids))
	for i, id := range ids {
		out[i] = CopysetID{Pool: f.pool, Copyset: id}
	}
	return out, nil
}

func (f *copysetFlags) one() CopysetID { return CopysetID{Pool: f.pool, Copyset: f.copyset} }
