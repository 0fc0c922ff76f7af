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
	// Member: whether the replica is in the configuration the leader has;
	// absent when no leader reported one.
	Member *bool `json:"member,omitempty"`
	// WriteFence: the owner of the copyset's write fence as the replica
	// applied it, and the log index it was set at.
	WriteFence      string `json:"writeFence,omitempty"`
	WriteFenceSince int64  `json:"writeFenceSince,omitempty"`
	Hash            string `json:"hash,omitempty"`
	HashApplied     *int64 `json:"hashAppliedIndex,omitempty"` // the applied index the hash covers
	Mismatch        bool   `json:"mismatch,omitempty"`
	NotCompared     bool   `json:"notCompared,omitempty"` // hashes differ, but never at a common applied index
	Error           string `json:"error,omitempty"`
}

func newCopysetStatusCommand(a *app) *cobra.Command {
	var cf copysetFlags
	var hash bool
	cmd := &cobra.Command{
		Use:   "status --pool P --copyset C [--hash]",
		Short: "Show every replica of copysets (asks all --servers)",
		Long: `Asks every server in --servers for its replica of each copyset and prints one
row per replica. Servers that do not host the copyset are left out; servers that
cannot be asked get a row with the error. STATE adds "(read-only)" for a replica
that refuses mutations (no free space, or broken), and "(write-fenced by OWNER
since INDEX)" while the copyset's write fence, as the replica applied it,
refuses client writes with EPOCH_TOO_OLD (a migration holds it). MEMBER says
whether the replica is in the raft configuration the leader has (no: a stale
replica, see copyset delete-broken); a member no server in --servers reported
gets a row of its own in state NotAnswering. Fails if a copyset was found
nowhere.

With --hash each replica also reports the hash of its copyset data (HASH) and
the applied index it covers (HASH-APPLIED). Replicas are compared at the same
applied index: while hashes differ only between replicas at different indices
(a follower applies a write a moment after the leader), it asks again, for up
to 5s. Replicas at the same index whose hash differs from the most common one
are marked MISMATCH and the command fails; if they never reach a common index
(writes keep coming) they are marked "not compared" and it fails saying so.`,
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
						all[i], _ = c.SettledCopysetHashes(ctx, copysets[i], hashSettle)
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

func printCopysetStatus(p *printer, copysets []CopysetID, all [][]ReplicaStatus, hash bool) error {
	var js []replicaJSON
	var missing, differ, unsettled []CopysetID
	anyErr := false
	for i, cs := range copysets {
		hosted := 0
		var hc HashCheck
		if hash {
			hc = compareCopysetHashes(all[i])
		}
		conf := LeaderConfig(all[i])
		seen := map[string]bool{}
		without := map[string]bool{} // servers that answered they do not host it
		for k, r := range all[i] {
			if r.Err == nil && !r.Hosted {
				without[r.Server] = true
				continue
			}
			j := replicaJSON{CopysetID: cs, Server: r.Server, Error: errText(r.Err)}
			name := r.Peer
			if name == "" {
				name, _ = PeerID(r.Server)
			}
			seen[name] = true
			if conf.Known {
				member := conf.Member(name)
				j.Member = &member
			}
			if r.Hosted {
				hosted++
				j.Peer, j.Leader, j.Term, j.Epoch, j.ReadOnly = r.Peer, r.Leader, r.Term, r.Epoch, r.ReadOnly
				j.WriteFence, j.WriteFenceSince = r.WriteFence, r.WriteFenceSince
				j.State = StateName(r.State)
				j.Committed, j.Applied, j.First, j.Last = r.Committed, r.Applied, r.First, r.Last
				j.Hash = r.Hash
				if r.HasHashApplied {
					j.HashApplied = &all[i][k].HashApplied
				}
				j.Mismatch = hash && hc.Mismatch[k]
				j.NotCompared = hash && hc.Unsettled && r.Hash != ""
			} else {
				anyErr = true
			}
			js = append(js, j)
		}
		for _, m := range conf.Peers {
			if seen[m] {
				continue
			}
			addr, _ := PeerAddr(m)
			yes := true
			why := "a member in the leader's configuration, but not in --servers"
			if without[addr] {
				why = "a member in the leader's configuration, but its server does not host the copyset"
			}
			js = append(js, replicaJSON{CopysetID: cs, Server: addr, Peer: m, State: stateNotAnswering, Member: &yes, Error: why})
			anyErr = true
		}
		if hosted == 0 {
			missing = append(missing, cs)
		}
		if hc.Diverged {
			differ = append(differ, cs)
		}
		if hc.Unsettled {
			unsettled = append(unsettled, cs)
		}
	}
	var rows [][]string
	for _, j := range js {
		member := ""
		if j.Member != nil {
			member = map[bool]string{true: "yes", false: "no"}[*j.Member]
		}
		row := []string{strconv.FormatUint(uint64(j.Copyset), 10), j.Server}
		switch {
		case j.State == stateNotAnswering:
			row = append(row, j.State, "", "", "", "", "", "", "", member)
			if hash {
				row = append(row, "", "", "")
			}
		case j.Error != "":
			row = append(row, "ERROR", "", "", "", "", "", "", "", member)
			if hash {
				row = append(row, "", "", "")
			}
		default:
			state := j.State
			if j.ReadOnly {
				state += " (read-only)"
			}
			if j.WriteFence != "" {
				state += fmt.Sprintf(" (write-fenced by %s since %d)", j.WriteFence, j.WriteFenceSince)
			}
			row = append(row, state, j.Leader, i64(j.Term), i64(j.Committed), i64(j.Applied), i64(j.First), i64(j.Last), u64(j.Epoch), member)
			if hash {
				check := "ok"
				switch {
				case j.Hash == "":
					check = "no hash"
				case j.Mismatch:
					check = "MISMATCH"
				case j.NotCompared:
					check = "not compared"
				}
				at := ""
				if j.HashApplied != nil {
					at = i64(*j.HashApplied)
				}
				row = append(row, j.Hash, at, check)
			}
		}
		if anyErr {
			row = append(row, j.Error)
		}
		rows = append(rows, row)
	}
	header := []string{"COPYSET", "SERVER", "STATE", "LEADER", "TERM", "COMMITTED", "APPLIED", "FIRST", "LAST", "EPOCH", "MEMBER"}
	if hash {
		header = append(header, "HASH", "HASH-APPLIED", "CHECK")
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
		return fmt.Errorf("replica hashes differ at the same applied index in %d of %d copysets (first: %s)",
			len(differ), len(copysets), differ[0])
	}
	if len(unsettled) > 0 {
		return fmt.Errorf("replica hashes of %d of %d copysets not compared (first: %s): the replicas did not reach a common applied index within %s; "+
			"writes are still arriving, run it again when they pause", len(unsettled), len(copysets), unsettled[0], hashSettle)
	}
	return nil
}

// stateNotAnswering is the state copyset status shows for a member of the
// leader's configuration that no server in --servers reported.
const stateNotAnswering = "NotAnswering"

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
		Long: `Asks every server of the cluster map (--servers are seeds; see chunkctl
--help), for each copyset of the range, whether it hosts
a replica (GetCopysetStatus) and prints one row per server: how many and which
copysets it hosts, and which of them it leads. Fails if a server could not be
asked about every copyset.`,
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
		Short: "Move a server's broken or stale replica of copysets to its trash",
		Long: `Sends DeleteBrokenCopyset to --server for each copyset: a replica that failed
to load or was stopped by an error, or a stale one, moves to the server's trash
directory (purged later). Stale (cluster status names them): a replica removed
from its copyset while its server was away, which never learns it and stays a
candidate; the server asks the copyset's leader and moves the replica only
when the leader's committed configuration does not name it. A member is
refused with COPYSET_IS_HEALTHY, and the server's reason is printed; when the
leader cannot be asked the command fails saying so. To take a member off a
server, use peer remove. Prints one row per copyset; fails unless every
copyset was deleted. --servers is not used.`,
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
