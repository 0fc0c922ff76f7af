package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// consistencyParallelism bounds how many copysets check-consistency checks at
// once.
const consistencyParallelism = 4

func newClusterCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Whole-cluster health and replica consistency",
	}
	cmd.AddCommand(newClusterStatusCommand(a), newClusterCheckCommand(a))
	return cmd
}

type clusterCopysetJSON struct {
	CopysetID
	Health  string   `json:"health"`
	Details []string `json:"details,omitempty"`
	Leader  string   `json:"leader"`
	Peers   []string `json:"peers"`
	// Configured: peers are the configuration the leader reports (else the
	// replicas that answered).
	Configured  bool           `json:"configured"`
	Stale       []StaleReplica `json:"stale,omitempty"`
	Term        int64          `json:"term"`
	Committed   int64          `json:"committedIndex"`
	MinApplied  int64          `json:"minAppliedIndex"`
	Epoch       uint64         `json:"epoch"`
	Unreachable []string       `json:"unreachable,omitempty"`
}

type clusterStatusJSON struct {
	Copysets []clusterCopysetJSON `json:"copysets"`
	Summary  string               `json:"summary"`
	Counts   map[string]int       `json:"counts"`
	Healthy  bool                 `json:"healthy"`
	// Servers are the servers of the cluster map (absent without one);
	// Truncated: the map stopped at its cap of servers.
	Servers   []MapServer `json:"servers,omitempty"`
	Truncated bool        `json:"truncated,omitempty"`
}

// healthOrder is the order of the summary line.
var healthOrder = []string{HealthOK, HealthStale, HealthLagging, HealthUnderReplicated, HealthNoLeader, HealthBroken, HealthMissing}

// healthSummary renders counts as "16 copysets: 15 ok, 1 lagging".
func healthSummary(total int, counts map[string]int) string {
	var parts []string
	for _, h := range healthOrder {
		if counts[h] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[h], h))
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("%d copysets", total)
	}
	return fmt.Sprintf("%d copysets: %s", total, strings.Join(parts, ", "))
}

