package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

// leaderParallelism bounds how many copysets `leader get` asks about at once.
const leaderParallelism = 16

func newLeaderCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "leader",
		Short: "Find and move copyset leaders",
	}
	cmd.AddCommand(newLeaderGetCommand(a), newLeaderTransferCommand(a))
	return cmd
}

type leaderJSON struct {
	CopysetID
	Leader string `json:"leader"`
	Error  string `json:"error,omitempty"`
}

func newLeaderGetCommand(a *app) *cobra.Command {
	var cf copysetFlags
	cmd := &cobra.Command{
		Use:   "get --pool P --copyset C",
		Short: "Print the leader of copysets (fails if any has none within --timeout)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			copysets, err := cf.list()
			if err != nil {
				return err
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				js := make([]leaderJSON, len(copysets))
				errs := make([]error, len(copysets))
				cells := make([]string, len(copysets))
				forEach(len(copysets), leaderParallelism, func(i int) {
					leader, err := c.GetLeader(ctx, copysets[i])
					js[i] = leaderJSON{CopysetID: copysets[i], Leader: leader, Error: errText(err)}
					errs[i] = err
					cells[i] = cellError(err)
				})
				failed, anyErr := 0, error(nil)
				for _, err := range errs {
					if err != nil {
						failed++
						if anyErr == nil {
							anyErr = err
						}
					}
				}
				header := []string{"POOL", "COPYSET", "LEADER"}
				if failed > 0 {
					header = append(header, "ERROR")
				}
				rows := make([][]string, len(js))
				for i, j := range js {
					rows[i] = []string{u64(uint64(j.Pool)), u64(uint64(j.Copyset)), j.Leader}
					if failed > 0 {
						rows[i] = append(rows[i], cells[i])
					}
				}
				if err := a.printer(cmd).print(js, header, rows); err != nil {
					return err
				}
				if failed == 1 && len(copysets) == 1 {
					return anyErr
				}
				if failed > 0 {
					return fmt.Errorf("no leader for %d of %d copysets; first: %w", failed, len(copysets), anyErr)
				}
				return nil
			})
		},
	}
	addCopysetFlags(cmd, &cf, true)
	return cmd
}

type transferJSON struct {
	CopysetID
	From string `json:"from"`
	To   string `json:"to"`
}

func newLeaderTransferCommand(a *app) *cobra.Command {
	var cf copysetFlags
	var to string
	cmd := &cobra.Command{
		Use:   "transfer --pool P --copyset C --to host:port",
		Short: "Make a peer the leader of a copyset (waits until it is)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			target, err := PeerID(to)
			if err != nil {
				return fmt.Errorf("--to: %w", err)
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				cs := cf.one()
				from, err := c.TransferLeader(ctx, cs, target)
				if err != nil {
					return err
				}
				now, _ := c.CachedLeader(cs)
				j := transferJSON{CopysetID: cs, From: from, To: now}
				row := []string{u64(uint64(cs.Pool)), u64(uint64(cs.Copyset)), j.From, j.To}
				return a.printer(cmd).print(j, []string{"POOL", "COPYSET", "FROM", "TO"}, [][]string{row})
			})
		},
	}
	addCopysetFlags(cmd, &cf, false)
	cmd.Flags().StringVar(&to, "to", "", "the peer to make leader, host:port")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}
