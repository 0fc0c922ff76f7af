package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
)

// chunkctl sync create|status|delete: export tasks (the sync service).

var syncModes = map[string]dspb.SyncMode{
	"full":        dspb.SyncMode_kFull,
	"incremental": dspb.SyncMode_kIncrementalByTimestamp,
	"continuous":  dspb.SyncMode_kFullAndContinuous,
}

// parseStartTime reads --start-time: RFC 3339 or unix milliseconds.
func parseStartTime(s string) (uint64, error) {
	if ms, err := strconv.ParseUint(s, 10, 64); err == nil {
		return ms, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("--start-time %q: not an RFC 3339 time or unix milliseconds", s)
	}
	if t.UnixMilli() <= 0 {
		return 0, fmt.Errorf("--start-time %q: before 1970", s)
	}
	return uint64(t.UnixMilli()), nil
}

func newSyncCreateCommand(a *app) *cobra.Command {
	var pool uint32
	var name, mode, start, dest string
	var sendInterval time.Duration
	var wait waitFlag
	cmd := &cobra.Command{
		Use:   "create --pool P --name N --mode full|incremental|continuous [--start-time T] --dest URL [--wait [D]]",
		Short: "Create an export task of a pool: one sub-task per copyset, exported by its leader",
		Long: `Creates an export task of a logical pool. A pool may have up to 8 tasks, each
of its own name (a name in use is refused: "sync task already exists"), with
its own dest, status and export id, a new one for every task created. Every
copyset of the pool gets a sub-task, replicated in the copyset, that its
leader exports to --dest: file:///absolute/path or s3://bucket/prefix (on the
servers' S3 endpoint). A copyset's directory in a dest holds one export: a
sub-task whose directory already holds another export's packets turns FAILED
(sync status names both export ids); give each task a dest of its own. Modes: full (snapshot, then the log up to the index committed when
the log phase began; then the task is SUCCESS), continuous (snapshot, then the
log for as long as the task exists), incremental (the log from the first entry
appended at or after --start-time; fails if the log no longer reaches back
that far). Nothing is created unless every check passes.

With --wait, it then waits (at most D) until every sub-task of a full export
is SUCCESS, or every sub-task of a continuous or incremental one exports the
log and covers every write acknowledged before the wait began (its covered
time, in sync status, is at or after that moment of this host's clock), with
progress on stderr about once a second; it fails at once if a sub-task turns
FAILED. The task is left as it is when the wait fails.`,
		Args: wait.args,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, ok := syncModes[mode]
			if !ok {
				return fmt.Errorf("--mode %q: want full, incremental or continuous", mode)
			}
			req := &dspb.CreateSyncTaskRequest{Db: proto.String(strconv.FormatUint(uint64(pool), 10)), Name: &name, Mode: m.Enum(), Dest: &dest}
			if cmd.Flags().Changed("send-interval") {
				if sendInterval < 100*time.Millisecond || sendInterval > time.Hour {
					return fmt.Errorf("--send-interval %v: want 100ms to 1h (without it: the servers' sync.send_interval)", sendInterval)
				}
				req.SendIntervalMs = proto.Uint32(uint32(sendInterval.Milliseconds()))
			}
			switch {
			case m == dspb.SyncMode_kIncrementalByTimestamp && start == "":
				return fmt.Errorf("--mode incremental needs --start-time")
			case m != dspb.SyncMode_kIncrementalByTimestamp && start != "":
				return fmt.Errorf("--start-time is for --mode incremental only")
			case start != "":
				ms, err := parseStartTime(start)
				if err != nil {
					return err
				}
				req.StartTs = &ms
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				msg, err := c.CreateSyncTask(ctx, req)
				if err != nil {
					return err
				}
				js := map[string]any{"pool": pool, "name": name, "mode": mode, "dest": dest, "message": msg}
				header := []string{"POOL", "NAME", "MODE", "DEST", "RESULT"}
				row := []string{strconv.Itoa(int(pool)), name, mode, dest, msg}
				if wait.d > 0 {
					w, err := c.WaitSyncTask(ctx, pool, name, m == dspb.SyncMode_kFull, wait.d, cmd.ErrOrStderr())
					if err != nil {
						return fmt.Errorf("task created (%s), but: %w", msg, err)
					}
					js["wait"] = w
					header = append(header, "DONE", "RECORDS", "WAITED")
					row = append(row, fmt.Sprintf("%d/%d", w.Done, w.SubTasks), strconv.FormatUint(w.Records, 10),
						(time.Duration(w.Seconds * float64(time.Second))).Round(time.Millisecond).String())
					if m != dspb.SyncMode_kFull {
						header, row = append(header, "COVERED TIME"), append(row, w.CoveredTime)
					}
				}
				return a.printer(cmd).print(js, header, [][]string{row})
			})
		},
	}
	f := cmd.Flags()
	f.Uint32Var(&pool, "pool", 0, "logical pool id to export")
	f.DurationVar(&sendInterval, "send-interval", 0, "this task's send interval: a caught-up continuous export sends a packet after waiting this long for more writes, and a heartbeat this often when idle (default: the servers' sync.send_interval)")
	f.StringVar(&name, "name", "", "the task's name")
	f.StringVar(&mode, "mode", "", "full, incremental or continuous")
	f.StringVar(&start, "start-time", "", "incremental: RFC 3339 time or unix milliseconds")
	f.StringVar(&dest, "dest", "", "file:///absolute/path or s3://bucket/prefix")
	addWaitFlag(cmd, &wait, "then wait this long at most until the export is done (full) or exports the log (continuous, incremental)")
	for _, r := range []string{"pool", "name", "mode", "dest"} {
		_ = cmd.MarkFlagRequired(r)
	}
	return cmd
}