func newClusterStatusCommand(a *app) *cobra.Command {
	var cf copysetFlags
	var lag int64
	var replicas int
	var wait waitFlag
	cmd := &cobra.Command{
		Use:   "status [--pool 1] [--copyset 1-16] [--lag 100] [--replicas 3] [--wait [duration]]",
		Short: "One table of every copyset with its health; fails if any is unhealthy",
		Long: `Finds every server and copyset of the cluster from the servers in --servers
(seeds: one reachable server is enough; see below), asks every server for its
replica of each copyset and prints one row per copyset: the leader, the peers
(the configuration the leader has; from servers older than that, the replicas
that answered plus a leader they name),
the leader's term, commit index and epoch, the lowest applied index of the
members, and the health:

  ok                everything below is fine
  stale             a replica that answered is not in the leader's configuration (removed
                    while its server was away); DETAIL names its server: move it to the
                    trash with copyset delete-broken --server S
  lagging           a member's applied index is more than --lag behind the leader's commit
                    index, or it has applied nothing yet (a new replica still empty)
  under-replicated  fewer healthy members answer than --replicas or than the configuration has
  no-leader         no replica that answered is the leader
  broken            a replica is in state ERROR (an I/O error stopped it)
  missing           no replica answered at all

The most severe problem names the health; DETAIL lists them all. A summary line
follows. Exits non-zero unless every copyset is ok.

The servers come from the cluster map (chunkctl asks the first server of
--servers that answers; it follows copyset memberships from server to server,
and also asks the other --servers and its own cluster_seeds): --servers are
seeds. Without --copyset every copyset the map found is shown, of every pool
(--pool: of that pool only; a POOL column appears when there are several),
including copysets the answering server saw earlier whose replicas are all
down now (missing). After the summary a table lists the servers of the map
(replicas hosted, leaders, and the error of a server that could not be
asked; a server named in --servers or cluster_seeds that hosts nothing yet
is listed too; JSON has them as servers), and a line counts them ("4
servers: 3 reachable, 1 unreachable"). Against
servers without the cluster map, --servers are all the servers asked and
--copyset defaults to 1-16 of pool 1.

With --wait [duration] (alone: 1m) it first waits until every member of every
copyset has applied the leader's commit index as of the start of the wait
(progress on stderr), then prints the table; if the time runs out it prints
the table and fails naming the replicas still behind.`,
		Args: wait.args,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := cf.list(); err != nil {
				return err
			}
			if replicas < 1 {
				return errors.New("--replicas: must be at least 1")
			}
			if lag < 0 {
				return errors.New("--lag: must not be negative")
			}
			return a.withCluster(cmd, func(ctx context.Context, c *Client, m *ClusterMap) error {
				copysets, err := cf.clusterList(cmd, m, true)
				if err != nil {
					return err
				}
				pools := poolsOf(copysets)
				all := make([][]ReplicaStatus, len(copysets))
				round := func() {
					forEach(len(copysets), statusParallelism, func(i int) {
						all[i], _ = c.CopysetStatus(ctx, copysets[i])
					})
				}
				round()
				var waitErr error
				if wait.d > 0 {
					if waitErr = c.waitApplied(ctx, clusterCatchUps(copysets, all), wait.d, cmd.ErrOrStderr()); waitErr == nil {
						round()
					}
				}
				if err := ctx.Err(); err != nil {
					return err
				}
				opt := HealthOptions{Replicas: replicas, Lag: lag}
				j := clusterStatusJSON{Copysets: make([]clusterCopysetJSON, len(copysets)), Counts: map[string]int{}}
				rows := make([][]string, len(copysets))
				for i, cs := range copysets {
					h := ClassifyCopyset(cs, all[i], opt)
					j.Counts[h.Health]++
					peers := h.Peers
					if peers == nil {
						peers = []string{}
					}
					j.Copysets[i] = clusterCopysetJSON{CopysetID: cs, Health: h.Health, Details: h.Details, Leader: h.Leader,
						Peers: peers, Configured: h.Configured, Stale: h.Stale, Term: h.Term, Committed: h.Committed,
						MinApplied: h.MinApplied, Epoch: h.Epoch, Unreachable: h.Unreachable}
					rows[i] = []string{u64(uint64(cs.Copyset)), h.Leader, strings.Join(h.Peers, ","), i64(h.Term),
						i64(h.Committed), i64(h.MinApplied), u64(h.Epoch), h.Health, strings.Join(h.Details, "; ")}
					if h.Answering == 0 {
						for k := 3; k <= 6; k++ {
							rows[i][k] = ""
						}
					}
					if len(pools) > 1 {
						rows[i] = append([]string{u64(uint64(cs.Pool))}, rows[i]...)
					}
				}
				j.Healthy = j.Counts[HealthOK] == len(copysets)
				j.Summary = healthSummary(len(copysets), j.Counts)
				if down := unreachableServers(all); len(down) > 0 {
					j.Summary += "; could not ask " + joinComma(down)
				}
				if m != nil {
					j.Servers, j.Truncated = m.Servers, m.Truncated
				}
				p := a.printer(cmd)
				header := []string{"COPYSET", "LEADER", "PEERS", "TERM", "COMMITTED", "APPLIED", "EPOCH", "HEALTH", "DETAIL"}
				if len(pools) > 1 {
					header = append([]string{"POOL"}, header...)
				}
				if err := p.print(j, header, rows); err != nil {
					return err
				}
				if !p.isJSON() {
					fmt.Fprintln(p.w, j.Summary)
					if m != nil {
						if err := printMapServers(p.w, m); err != nil {
							return err
						}
					}
				}
				if waitErr != nil {
					return waitErr
				}
				if !j.Healthy {
					var parts []string
					for _, h := range healthOrder[1:] {
						if n := j.Counts[h]; n > 0 {
							parts = append(parts, fmt.Sprintf("%d %s", n, h))
						}
					}
					of := fmt.Sprintf("pool %d", cf.pool)
					if len(pools) == 1 {
						of = fmt.Sprintf("pool %d", pools[0])
					} else if len(pools) > 1 {
						of = "pools " + FormatIDList(pools)
					}
					return fmt.Errorf("cluster unhealthy: %d of %d copysets of %s not ok (%s)",
						len(copysets)-j.Counts[HealthOK], len(copysets), of, strings.Join(parts, ", "))
				}
				return nil
			})
		},
	}
	addCopysetRangeFlags(cmd, &cf)
	cmd.Flags().Int64Var(&lag, "lag", 100, "log entries a replica's applied index may trail the leader's commit index")
	cmd.Flags().IntVar(&replicas, "replicas", 3, "replicas every copyset should have")
	addWaitFlag(cmd, &wait, "first wait this long at most for every member to apply the leader's commit index")
	return cmd
}

