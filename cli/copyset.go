package cli

import (
	"context"
	"errors"
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
	cmd.AddCommand(newCopysetCreateCommand(a), newCopysetStatusCommand(a), newCopysetListCommand(a), newCopysetDeleteBrokenCommand(a))
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
			dial, err := a.tls.DialOptions()
			if err != nil {
				return err
			}
			c, err := New(Options{Servers: peerList, Timeout: a.timeout, AttemptTimeout: a.attemptTimeout, DialOptions: dial})
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
	Hash      string `json:"hash,omitempty"`
	Mismatch  bool   `json:"mismatch,omitempty"`
	Error     string `json:"error,omitempty"`
}

func newCopysetStatusCommand(a *app) *cobra.Command {
	var cf copysetFlags
	var hash bool
	cmd := &cobra.Command{
		Use:   "status --pool P --copyset C [--hash]",
		Short: "Show every replica of copysets (asks all --servers)",
		Long: `Asks every server in --servers for its replica of each copyset and prints one
row per replica. Servers that do not host the copyset are left out; servers that
cannot be asked get a row with the error. Fails if a copyset was found nowhere.

With --hash each replica also reports the hash of its copyset data (HASH);
replicas whose hash differs from the most common one of the copyset are marked
MISMATCH and the command fails. Replicas agree only at the same applied index:
under writes use cluster check-consistency, which waits for that.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			copysets, err := cf.list()
			if err != nil {
				return err
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				all := make([][]ReplicaStatus, len(copysets))
				forEach(len(copysets), statusParallelism, func(i int) {
					if hash {
						all[i], _ = c.CopysetHashes(ctx, copysets[i])
					} else {
						all[i], _ = c.CopysetStatus(ctx, copysets[i])
					}
				})
				if err := ctx.Err(); err != nil {
					return err
				}
				return printCopysetStatus(a.printer(cmd), copysets, all, hash)
			})
		},
	}
	addCopysetFlags(cmd, &cf, true)
	cmd.Flags().BoolVar(&hash, "hash", false, "also ask each replica for the hash of its copyset data and compare them")
	return cmd
}

// hashMismatches marks the hosted rows whose copyset hash differs from the
// most common one (every row on a tie). Rows without a hash are not compared.
func hashMismatches(rows []ReplicaStatus) []bool {
	hr := make([]ReplicaHash, len(rows))
	for i, r := range rows {
		hr[i] = ReplicaHash{Server: r.Server, Hosted: r.Err == nil && r.Hosted && r.Hash != "", Hash: r.Hash}
	}
	return CompareHashes(hr).Mismatch
}

func printCopysetStatus(p *printer, copysets []CopysetID, all [][]ReplicaStatus, hash bool) error {
	var js []replicaJSON
	var rows [][]string
	var missing, differ []CopysetID
	anyErr := false
	for i, cs := range copysets {
		hosted := 0
		var mismatch []bool
		if hash {
			mismatch = hashMismatches(all[i])
		}
		marked := false
		for k, r := range all[i] {
			if r.Err == nil && !r.Hosted {
				continue
			}
			j := replicaJSON{CopysetID: cs, Server: r.Server, Error: errText(r.Err)}
			if r.Hosted {
				hosted++
				j.Peer, j.Leader, j.Term, j.Epoch, j.ReadOnly = r.Peer, r.Leader, r.Term, r.Epoch, r.ReadOnly
				j.State = StateName(r.State)
				j.Committed, j.Applied, j.First, j.Last = r.Committed, r.Applied, r.First, r.Last
				j.Hash = r.Hash
				if hash && mismatch[k] {
					j.Mismatch, marked = true, true
				}
			} else {
				anyErr = true
			}
			js = append(js, j)
		}
		if hosted == 0 {
			missing = append(missing, cs)
		}
		if marked {
			differ = append(differ, cs)
		}
	}
	for _, j := range js {
		row := []string{strconv.FormatUint(uint64(j.Copyset), 10), j.Server}
		if j.Error != "" {
			row = append(row, "ERROR", "", "", "", "", "", "", "")
			if hash {
				row = append(row, "", "")
			}
		} else {
			state := j.State
			if j.ReadOnly {
				state += " (read-only)"
			}
			row = append(row, state, j.Leader, i64(j.Term), i64(j.Committed), i64(j.Applied), i64(j.First), i64(j.Last), u64(j.Epoch))
			if hash {
				check := "ok"
				switch {
				case j.Hash == "":
					check = "no hash"
				case j.Mismatch:
					check = "MISMATCH"
				}
				row = append(row, j.Hash, check)
			}
		}
		if anyErr {
			row = append(row, j.Error)
		}
		rows = append(rows, row)
	}
	header := []string{"COPYSET", "SERVER", "STATE", "LEADER", "TERM", "COMMITTED", "APPLIED", "FIRST", "LAST", "EPOCH"}
	if hash {
		header = append(header, "HASH", "CHECK")
	}
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
	if len(differ) > 0 {
		return fmt.Errorf("replica hashes differ in %d of %d copysets (first: %s); replicas at different applied indices differ until they catch up",
			len(differ), len(copysets), differ[0])
	}
	return nil
}

type serverCopysetsJSON struct {
	Server   string   `json:"server"`
	Copysets []uint32 `json:"copysets"`
	Leaders  []uint32 `json:"leaders"`
	Error    string   `json:"error,omitempty"`
}

func copysetIDs(list []CopysetID) []uint32 {
	out := make([]uint32, len(list))
	for i, cs := range list {
		out[i] = cs.Copyset
	}
	return out
}

func newCopysetListCommand(a *app) *cobra.Command {
	var cf copysetFlags
	cmd := &cobra.Command{
		Use:   "list [--pool 1] [--copyset 1-16]",
		Short: "List the copysets each server hosts and leads",
		Long: `Asks every server in --servers, for each copyset of the range, whether it hosts
a replica (GetCopysetStatus) and prints one row per server: how many and which
copysets it hosts, and which of them it leads. Fails if a server could not be
asked about every copyset.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			copysets, err := cf.list()
			if err != nil {
				return err
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				list := c.HostedCopysets(ctx, copysets)
				if err := ctx.Err(); err != nil {
					return err
				}
				js := make([]serverCopysetsJSON, len(list))
				rows := make([][]string, len(list))
				var failed []error
				for i, s := range list {
					js[i] = serverCopysetsJSON{Server: s.Server, Copysets: copysetIDs(s.Copysets()), Leaders: copysetIDs(s.Leaders()), Error: errText(s.Err)}
					if s.Err != nil {
						failed = append(failed, fmt.Errorf("%s: %w", s.Server, s.Err))
					}
				}
				for i, j := range js {
					rows[i] = []string{j.Server, strconv.Itoa(len(j.Copysets)), FormatIDList(j.Copysets), FormatIDList(j.Leaders)}
					if len(failed) > 0 {
						rows[i] = append(rows[i], cellError(list[i].Err))
					}
				}
				header := []string{"SERVER", "COUNT", "COPYSETS", "LEADS"}
				if len(failed) > 0 {
					header = append(header, "ERROR")
				}
				if err := a.printer(cmd).print(js, header, rows); err != nil {
					return err
				}
				if len(failed) > 0 {
					return fmt.Errorf("could not list the copysets of %d of %d servers: %w", len(failed), len(list), joinErrors(failed))
				}
				return nil
			})
		},
	}
	addCopysetRangeFlags(cmd, &cf)
	return cmd
}