func newSyncDeleteCommand(a *app) *cobra.Command {
	var pool uint32
	var name string
	cmd := &cobra.Command{
		Use:   "delete --pool P --name N",
		Short: "Delete an export task everywhere and stop its collectors (the exported packets stay; the pool's other tasks go on)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				msg, err := c.DeleteSyncTask(ctx, strconv.FormatUint(uint64(pool), 10), name)
				if err != nil {
					return err
				}
				return a.printer(cmd).print(map[string]any{"pool": pool, "name": name, "message": msg},
					[]string{"POOL", "NAME", "RESULT"}, [][]string{{strconv.Itoa(int(pool)), name, msg}})
			})
		},
	}
	cmd.Flags().Uint32Var(&pool, "pool", 0, "logical pool id")
	cmd.Flags().StringVar(&name, "name", "", "the task's name")
	_ = cmd.MarkFlagRequired("pool")
	_ = cmd.MarkFlagRequired("name")
	return cmd
}

// syncSubTaskJSON is one sub-task of sync status -o json.
type syncSubTaskJSON struct {
	Pool    uint32 `json:"pool"`
	Copyset uint32 `json:"copyset"`
	// Name is the sub-task's task (absent from a server that does not
	// say); ExportID its export's id (empty for a task created before
	// export ids).
	Name          string `json:"name,omitempty"`
	ExportID      string `json:"exportId,omitempty"`
	Mode          string `json:"mode"`
	Status        string `json:"status"`
	Point         string `json:"point"`
	Count         uint64 `json:"count"`
	DataCollector string `json:"data_collector"`
	Token         string `json:"token"` // the collector's token (progress.token): a new one on every reassignment
	Dest          string `json:"dest"`
	LastUpdate    string `json:"last_update,omitempty"`
	// CoveredIndex is the last log index the export covers: every entry up
	// to it is in a packet the dest holds or holds no chunk op (0 before
	// the binlog phase). Every write the copyset acknowledged before
	// CoveredTime (CoveredTimeMs, Unix ms; absent while unknown) is at or
	// below it.
	CoveredIndex  uint64 `json:"coveredIndex"`
	CoveredTime   string `json:"coveredTime,omitempty"`
	CoveredTimeMs int64  `json:"coveredTimeMs,omitempty"`
	// LastPacketTime is when the collector built the last packet or
	// heartbeat the SyncTool accepted (its clock; LastPacketTimeMs, Unix
	// ms; absent while unknown).
	LastPacketTime   string `json:"lastPacketTime,omitempty"`
	LastPacketTimeMs int64  `json:"lastPacketTimeMs,omitempty"`
	Info             string `json:"info"`
}

