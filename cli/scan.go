package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

func newScanCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "scan",
		Short: "Integrity scans of copysets: schedule, list, cancel, pause, resume, repair",
		Long: `An integrity job scans a copyset: every replica computes crc32c of each chunk
range at the same raft log index and the leader compares them and records
mismatches. Jobs live in the copyset's replicated state; requests go to the
copyset's leader. IntegrityJob names the copyset by id only: --pool (default 1)
finds the leader and travels as gRPC metadata (chunkraft-logic-pool-id).
A job reports its state, progress and how many mismatches it found; what a
scan found (chunk, range, which replica differs) is in the server's log, the
chunkraft_scan_mismatches_total metric and GET /integrity on the server's
metrics port. scan repair rewrites a bad range.`,
	}
	cmd.AddCommand(newScanScheduleCommand(a), newScanListCommand(a),
		newScanJobCommand(a, ScanCancel, "Cancel an integrity job"),
		newScanJobCommand(a, ScanPause, "Pause a running or waiting integrity job"),
		newScanJobCommand(a, ScanResume, "Resume a paused integrity job"),
		newScanRepairCommand(a))
	return cmd
}

type scanJobJSON struct {
	Pool      uint32 `json:"pool"`
	Copyset   int32  `json:"copyset"`
	ID        int32  `json:"id"`
	State     string `json:"state"`
	Progress  int32  `json:"progress"`
	Scheduled string `json:"scheduled,omitempty"` // RFC 3339, UTC
	Started   string `json:"started,omitempty"`
	// Mismatches found so far; absent when the server did not report it.
	Mismatches *int `json:"mismatches,omitempty"`
}

func timeCell(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func scanJobRows(pool uint32, jobs []ScanJob) ([]scanJobJSON, [][]string) {
	js := make([]scanJobJSON, len(jobs))
	rows := make([][]string, len(jobs))
	for i, j := range jobs {
		js[i] = scanJobJSON{Pool: pool, Copyset: j.Copyset, ID: j.ID, State: ScanStateName(j.State), Progress: j.Progress,
			Scheduled: timeCell(j.Scheduled), Started: timeCell(j.Started)}
		mismatches := "-"
		if j.Mismatches >= 0 {
			js[i].Mismatches = &j.Mismatches
			mismatches = strconv.Itoa(j.Mismatches)
		}
		rows[i] = []string{strconv.Itoa(int(j.Copyset)), strconv.Itoa(int(j.ID)), js[i].State,
			strconv.Itoa(int(j.Progress)) + "%", mismatches, js[i].Scheduled, js[i].Started}
	}
	return js, rows
}

var scanJobHeader = []string{"COPYSET", "JOB", "STATE", "PROGRESS", "MISMATCHES", "SCHEDULED", "STARTED"}

// parseAt parses --at: an RFC 3339 time or a duration from now ("10m").
func parseAt(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("--at: %s is in the past", s)
		}
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--at: %q is neither a duration (10m) nor an RFC 3339 time (2025-01-02T15:04:05Z)", s)
	}
	return t, nil
}

// scanEach runs op for every copyset (a few at a time) and collects the jobs
// in copyset order.
func scanEach(ctx context.Context, c *Client, op ScanOp, copysets []CopysetID, at time.Time) ([]ScanJob, error) {
	jobs := make([][]ScanJob, len(copysets))
	errs := make([]error, len(copysets))
	forEach(len(copysets), statusParallelism, func(i int) {
		jobs[i], errs[i] = c.Scan(ctx, op, copysets[i], 0, at)
	})
	var all []ScanJob
	var failed []error
	for i := range copysets {
		all = append(all, jobs[i]...)
		if errs[i] != nil {
			failed = append(failed, errs[i])
		}
	}
	switch {
	case len(failed) == 1 && len(copysets) == 1:
		return all, failed[0]
	case len(failed) > 0:
		return all, fmt.Errorf("%s failed for %d of %d copysets; first: %w", op, len(failed), len(copysets), failed[0])
	}
	return all, nil
}

