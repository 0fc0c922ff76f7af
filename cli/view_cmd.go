package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/klauspost/crc32"
	"github.com/spf13/cobra"

	vpb "github.com/chunkraft/chunkraft/proto/chunkraft/viewpb"
)

// chunkctl disagg view: the read views (TiFlash's EstablishDisaggTask,
// FetchDisaggPages, CancelDisaggTask; docs/disagg-views.md).

func newDisaggViewCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "view",
		Short: "Establish, fetch, cancel and list point-in-time read views of chunks",
		Long: `A read view keeps the chunks of a copyset (a region: region_id is the copyset's
group id, conf_ver its epoch, ranges chunk ids as 8-byte big-endian keys) as
they were when it was established, for a remote reader: every replica keeps the
pre-image of each block overwritten or deleted after that point, until the view
is fetched (each segment once), cancelled or its lease expires. A task is named
by --start-ts and --task (the DisaggTaskMeta start_ts and task_id). Bounds:
disagg.views.max_per_copyset, disagg.views.max_preimage_bytes.`,
	}
	cmd.AddCommand(newViewEstablishCommand(a), newViewFetchCommand(a), newViewCancelCommand(a), newViewListCommand(a))
	return cmd
}

// viewTaskFlags are --start-ts and --task.
type viewTaskFlags struct {
	startTs uint64
	task    int64
}

func addViewTaskFlags(cmd *cobra.Command, f *viewTaskFlags) {
	cmd.Flags().Uint64Var(&f.startTs, "start-ts", 0, "the task's start_ts")
	cmd.Flags().Int64Var(&f.task, "task", 0, "the task's task_id")
	_ = cmd.MarkFlagRequired("task")
}

// viewSegmentJSON is one segment of an established view.
type viewSegmentJSON struct {
	Pool      int64    `json:"pool"`
	Copyset   uint64   `json:"copyset"`
	RegionID  uint64   `json:"region_id"`
	ConfVer   uint64   `json:"conf_ver"`
	ViewSeq   uint64   `json:"view_seq"`
	BlockSize uint32   `json:"block_size"`
	PageIDs   []uint64 `json:"page_ids"`
}