type deleteBrokenJSON struct {
	CopysetID
	Server string `json:"server"`
	Result string `json:"result"` // deleted, or the status / error
	Error  string `json:"error,omitempty"`
}

func newCopysetDeleteBrokenCommand(a *app) *cobra.Command {
	var cf copysetFlags
	var server string
	cmd := &cobra.Command{
		Use:   "delete-broken --server host:port --pool P --copyset C",
		Short: "Move a server's broken replica of copysets to its trash",
		Long: `Sends DeleteBrokenCopyset to --server for each copyset: a replica that failed
to load or was stopped by an error moves to the server's trash directory
(purged later); a loaded, healthy replica is refused with COPYSET_IS_HEALTHY.
To take a healthy replica off a server, use peer remove. Prints one row per
copyset; fails unless every copyset was deleted. --servers is not used.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			copysets, err := cf.list()
			if err != nil {
				return err
			}
			addr, err := PeerAddr(server)
			if err != nil {
				return fmt.Errorf("--server: %w", err)
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				errs := make([]error, len(copysets))
				forEach(len(copysets), statusParallelism, func(i int) {
					errs[i] = c.DeleteBrokenCopyset(ctx, addr, copysets[i])
				})
				js := make([]deleteBrokenJSON, len(copysets))
				rows := make([][]string, len(copysets))
				var failed []error
				for i, cs := range copysets {
					j := deleteBrokenJSON{CopysetID: cs, Server: addr, Result: "deleted"}
					var se *CopysetStatusError
					switch {
					case errors.As(errs[i], &se):
						j.Result, j.Error = se.Status.String(), errText(errs[i])
					case errs[i] != nil:
						j.Result, j.Error = "failed", errText(errs[i])
					}
					if errs[i] != nil {
						failed = append(failed, errs[i])
					}
					js[i] = j
					rows[i] = []string{addr, u64(uint64(cs.Pool)), u64(uint64(cs.Copyset)), j.Result}
				}
				if err := a.printer(cmd).print(js, []string{"SERVER", "POOL", "COPYSET", "RESULT"}, rows); err != nil {
					return err
				}
				switch {
				case len(failed) == 1 && len(copysets) == 1:
					return failed[0]
				case len(failed) > 0:
					return fmt.Errorf("%d of %d copysets not deleted; first: %w", len(failed), len(copysets), failed[0])
				}
				return nil
			})
		},
	}
	addCopysetFlags(cmd, &cf, true)
	cmd.Flags().StringVar(&server, "server", "", "the server holding the broken replica, host:port")
	_ = cmd.MarkFlagRequired("server")
	return cmd
}
