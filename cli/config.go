package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

func newConfigCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Read and change chunkserver configuration at runtime",
	}
	cmd.AddCommand(newConfigGetCommand(a), newConfigSetCommand(a), newConfigDumpCommand(a))
	return cmd
}

type configJSON struct {
	Server string `json:"server"`
	Key    string `json:"key,omitempty"`
	Value  string `json:"value"`
	Error  string `json:"error,omitempty"`
}

// configServers are --server if given, else every server in --servers.
func configServers(c *Client, server string) ([]string, error) {
	if server == "" {
		return c.Servers(), nil
	}
	addr, err := PeerAddr(server)
	if err != nil {
		return nil, fmt.Errorf("--server: %w", err)
	}
	return []string{addr}, nil
}

// configFanout runs op (with value, for a set) on every server of the
// command and returns one row per server and the error to exit with.
func configFanout(ctx context.Context, c *Client, servers []string, op ConfigOp, key, value string) ([]configJSON, error) {
	rows := make([]configJSON, len(servers))
	errs := make([]error, len(servers))
	forEach(len(servers), len(servers), func(i int) {
		v, err := c.Config(ctx, op, servers[i], key, value)
		rows[i] = configJSON{Server: servers[i], Key: key, Value: v, Error: errText(err)}
		errs[i] = err
	})
	what := string(op) + " " + key
	if op == ConfigDump {
		what = "dump config"
		if key != "" {
			what += " " + key
		}
	}
	var failed []error
	for i, err := range errs {
		if err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", servers[i], err))
		}
	}
	switch {
	case len(failed) == 1 && len(servers) == 1:
		return rows, fmt.Errorf("%s on %w", what, failed[0])
	case len(failed) > 0:
		return rows, fmt.Errorf("%s failed on %d of %d servers: %w", what, len(failed), len(servers), joinErrors(failed))
	}
	return rows, nil
}

func newConfigGetCommand(a *app) *cobra.Command {
	var server, key string
	cmd := &cobra.Command{
		Use:   "get --key K [--server host:port]",
		Short: "Print a configuration key on every server (or one)",
		Long: `Asks --server, or every server in --servers, for the value of --key (ConfigService
Get) and prints one row per server. An unknown key is refused by the server with
a message. Fails if any server failed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				servers, err := configServers(c, server)
				if err != nil {
					return err
				}
				rows, ferr := configFanout(ctx, c, servers, ConfigGet, key, "")
				return a.printConfigRows(cmd, rows, ferr)
			})
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "configuration key, e.g. log_level")
	cmd.Flags().StringVar(&server, "server", "", "ask only this server, host:port (default: every server in --servers)")
	_ = cmd.MarkFlagRequired("key")
	return cmd
}

// printConfigRows prints one row per server (with an ERROR column when
// any failed) and returns ferr, the fan-out's error.
func (a *app) printConfigRows(cmd *cobra.Command, rows []configJSON, ferr error) error {
	table := make([][]string, len(rows))
	for i, r := range rows {
		table[i] = []string{r.Server, r.Key, r.Value}
		if ferr != nil {
			table[i] = append(table[i], r.Error)
		}
	}
	header := []string{"SERVER", "KEY", "VALUE"}
	if ferr != nil {
		header = append(header, "ERROR")
	}
	if err := a.printer(cmd).print(rows, header, table); err != nil {
		return err
	}
	return ferr
}

func newConfigSetCommand(a *app) *cobra.Command {
	var server, key, value string
	var all bool
	cmd := &cobra.Command{
		Use:   "set (--server host:port | --all) --key K --value V",
		Short: "Change a configuration key on one server or every server (takes effect now, persisted)",
		Long: `Sends ConfigService Set to --server, or with --all to every server in --servers.
Keys that can change at runtime take effect at once and are written to the
server's configuration file (only the key's line changes); the server refuses
the others (a restart is needed), unknown keys and invalid values, with a
message, and then changes nothing. Prints the value now in effect: with --all
one row per server, its result or its error; fails if any server failed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (server != "") {
				return errors.New("give either --server host:port or --all")
			}
			var servers []string
			if !all {
				addr, err := PeerAddr(server)
				if err != nil {
					return fmt.Errorf("--server: %w", err)
				}
				servers = []string{addr}
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				if all {
					servers = c.Servers()
				}
				rows, ferr := configFanout(ctx, c, servers, ConfigSet, key, value)
				if !all {
					if ferr != nil {
						return ferr
					}
					if rows[0].Value == "" {
						rows[0].Value = value
					}
					return a.printer(cmd).print(rows[0], []string{"SERVER", "KEY", "VALUE"},
						[][]string{{rows[0].Server, key, rows[0].Value}})
				}
				return a.printConfigRows(cmd, rows, ferr)
			})
		},
	}
	cmd.Flags().StringVar(&server, "server", "", "the server to change, host:port")
	cmd.Flags().BoolVar(&all, "all", false, "change every server in --servers")
	cmd.Flags().StringVar(&key, "key", "", "configuration key, e.g. log_level")
	cmd.Flags().StringVar(&value, "value", "", "its new value")
	_ = cmd.MarkFlagRequired("key")
	_ = cmd.MarkFlagRequired("value")
	return cmd
}

// dumpRows splits a Dump reply ("key=value" lines) into rows of server; a
// line without "=" is a row with an empty key.
func dumpRows(server, dump string) []configJSON {
	var out []configJSON
	for _, line := range strings.Split(dump, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			k, v = "", line
		}
		out = append(out, configJSON{Server: server, Key: k, Value: v})
	}
	return out
}

func newConfigDumpCommand(a *app) *cobra.Command {
	var server, prefix string
	cmd := &cobra.Command{
		Use:   "dump [--server host:port] [--key prefix]",
		Short: "Print the whole configuration of every server (or one)",
		Long: `Asks --server, or every server in --servers, for its configuration
(ConfigService Dump: sorted key=value lines) and prints one row per key and
server. --key is a prefix filter on whole key segments ("raft" gives raft.*).
Fails if any server failed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				servers, err := configServers(c, server)
				if err != nil {
					return err
				}
				replies, ferr := configFanout(ctx, c, servers, ConfigDump, prefix, "")
				js := []configJSON{}
				for _, r := range replies {
					if r.Error != "" {
						js = append(js, configJSON{Server: r.Server, Error: r.Error})
						continue
					}
					js = append(js, dumpRows(r.Server, r.Value)...)
				}
				table := make([][]string, len(js))
				for i, j := range js {
					table[i] = []string{j.Server, j.Key, j.Value}
					if ferr != nil {
						table[i] = append(table[i], j.Error)
					}
				}
				header := []string{"SERVER", "KEY", "VALUE"}
				if ferr != nil {
					header = append(header, "ERROR")
				}
				if err := a.printer(cmd).print(js, header, table); err != nil {
					return err
				}
				return ferr
			})
		},
	}
	cmd.Flags().StringVar(&server, "server", "", "ask only this server, host:port (default: every server in --servers)")
	cmd.Flags().StringVar(&prefix, "key", "", "only keys under this prefix (whole segments: raft gives raft.*)")
	return cmd
}
