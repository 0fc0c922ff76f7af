package cli

import (
	"context"

	"github.com/spf13/cobra"
)

func newEpochCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "epoch",
		Short: "Fence files by epoch on the chunkservers",
	}
	cmd.AddCommand(newEpochUpdateCommand(a))
	return cmd
}

type epochServerJSON struct {
	Server string `json:"server"`
	Status string `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
}

type epochUpdateJSON struct {
	FileID  uint64            `json:"fileId"`
	Epoch   uint64            `json:"epoch"`
	Servers []epochServerJSON `json:"servers"`
}

func newEpochUpdateCommand(a *app) *cobra.Command {
	var fileID, epoch uint64
	cmd := &cobra.Command{
		Use:   "update --file-id F --epoch E",
		Short: "Raise a file's epoch on every server in --servers (fails unless all take it)",
		Long: `Sends UpdateEpoch to every server in --servers. Each stores the fence and
commits it to the raft log of every copyset it hosts, so that every replica of
those copysets, including ones added later, holds it: chunk requests carrying
an older epoch of the file (chunk write/delete --file-id F --epoch E) are then
refused with CHUNK_OP_STATUS_EPOCH_TOO_OLD. A server that already holds a newer
epoch refuses the update with EPOCH_TOO_OLD; one that could not commit it to
every copyset it hosts answers FAILURE_UNKNOWN (run the command again). Prints
one row per server; fails if any server refused or could not be reached within
--timeout.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				rows, uerr := c.UpdateEpoch(ctx, fileID, epoch)
				j := epochUpdateJSON{FileID: fileID, Epoch: epoch, Servers: make([]epochServerJSON, len(rows))}
				failed := false // a server did not reply: ERROR column
				for _, r := range rows {
					failed = failed || !r.Replied
				}
				table := make([][]string, len(rows))
				for i, r := range rows {
					// A reply's status says it all; an error is for no reply.
					sj := epochServerJSON{Server: r.Server}
					cell := ""
					if r.Replied {
						sj.Status = r.Status.String()
					} else {
						sj.Error, cell = errText(r.Err), cellError(r.Err)
					}
					j.Servers[i] = sj
					table[i] = []string{r.Server, sj.Status}
					if failed {
						table[i] = append(table[i], cell)
					}
				}
				header := []string{"SERVER", "STATUS"}
				if failed {
					header = append(header, "ERROR")
				}
				if err := a.printer(cmd).print(j, header, table); err != nil {
					return err
				}
				return uerr
			})
		},
	}
	cmd.Flags().Uint64Var(&fileID, "file-id", 0, "file id")
	cmd.Flags().Uint64Var(&epoch, "epoch", 0, "the file's new epoch (not lower than the servers' current one)")
	_ = cmd.MarkFlagRequired("file-id")
	_ = cmd.MarkFlagRequired("epoch")
	return cmd
}
