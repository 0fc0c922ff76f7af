package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

// newDMPurgeRelayCommand is dmctl's purge-relay (pb.Worker PurgeRelay).
func newDMPurgeRelayCommand(a *app) *cobra.Command {
	var (
		inactive     bool
		before       string
		file, subDir string
	)
	cmd := &cobra.Command{
		Use:   "purge-relay (--inactive | --before TIME | --filename PACKET --sub-dir pool-P/copyset-C)",
		Short: "Delete the relay packets dm's tasks have applied (the exports of tasks with a source cluster)",
		Long: `Delete packets of the relays dm made (each task with a source cluster
exports its pool to source.relay): --inactive every packet before the one
each share is in; --before TIME those of them written before TIME (RFC 3339
or a duration ago: 24h); --filename PACKET --sub-dir pool-P/copyset-C those
of them before PACKET of that copyset. The newest packet of a copyset always
stays, and so does every packet a share has not applied. Refused while any
task is paused. An export given as source.export is never purged. A
purged relay restores with sync restore only onto a copy restored from it
(with --marker) before the purge: sync restore --resume-from replays the
range kept (the copyset's purged.pb says what was purged;
docs/sync-format.md). Exit status 1 when
refused.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var at time.Time
			if before != "" {
				if d, err := time.ParseDuration(before); err == nil {
					if d <= 0 {
						return fmt.Errorf("--before %s: want a duration ago above 0, or an RFC 3339 time", before)
					}
					at = time.Now().Add(-d)
				} else if at, err = time.Parse(time.RFC3339, before); err != nil {
					return fmt.Errorf("--before %q is neither a duration (24h) nor an RFC 3339 time (2026-01-02T15:04:05Z)", before)
				}
			}
			n := 0
			for _, set := range []bool{inactive, before != "", file != ""} {
				if set {
					n++
				}
			}
			if n != 1 {
				return errors.New("give exactly one of --inactive, --before or --filename")
			}
			if file != "" && subDir == "" {
				return errors.New("--filename needs --sub-dir pool-P/copyset-C")
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				resp, err := c.DMPurgeRelay(ctx, inactive, at, file, subDir)
				if resp == nil {
					return err
				}
				return a.printDMAnswer(cmd, resp, resp.GetMsg(), err)
			})
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&inactive, "inactive", false, "purge every packet before the one each share is in")
	fl.StringVar(&before, "before", "", "purge those written before this time (RFC 3339, or a duration ago: 24h)")
	fl.StringVarP(&file, "filename", "f", "", "purge those before this packet (with --sub-dir)")
	fl.StringVar(&subDir, "sub-dir", "", "the copyset of --filename, pool-P/copyset-C")
	return cmd
}
