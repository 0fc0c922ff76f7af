package cli

import "github.com/spf13/cobra"

// syncSubcommands are the subcommands of `chunkctl sync`, in help order.
// A sync command is a func(*app) *cobra.Command in its own file, listed
// here.
var syncSubcommands = []func(a *app) *cobra.Command{
	newSyncCreateCommand, newSyncStatusCommand, newSyncDeleteCommand, newSyncRestoreCommand,
}

// newSyncCommand is `chunkctl sync`, the commands of the sync service
// (continuous export of a pool).
func newSyncCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sync",
		Short: "The sync service: exports of a pool to files or S3, and their restore",
		Long: `The sync service exports a logical pool's chunks to a destination
(file:///absolute/path or s3://bucket/prefix): a snapshot of every chunk,
then the copysets' raft logs (openmldb.datasync's protocol; the format is
docs/sync-format.md); restore replays an export into a cluster. Tasks are
replicated in the pool's copysets: any server answers for any task, and a
leader change moves a copyset's export to its new leader with a new token.`,
	}
	for _, sub := range syncSubcommands {
		cmd.AddCommand(sub(a))
	}
	return cmd
}