func newViewEstablishCommand(a *app) *cobra.Command {
	var cs copysetFlags
	var tf viewTaskFlags
	var lo, hi uint64
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "establish --pool P --copyset C --task N [--start-ts T] [--from ID] [--to ID] [--timeout D]",
		Short: "Establish a read view of chunks [--from, --to) of a copyset on its leader; prints its pages",
		Long: `Calls EstablishDisaggTask on the copyset's leader with its current epoch. The view
holds the chunks of [--from, --to) (--to 0: no bound) that exist now, as of now;
its pages are the blocks that hold data (-o json lists their ids:
chunk_id << 20 | block). Its lease is --timeout (default: the server's
disagg.views.default_timeout); a fetch extends it by 300 s. Establishing the same
task again answers the same view.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				v, err := c.ViewEstablish(ctx, cs.one(), ViewTaskMeta(tf.startTs, tf.task), lo, hi, int64(timeout/time.Second))
				if err != nil {
					return err
				}
				return a.printViewSegments(cmd, v)
			})
		},
	}
	addCopysetFlags(cmd, &cs, false)
	addViewTaskFlags(cmd, &tf)
	cmd.Flags().Uint64Var(&lo, "from", 0, "first chunk id of the view")
	cmd.Flags().Uint64Var(&hi, "to", 0, "chunk id past the view (0: no bound)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "lease (whole seconds; 0: the server's default)")
	return cmd
}

func (a *app) printViewSegments(cmd *cobra.Command, v *ViewEstablished) error {
	js := []viewSegmentJSON{}
	var rows [][]string
	for _, tb := range v.Tables {
		for _, sg := range tb.GetSegments() {
			js = append(js, viewSegmentJSON{Pool: tb.GetTableId(), Copyset: sg.GetSegmentId(), RegionID: sg.GetRegionId(), ConfVer: sg.GetConfVer(),
				ViewSeq: sg.GetViewSeq(), BlockSize: sg.GetBlockSize(), PageIDs: append([]uint64{}, sg.GetPageIds()...)})
			rows = append(rows, []string{strconv.FormatInt(tb.GetTableId(), 10), u64(sg.GetSegmentId()), u64(sg.GetViewSeq()),
				u64(sg.GetConfVer()), strconv.Itoa(len(sg.GetPageIds())), v.Server})
		}
	}
	return a.printer(cmd).print(js, []string{"POOL", "COPYSET", "VIEW", "CONF_VER", "PAGES", "SERVER"}, rows)
}

// viewFetchJSON is a fetch's summary.
type viewFetchJSON struct {
	Pool     uint32 `json:"pool"`
	Copyset  uint32 `json:"copyset"`
	Pages    int    `json:"pages"`
	Bytes    int64  `json:"bytes"`
	CRCOK    bool   `json:"crc_ok"`
	Out      string `json:"out,omitempty"`
	BadPages int    `json:"bad_pages"`
}

func newViewFetchCommand(a *app) *cobra.Command {
	var cs copysetFlags
	var tf viewTaskFlags
	var out string
	var verify bool
	cmd := &cobra.Command{
		Use:   "fetch --pool P --copyset C --task N [--start-ts T] (--out DIR | --verify)",
		Short: "Fetch every page of a view's segment (once): write them to a directory or verify their crc",
		Long: `Asks the copyset's leader for the view's page list (an Establish of the same
task answers the same view), then FetchDisaggPages of all of them. With --out
DIR each page is written to DIR/<chunk>_<offset>.page (its bytes as of the
view); with --verify the pages are only checked against their crc32c. A
segment is fetched once: afterwards its view is dropped.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (out == "") == !verify {
				return errors.New("give one of --out DIR and --verify")
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				meta := ViewTaskMeta(tf.startTs, tf.task)
				ids, err := viewPageIDs(ctx, c, cs.one(), tf)
				if err != nil {
					return err
				}
				if out != "" {
					if err := os.MkdirAll(out, 0o755); err != nil {
						return err
					}
				}
				sum := viewFetchJSON{Pool: cs.pool, Copyset: cs.copyset, Out: out, CRCOK: true}
				table := crc32.MakeTable(crc32.Castagnoli)
				err = c.ViewFetch(ctx, cs.one(), meta, ids, func(p *vpb.Page) error {
					sum.Pages++
					sum.Bytes += int64(len(p.GetData()))
					if crc32.Checksum(p.GetData(), table) != p.GetCrc32C() {
						sum.CRCOK = false
						sum.BadPages++
					}
					if out != "" {
						name := filepath.Join(out, fmt.Sprintf("%d_%d.page", p.GetChunkId(), p.GetOffset()))
						return os.WriteFile(name, p.GetData(), 0o644)
					}
					return nil
				})
				if err != nil {
					return err
				}
				if err := a.printer(cmd).print(sum, []string{"POOL", "COPYSET", "PAGES", "BYTES", "CRC"},
					[][]string{{u64(uint64(cs.pool)), u64(uint64(cs.copyset)), strconv.Itoa(sum.Pages), strconv.FormatInt(sum.Bytes, 10), map[bool]string{true: "ok", false: "MISMATCH"}[sum.CRCOK]}}); err != nil {
					return err
				}
				if !sum.CRCOK {
					return fmt.Errorf("%d pages failed their crc32c", sum.BadPages)
				}
				return nil
			})
		},
	}
	addCopysetFlags(cmd, &cs, false)
	addViewTaskFlags(cmd, &tf)
	cmd.Flags().StringVar(&out, "out", "", "directory to write the pages to")
	cmd.Flags().BoolVar(&verify, "verify", false, "only verify the pages' crc32c")
	return cmd
}

