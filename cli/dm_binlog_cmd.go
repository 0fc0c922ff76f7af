package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	dmworkerpb "github.com/chunkraft/chunkraft/proto/dm/pb"
)

// newDMBinlogCommand is dmctl's `binlog`: operators at a source position
// of a task in the Sync unit (pb.Worker HandleError).
func newDMBinlogCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "binlog",
		Short: "Skip, replace or inject source ops of a task in Sync, at a source position or its apply error",
		Long: `Operators at a source position P/C:index.op (pool P, copyset C of the
source, the op at log index "index", position "op" in its entry; query-status
shows where each share stands, and a share paused by an apply error names
its position). An operator waits in the share until the share applies that
position: skip leaves the op out, replace applies the given ops instead,
inject applies them before it. revert removes an operator not applied yet,
list shows them. Without --binlog-pos, skip, replace and revert act at each
share's apply error. A paused share resumes once an operator is set.

Ops, one per argument (or ';'-separated), in the form:
  write <chunk> <offset> <length> sn=<n> [csn=<n>] data=zero|b64:<base64>
  delete <chunk> sn=<n>
  delete-snap <chunk> csn=<n>
  noop
A write covers whole 4 KiB blocks, at most 64 KiB.`,
	}
	var pos string
	sub := func(use string, op dmworkerpb.ErrorOp, short string, args cobra.PositionalArgs) *cobra.Command {
		c := &cobra.Command{
			Use:   use,
			Short: short,
			Args:  args,
			RunE: func(cmd *cobra.Command, args []string) error {
				return a.withClient(cmd, func(ctx context.Context, c *Client) error {
					resp, err := c.DMHandleError(ctx, args[0], op, pos, args[1:])
					if resp == nil {
						return err
					}
					if op == dmworkerpb.ErrorOp_List && err == nil {
						return printOperators(a.printer(cmd), resp.GetMsg())
					}
					return a.printDMAnswer(cmd, resp, resp.GetMsg(), err)
				})
			},
		}
		c.Flags().StringVar(&pos, "binlog-pos", "", "the source position P/C:index.op (default: each share's apply error)")
		return c
	}
	cmd.AddCommand(
		sub("skip TASK", dmworkerpb.ErrorOp_Skip, "Leave out the source op at the position", cobra.ExactArgs(1)),
		sub("replace TASK OP...", dmworkerpb.ErrorOp_Replace, "Apply the given ops instead of the source op at the position", cobra.MinimumNArgs(2)),
		sub("inject TASK OP...", dmworkerpb.ErrorOp_Inject, "Apply the given ops before the source op at the position (needs --binlog-pos)", cobra.MinimumNArgs(2)),
		sub("revert TASK", dmworkerpb.ErrorOp_Revert, "Remove the operator at the position (one not applied yet)", cobra.ExactArgs(1)),
		sub("list TASK", dmworkerpb.ErrorOp_List, "List the operators waiting (at or after --binlog-pos)", cobra.ExactArgs(1)),
	)
	return cmd
}

// dmOperator is one operator of HandleError List's answer (a JSON array
// in its message, docs/dm.md): dm.OperatorView's wire form, declared here
// since cli imports no server package.
type dmOperator struct {
	Task     string   `json:"task"`
	Position string   `json:"position"`
	Op       string   `json:"op"`
	Ops      []string `json:"ops,omitempty"`
	Target   string   `json:"target"`
	AddedMs  int64    `json:"addedMs"`
}

// printOperators prints List's answer.
func printOperators(p *printer, msg string) error {
	var ops []dmOperator
	if err := json.Unmarshal([]byte(msg), &ops); err != nil {
		return fmt.Errorf("list answer: %w", err)
	}
	rows := make([][]string, 0, len(ops))
	for _, o := range ops {
		rows = append(rows, []string{o.Task, o.Position, o.Op, o.Target, strings.Join(o.Ops, "; "),
			time.UnixMilli(o.AddedMs).UTC().Format(time.RFC3339)})
	}
	return p.print(ops, []string{"TASK", "POSITION", "OPERATOR", "TARGET", "OPS", "ADDED"}, rows)
}
