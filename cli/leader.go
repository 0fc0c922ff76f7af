package cli

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/spf13/cobra"
)

// leaderParallelism bounds how many copysets `leader get` asks about at once.
const leaderParallelism = 16

func newLeaderCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "leader",
		Short: "Find and move copyset leaders",
	}
	cmd.AddCommand(newLeaderGetCommand(a), newLeaderTransferCommand(a), newLeaderBalanceCommand(a))
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

// balanceParallelism bounds how many transfers `leader balance` runs at once.
const balanceParallelism = 4

type balanceMoveJSON struct {
	CopysetID
	From   string `json:"from"`
	To     string `json:"to"`
	Result string `json:"result"` // planned (--dry-run), done, failed
	Error  string `json:"error,omitempty"`
}

type balanceCountJSON struct {
	Server string `json:"server"`
	Before int    `json:"before"`
	After  int    `json:"after"`
}

type balanceJSON struct {
	Moves     []balanceMoveJSON  `json:"moves"`
	Leaders   []balanceCountJSON `json:"leaders"`
	NoLeader  []CopysetID        `json:"noLeader,omitempty"`
	Unreached []string           `json:"unreachable,omitempty"`
}

// leadership gathers, per copyset, its leader and the replicas that may lead
// (state LEADER or FOLLOWER) from every server's status.
func leadership(ctx context.Context, c *Client, copysets []CopysetID) ([]CopysetLeadership, []CopysetID, []string) {
	all := make([][]ReplicaStatus, len(copysets))
	forEach(len(copysets), statusParallelism, func(i int) {
		all[i], _ = c.CopysetStatus(ctx, copysets[i])
	})
	var out []CopysetLeadership
	var noLeader []CopysetID
	unreached := map[string]bool{}
	for i, cs := range copysets {
		cl := CopysetLeadership{Copyset: cs}
		hosted := false
		for _, r := range all[i] {
			if r.Err != nil {
				unreached[r.Server] = true
			}
			if !r.Hosted {
				continue
			}
			hosted = true
			switch r.State {
			case StateLeader:
				cl.Leader = replicaName(r)
				cl.Peers = append(cl.Peers, replicaName(r))
			case StateFollower:
				cl.Peers = append(cl.Peers, replicaName(r))
			}
		}
		switch {
		case cl.Leader != "":
			out = append(out, cl)
		case hosted:
			noLeader = append(noLeader, cs)
		}
	}
	var servers []string
	for s := range unreached {
		servers = append(servers, s)
	}
	slices.Sort(servers)
	return out, noLeader, servers
}

func newLeaderBalanceCommand(a *app) *cobra.Command {
	var cf copysetFlags
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "balance [--pool 1] [--copyset 1-16] [--dry-run]",
		Short: "Spread copyset leaders evenly over the servers",
		Long: `Counts the leaders each server holds among the copysets (asking every server of
the cluster map, --servers being seeds, for its replicas), then moves leadership from the most loaded servers
to the least loaded members of the same copysets until the counts differ by at
most one (or no member can take one more), each copyset at most once. Prints
the moves and the leaders per server before and after. With --dry-run it only
prints the plan. Copysets without a leader are left alone. Fails if a transfer
failed.`,
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
				cls, noLeader, unreached := leadership(ctx, c, copysets)
				if err := ctx.Err(); err != nil {
					return err
				}
				before := LeaderCounts(cls)
				moves, after := PlanLeaderBalance(cls)
				errs := make([]error, len(moves))
				if !dryRun {
					forEach(len(moves), balanceParallelism, func(i int) {
						_, errs[i] = c.TransferLeader(ctx, moves[i].Copyset, moves[i].To)
					})
				}
				j := balanceJSON{Moves: []balanceMoveJSON{}, Leaders: []balanceCountJSON{}, NoLeader: noLeader, Unreached: unreached}
				var failed []error
				for i, m := range moves {
					mj := balanceMoveJSON{CopysetID: m.Copyset, From: m.From, To: m.To, Result: "done"}
					switch {
					case dryRun:
						mj.Result = "planned"
					case errs[i] != nil:
						mj.Result, mj.Error = "failed", errText(errs[i])
						failed = append(failed, errs[i])
						after[m.From]++
						after[m.To]--
					}
					j.Moves = append(j.Moves, mj)
				}
				servers := make([]string, 0, len(before))
				for s := range before {
					servers = append(servers, s)
				}
				slices.Sort(servers)
				for _, s := range servers {
					j.Leaders = append(j.Leaders, balanceCountJSON{Server: s, Before: before[s], After: after[s]})
				}
				if err := printBalance(a.printer(cmd), j, len(failed) > 0); err != nil {
					return err
				}
				if len(failed) > 0 {
					return fmt.Errorf("%d of %d leader transfers failed; first: %w", len(failed), len(moves), failed[0])
				}
				return nil
			})
		},
	}
	addCopysetRangeFlags(cmd, &cf)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the plan, move nothing")
	return cmd
}

func printBalance(p *printer, j balanceJSON, anyFailed bool) error {
	if p.isJSON() {
		return writeJSON(p.w, j)
	}
	if len(j.Moves) > 0 {
		header := []string{"POOL", "COPYSET", "FROM", "TO", "RESULT"}
		if anyFailed {
			header = append(header, "ERROR")
		}
		var rows [][]string
		for _, m := range j.Moves {
			row := []string{u64(uint64(m.Pool)), u64(uint64(m.Copyset)), m.From, m.To, m.Result}
			if anyFailed {
				row = append(row, m.Error)
			}
			rows = append(rows, row)
		}
		if err := writeTable(p.w, header, rows); err != nil {
			return err
		}
		fmt.Fprintln(p.w)
	} else {
		fmt.Fprintln(p.w, "leaders are balanced: nothing to move")
	}
	var rows [][]string
	for _, l := range j.Leaders {
		rows = append(rows, []string{l.Server, strconv.Itoa(l.Before), strconv.Itoa(l.After)})
	}
	if err := writeTable(p.w, []string{"SERVER", "LEADERS-BEFORE", "LEADERS-AFTER"}, rows); err != nil {
		return err
	}
	if len(j.NoLeader) > 0 {
		ids := make([]uint32, len(j.NoLeader))
		for i, cs := range j.NoLeader {
			ids[i] = cs.Copyset
		}
		fmt.Fprintf(p.w, "without a leader, left alone: copysets %s\n", FormatIDList(ids))
	}
	if len(j.Unreached) > 0 {
		fmt.Fprintf(p.w, "could not ask: %s (their replicas are not counted)\n", joinComma(j.Unreached))
	}
	return nil
}
