package cli

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
)

// statusParallelism bounds how many copysets `copyset status` asks about at once.
const statusParallelism = 8

func newCopysetCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "copyset",
		Short: "Create and inspect copysets",
	}
	cmd.AddCommand(newCopysetCreateCommand(a), newCopysetStatusCommand(a))
	return cmd
}

type peerResultJSON struct {
	Peer   string `json:"peer"`
	Result string `json:"result"` // created, exists, failed
	Error  string `json:"error,omitempty"`
}

type createResultJSON struct {
	CopysetID
	Result string           `json:"result"`
	Peers  []peerResultJSON `json:"peers"`
	Error  string           `json:"error,omitempty"`
}

// resultText summarises a CreateResult in one word or phrase.
func resultText(r CreateResult) string {
	created, existed, failed := r.Counts()
	switch {
	case failed > 0 || r.Err != nil:
		return "failed"
	case existed == 0:
		return "created"
	case created == 0:
		return "exists"
	}
	return fmt.Sprintf("created (already on %d of %d peers)", existed, len(r.Peers))
}

func newCopysetCreateCommand(a *app) *cobra.Command {
	var cf copysetFlags
	var peers string
	cmd := &cobra.Command{
		Use:   "create --pool P --copyset C --peers host:port,...",
		Short: "Create copysets on their peers (re-runnable: existing ones count as success)",
		Long: `Sends CreateCopysetNode to every peer of each copyset; each peer bootstraps
its replica with the given configuration. A copyset a peer already has counts as
success, so the command can be run again after a partial failure. --servers is
not used: the peers are contacted directly.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			copysets, err := cf.list()
			if err != nil {
				return err
			}
			peerList, err := ParsePeerList(peers)
			if err != nil {
				return fmt.Errorf("--peers: %w", err)
			}
			c, err := New(Options{Servers: peerList, Timeout: a.timeout, AttemptTimeout: a.attemptTimeout})
			if err != nil {
				return err
			}
			defer c.Close()
			ctx := cmd.Context()
			results, cerr := c.CreateCopysets(ctx, copysets, peerList)
			if results == nil {
				return cerr
			}
			js := make([]createResultJSON, len(results))
			rows := make([][]string, len(results))
			for i, r := range results {
				js[i] = createResultJSON{CopysetID: r.Copyset, Result: resultText(r), Error: errText(r.Err)}
				for _, p := range r.Peers {
					pr := peerResultJSON{Peer: p.Peer, Result: "created", Error: errText(p.Err)}
					if p.Err != nil {
						pr.Result = "failed"
					} else if p.Existed {
						pr.Result = "exists"
					}
					js[i].Peers = append(js[i].Peers, pr)
				}
				rows[i] = []string{u64(uint64(r.Copyset.Pool)), u64(uint64(r.Copyset.Copyset)), resultText(r)}
			}
			if err := a.printer(cmd).print(js, []string{"POOL", "COPYSET", "RESULT"}, rows); err != nil {
				return err
			}
			return cerr
		},
	}
	addCopysetFlags(cmd, &cf, true)
	cmd.Flags().StringVar(&peers, "peers", "", "the copyset's peers, host:port,... (usually 3)")
	_ = cmd.MarkFlagRequired("peers")
	return cmd
}

type replicaJSON struct {
	CopysetID
	Server    string `json:"server"`
	Peer      string `json:"peer,omitempty"`
	State     string `json:"state,omitempty"`
	Leader    string `json:"leader,omitempty"`
	Term      int64  `json:"term"`
	Committed int64  `json:"committedIndex"`
	Applied   int64  `json:"appliedIndex"`
	First     int64  `json:"firstIndex"`
	Last      int64  `json:"lastIndex"`
	Epoch     uint64 `json:"epoch"`
	ReadOnly  bool   `json:"readOnly,omitempty"`
	Error     string `json:"error,omitempty"`
}

func newCopysetStatusCommand(a *app) *cobra.Command {
	var cf copysetFlags
	cmd := &cobra.Command{
		Use:   "status --pool P --copyset C",
		Short: "Show every replica of copysets (asks all --servers)",
		Long: `Asks every server in --servers for its replica of each copyset and prints one
row per replica. Servers that do not host the copyset are left out; servers that
cannot be asked get a row with the error. Fails if a copyset was found nowhere.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			copysets, err := cf.list()
			if err != nil {
				return err
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				all := make([][]ReplicaStatus, len(copysets))
				forEach(len(copysets), statusParallelism, func(i int) {
					all[i], _ = c.CopysetStatus(ctx, copysets[i])
				})
				if err := ctx.Err(); err != nil {
					return err
				}
				return printCopysetStatus(a.printer(cmd), copysets, all)
			})
		},
	}
	addCopysetFlags(cmd, &cf, true)
	return cmd
}

func printCopysetStatus(p *printer, copysets []CopysetID, all [][]ReplicaStatus) error {
	var js []replicaJSON
	var rows [][]string
	var missing []CopysetID
	anyErr := false
	for i, cs := range copysets {
		hosted := 0
		for _, r := range all[i] {
			if r.Err == nil && !r.Hosted {
				continue
			}
			j := replicaJSON{CopysetID: cs, Server: r.Server, Error: errText(r.Err)}
			if r.Hosted {
				hosted++
				j.Peer, j.Leader, j.Term, j.Epoch, j.ReadOnly = r.Peer, r.Leader, r.Term, r.Epoch, r.ReadOnly
				j.State = StateName(r.State)
				j.Committed, j.Applied, j.First, j.Last = r.Committed, r.Applied, r.First, r.Last
			} else {
				anyErr = true
			}
			js = append(js, j)
		}
		if hosted == 0 {
			missing = append(missing, cs)
		}
	}
	for _, j := range js {
		row := []string{strconv.FormatUint(uint64(j.Copyset), 10), j.Server}
		if j.Error != "" {
			row = append(row, "ERROR", "", "", "", "", "", "", "")
		} else {
			state := j.State
			if j.ReadOnly {
				state += " (read-only)"
			}
			row = append(row, state, j.Leader, i64(j.Term), i64(j.Committed), i64(j.Applied), i64(j.First), i64(j.Last), u64(j.Epoch))
		}
		if anyErr {
			row = append(row, j.Error)
		}
		rows = append(rows, row)
	}
	header := []string{"COPYSET", "SERVER", "STATE", "LEADER", "TERM", "COMMITTED", "APPLIED", "FIRST", "LAST", "EPOCH"}
	if anyErr {
		header = append(header, "ERROR")
	}
	if js == nil {
		js = []replicaJSON{}
	}
	if err := p.print(js, header, rows); err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("no server reported a replica of %d of %d copysets (first: %s)", len(missing), len(copysets), missing[0])
	}
	return nil
}
