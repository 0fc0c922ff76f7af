package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	dmworkerpb "github.com/chunkraft/chunkraft/proto/dm/pb"
)

// newDMValidationCommand is dmctl's `validation`: the validator of a task
// whose task file sets validator.mode (pb.Worker's validator RPCs).
func newDMValidationCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "validation",
		Short: "The validator of a task: its status, its error rows and their state, its cutover point",
		Long: `A task whose file sets validator.mode (fast: existence, sn and corrected sn;
full: also the data's hash) compares, while in Sync, each target chunk with
the source cluster's, as of the same source op (a chunk still being written
stays pending). A chunk that keeps differing for validator.row-error-delay
becomes an error row: show-error lists them, ignore-error, resolve-error and
clear-error act on one (by id) or all (--all). update sets the cutover point:
a source position P/C:index.op, a time (RFC 3339) or "cutover" (the task's
cutover fence). Exit status 1 when refused.`,
	}
	status := &cobra.Command{
		Use:   "status TASK",
		Short: "Each copyset's validator: stage, checkpoint, cutover point, last pass, error rows",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			stage, _ := cmd.Flags().GetString("table-stage")
			var filter dmworkerpb.Stage
			switch strings.ToLower(stage) {
			case "":
			case "running":
				filter = dmworkerpb.Stage_Running
			case "stopped":
				filter = dmworkerpb.Stage_Stopped
			default:
				return fmt.Errorf("--table-stage %q: want running or stopped", stage)
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				var resp *dmworkerpb.GetValidationStatusResponse
				err := c.onAnyServerWithin(ctx, c.timeout, func(ctx context.Context, cc grpc.ClientConnInterface) error {
					var err error
					resp, err = dmworkerpb.NewWorkerClient(cc).GetWorkerValidatorStatus(ctx, &dmworkerpb.GetValidationStatusRequest{TaskName: args[0], FilterStatus: filter})
					return err
				})
				if err != nil {
					return err
				}
				p := a.printer(cmd)
				if p.isJSON() {
					return printProto(p.w, resp)
				}
				rows := make([][]string, 0, len(resp.GetValidators()))
				for _, v := range resp.GetValidators() {
					errs := make([]string, 0, len(v.GetResult().GetErrors()))
					for _, e := range v.GetResult().GetErrors() {
						errs = append(errs, e.GetMessage())
					}
					rows = append(rows, []string{v.GetSource(), v.GetMode(), v.GetStage().String(), v.GetValidatorBinlog(), v.GetCutoverBinlogPos(),
						v.GetProcessedRowsStatus(), v.GetPendingRowsStatus(), v.GetErrorRowsStatus(), strings.Join(errs, "; ")})
				}
				return writeTable(p.w, []string{"SOURCE", "MODE", "STAGE", "CHECKPOINT", "CUTOVER", "PROCESSED", "PENDING", "ERRORS", "PROBLEM"}, rows)
			})
		},
	}
	status.Flags().String("table-stage", "", "list only the chunks of validators in this stage: running or stopped")
	show := &cobra.Command{
		Use:   "show-error TASK",
		Short: "List the task's error rows (--error all, unprocessed, ignored or resolved)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			which, _ := cmd.Flags().GetString("error")
			states := map[string]dmworkerpb.ValidateErrorState{"all": dmworkerpb.ValidateErrorState_InvalidErr,
				"unprocessed": dmworkerpb.ValidateErrorState_NewErr, "ignored": dmworkerpb.ValidateErrorState_IgnoredErr,
				"resolved": dmworkerpb.ValidateErrorState_ResolvedErr}
			state, ok := states[which]
			if !ok {
				return fmt.Errorf("--error %q: want all, unprocessed, ignored or resolved", which)
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				var resp *dmworkerpb.GetValidationErrorResponse
				err := c.onAnyServerWithin(ctx, c.timeout, func(ctx context.Context, cc grpc.ClientConnInterface) error {
					var err error
					resp, err = dmworkerpb.NewWorkerClient(cc).GetValidatorError(ctx, &dmworkerpb.GetValidationErrorRequest{TaskName: args[0], ErrState: state})
					return err
				})
				if err != nil {
					return err
				}
				p := a.printer(cmd)
				if p.isJSON() {
					return printProto(p.w, resp)
				}
				rows := make([][]string, 0, len(resp.GetError()))
				for _, e := range resp.GetError() {
					rows = append(rows, []string{e.GetId(), e.GetSource(), e.GetSrcTable(), e.GetErrorType(), e.GetStatus().String(), e.GetTime(), e.GetSrcData(), e.GetDstData()})
				}
				return writeTable(p.w, []string{"ID", "SOURCE", "CHUNK", "TYPE", "STATE", "TIME", "SOURCE HAS", "TARGET HAS"}, rows)
			})
		},
	}
	show.Flags().String("error", "unprocessed", "which rows: all, unprocessed, ignored or resolved")
	operate := func(use string, op dmworkerpb.ValidationErrOp, short string) *cobra.Command {
		c := &cobra.Command{
			Use:   use + " TASK [ID]",
			Short: short,
			Args:  cobra.RangeArgs(1, 2),
			RunE: func(cmd *cobra.Command, args []string) error {
				all, _ := cmd.Flags().GetBool("all")
				req := &dmworkerpb.OperateValidationErrorRequest{Op: op, TaskName: args[0], IsAllError: all}
				switch {
				case all && len(args) == 2:
					return errors.New("give an error id or --all, not both")
				case !all && len(args) == 1:
					return errors.New("give an error id (show-error lists them) or --all")
				case len(args) == 2:
					id, err := strconv.ParseUint(args[1], 10, 64)
					if err != nil || id == 0 {
						return fmt.Errorf("error id %q: want the number show-error gives", args[1])
					}
					req.ErrId = id
				}
				return a.withClient(cmd, func(ctx context.Context, c *Client) error {
					var resp *dmworkerpb.OperateValidationErrorResponse
					err := c.onAnyServerWithin(ctx, c.timeout, func(ctx context.Context, cc grpc.ClientConnInterface) error {
						var err error
						resp, err = dmworkerpb.NewWorkerClient(cc).OperateValidatorError(ctx, req)
						return err
					})
					if err != nil {
						return err
					}
					if !resp.GetResult() {
						err = &DMError{Msg: resp.GetMsg()}
					}
					return a.printDMAnswer(cmd, resp, resp.GetMsg(), err)
				})
			},
		}
		c.Flags().Bool("all", false, "every error row of the task")
		return c
	}
	update := &cobra.Command{
		Use:   "update TASK --cutover-binlog-pos P/C:index.op|TIME|cutover",
		Short: "Set the validator's cutover point: status says when it has compared every chunk past it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pos, _ := cmd.Flags().GetString("cutover-binlog-pos")
			gtid, _ := cmd.Flags().GetString("cutover-binlog-gtid")
			if pos == "" && gtid == "" {
				return errors.New("give --cutover-binlog-pos P/C:index.op, a time (RFC 3339) or cutover")
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				var resp *dmworkerpb.CommonWorkerResponse
				err := c.onAnyServerWithin(ctx, c.timeout, func(ctx context.Context, cc grpc.ClientConnInterface) error {
					var err error
					resp, err = dmworkerpb.NewWorkerClient(cc).UpdateValidator(ctx, &dmworkerpb.UpdateValidationWorkerRequest{TaskName: args[0], BinlogPos: pos, BinlogGTID: gtid})
					return err
				})
				if err != nil {
					return err
				}
				if !resp.GetResult() {
					err = &DMError{Msg: resp.GetMsg()}
				}
				return a.printDMAnswer(cmd, resp, resp.GetMsg(), err)
			})
		},
	}
	update.Flags().String("cutover-binlog-pos", "", "the cutover point: a source position P/C:index.op, a time (RFC 3339) or cutover (the task's cutover fence)")
	update.Flags().String("cutover-binlog-gtid", "", "upstream's GTID form (refused: chunk ops have none)")
	cmd.AddCommand(status, show,
		operate("ignore-error", dmworkerpb.ValidationErrOp_IgnoreErrOp, "Mark an error row (or --all) ignored: its chunk gets no new row"),
		operate("resolve-error", dmworkerpb.ValidationErrOp_ResolveErrOp, "Mark an error row (or --all) resolved: a chunk that differs again gets a new row"),
		operate("clear-error", dmworkerpb.ValidationErrOp_ClearErrOp, "Delete an error row (or --all)"),
		update)
	return cmd
}