func newScanScheduleCommand(a *app) *cobra.Command {
	var cf copysetFlags
	var at string
	cmd := &cobra.Command{
		Use:   "schedule [--pool 1] --copyset C [--at 10m|RFC3339]",
		Short: "Schedule an integrity scan of copysets",
		Long: `Sends ScheduleJob to the leader of each copyset and prints the jobs the leader
reports for it. Without --at the job starts as soon as the server can run it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			copysets, err := cf.list()
			if err != nil {
				return err
			}
			when, err := parseAt(at, time.Now())
			if err != nil {
				return err
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				jobs, serr := scanEach(ctx, c, ScanSchedule, copysets, when)
				if serr != nil && len(jobs) == 0 {
					return serr
				}
				js, rows := scanJobRows(cf.pool, jobs)
				if err := a.printer(cmd).print(js, scanJobHeader, rows); err != nil {
					return err
				}
				return serr
			})
		},
	}
	cmd.Flags().Uint32Var(&cf.pool, "pool", DefaultPool, "logical pool id (finds the leader)")
	cmd.Flags().StringVar(&cf.copysets, "copyset", "", "copyset id or list/range (7, 1-16, 1,3,8-10)")
	cmd.Flags().StringVar(&at, "at", "", "when to start: a duration from now (10m) or an RFC 3339 time")
	_ = cmd.MarkFlagRequired("copyset")
	return cmd
}

func newScanListCommand(a *app) *cobra.Command {
	var cf copysetFlags
	cmd := &cobra.Command{
		Use:   "list [--pool 1] [--copyset 1-16]",
		Short: "List the integrity jobs of copysets with their state and progress",
		Long: `Sends ListJobs to the leader of each copyset and prints its jobs: state
(WAITING, RUNNING, PAUSED, FINISHED, CANCELED, FAILED) and progress.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			copysets, err := cf.list()
			if err != nil {
				return err
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				jobs, serr := scanEach(ctx, c, ScanList, copysets, time.Time{})
				if serr != nil && len(jobs) == 0 {
					return serr
				}
				js, rows := scanJobRows(cf.pool, jobs)
				if err := a.printer(cmd).print(js, scanJobHeader, rows); err != nil {
					return err
				}
				return serr
			})
		},
	}
	addCopysetRangeFlags(cmd, &cf)
	return cmd
}

func newScanJobCommand(a *app, op ScanOp, short string) *cobra.Command {
	var cf copysetFlags
	var job int32
	cmd := &cobra.Command{
		Use:   string(op) + " [--pool 1] --copyset C --job ID",
		Short: short,
		Long: short + ` (` + strings.ToUpper(string(op[:1])) + string(op[1:]) + `Job, sent to the copyset's leader) and print the
jobs the leader reports for the copyset afterwards.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if job <= 0 {
				return fmt.Errorf("--job: must be > 0")
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				jobs, err := c.Scan(ctx, op, cf.one(), job, time.Time{})
				if err != nil {
					return err
				}
				js, rows := scanJobRows(cf.pool, jobs)
				return a.printer(cmd).print(js, scanJobHeader, rows)
			})
		},
	}
	cmd.Flags().Uint32Var(&cf.pool, "pool", DefaultPool, "logical pool id (finds the leader)")
	cmd.Flags().Uint32Var(&cf.copyset, "copyset", 0, "copyset id")
	cmd.Flags().Int32Var(&job, "job", 0, "job id (scan list shows them)")
	_ = cmd.MarkFlagRequired("copyset")
	_ = cmd.MarkFlagRequired("job")
	return cmd
}

type repairJSON struct {
	ChunkID
	Offset uint32 `json:"offset"`
	Length uint32 `json:"length"`
	Sn     uint64 `json:"sn"`
}

func newScanRepairCommand(a *app) *cobra.Command {
	var f chunkFlags
	var offset, length string
	cmd := &cobra.Command{
		Use:   "repair --pool P --copyset C --chunk ID [--offset 0] [--length 16m]",
		Short: "Rewrite a chunk range on every replica from the copyset's agreed data",
		Long: `Repairs a range a scan (or cluster check-consistency) found different on a
minority of replicas: reads [offset, offset+length) from the copyset's leader
(a linearizable read of the committed data) and writes it back through raft at
the chunk's current sequence number (GetChunkInfo), so every replica,
the diverged one included, ends with the same bytes and no COW snapshot is made.

If the leader's own copy is the damaged one, its read fails with CRC_FAIL:
move the leader to a good replica (leader transfer) and repair again. Run it
while no client writes the chunk: a write racing with the repair may be
overwritten with the data read before it. On a clone chunk the range counts
as written afterwards. Verify with chunk hash or a new scan.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			off, err := parseSize32("offset", offset)
			if err != nil {
				return err
			}
			n, err := parseSize32("length", length)
			if err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("--length: must be > 0")
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				r, err := c.RepairRange(ctx, f.id(), off, n)
				if err != nil {
					return err
				}
				j := repairJSON{ChunkID: r.Chunk, Offset: r.Offset, Length: r.Length, Sn: r.Sn}
				row := chunkRow(r.Chunk, u64(uint64(r.Offset)), u64(uint64(r.Length)), u64(r.Sn), "rewritten")
				return a.printer(cmd).print(j, []string{"POOL", "COPYSET", "CHUNK", "OFFSET", "LENGTH", "SN", "RESULT"}, [][]string{row})
			})
		},
	}
	addChunkFlags(cmd, &f)
	cmd.Flags().StringVar(&offset, "offset", "0", "byte offset of the range in the chunk (4096, 4k, 1MiB)")
	cmd.Flags().StringVar(&length, "length", "16m", "bytes to rewrite (4096, 4k, 1MiB)")
	return cmd
}
