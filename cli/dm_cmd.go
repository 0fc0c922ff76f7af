package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	dmworkerpb "github.com/chunkraft/chunkraft/proto/dm/pb"
)

// chunkctl dm: the dm service (TiFlow DM's worker protocol): online
// migration of a pool into this cluster. The commands mirror dmctl's.

func newDMCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dm",
		Short: "The dm service: migrate a pool into this cluster, exactly once",
		Long: `The dm service migrates a pool into this cluster online: a task applies the
export of a source pool (docs/sync-format.md) to a target pool of this
cluster, copyset C into copyset C, each source op exactly once, and follows
the export as it grows. The source is another cluster's pool, which the task
has export itself to a relay location, or an export already written
(chunkctl sync create). Tasks are
described by a task file (YAML; docs/dm.md lists its keys) and replicated in
the target copysets: any server answers for any task. The commands mirror
dmctl's: start-task, check-task, pause-task, resume-task, stop-task,
update-task, query-status, get-config worker, binlog, purge-relay; cutover makes the
target the live copy.`,
	}
	cmd.AddCommand(newDMStartCommand(a, false), newDMStartCommand(a, true),
		newDMOperateCommand(a, "pause-task", dmworkerpb.TaskOp_Pause, "Pause a task: its appliers stop where they are; resume-task goes on from there (no auto-resume while paused by a user)"),
		newDMOperateCommand(a, "resume-task", dmworkerpb.TaskOp_Resume, "Resume a paused or stopped-by-an-error task from its checkpoints (clears its errors)"),
		newDMOperateCommand(a, "stop-task", dmworkerpb.TaskOp_Stop, "Stop a task and remove it (the data it applied stays; starting it again needs empty target copysets)"),
		newDMUpdateCommand(a), newDMQueryStatusCommand(a), newDMGetConfigCommand(a), newDMCutoverCommand(a),
		newDMBinlogCommand(a), newDMBinlogSchemaCommand(a), newDMValidationCommand(a), newDMPurgeRelayCommand(a))
	return cmd
}

// readTaskFile reads a task file, "-" for stdin.
func readTaskFile(cmd *cobra.Command, path string) ([]byte, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), 1<<20+1))
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("task file: %w", err)
	}
	return b, nil
}

// taskFileCall reads the task file at path and sends it with call, then
// prints the answer.
func (a *app) taskFileCall(cmd *cobra.Command, path string, check bool,
	call func(c *Client, ctx context.Context, task []byte, check bool) (*dmpb.ControlResponse, error)) error {
	task, err := readTaskFile(cmd, path)
	if err != nil {
		return err
	}
	return a.withClient(cmd, func(ctx context.Context, c *Client) error {
		resp, err := call(c, ctx, task, check)
		return a.printControl(cmd, resp, err)
	})
}

func newDMStartCommand(a *app, check bool) *cobra.Command {
	use, short := "start-task TASK.yaml", "Start a task: check it on every target copyset, then start it on each (nothing starts unless every check passes)"
	if check {
		use, short = "check-task TASK.yaml", "Check a task without starting it: what start-task would do on each target copyset, and what is wrong"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: short + `.
TASK.yaml ("-": stdin) is a task file: name, task-mode (all or full), source
(pool, and cluster: seeds of the source cluster with relay: where it
exports the pool for the task; or export: a file:// or s3:// export of the
pool), target-pool, copysets (optional: the target copysets; default all of
the pool's), sync.throttle-bytes-per-sec (optional). Unknown keys are an
error. Each target copyset must exist, have a leader and hold no chunk; the
source must have the copyset of the same id. Exit status 1 when a check
fails.`,
	}
	if check {
		cmd.Args = cobra.ExactArgs(1)
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			return a.taskFileCall(cmd, args[0], true, (*Client).DMStartTask)
		}
		return cmd
	}
	var wait waitFlag
	cmd.Long += `

With --wait, it then waits (at most D) until the task is Finished (task-mode
full) or in the Sync unit and caught up with its source (task-mode all),
asking for its status every 0.2 s, with progress on stderr about once a
second; it fails at once if the task is stopped, paused by a user or paused
by an error auto-resume does not resume. The task is left as it is when the
wait fails. -o json prints {"start": the start's answer, "wait": stage,
unit, progress, seconds}.`
	var path string
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		var err error
		path, err = taskAndWaitArgs(cmd, &wait, args)
		return err
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if wait.d == 0 {
			return a.taskFileCall(cmd, path, false, (*Client).DMStartTask)
		}
		return a.startTaskAndWait(cmd, path, wait.d)
	}
	addWaitFlag(cmd, &wait, "then wait this long at most until the task is Finished (full) or caught up in Sync (all)")
	return cmd
}

