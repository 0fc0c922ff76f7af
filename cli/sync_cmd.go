package cli

import "github.com/spf13/cobra"

// syncSubcommands are the subcommands of `chunkctl sync`, in help order.
// A sync command is a func(*app) *cobra.Command in its own file, listed
// here.
var syncSubcommands = []func(a *app) *cobra.Command{
	newSyncRestoreCommand,
}

// newSyncCommand is `chunkctl sync`, the commands of the sync service
// (continuous export of a pool, issue 15).
func newSyncCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sync",
		Short: "The sync service: exports of a pool to files or S3, and their restore",
		Long: `The sync service exports a pool copyset by copyset to a destination
(file:///absolute/path or s3://bucket/prefix) in the format of
docs/sync-format.md; restore replays an export into a cluster.`,
	}
	for _, sub := range syncSubcommands {
		cmd.AddCommand(sub(a))
	}
	return cmd
}
