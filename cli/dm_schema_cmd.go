package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	dmworkerpb "github.com/chunkraft/chunkraft/proto/dm/pb"
)

// newDMBinlogSchemaCommand is dmctl's `binlog-schema`: the state a task
// tracks for each chunk of a source copyset (pb.Worker OperateSchema).
func newDMBinlogSchemaCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "binlog-schema",
		Short: "Show or override the state a paused task tracks for a chunk (a clone chunk or a normal one)",
		Long: `A task replays the source's ops on each chunk as the source's chunk store
decided them, which depends on whether the chunk is a clone chunk there:
the task tracks that state per chunk, its "schema". A database is a source
copyset, pool-P/copyset-C; a table is a chunk id. list, get, update and
delete need the task paused in its Sync unit; targets also serves a running
task. --source, when given, must be the location the task reads.

A schema, for update:
  normal
  clone sn=<n> csn=<n> [written=<blocks>]
<blocks> are 4 KiB block indexes of the chunk (0-4095) and ranges:
written=0-255,1024. update keeps what the task tracked before; delete
restores it while the task has applied nothing since. Exit status 1 when
refused.`,
	}
	var source string
	run := func(cmd *cobra.Command, req *dmworkerpb.OperateWorkerSchemaRequest, print func(p *printer, msg string) error) error {
		req.Source = source
		return a.withClient(cmd, func(ctx context.Context, c *Client) error {
			resp, err := c.DMOperateSchema(ctx, req)
			if resp == nil {
				return err
			}
			if err == nil && print != nil {
				return print(a.printer(cmd), resp.GetMsg())
			}
			return a.printDMAnswer(cmd, resp, resp.GetMsg(), err)
		})
	}
	list := &cobra.Command{
		Use:   "list TASK [DATABASE]",
		Short: "List the task's source copysets, or the chunks of one (those on the target and those it tracks)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &dmworkerpb.OperateWorkerSchemaRequest{Op: dmworkerpb.SchemaOp_ListSchema, Task: args[0]}
			head := "DATABASE"
			if len(args) == 2 {
				req.Op, req.Database, head = dmworkerpb.SchemaOp_ListTable, args[1], "CHUNK"
			}
			return run(cmd, req, func(p *printer, msg string) error {
				var names []string
				if err := json.Unmarshal([]byte(msg), &names); err != nil {
					return fmt.Errorf("list answer: %w", err)
				}
				rows := make([][]string, 0, len(names))
				for _, n := range names {
					rows = append(rows, []string{n})
				}
				return p.print(names, []string{head}, rows)
			})
		},
	}
	get := &cobra.Command{
		Use:   "get TASK DATABASE CHUNK",
		Short: "Show a chunk's schema: what the task tracks, the target chunk's sn, corrected sn and snapshot sn",
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			return run(cmd, &dmworkerpb.OperateWorkerSchemaRequest{Op: dmworkerpb.SchemaOp_GetSchema, Task: args[0], Database: args[1], Table: args[2]},
				printSchema)
		},
	}
	var file string
	update := &cobra.Command{
		Use:   "update TASK DATABASE CHUNK [SCHEMA]",
		Short: "Override a chunk's schema (normal, or clone sn=<n> csn=<n> [written=<blocks>]), given or read from --file",
		Args:  cobra.RangeArgs(3, 4),
		RunE: func(cmd *cobra.Command, args []string) error {
			var text string
			switch {
			case len(args) == 4 && file != "":
				return fmt.Errorf("give the schema or --file, not both")
			case len(args) == 4:
				text = args[3]
			case file != "":
				b, err := os.ReadFile(file)
				if err != nil {
					return fmt.Errorf("--file: %w", err)
				}
				text = strings.TrimSpace(string(b))
			default:
				return fmt.Errorf("give the schema (normal, or clone sn=<n> csn=<n> [written=<blocks>]) or --file")
			}
			return run(cmd, &dmworkerpb.OperateWorkerSchemaRequest{Op: dmworkerpb.SchemaOp_SetSchema, Task: args[0], Database: args[1], Table: args[2],
				Schema: text, Flush: true}, nil)
		},
	}
	update.Flags().StringVar(&file, "file", "", "read the schema from this file")
	del := &cobra.Command{
		Use:   "delete TASK DATABASE CHUNK",
		Short: "Drop a chunk's override, restoring what the task tracked before (while it has applied nothing since)",
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			return run(cmd, &dmworkerpb.OperateWorkerSchemaRequest{Op: dmworkerpb.SchemaOp_RemoveSchema, Task: args[0], Database: args[1], Table: args[2]}, nil)
		},
	}
	var dbRe, tableRe string
	targets := &cobra.Command{
		Use:   "targets TASK",
		Short: "List where each source copyset (or, with --table, chunk) lands",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return run(cmd, &dmworkerpb.OperateWorkerSchemaRequest{Op: dmworkerpb.SchemaOp_ListMigrateTargets, Task: args[0], Database: dbRe, Table: tableRe},
				printMigrateTargets)
		},
	}
	targets.Flags().StringVar(&dbRe, "database", "", "only source copysets matching this regular expression")
	targets.Flags().StringVar(&tableRe, "table", "", "a row per chunk whose id matches this regular expression")
	cmd.PersistentFlags().StringVarP(&source, "source", "s", "", "the location the task reads (checked when given)")
	cmd.AddCommand(list, get, update, del, targets)
	return cmd
}

