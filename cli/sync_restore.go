package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/chunkraft/chunkraft/datasync/dest"
	"github.com/chunkraft/chunkraft/datasync/restore"
	"github.com/chunkraft/chunkraft/internal/objstore"
	chunkserverpb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// EnvS3Endpoint names the environment variable that sets the default of
// sync restore's --s3-endpoint.
const EnvS3Endpoint = "CHUNKCTL_S3_ENDPOINT"

type syncRestoreFlags struct {
	from, copysets, untilTime, progress string
	marker, resumeFrom                  string
	s3Endpoint, s3Region, s3Lookup      string
	s3Secure                            bool
	pool, toPool                        uint32
	untilIndex                          uint64
	parallel, chunkParallel, writeDepth int
}

func newSyncRestoreCommand(a *app) *cobra.Command {
	var f syncRestoreFlags
	cmd := &cobra.Command{
		Use:   "restore --from DEST --pool P [--to-pool Q] [--copysets LIST] [--until-index N | --until-time T] [--marker LOCATION] [--resume-from LOCATION]",
		Short: "Replay a sync export into a cluster whose target copysets exist and are empty",
		Long: `Replays the export of pool P at DEST (file:///absolute/path or
s3://bucket/prefix) into the cluster of --servers, through the ordinary
ChunkService: copyset C of pool P goes to copyset C of pool Q (--to-pool,
default P); every target copyset must exist and hold no chunk.

First every packet of every copyset is read and checked (its CRC, and the
unbroken chain of points, all of one export id); the first gap or bad packet
(one of another export) stops the restore, naming it, before anything is
written. Then each copyset is replayed: the
snapshot phase rebuilds each chunk exactly (sn, corrected sn, COW snapshot),
then the binlog records follow in log order.

--until-index N restores every copyset as of its raft index N; --until-time T
(RFC 3339, or Unix milliseconds) as of its last binlog record appended at or
before T. A point before the snapshot phase's last read (or past the end of
the export) cannot be restored: the error names the earliest index that can.
A time before the export's starting state was taken (when its snapshot phase
began; an incremental export's start time) cannot be restored either: the
error names the earliest time that can, as RFC 3339 and Unix ms. An export
written before exports recorded that time restores only times at or after
one of its binlog records.

--marker LOCATION (file:// or s3://) writes, once the restore is done, a
restore marker per copyset there (pool-P/copyset-C/restore-marker.pb): the
export and the index restored to, where in the export the next record is,
and the digest of the restored copyset. A dm task in task-mode incremental
(incremental-from: LOCATION) goes on from it, applying the export from the
next record on, provided the restored copysets are unchanged since.

--resume-from LOCATION goes on from the restore markers there instead of
from the start: each target copyset must be what the restore that wrote its
marker left (its digest), and the export must be the one that restore read,
holding the packet of the marker's next record; the records from there on
(up to --until-index, or the end) are replayed. This is how an export whose
first packets were purged (dm purge-relay) restores the range it kept: onto
copysets restored from it, with --marker, before the purge. With --marker
the markers move on (the same location may be given to both).

An s3:// DEST uses --s3-endpoint (default $` + EnvS3Endpoint + `) and the
credentials of AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. Progress goes to
stderr on a terminal (--progress); the summary to stdout (-o json: as JSON).
The format and the rebuild are described in docs/sync-format.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runSyncRestore(cmd, a, &f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.from, "from", "", "the export: file:///absolute/path or s3://bucket/prefix")
	fl.Uint32Var(&f.pool, "pool", 0, "the pool of the export to restore")
	fl.Uint32Var(&f.toPool, "to-pool", 0, "the pool to restore into (default --pool)")
	fl.StringVar(&f.copysets, "copysets", "", "restore only these copysets (7, 1-16, 1,3,8-10; default every copyset of the export)")
	fl.Uint64Var(&f.untilIndex, "until-index", 0, "restore each copyset as of this raft index")
	fl.StringVar(&f.untilTime, "until-time", "", "restore each copyset as of its last record appended at or before this time (RFC 3339 or Unix ms)")
	fl.IntVar(&f.parallel, "parallel", restore.DefaultParallel, "copysets restored at once (each holds up to about 90 MB of packets and chunk images)")
	fl.IntVar(&f.chunkParallel, "chunk-parallel", restore.DefaultChunkParallel, "binlog ops of different chunks of a copyset in flight at once (a chunk's own ops go one after the other)")
	fl.IntVar(&f.writeDepth, "write-depth", restore.DefaultWriteDepth, "writes of one chunk's rebuild in flight at once (1 MiB each, to disjoint blocks at one sn); more is faster only while the target servers' disks keep up")
	fl.StringVar(&f.marker, "marker", "", "write a restore marker per copyset to this location (file:///absolute/path or s3://bucket/prefix) for a dm task in task-mode incremental")
	fl.StringVar(&f.resumeFrom, "resume-from", "", "go on from the restore markers at this location (file:///absolute/path or s3://bucket/prefix) instead of the export's start; the target copysets must be as that restore left them")
	fl.StringVar(&f.progress, "progress", "auto", "live progress on stderr: auto (on a terminal), always or never")
	fl.StringVar(&f.s3Endpoint, "s3-endpoint", os.Getenv(EnvS3Endpoint), "S3 endpoint of an s3:// --from (host:port or http(s)://host:port); $"+EnvS3Endpoint+" sets the default")
	fl.StringVar(&f.s3Region, "s3-region", "", "S3 region (default: discovered)")
	fl.StringVar(&f.s3Lookup, "s3-bucket-lookup", "", "S3 addressing: auto, path or dns")
	fl.BoolVar(&f.s3Secure, "s3-secure", false, "HTTPS to an --s3-endpoint without a scheme")
	_ = cmd.MarkFlagRequired("from")
	_ = cmd.MarkFlagRequired("pool")
	return cmd
}

// options checks the flags (nothing is touched yet) and returns the
// restore options without source and target.
func (f *syncRestoreFlags) options(cmd *cobra.Command) (restore.Options, dest.URL, error) {
	var o restore.Options
	u, err := dest.Parse(f.from)
	if err != nil {
		return o, u, fmt.Errorf("--from: %w", err)
	}
	if u.Scheme == dest.SchemeS3 && f.s3Endpoint == "" {
		return o, u, fmt.Errorf("--from %s: an s3 export needs --s3-endpoint (or $%s)", u, EnvS3Endpoint)
	}
	if f.pool == 0 {
		return o, u, errors.New("--pool: pool ids start at 1")
	}
	if cmd.Flags().Changed("to-pool") && f.toPool == 0 {
		return o, u, errors.New("--to-pool: pool ids start at 1")
	}
	o.Pool, o.ToPool = f.pool, f.toPool
	if f.copysets != "" {
		if o.Copysets, err = ParseIDList(f.copysets); err != nil {
			return o, u, fmt.Errorf("--copysets: %w", err)
		}
	}
	o.HasUntilIndex = cmd.Flags().Changed("until-index")
	o.UntilIndex = f.untilIndex
	if cmd.Flags().Changed("until-time") {
		if o.HasUntilIndex {
			return o, u, errors.New("give --until-index or --until-time, not both")
		}
		if o.UntilTimeMs, err = parseUntilTime(f.untilTime); err != nil {
			return o, u, err
		}
		o.HasUntilTime = true
	}
	if f.resumeFrom != "" && o.HasUntilTime {
		return o, u, errors.New("--until-time cannot go with --resume-from: a restore marker does not say when its last record was appended; give --until-index")
	}
	if f.parallel < 1 {
		return o, u, fmt.Errorf("--parallel %d: at least 1", f.parallel)
	}
	if f.chunkParallel < 1 {
		return o, u, fmt.Errorf("--chunk-parallel %d: at least 1", f.chunkParallel)
	}
	if f.writeDepth < 1 {
		return o, u, fmt.Errorf("--write-depth %d: at least 1", f.writeDepth)
	}
	o.Parallel, o.ChunkParallel, o.WriteDepth = f.parallel, f.chunkParallel, f.writeDepth
	o.Geometry = restore.Geometry{ChunkSize: ChunkSize, BlockSize: BlockSize}
	switch f.progress {
	case "auto", "always", "never":
	default:
		return o, u, fmt.Errorf("--progress %q: want auto, always or never", f.progress)
	}
	return o, u, nil
}

// parseUntilTime parses an RFC 3339 time or Unix milliseconds.
func parseUntilTime(s string) (int64, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		if ms < 0 {
			return 0, fmt.Errorf("--until-time %s: before 1970", s)
		}
		return ms, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("--until-time %q: want an RFC 3339 time (2026-01-02T15:04:05Z) or Unix milliseconds", s)
	}
	return t.UnixMilli(), nil
}

func runSyncRestore(cmd *cobra.Command, a *app, f *syncRestoreFlags) error {
	o, u, err := f.options(cmd)
	if err != nil {
		return err
	}
	location := func(flag, s string) (dest.URL, error) {
		if s == "" {
			return dest.URL{}, nil
		}
		lu, err := dest.Parse(s)
		if err != nil {
			return lu, fmt.Errorf("--%s: %w", flag, err)
		}
		if lu.Scheme == dest.SchemeS3 && f.s3Endpoint == "" {
			return lu, fmt.Errorf("--%s %s: an s3 location needs --s3-endpoint (or $%s)", flag, lu, EnvS3Endpoint)
		}
		return lu, nil
	}
	mu, err := location("marker", f.marker)
	if err != nil {
		return err
	}
	ru, err := location("resume-from", f.resumeFrom)
	if err != nil {
		return err
	}
	return a.withClient(cmd, func(ctx context.Context, c *Client) error {
		store := objstore.Config{S3: objstore.S3Config{
			Endpoint: f.s3Endpoint, Region: f.s3Region, BucketLookup: f.s3Lookup, Secure: f.s3Secure}}
		src, err := dest.Open(ctx, u, store)
		if err != nil {
			return fmt.Errorf("--from: %w", err)
		}
		defer src.Close()
		var markers dest.Dest
		if f.marker != "" {
			if markers, err = dest.Open(ctx, mu, store); err != nil {
				return fmt.Errorf("--marker: %w", err)
			}
			defer markers.Close()
		}
		if f.resumeFrom != "" {
			rd, err := dest.Open(ctx, ru, store)
			if err != nil {
				return fmt.Errorf("--resume-from: %w", err)
			}
			defer rd.Close()
			o.ResumeFrom = rd
			o.Digests = func(ctx context.Context, pool uint32, ids []uint32) (map[uint32]string, error) {
				ds, err := c.CopysetDigests(ctx, pool, ids)
				out := make(map[uint32]string, len(ds))
				for id, d := range ds {
					out[id] = d.Digest
				}
				return out, err
			}
		}
		o.Source = src
		o.Target = &restoreTarget{c: c}
		var line *progressLine
		if show := f.progress == "always" || f.progress == "auto" && isTerminal(cmd.ErrOrStderr()); show {
			line = &progressLine{w: cmd.ErrOrStderr()}
			o.Progress = line.update
		}
		sum, err := restore.Restore(ctx, o)
		line.end()
		if err != nil {
			return err
		}
		if markers != nil {
			if err := writeMarkers(ctx, c, markers, u, sum); err != nil {
				return fmt.Errorf("the restore is done, but its markers are not: %w", err)
			}
			sum.MarkerLocation = mu.String()
		}
		return printRestoreSummary(a.printer(cmd), o, sum)
	})
}

// writeMarkers writes the restore marker of every copyset of sum to dst,
// with the export's location u and the restored copysets' digests.
func writeMarkers(ctx context.Context, c *Client, dst dest.Dest, u dest.URL, sum *restore.Summary) error {
	if len(sum.Copysets) == 0 {
		return nil
	}
	to := sum.Copysets[0].ToPool
	ids := make([]uint32, len(sum.Copysets))
	for i, cs := range sum.Copysets {
		ids[i] = cs.Copyset
	}
	digests, err := c.CopysetDigests(ctx, to, ids)
	if err != nil {
		return err
	}
	now := time.Now().UnixMilli()
	for _, cs := range sum.Copysets {
		d, ok := digests[cs.Copyset]
		if !ok {
			return fmt.Errorf("copyset %d/%d: no digest", to, cs.Copyset)
		}
		m := cs.Marker
		m.Export, m.Digest, m.Chunks, m.RestoredAtMs = u.String(), d.Digest, d.Chunks, now
		if err := restore.WriteMarker(ctx, dst, m); err != nil {
			return err
		}
	}
	return nil
}

// restoreSummaryJSON is -o json's summary.
type restoreSummaryJSON struct {
	*restore.Summary
	Pool           uint32  `json:"pool"`
	ToPool         uint32  `json:"toPool"`
	ElapsedSeconds float64 `json:"elapsedSeconds"`
	CheckSeconds   float64 `json:"checkSeconds"` // the part of elapsedSeconds the check pass took
	MBPerSecond    float64 `json:"mbPerSecond"`
}

func printRestoreSummary(p *printer, o restore.Options, sum *restore.Summary) error {
	to := o.ToPool
	if to == 0 {
		to = o.Pool
	}
	secs := sum.Elapsed.Seconds()
	rate := 0.0
	if secs > 0 {
		rate = float64(sum.Bytes) / 1e6 / secs
	}
	if p.isJSON() {
		return writeJSON(p.w, restoreSummaryJSON{Summary: sum, Pool: o.Pool, ToPool: to, ElapsedSeconds: secs, CheckSeconds: sum.Checked.Seconds(), MBPerSecond: rate})
	}
	rows := make([][]string, len(sum.Copysets))
	for i, s := range sum.Copysets {
		rows[i] = []string{fmt.Sprint(s.Copyset), fmt.Sprint(s.UntilIndex), fmt.Sprint(s.Packets), fmt.Sprint(s.Chunks),
			fmt.Sprint(s.Records), fmt.Sprint(s.Skipped), fmt.Sprint(s.Refused), fmt.Sprint(s.Bytes)}
	}
	if err := writeTable(p.w, []string{"COPYSET", "UNTIL-INDEX", "PACKETS", "CHUNKS", "RECORDS", "SKIPPED", "REFUSED", "BYTES"}, rows); err != nil {
		return err
	}
	_, err := fmt.Fprintf(p.w, "restored %d copysets of pool %d into pool %d: %d chunks, %d records (%d skipped, %d refused as in the source), %.1f MB in %s (checked in %s), %.1f MB/s\n",
		len(sum.Copysets), o.Pool, to, sum.Chunks, sum.Records, sum.Skipped, sum.Refused,
		float64(sum.Bytes)/1e6, sum.Elapsed.Round(time.Millisecond), sum.Checked.Round(time.Millisecond), rate)
	if err == nil && sum.MarkerLocation != "" {
		_, err = fmt.Fprintf(p.w, "restore markers of the %d copysets written to %s\n", len(sum.Copysets), sum.MarkerLocation)
	}
	return err
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progressLine is the one updating line of a restore's progress.
type progressLine struct {
	w     io.Writer
	last  time.Time
	width int
	shown bool
}

// progressEvery bounds how often the line is redrawn.
const progressEvery = 100 * time.Millisecond

func (l *progressLine) update(p restore.Progress) {
	final := p.CopysetsDone == p.Copysets
	now := time.Now()
	if !final && now.Sub(l.last) < progressEvery {
		return
	}
	l.last = now
	total := ""
	if p.PacketsTotal > 0 {
		total = "/" + strconv.Itoa(p.PacketsTotal)
	}
	s := fmt.Sprintf("%s: copyset %d/%d, packets %d%s, records %d, %.1f MB, copysets done %d/%d",
		p.Phase, p.Pool, p.Copyset, p.Packets, total, p.Records, float64(p.Bytes)/1e6, p.CopysetsDone, p.Copysets)
	pad := max(l.width-len(s), 0)
	l.width = len(s)
	fmt.Fprintf(l.w, "\r%s%s", s, strings.Repeat(" ", pad))
	l.shown = true
}

// end finishes the line (nil: no progress shown).
func (l *progressLine) end() {
	if l != nil && l.shown {
		fmt.Fprintln(l.w)
	}
}

// restoreTarget is the restore.Target of a Client: every op goes to the
// copyset's leader with the client's retries.
type restoreTarget struct{ c *Client }

func chunkIDOf(c restore.Chunk) ChunkID {
	return ChunkID{CopysetID: CopysetID{Pool: c.Pool, Copyset: c.Copyset}, Chunk: c.ID}
}

// unknownRetries is how often a write answered FAILURE_UNKNOWN that is not
// the refusal of a write needing a snapshot is sent again (writes replay
// harmlessly).
const unknownRetries = 3

// CheckEmpty asks every server for its replica's copyset hash: an empty
// copyset hashes to "0" (GetCopysetStatus).
func (t *restoreTarget) CheckEmpty(ctx context.Context, pool, copyset uint32) error {
	cs := CopysetID{Pool: pool, Copyset: copyset}
	rows, err := t.c.CopysetHashes(ctx, cs)
	if err != nil {
		return err
	}
	hosted := 0
	var errs []string
	for _, r := range rows {
		switch {
		case r.Err != nil:
			errs = append(errs, r.Server+": "+describe(r.Err))
		case r.Hosted && r.Hash != "0":
			return fmt.Errorf("target copyset %d/%d holds chunks (copyset hash %s on %s): sync restore needs empty copysets", pool, copyset, r.Hash, r.Server)
		case r.Hosted:
			hosted++
		}
	}
	switch {
	case hosted > 0:
		return nil
	case len(errs) > 0:
		return fmt.Errorf("target copyset %d/%d: no server could say whether it is empty: %s", pool, copyset, strings.Join(errs, "; "))
	}
	return fmt.Errorf("target copyset %d/%d is hosted by none of the %d servers: create it first", pool, copyset, len(rows))
}

func (t *restoreTarget) WriteChunk(ctx context.Context, c restore.Chunk, off uint32, data []byte, sn uint64) (restore.Outcome, error) {
	id := chunkIDOf(c)
	for try := 0; ; try++ {
		err := t.c.WriteChunk(ctx, id, off, data, sn)
		switch {
		case err == nil:
			return restore.Applied, nil
		case IsChunkStatus(err, chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_BACKWARD):
			return restore.Backward, nil
		case !IsChunkStatus(err, chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_FAILURE_UNKNOWN):
			return 0, err
		}
		// A write that needs a snapshot while the chunk has one is
		// FAILURE_UNKNOWN; so is a failed proposal. Tell them apart.
		sns, ierr := t.c.GetChunkInfo(ctx, id)
		if ierr != nil {
			return 0, fmt.Errorf("%w (and then: %w)", err, ierr)
		}
		if len(sns) == 2 && sn > sns[0] {
			return restore.Refused, nil
		}
		if try == unknownRetries {
			return 0, err
		}
		if !sleepCtx(ctx, time.Duration(try+1)*200*time.Millisecond) {
			return 0, ctx.Err()
		}
	}
}

// outcomeOf maps a delete's error: BACKWARD is the source's outcome too.
func outcomeOf(err error) (restore.Outcome, error) {
	switch {
	case err == nil:
		return restore.Applied, nil
	case IsChunkStatus(err, chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_BACKWARD):
		return restore.Backward, nil
	}
	return 0, err
}

func (t *restoreTarget) DeleteChunk(ctx context.Context, c restore.Chunk, sn uint64) (restore.Outcome, error) {
	return outcomeOf(t.c.DeleteChunk(ctx, chunkIDOf(c), sn))
}

func (t *restoreTarget) DeleteChunkSnapshotOrCorrectSn(ctx context.Context, c restore.Chunk, cs uint64) (restore.Outcome, error) {
	return outcomeOf(t.c.DeleteChunkSnapshotOrCorrectSn(ctx, chunkIDOf(c), cs))
}

func (t *restoreTarget) ChunkExists(ctx context.Context, c restore.Chunk) (bool, error) {
	sns, err := t.c.GetChunkInfo(ctx, chunkIDOf(c))
	return len(sns) > 0, err
}