// viewPageIDs are the page ids of the task's view on cs: the task must
// have a view there (an Establish of an unknown task would make one).
func viewPageIDs(ctx context.Context, c *Client, cs CopysetID, tf viewTaskFlags) ([]uint64, error) {
	views, err := c.ViewList(ctx)
	if err != nil {
		return nil, err
	}
	found := false
	for _, v := range views {
		m := v.GetInfo()
		if v.GetPool() == cs.Pool && v.GetCopyset() == cs.Copyset && m.GetTaskKey() != "" && viewTaskMatches(m.GetTaskMeta(), tf) {
			found = true
		}
	}
	if !found {
		return nil, fmt.Errorf("task %d (start ts %d) has no read view on %s", tf.task, tf.startTs, cs)
	}
	v, err := c.ViewEstablish(ctx, cs, ViewTaskMeta(tf.startTs, tf.task), 0, 0, 0)
	if err != nil {
		return nil, err
	}
	for _, tb := range v.Tables {
		for _, sg := range tb.GetSegments() {
			if uint32(sg.GetSegmentId()) == cs.Copyset && uint32(tb.GetTableId()) == cs.Pool {
				return sg.GetPageIds(), nil
			}
		}
	}
	return nil, fmt.Errorf("the view of task %d has no segment on %s", tf.task, cs)
}

// viewTaskMatches reports whether a view's task meta is (startTs, task).
func viewTaskMatches(meta []byte, tf viewTaskFlags) bool {
	m, err := decodeTaskMeta(meta)
	return err == nil && m.GetStartTs() == tf.startTs && m.GetTaskId() == tf.task
}

func newViewCancelCommand(a *app) *cobra.Command {
	var tf viewTaskFlags
	cmd := &cobra.Command{
		Use:   "cancel --task N [--start-ts T]",
		Short: "CancelDisaggTask: the task's views are dropped on every copyset and their pre-images freed",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				if err := c.ViewCancel(ctx, ViewTaskMeta(tf.startTs, tf.task)); err != nil {
					return err
				}
				return a.printer(cmd).print(map[string]any{"start_ts": tf.startTs, "task": tf.task, "result": "cancelled"},
					[]string{"START_TS", "TASK", "RESULT"}, [][]string{{u64(tf.startTs), strconv.FormatInt(tf.task, 10), "cancelled"}})
			})
		},
	}
	addViewTaskFlags(cmd, &tf)
	return cmd
}

// viewJSON is one live view in `view list -o json`.
type viewJSON struct {
	Pool        uint32   `json:"pool"`
	Copyset     uint32   `json:"copyset"`
	ViewSeq     uint64   `json:"view_seq"`
	StartTs     uint64   `json:"start_ts"`
	Task        int64    `json:"task"`
	Chunks      uint64   `json:"chunks"`
	SavedBytes  uint64   `json:"saved_bytes"`
	BudgetBytes uint64   `json:"budget_bytes"`
	OverBudget  bool     `json:"over_budget"`
	Lease       string   `json:"lease"`
	Fetched     []uint64 `json:"fetched"`
}

func newViewListCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "The live read views of every copyset, from their leaders: chunks, pre-image bytes, lease",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				views, err := c.ViewList(ctx)
				if err != nil {
					return err
				}
				js := []viewJSON{}
				var rows [][]string
				for _, v := range views {
					m, _ := decodeTaskMeta(v.GetInfo().GetTaskMeta())
					j := viewJSON{Pool: v.GetPool(), Copyset: v.GetCopyset(), ViewSeq: v.GetViewSeq(), StartTs: m.GetStartTs(), Task: m.GetTaskId(),
						Chunks: v.GetChunks(), SavedBytes: v.GetSavedBytes(), BudgetBytes: v.GetBudgetBytes(), OverBudget: v.GetOverBudget(),
						Lease: time.UnixMilli(v.GetLeaseUnixMs()).UTC().Format(time.RFC3339), Fetched: append([]uint64{}, v.GetFetched()...)}
					js = append(js, j)
					rows = append(rows, []string{u64(uint64(j.Pool)), u64(uint64(j.Copyset)), u64(j.ViewSeq), u64(j.StartTs), strconv.FormatInt(j.Task, 10),
						u64(j.Chunks), u64(j.SavedBytes), u64(j.BudgetBytes), strconv.FormatBool(j.OverBudget), j.Lease})
				}
				return a.printer(cmd).print(js, []string{"POOL", "COPYSET", "VIEW", "START_TS", "TASK", "CHUNKS", "SAVED", "BUDGET", "OVER", "LEASE"}, rows)
			})
		},
	}
}