// dmSchema is GetSchema's answer (a JSON object in its message,
// docs/dm.md): dm.SchemaView's wire form, declared here since cli imports
// no server package.
type dmSchema struct {
	Task        string `json:"task"`
	Database    string `json:"database"`
	Chunk       uint64 `json:"chunk"`
	Target      string `json:"target"`
	Exists      bool   `json:"exists"`
	Sn          uint64 `json:"sn,omitempty"`
	CorrectedSn uint64 `json:"correctedSn,omitempty"`
	SnapSn      uint64 `json:"snapSn,omitempty"`
	Schema      string `json:"schema"`
	Unwritten   string `json:"unwritten,omitempty"`
	AsOf        string `json:"asOf,omitempty"`
	Override    *struct {
		Text  string `json:"text"`
		SetMs int64  `json:"setMs"`
		Prior string `json:"prior"`
		At    string `json:"at"`
	} `json:"override,omitempty"`
}

func printSchema(p *printer, msg string) error {
	var v dmSchema
	if err := json.Unmarshal([]byte(msg), &v); err != nil {
		return fmt.Errorf("get answer: %w", err)
	}
	target := "absent"
	if v.Exists {
		target = fmt.Sprintf("sn %d, corrected sn %d, snapshot sn %d", v.Sn, v.CorrectedSn, v.SnapSn)
	}
	rows := [][]string{
		{"chunk", fmt.Sprintf("%d of %s (task %s)", v.Chunk, v.Database, v.Task)},
		{"schema", v.Schema},
		{"target", v.Target + ": " + target},
	}
	if v.Unwritten != "" {
		rows = append(rows, []string{"unwritten blocks", v.Unwritten})
	}
	if v.AsOf != "" {
		rows = append(rows, []string{"image as of", v.AsOf})
	}
	if o := v.Override; o != nil {
		rows = append(rows, []string{"set by operator", fmt.Sprintf("%s at %s (before: %s; the task stood at %s)",
			o.Text, time.UnixMilli(o.SetMs).UTC().Format(time.RFC3339), o.Prior, o.At)})
	}
	return p.print(v, []string{"FIELD", "VALUE"}, rows)
}

// dmMigrateTarget is one route of ListMigrateTargets (dm.MigrateTarget's
// wire form).
type dmMigrateTarget struct {
	SourceSchema string `json:"source_schema"`
	SourceTable  string `json:"source_table"`
	TargetSchema string `json:"target_schema"`
	TargetTable  string `json:"target_table"`
}

func printMigrateTargets(p *printer, msg string) error {
	var ts []dmMigrateTarget
	if err := json.Unmarshal([]byte(msg), &ts); err != nil {
		return fmt.Errorf("targets answer: %w", err)
	}
	rows := make([][]string, 0, len(ts))
	for _, t := range ts {
		rows = append(rows, []string{t.SourceSchema, t.SourceTable, t.TargetSchema, t.TargetTable})
	}
	return p.print(ts, []string{"SOURCE", "CHUNK", "TARGET", "TARGET CHUNK"}, rows)
}