// timeMs formats a Unix ms time as RFC 3339 with milliseconds, UTC.
func timeMs(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// readInfo fills in what j's readable info (upstream's compact
// "key=value;..." string) says: the last update, covered and last packet
// times, the covered index and the export id (when j has none yet).
func (j *syncSubTaskJSON) readInfo() {
	for _, kv := range strings.Split(j.Info, ";") {
		k, v, _ := strings.Cut(kv, "=")
		if k == "exportId" && j.ExportID == "" {
			j.ExportID = v
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			continue
		}
		switch k {
		case "lastUpdateTime":
			j.LastUpdate = time.UnixMilli(n).UTC().Format(time.RFC3339)
		case "coveredIndex":
			j.CoveredIndex = uint64(n)
		case "coveredTime":
			j.CoveredTime, j.CoveredTimeMs = timeMs(n), n
		case "lastPacketTime":
			j.LastPacketTime, j.LastPacketTimeMs = timeMs(n), n
		}
	}
}

func syncPoint(p *dspb.SyncPoint) string {
	if p == nil {
		return ""
	}
	if p.GetType() == dspb.SyncType_kBINLOG {
		return fmt.Sprintf("binlog %d", p.GetOffset())
	}
	if p.Pk == nil {
		return "start"
	}
	return fmt.Sprintf("snapshot chunk %s offset %d", p.GetPk(), p.GetOffset())
}

func newSyncStatusCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Every sub-task of every export task: task, status, point, records exported, collector, what it covers",
		Long: `Lists every sub-task of every export task (a pool may have several tasks): its
task's NAME, mode, status, POINT (the next point to export), RECORDS
exported, COLLECTOR (the server exporting it), LAST UPDATE (its last packet or
heartbeat) and EXPORT ID (the id every packet of the task's export carries;
empty for a task created before export ids). COVERED is the last raft index of
the copyset the export covers: every entry up to it is in a packet the
destination holds, or was read by the collector and holds no chunk op (such
entries are exported with the next write, so POINT can stay behind while
COVERED follows the log). Every write the copyset acknowledged before COVERED
TIME (the collector's clock, milliseconds, UTC) is in the export. Both are
empty until the sub-task reaches its binlog phase; with a caught-up export
they trail the log by about sync.send_interval. -o json names them
coveredIndex, coveredTime and coveredTimeMs (Unix ms), and has name, exportId
and lastPacketTime(Ms) (when the collector built the last packet or
heartbeat the SyncTool accepted, its clock).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				// A partial status (some copyset's leader did not answer) is
				// printed, then its error makes the exit non-zero.
				resp, err := c.SyncTaskStatus(ctx)
				if resp == nil {
					return err
				}
				var js []syncSubTaskJSON
				var rows [][]string
				for i, t := range resp.GetTask() {
					p := t.GetProgress()
					j := syncSubTaskJSON{Pool: p.GetTid(), Copyset: p.GetPid(), Name: p.GetTaskName(), ExportID: p.GetExportId(),
						Mode: strings.TrimPrefix(p.GetMode().String(), "k"), Status: t.GetStatus(), Point: syncPoint(p.GetSyncPoint()),
						Count: t.GetCount(), DataCollector: t.GetDataCollector(), Token: p.GetToken(), Dest: p.GetDest()}
					if i < len(resp.GetReadableInfo()) {
						j.Info = resp.GetReadableInfo()[i]
						j.readInfo()
					}
					js = append(js, j)
					covered := ""
					if p.GetSyncPoint().GetType() == dspb.SyncType_kBINLOG {
						covered = strconv.FormatUint(j.CoveredIndex, 10)
					}
					rows = append(rows, []string{strconv.Itoa(int(j.Pool)), j.Name, strconv.Itoa(int(j.Copyset)), j.Mode, j.Status, j.Point,
						strconv.FormatUint(j.Count, 10), j.DataCollector, j.LastUpdate, covered, j.CoveredTime, j.ExportID})
				}
				if js == nil {
					js = []syncSubTaskJSON{}
				}
				header := []string{"POOL", "NAME", "COPYSET", "MODE", "STATUS", "POINT", "RECORDS", "COLLECTOR", "LAST UPDATE", "COVERED", "COVERED TIME", "EXPORT ID"}
				if perr := a.printer(cmd).print(js, header, rows); perr != nil {
					return perr
				}
				return err
			})
		},
	}
}