func newDMUpdateCommand(a *app) *cobra.Command {
	var check bool
	cmd := &cobra.Command{
		Use:   "update-task TASK.yaml",
		Short: "Change a paused task's sync settings to the task file's (sync.throttle-bytes-per-sec); resume-task goes on with them",
		Long: `Change the config of task NAME (the task file's name) to the task file's.
The task must be paused on every copyset (pause-task), and the file may
differ from the task's only in what may change while in Sync:
sync.throttle-bytes-per-sec. Anything else that differs is named and
nothing changes. --check only says whether the update may be made. Exit
status 1 when it may not.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.taskFileCall(cmd, args[0], check, (*Client).DMUpdateTask)
		},
	}
	cmd.Flags().BoolVar(&check, "check", false, "only check whether the update may be made")
	return cmd
}

func newDMOperateCommand(a *app, use string, op dmworkerpb.TaskOp, short string) *cobra.Command {
	return &cobra.Command{
		Use:   use + " NAME",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				resp, err := c.DMOperateTask(ctx, args[0], op)
				return a.printControl(cmd, resp, err)
			})
		},
	}
}

func newDMCutoverCommand(a *app) *cobra.Command {
	var (
		abort bool
		wait  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "cutover NAME",
		Short: "Make a task's target pool the live copy: fence the source, catch up, verify, open the target to writes",
		Long: `Cut task NAME over to its target pool, with nothing lost: every source
copyset refuses client writes from a replicated point on (its write fence;
EPOCH_TOO_OLD to a writer), dm waits until the relay export has reached
that point and the target has applied it, compares every copyset's digest
on both sides, then marks the task Finished and opens the target pool to
client writes. It prints each step and the write downtime (from the first
source fence to the last target lift). The source pool stays fenced.

Each step is recorded in the target copysets (query-status shows it): run
the cutover again after any failure or crash to go on from where it stood,
or --abort before it commits to lift the source's fences (the task goes on
in Sync). A cutover needs a task with a source cluster, in task-mode all,
in the Sync unit on every copyset. Exit status 1 when it did not commit (or
abort).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if wait < 0 {
				return fmt.Errorf("--timeout %v: want 0 (the server's default) or more", wait)
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				resp, err := c.DMCutover(ctx, args[0], abort, wait)
				if resp == nil {
					return err
				}
				p := a.printer(cmd)
				if p.isJSON() {
					if perr := printProto(p.w, resp); perr != nil {
						return perr
					}
					return err
				}
				for _, s := range resp.GetSteps() {
					fmt.Fprintln(p.w, s)
				}
				if err == nil {
					fmt.Fprintln(p.w, resp.GetMsg())
				}
				return err
			})
		},
	}
	cmd.Flags().BoolVar(&abort, "abort", false, "abort a cutover that has not committed: the source pool takes writes again")
	cmd.Flags().DurationVar(&wait, "timeout", 0, "how long to wait for the target to catch up with the fenced source (0: 5m)")
	return cmd
}

// printDMAnswer prints a worker answer: all of it as JSON, else its
// message (none when refused: the refusal is err, which it returns).
func (a *app) printDMAnswer(cmd *cobra.Command, resp proto.Message, msg string, err error) error {
	p := a.printer(cmd)
	if p.isJSON() {
		if perr := printProto(p.w, resp); perr != nil {
			return perr
		}
		return err
	}
	if err == nil {
		fmt.Fprintln(p.w, msg)
	}
	return err
}

// printControl prints a control answer: a row per copyset (JSON: the
// answer), then its message; a refusal is the error (exit 1).
func (a *app) printControl(cmd *cobra.Command, resp *dmpb.ControlResponse, err error) error {
	if resp == nil {
		return err
	}
	p := a.printer(cmd)
	if p.isJSON() {
		if perr := printProto(p.w, resp); perr != nil {
			return perr
		}
		return err
	}
	var rows [][]string
	for _, r := range resp.GetCopysets() {
		ok := "ok"
		if !r.GetResult() {
			ok = "FAILED"
		}
		rows = append(rows, []string{fmt.Sprintf("%d/%d", r.GetPool(), r.GetCopyset()), ok, r.GetMsg()})
	}
	if len(rows) > 0 {
		if perr := writeTable(p.w, []string{"COPYSET", "RESULT", "MESSAGE"}, rows); perr != nil {
			return perr
		}
	}
	if err == nil && resp.GetMsg() != "" {
		fmt.Fprintln(p.w, resp.GetMsg())
	}
	return err
}

