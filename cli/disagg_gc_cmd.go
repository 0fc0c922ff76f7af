package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	disaggpb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
)

// chunkctl disagg gc: the lock table's garbage collector over the
// servers' object store.

// disaggGcJSON is disagg gc -o json.
type disaggGcJSON struct {
	Prefix  string            `json:"prefix"`
	Grace   string            `json:"grace"`
	Marked  []disaggGcObjJSON `json:"marked"`
	Removed []disaggGcObjJSON `json:"removed"`
	Kept    []disaggGcObjJSON `json:"kept"`
	Waiting []disaggGcObjJSON `json:"waiting"`
	Skipped uint32            `json:"skipped"`
	Stopped string            `json:"stopped,omitempty"`
}

type disaggGcObjJSON struct {
	Name     string `json:"name"`
	LockBy   string `json:"lock_by,omitempty"`
	MarkedAt string `json:"marked_at,omitempty"` // RFC 3339
}

func gcObjects(objs []*disaggpb.GcObject) []disaggGcObjJSON {
	out := []disaggGcObjJSON{}
	for _, o := range objs {
		j := disaggGcObjJSON{Name: o.GetName(), LockBy: o.GetLockBy()}
		if o.GetMarkedMs() > 0 {
			j.MarkedAt = time.UnixMilli(o.GetMarkedMs()).UTC().Format(time.RFC3339)
		}
		out = append(out, j)
	}
	return out
}

func newDisaggGcCommand(a *app) *cobra.Command {
	var prefix string
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "gc --prefix P [--grace D]",
		Short: "Mark deleted every object under P no lock holds; remove objects marked longer than D ago",
		Long: `Runs on the lock owner over the servers' object store. First every object
under P marked deleted longer than --grace ago is removed: the object (a
DTFile: every object under its key), a data file's .del object, then its
lock table entry. Then every other object under P that no lock holds (a
clone chunk's lock, an upstream lock in the table or a lock object in the
store) is marked deleted through raft (a data file key also gets upstream's
.del object). Lock objects (lock/...) and .del objects are never collected.

An @s3 clone chunk locks its source before it is created and keeps the lock
until it is fully recovered or deleted, so gc never collects a source a
clone reads from; a clone of a marked source is refused.

The prefix must not be empty (it would collect the whole store); --grace
must not be negative (0: remove at the next run what this one marks). Each
run marks while the lock table has room (3/4 of its 4096 entries; the rest
stays for locks): past that it stops, reports what it did and exits 1; run
it again after the grace. Prints marked, removed, kept (locked, with the
lock) and waiting (marked, grace not over) objects; -o json.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				r, err := c.DisaggGc(ctx, prefix, grace)
				if err != nil {
					return err
				}
				js := disaggGcJSON{Prefix: prefix, Grace: grace.String(), Marked: gcObjects(r.GetMarked()), Removed: gcObjects(r.GetRemoved()),
					Kept: gcObjects(r.GetLocked()), Waiting: gcObjects(r.GetWaiting()), Skipped: r.GetSkipped(), Stopped: r.GetStopped()}
				var rows [][]string
				for _, g := range []struct {
					action string
					objs   []disaggGcObjJSON
				}{{"marked", js.Marked}, {"removed", js.Removed}, {"kept", js.Kept}, {"waiting", js.Waiting}} {
					for _, o := range g.objs {
						detail := o.MarkedAt
						if o.LockBy != "" {
							detail = "locked by " + o.LockBy
						} else if detail != "" {
							detail = "marked " + detail
						}
						rows = append(rows, []string{g.action, o.Name, detail})
					}
				}
				p := a.printer(cmd)
				if err := p.print(js, []string{"ACTION", "OBJECT", "DETAIL"}, rows); err != nil {
					return err
				}
				if !p.isJSON() {
					fmt.Fprintf(cmd.OutOrStdout(), "marked %d, removed %d, kept %d (locked), waiting %d, skipped %d (lock and .del objects)\n",
						len(js.Marked), len(js.Removed), len(js.Kept), len(js.Waiting), js.Skipped)
				}
				if js.Stopped != "" {
					return errors.New("gc stopped early: " + js.Stopped)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&prefix, "prefix", "", "collect the objects whose names start with this (required, not empty)")
	cmd.Flags().DurationVar(&grace, "grace", time.Hour, "remove objects marked deleted longer than this ago (>= 0)")
	_ = cmd.MarkFlagRequired("prefix")
	return cmd
}
