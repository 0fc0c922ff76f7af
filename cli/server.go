package cli

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
)

func newServerCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Inspect chunkservers",
	}
	cmd.AddCommand(newServerStatusCommand(a))
	return cmd
}

type serverStatusJSON struct {
	Server       string   `json:"server"`
	Reachable    bool     `json:"reachable"`
	LoadFinished *bool    `json:"copysetLoadFin,omitempty"`
	Copysets     []uint32 `json:"copysets"`
	Leaders      []uint32 `json:"leaders"`
	Error        string   `json:"error,omitempty"`
}

// ServerState is what `server status` reports about one server.
type ServerState struct {
	Server    string
	Reachable bool // the server answered gRPC
	// LoadKnown: ChunkServerStatus answered; LoadFinished is its
	// copysetLoadFin.
	LoadKnown    bool
	LoadFinished bool
	Copysets     ServerCopysets
	Err          error // the first failure
}

// ServerStates asks every configured server for ChunkServerStatus and which
// of copysets it hosts and leads (one attempt per RPC). Servers that do not
// answer at all are not asked about copysets.
func (c *Client) ServerStates(ctx context.Context, copysets []CopysetID) []ServerState {
	out := make([]ServerState, len(c.servers))
	forEach(len(c.servers), len(c.servers), func(i int) {
		addr := c.servers[i]
		st := ServerState{Server: addr, Copysets: ServerCopysets{Server: addr}}
		fin, err := c.LoadFinished(ctx, addr)
		switch {
		case err == nil:
			st.Reachable, st.LoadKnown, st.LoadFinished = true, true, fin
		case retryable(err):
			st.Err = err
			out[i] = st
			return
		default: // it answered, with an error (e.g. Unimplemented)
			st.Reachable, st.Err = true, err
		}
		st.Copysets = c.hostedOn(ctx, addr, copysets)
		if st.Err == nil {
			st.Err = st.Copysets.Err
		}
		out[i] = st
	})
	return out
}

func newServerStatusCommand(a *app) *cobra.Command {
	var cf copysetFlags
	cmd := &cobra.Command{
		Use:   "status [--pool 1] [--copyset 1-16]",
		Short: "Per server: reachable, copysets loaded, copysets hosted, leaders held",
		Long: `Asks every server of the cluster map (--servers are seeds; see chunkctl
--help) for ChunkServerStatus (LOADED: every local
copyset is loaded and caught up with its leader) and, for the copysets of the
range, whether it hosts and leads them. Fails if a server could not be reached.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := cf.list(); err != nil {
				return err
			}
			return a.withCluster(cmd, func(ctx context.Context, c *Client, m *ClusterMap) error {
				copysets, err := cf.clusterList(cmd, m, false)
				if err != nil {
					return err
				}
				states := c.ServerStates(ctx, copysets)
				if err := ctx.Err(); err != nil {
					return err
				}
				js := make([]serverStatusJSON, len(states))
				rows := make([][]string, len(states))
				anyErr := false
				var down []string
				for _, s := range states {
					anyErr = anyErr || s.Err != nil
				}
				for i, s := range states {
					j := serverStatusJSON{Server: s.Server, Reachable: s.Reachable, Error: errText(s.Err),
						Copysets: copysetIDs(s.Copysets.Copysets()), Leaders: copysetIDs(s.Copysets.Leaders())}
					reach, loaded, hosted, leads := "yes", "", "", ""
					if s.LoadKnown {
						fin := s.LoadFinished
						j.LoadFinished = &fin
						loaded = yesNo(fin)
					}
					if s.Reachable {
						hosted, leads = strconv.Itoa(len(j.Copysets)), strconv.Itoa(len(j.Leaders))
					} else {
						reach = "no"
						down = append(down, s.Server)
					}
					js[i] = j
					rows[i] = []string{s.Server, reach, loaded, hosted, leads}
					if anyErr {
						rows[i] = append(rows[i], cellError(s.Err))
					}
				}
				header := []string{"SERVER", "REACHABLE", "LOADED", "COPYSETS", "LEADERS"}
				if anyErr {
					header = append(header, "ERROR")
				}
				if err := a.printer(cmd).print(js, header, rows); err != nil {
					return err
				}
				if len(down) > 0 {
					return fmt.Errorf("%d of %d servers unreachable: %s", len(down), len(states), joinComma(down))
				}
				return nil
			})
		},
	}
	addCopysetRangeFlags(cmd, &cf)
	return cmd
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