// unreachableServers are the servers that failed any status row, sorted.
func unreachableServers(all [][]ReplicaStatus) []string {
	seen := map[string]bool{}
	var out []string
	for _, rows := range all {
		for _, r := range rows {
			if r.Err != nil && !seen[r.Server] {
				seen[r.Server] = true
				out = append(out, r.Server)
			}
		}
	}
	slices.Sort(out)
	return out
}

type consistencyJSON struct {
	CopysetID
	Result     string          `json:"result"` // consistent, INCONSISTENT, not-converged, error
	Replicas   []string        `json:"replicas"`
	Applied    int64           `json:"appliedIndex"`
	Hashes     string          `json:"hashes"` // equal, differ, not-reported, ""
	Mismatches []mismatchJSON  `json:"mismatches,omitempty"`
	Problems   []string        `json:"problems,omitempty"`
	Note       string          `json:"note,omitempty"`
	Chunks     *chunkRangeJSON `json:"chunksCompared,omitempty"`
}

type mismatchJSON struct {
	Chunk   uint64   `json:"chunk"`
	Hash    string   `json:"majorityHash,omitempty"`
	Servers []string `json:"servers"`
}

type chunkRangeJSON struct {
	Count int    `json:"count"`
	IDs   string `json:"ids"`
}

// Results of check-consistency per copyset.
const (
	resultConsistent   = "consistent"
	resultInconsistent = "INCONSISTENT"
	resultNotConverged = "not-converged"
	resultError        = "error"
)

func consistencyResult(r ConsistencyReport) string {
	switch {
	case r.Consistent():
		return resultConsistent
	case len(r.Mismatches) > 0, r.Converged && r.HashReported && !r.HashesEqual:
		return resultInconsistent
	case len(r.Replicas) > 0 && !r.Converged:
		return resultNotConverged
	}
	return resultError
}

