package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
)

// syncWaitDone says when `sync create --wait` is done with a sub-task: a
// full export once it is SUCCESS, a continuous or incremental one once it
// exports the log (its point is a binlog point) and covers every write
// acknowledged before sinceMs (its covered time, info's coveredTime, is
// at or after it; a server that does not report one is not waited for).
func syncWaitDone(full bool, t *dspb.Task, info string, sinceMs int64) bool {
	if full {
		return t.GetStatus() == "SUCCESS"
	}
	j := syncSubTaskJSON{Info: info}
	j.readInfo()
	covers := !strings.Contains(info, "coveredTime=") || j.CoveredTimeMs >= sinceMs
	return t.GetStatus() == "RUNNING" && t.GetProgress().GetSyncPoint().GetType() == dspb.SyncType_kBINLOG && covers
}

// syncWaitResult is what a wait saw last.
type syncWaitResult struct {
	SubTasks int     `json:"sub_tasks"`
	Done     int     `json:"done"`
	Records  uint64  `json:"records"`
	Seconds  float64 `json:"seconds"`
	// CoveredTime is, for a continuous or incremental export, the earliest
	// covered time of its sub-tasks: every write acknowledged before it is
	// in the export on every copyset (absent when a sub-task has none).
	CoveredTime string `json:"coveredTime,omitempty"`
}

// WaitSyncTask asks for the sync status of pool's task name until every
// sub-task of it is done (syncWaitDone; the pool's other tasks are not
// looked at), for at most d, printing progress to
// progress about once a second. It fails at once when a sub-task is
// FAILED (naming it and its message) or the task is gone, and on timeout
// naming the sub-tasks not done. It is done only on a complete status:
// TaskStatus answers a partial one (code -1) while a copyset's leader does
// not answer, which could leave out a sub-task not done yet.
func (c *Client) WaitSyncTask(ctx context.Context, pool uint32, name string, full bool, d time.Duration, progress io.Writer) (syncWaitResult, error) {
	start := time.Now()
	lastReport := start
	want := "SUCCESS"
	if !full {
		want = "exporting the log, covering the writes acknowledged before " + timeMs(start.UnixMilli())
	}
	for {
		var res syncWaitResult
		var behind []string
		var coveredMs int64 // the earliest covered time (-1: a sub-task has none)
		// A partial status (a copyset without a leader that answers, as
		// in an election) is asked again, as is one that fails.
		resp, err := c.SyncTaskStatus(ctx)
		if err != nil {
			behind = append(behind, "status: "+err.Error())
			resp = nil
		}
		for i, t := range resp.GetTask() {
			p := t.GetProgress()
			// A server that does not name the task has one task per pool.
			if p.GetTid() != pool || (p.TaskName != nil && p.GetTaskName() != name) {
				continue
			}
			res.SubTasks++
			res.Records += t.GetCount()
			info := ""
			if i < len(resp.GetReadableInfo()) {
				info = resp.GetReadableInfo()[i]
			}
			if t.GetStatus() == "FAILED" {
				msg := ""
				if _, m, ok := strings.Cut(info, ";message="); ok {
					msg = ": " + m
				}
				return res, fmt.Errorf("sub-task of task %q on copyset %d/%d FAILED%s", name, pool, p.GetPid(), msg)
			}
			j := syncSubTaskJSON{Info: info}
			j.readInfo()
			switch {
			case j.CoveredTimeMs == 0 || coveredMs < 0:
				coveredMs = -1
			case coveredMs == 0 || j.CoveredTimeMs < coveredMs:
				coveredMs = j.CoveredTimeMs
			}
			if syncWaitDone(full, t, info, start.UnixMilli()) {
				res.Done++
				continue
			}
			at := fmt.Sprintf("copyset %d %s at %s", p.GetPid(), t.GetStatus(), syncPoint(p.GetSyncPoint()))
			if !full && j.CoveredTime != "" {
				at += ", covering " + j.CoveredTime
			}
			behind = append(behind, at)
		}
		if !full && coveredMs > 0 {
			res.CoveredTime = timeMs(coveredMs)
		}
		res.Seconds = time.Since(start).Seconds()
		if resp != nil && res.SubTasks == 0 {
			return res, fmt.Errorf("pool %d has no export task %q (deleted while waiting?)", pool, name)
		}
		if len(behind) == 0 {
			return res, nil
		}
		if len(behind) > 3 {
			behind = append(behind[:3], fmt.Sprintf("%d more", len(behind)-3))
		}
		elapsed := time.Since(start)
		if elapsed >= d {
			return res, fmt.Errorf("timed out after %s waiting for %d of %d sub-tasks of task %q of pool %d to be %s: %s",
				d, res.SubTasks-res.Done, res.SubTasks, name, pool, want, strings.Join(behind, "; "))
		}
		if time.Since(lastReport) >= waitReport {
			lastReport = time.Now()
			fmt.Fprintf(progress, "waiting (%s of %s): %d of %d sub-tasks %s, %d records exported; %s\n",
				elapsed.Round(time.Second), d, res.Done, res.SubTasks, want, res.Records, strings.Join(behind, "; "))
		}
		if !sleepCtx(ctx, min(waitPoll, d-elapsed)) {
			return res, ctx.Err()
		}
	}
}
