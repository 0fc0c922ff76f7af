package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// defaultWait is what a bare --wait waits at most.
const defaultWait = time.Minute

// waitFlag is --wait [duration]: given alone it is defaultWait; the
// duration may follow as --wait=30s or as --wait 30s.
type waitFlag struct {
	d time.Duration
}

func addWaitFlag(cmd *cobra.Command, w *waitFlag, usage string) {
	cmd.Flags().DurationVar(&w.d, "wait", 0, usage+" (alone: "+defaultWait.String()+")")
	cmd.Flags().Lookup("wait").NoOptDefVal = defaultWait.String()
}

// args is the command's Args: none, except the duration of a bare --wait.
func (w *waitFlag) args(cmd *cobra.Command, args []string) error {
	f := cmd.Flags().Lookup("wait")
	if len(args) == 0 {
		if f.Changed && w.d <= 0 {
			return fmt.Errorf("--wait: must be positive, got %s", w.d)
		}
		return nil
	}
	if len(args) == 1 && f.Changed && w.d == defaultWait {
		d, err := time.ParseDuration(args[0])
		if err != nil {
			return fmt.Errorf("--wait: %q is not a duration (30s, 2m)", args[0])
		}
		if d <= 0 {
			return fmt.Errorf("--wait: must be positive, got %s", args[0])
		}
		w.d = d
		return nil
	}
	return fmt.Errorf("unexpected argument %q", args[0])
}

// catchUp is one replica a wait is for: it must apply target.
type catchUp struct {
	cs     CopysetID
	peer   string // its peer id
	server string // the address to ask
	target int64  // the leader's commit index when the wait began
}

// waitPoll is the pause between the status rounds of a wait, and
// waitReport how often it prints progress.
const (
	waitPoll   = 200 * time.Millisecond
	waitReport = time.Second
)

// waitApplied asks each replica of items (on its own server) until it has
// applied its target, for at most d, printing progress to progress about
// once a second. It fails naming the replicas still behind.
func (c *Client) waitApplied(ctx context.Context, items []catchUp, d time.Duration, progress io.Writer) error {
	start := time.Now()
	applied := make([]int64, len(items))
	notes := make([]string, len(items))
	pending := make([]int, len(items))
	for i := range items {
		pending[i] = i
	}
	lastReport := start
	for {
		forEach(len(pending), statusParallelism, func(k int) {
			i := pending[k]
			r := c.replicaStatus(ctx, items[i].cs, items[i].server, false)
			switch {
			case r.Err != nil:
				notes[i] = "not answering: " + cellError(r.Err)
			case !r.Hosted:
				notes[i] = "no replica on " + items[i].server
			default:
				applied[i], notes[i] = r.Applied, ""
			}
		})
		pending = slices.DeleteFunc(pending, func(i int) bool { return notes[i] == "" && applied[i] >= items[i].target })
		if len(pending) == 0 {
			return nil
		}
		behind := make([]string, 0, 3)
		for _, i := range pending[:min(len(pending), 3)] {
			it := items[i]
			s := fmt.Sprintf("%s %s applied %d of %d", it.cs, it.peer, applied[i], it.target)
			if notes[i] != "" {
				s = fmt.Sprintf("%s %s %s", it.cs, it.peer, notes[i])
			}
			behind = append(behind, s)
		}
		if len(pending) > 3 {
			behind = append(behind, fmt.Sprintf("%d more", len(pending)-3))
		}
		elapsed := time.Since(start)
		if elapsed >= d {
			return fmt.Errorf("timed out after %s waiting for %d of %d replicas to apply the leader's commit index as of the start: %s",
				d, len(pending), len(items), strings.Join(behind, "; "))
		}
		if time.Since(lastReport) >= waitReport {
			lastReport = time.Now()
			fmt.Fprintf(progress, "waiting (%s of %s): %d of %d replicas behind: %s\n",
				elapsed.Round(time.Second), d, len(pending), len(items), strings.Join(behind, "; "))
		}
		if !sleepCtx(ctx, min(waitPoll, d-elapsed)) {
			return ctx.Err()
		}
	}
}

// clusterCatchUps are the replicas `cluster status --wait` waits for: every
// member of each copyset with a leader (the leader's configuration when it
// reports one, else the replicas that answered), to apply the leader's
// commit index of rows.
func clusterCatchUps(copysets []CopysetID, all [][]ReplicaStatus) []catchUp {
	var out []catchUp
	for i, cs := range copysets {
		var leader *ReplicaStatus
		for k, r := range all[i] {
			if r.Err == nil && r.Hosted && r.State == StateLeader && (leader == nil || r.Term > leader.Term) {
				leader = &all[i][k]
			}
		}
		if leader == nil {
			continue
		}
		conf := LeaderConfig(all[i])
		seen := map[string]bool{}
		for _, r := range all[i] {
			if r.Err != nil || !r.Hosted || (conf.Known && !conf.Member(replicaName(r))) {
				continue
			}
			seen[replicaName(r)] = true
			out = append(out, catchUp{cs: cs, peer: replicaName(r), server: r.Server, target: leader.Committed})
		}
		for _, m := range conf.Peers {
			if addr, err := PeerAddr(m); err == nil && !seen[m] {
				out = append(out, catchUp{cs: cs, peer: m, server: addr, target: leader.Committed})
			}
		}
	}
	return out
}