func newClusterCheckCommand(a *app) *cobra.Command {
	var cf copysetFlags
	var chunks string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "check-consistency [--pool 1] [--copyset 1-16] [--chunks 1-64] [--wait 10s]",
		Short: "Compare the replicas of every copyset; fails on any difference",
		Long: `For each copyset (those of --copyset, else every copyset of --pool the
cluster map found; --servers are seeds, see chunkctl --help): compares the
hash of each replica's copyset data (GetCopysetStatus queryHash), each taken
at an applied index the replica reports. Equal hashes are consistent. Different hashes count only between
replicas at the same applied index (twice in a row): a follower applies a
write a moment after the leader acknowledged it (the leader's hash query
tells the followers its commit index at once), so until the replicas meet at
one index it asks again, up to --wait; if they never do (writes keep coming)
the copyset is not-converged, not INCONSISTENT. When the hashes differ, or the
replicas report none, it compares GetChunkHash of each chunk in --chunks
across the replicas to name the chunks that differ (there is no RPC that lists
a copyset's chunks, so give the ids in use). Prints one row per copyset and a
summary line; exits non-zero on any mismatch, on replicas that did not
converge and on servers that could not be asked. A mismatching range can be
rewritten from the leader's copy with scan repair.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := cf.list(); err != nil {
				return err
			}
			ids, err := ParseIDList(chunks)
			if err != nil {
				return fmt.Errorf("--chunks: %w", err)
			}
			chunkIDs := make([]uint64, len(ids))
			for i, id := range ids {
				chunkIDs[i] = uint64(id)
			}
			return a.withCluster(cmd, func(ctx context.Context, c *Client, m *ClusterMap) error {
				copysets, err := cf.clusterList(cmd, m, false)
				if err != nil {
					return err
				}
				reports := make([]ConsistencyReport, len(copysets))
				forEach(len(copysets), consistencyParallelism, func(i int) {
					reports[i] = c.CheckConsistency(ctx, copysets[i], chunkIDs, wait)
				})
				if err := ctx.Err(); err != nil {
					return err
				}
				return printConsistency(a.printer(cmd), cf.pool, reports)
			})
		},
	}
	addCopysetRangeFlags(cmd, &cf)
	cmd.Flags().StringVar(&chunks, "chunks", "1-64", "chunk ids to compare when copyset hashes differ or are not reported")
	cmd.Flags().DurationVar(&wait, "wait", 10*time.Second, "how long to wait for replicas with different hashes to reach the same applied index")
	return cmd
}

func printConsistency(p *printer, pool uint32, reports []ConsistencyReport) error {
	js := make([]consistencyJSON, len(reports))
	rows := make([][]string, len(reports))
	counts := map[string]int{}
	var firstBad *ConsistencyReport
	for i, r := range reports {
		res := consistencyResult(r)
		counts[res]++
		if res != resultConsistent && firstBad == nil {
			firstBad = &reports[i]
		}
		j := consistencyJSON{CopysetID: r.Copyset, Result: res, Replicas: []string{}, Applied: r.Applied, Problems: r.Problems, Note: r.Note}
		for _, rep := range r.Replicas {
			j.Replicas = append(j.Replicas, replicaName(rep))
		}
		slices.Sort(j.Replicas)
		switch {
		case !r.Converged:
		case !r.HashReported:
			j.Hashes = "not-reported"
		case r.HashesEqual:
			j.Hashes = "equal"
		default:
			j.Hashes = "differ"
		}
		if len(r.Chunks) > 0 {
			j.Chunks = &chunkRangeJSON{Count: len(r.Chunks), IDs: formatChunkList(r.Chunks)}
		}
		for _, m := range r.Mismatches {
			j.Mismatches = append(j.Mismatches, mismatchJSON(m))
		}
		js[i] = j
		detail := strings.Join(r.Problems, "; ")
		if detail == "" {
			detail = r.Note
		}
		applied := ""
		if r.Converged {
			applied = i64(r.Applied)
		}
		rows[i] = []string{u64(uint64(r.Copyset.Copyset)), strconv.Itoa(len(r.Replicas)), applied, j.Hashes, res, detail}
	}
	header := []string{"COPYSET", "REPLICAS", "APPLIED", "HASHES", "RESULT", "DETAIL"}
	var parts, bad []string
	for _, res := range []string{resultConsistent, resultInconsistent, resultNotConverged, resultError} {
		if counts[res] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[res], res))
			if res != resultConsistent {
				bad = append(bad, fmt.Sprintf("%d %s", counts[res], res))
			}
		}
	}
	summary := fmt.Sprintf("%d copysets: %s", len(reports), strings.Join(parts, ", "))
	if p.isJSON() {
		if err := writeJSON(p.w, struct {
			Copysets []consistencyJSON `json:"copysets"`
			Summary  string            `json:"summary"`
		}{js, summary}); err != nil {
			return err
		}
	} else {
		if err := writeTable(p.w, header, rows); err != nil {
			return err
		}
		fmt.Fprintln(p.w, summary)
	}
	if firstBad != nil {
		return fmt.Errorf("replicas not consistent: %d of %d copysets of pool %d (%s); first: %s: %s", len(reports)-counts[resultConsistent],
			len(reports), pool, strings.Join(bad, ", "), firstBad.Copyset, strings.Join(firstBad.Problems, "; "))
	}
	return nil
}
