package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
)

type snapshotJSON struct {
	*CopysetID
	Server string `json:"server"`
	Result string `json:"result"` // done, failed
	Error  string `json:"error,omitempty"`
}

func newSnapshotCommand(a *app) *cobra.Command {
	var cf copysetFlags
	var all bool
	cmd := &cobra.Command{
		Use:   "snapshot (--pool P --copyset C | --all)",
		Short: "Take raft snapshots now: of copysets on every replica, or of everything",
		Long: `With --pool and --copyset, asks every server in --servers that hosts a replica
of each copyset to take a raft snapshot of it (Snapshot); servers without one
are skipped. With --all, asks every server in --servers to snapshot all its
copysets (SnapshotAll). Each server answers when its snapshot is done; a
snapshot lets the raft log before it be truncated. Prints one row per replica
(or server); fails if any failed or a copyset was found nowhere.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			pool, copyset := cmd.Flags().Changed("pool"), cmd.Flags().Changed("copyset")
			switch {
			case all && (pool || copyset):
				return errors.New("--all snapshots every copyset: give --all or --pool and --copyset, not both")
			case !all && !(pool && copyset):
				return errors.New("give --pool and --copyset, or --all")
			}
			var copysets []CopysetID
			if !all {
				var err error
				if copysets, err = cf.list(); err != nil {
					return err
				}
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				if all {
					rows, err := c.SnapshotAll(ctx)
					return printSnapshots(a.printer(cmd), nil, [][]ServerResult{rows}, err)
				}
				results := make([][]ServerResult, len(copysets))
				errs := make([]error, len(copysets))
				forEach(len(copysets), statusParallelism, func(i int) {
					results[i], errs[i] = c.SnapshotCopyset(ctx, copysets[i])
				})
				var failed []error
				for _, err := range errs {
					if err != nil {
						failed = append(failed, err)
					}
				}
				var err error
				switch {
				case len(failed) == 1 && len(copysets) == 1:
					err = failed[0]
				case len(failed) > 0:
					err = fmt.Errorf("snapshot failed for %d of %d copysets; first: %w", len(failed), len(copysets), failed[0])
				}
				return printSnapshots(a.printer(cmd), copysets, results, err)
			})
		},
	}
	cmd.Flags().Uint32Var(&cf.pool, "pool", 0, "logical pool id")
	cmd.Flags().StringVar(&cf.copysets, "copyset", "", "copyset id or list/range (7, 1-16, 1,3,8-10)")
	cmd.Flags().BoolVar(&all, "all", false, "snapshot every copyset of every server in --servers")
	return cmd
}

// printSnapshots prints the rows of replicas (copysets != nil) or servers
// and returns err.
func printSnapshots(p *printer, copysets []CopysetID, results [][]ServerResult, err error) error {
	js := []snapshotJSON{}
	var rows [][]string
	anyErr := false
	for _, rs := range results {
		for _, r := range rs {
			anyErr = anyErr || r.Err != nil
		}
	}
	for i, rs := range results {
		for _, r := range rs {
			if !r.Hosted && r.Err == nil {
				continue
			}
			j := snapshotJSON{Server: r.Server, Result: "done", Error: errText(r.Err)}
			if r.Err != nil {
				j.Result = "failed"
			}
			var row []string
			if copysets != nil {
				cs := copysets[i]
				j.CopysetID = &cs
				row = []string{u64(uint64(cs.Pool)), u64(uint64(cs.Copyset))}
			}
			row = append(row, r.Server, j.Result)
			if anyErr {
				row = append(row, cellError(r.Err))
			}
			js = append(js, j)
			rows = append(rows, row)
		}
	}
	header := []string{"SERVER", "RESULT"}
	if copysets != nil {
		header = append([]string{"POOL", "COPYSET"}, header...)
	}
	if anyErr {
		header = append(header, "ERROR")
	}
	if perr := p.print(js, header, rows); perr != nil {
		return perr
	}
	return err
}