// printProto writes m as indented protobuf JSON (field names as in the
// .proto).
func printProto(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", UseProtoNames: true, EmitUnpopulated: false}.Marshal(m)
	if err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func newDMQueryStatusCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "query-status [NAME]",
		Short: "The status of every task (or one): stage, unit, progress, errors, as pb.Worker's QueryStatus reports it",
		Long: `The status of every task, or of task NAME: its stage (a transitional one,
Pausing/Resuming/Stopping, while some copysets have taken a change and some
not), its unit (Load: the export's chunk images; Sync: its log), progress,
the source positions applied (pool/copyset:index.op) and the errors that
paused it. -o json prints pb.Worker's QueryStatusResponse. Exit status 1 when
there is no such task (or none at all).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				resp, err := c.DMQueryStatus(ctx, name)
				if err != nil {
					return err
				}
				p := a.printer(cmd)
				if p.isJSON() {
					if err := printProto(p.w, resp); err != nil {
						return err
					}
				} else {
					var rows [][]string
					for _, st := range resp.GetSubTaskStatus() {
						rows = append(rows, []string{st.GetName(), st.GetStage().String(), st.GetUnit().String(), progressOf(st), errorsOf(st)})
					}
					if len(rows) > 0 {
						if err := writeTable(p.w, []string{"NAME", "STAGE", "UNIT", "PROGRESS", "ERRORS"}, rows); err != nil {
							return err
						}
					}
					for _, st := range resp.GetSubTaskStatus() {
						if c := st.GetCutover(); c != nil {
							fmt.Fprintf(p.w, "%s: cutover %s%s\n", st.GetName(), c.GetStep(), downtimeOf(c))
						}
					}
					if resp.GetMsg() != "" {
						fmt.Fprintln(p.w, resp.GetMsg())
					}
				}
				if !resp.GetResult() {
					return &DMError{Msg: resp.GetMsg()}
				}
				for _, st := range resp.GetSubTaskStatus() {
					if st.GetMsg() != "" {
						return &DMError{Msg: st.GetMsg()}
					}
				}
				return nil
			})
		},
	}
}

// progressOf is a subtask status's progress in a line.
func progressOf(st *dmworkerpb.SubTaskStatus) string {
	switch {
	case st.GetLoad() != nil:
		return fmt.Sprintf("%s; %d bytes, %d bytes/s", st.GetLoad().GetProgress(), st.GetLoad().GetFinishedBytes(), st.GetLoad().GetBps())
	case st.GetSync() != nil:
		sy := st.GetSync()
		state := fmt.Sprintf("%d s behind", sy.GetSecondsBehindMaster())
		if sy.GetSynced() {
			state = "synced"
		}
		return fmt.Sprintf("%d ops, %d records, %d ops/s, %s; applied %s", sy.GetTotalEvents(), sy.GetTotalRows(), sy.GetRecentTps(), state, sy.GetSyncerBinlog())
	case st.GetDump() != nil:
		return st.GetDump().GetProgress()
	}
	return st.GetMsg()
}

// downtimeOf is a committed cutover's write downtime, as a suffix.
func downtimeOf(c *dmworkerpb.CutoverStatus) string {
	if c.GetLiftedMs() == 0 {
		return ""
	}
	return fmt.Sprintf(", write downtime %d ms", c.GetDowntimeMs())
}

// errorsOf is a subtask status's errors in a line.
func errorsOf(st *dmworkerpb.SubTaskStatus) string {
	var out []string
	for _, e := range st.GetResult().GetErrors() {
		out = append(out, fmt.Sprintf("[code=%d:class=%s:scope=%s:level=%s] %s", e.GetErrCode(), e.GetErrClass(), e.GetErrScope(), e.GetErrLevel(), e.GetMessage()))
	}
	if st.GetResult().GetIsCanceled() {
		out = append(out, "paused by a user")
	}
	return strings.Join(out, "; ")
}

func newDMGetConfigCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:       "get-config worker",
		Short:     "A server's dm configuration (the dm: section) as TOML, as pb.Worker's GetWorkerCfg answers",
		Args:      cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		ValidArgs: []string{"worker"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				cfg, err := c.DMWorkerConfig(ctx)
				if err != nil {
					return err
				}
				p := a.printer(cmd)
				if p.isJSON() {
					return writeJSON(p.w, map[string]string{"cfg": cfg})
				}
				_, err = fmt.Fprint(p.w, cfg)
				return err
			})
		},
	}
}
