package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"

	dmworkerpb "github.com/chunkraft/chunkraft/proto/dm/pb"
)

// taskAndWaitArgs are start-task's arguments: the task file, and the
// duration of a bare --wait wherever it is on the line (--wait 10m
// task.yaml, task.yaml --wait 10m). Of two, the task file is the one that
// is not a duration, else the one that is a file.
func taskAndWaitArgs(cmd *cobra.Command, wait *waitFlag, args []string) (string, error) {
	switch len(args) {
	case 1:
		return args[0], wait.args(cmd, nil)
	case 2:
		_, err0 := time.ParseDuration(args[0])
		_, err1 := time.ParseDuration(args[1])
		_, stat0 := os.Stat(args[0])
		if err0 == nil || (err1 != nil && stat0 != nil) {
			args = []string{args[1], args[0]}
		}
		return args[0], wait.args(cmd, args[1:])
	}
	return "", fmt.Errorf("accepts a task file (and the duration of --wait), received %d arg(s)", len(args))
}

// startTaskAndWait is start-task --wait: the start, as start-task prints
// it, then WaitDMTask for at most d. -o json prints one object: the
// start's answer and what the wait saw last.
func (a *app) startTaskAndWait(cmd *cobra.Command, path string, d time.Duration) error {
	task, err := readTaskFile(cmd, path)
	if err != nil {
		return err
	}
	var named struct {
		Name string `yaml:"name"`
	}
	_ = yaml.Unmarshal(task, &named) // the servers check the file; its name is all the wait needs
	return a.withClient(cmd, func(ctx context.Context, c *Client) error {
		resp, err := c.DMStartTask(ctx, task, false)
		p := a.printer(cmd)
		switch {
		case err != nil:
			return a.printControl(cmd, resp, err)
		case !p.isJSON():
			if err := a.printControl(cmd, resp, nil); err != nil {
				return err
			}
		}
		w, werr := c.WaitDMTask(ctx, named.Name, d, cmd.ErrOrStderr())
		if werr != nil {
			werr = fmt.Errorf("task started, but: %w", werr)
		}
		if p.isJSON() {
			start, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(resp)
			if err != nil {
				return fmt.Errorf("write json: %w", err)
			}
			if err := writeJSON(p.w, map[string]any{"start": json.RawMessage(start), "wait": w}); err != nil {
				return err
			}
			return werr
		}
		if werr == nil {
			fmt.Fprintf(p.w, "%s: %s in %s after %s: %s\n", named.Name, w.Stage, w.Unit,
				time.Duration(w.Seconds*float64(time.Second)).Round(time.Millisecond), w.Progress)
		}
		return werr
	})
}

// dmWaitResult is what `dm start-task --wait` saw last.
type dmWaitResult struct {
	Stage    string  `json:"stage"`
	Unit     string  `json:"unit"`
	Progress string  `json:"progress"`
	Seconds  float64 `json:"seconds"`
}

// dmWaitDone says whether a task's status is what a wait waits for: a
// task of mode full Finished, a task of mode all in the Sync unit and
// caught up with its source (synced).
func dmWaitDone(st *dmworkerpb.SubTaskStatus) bool {
	return st.GetStage() == dmworkerpb.Stage_Finished ||
		(st.GetStage() == dmworkerpb.Stage_Running && st.GetUnit() == dmworkerpb.UnitType_Sync && st.GetSync().GetSynced())
}

// dmWaitStuck is why a task will not get there without an operator: it
// is stopped, paused by a user, or paused by an error auto-resume does not
// resume (level high); "" while it may.
func dmWaitStuck(st *dmworkerpb.SubTaskStatus) string {
	switch st.GetStage() {
	case dmworkerpb.Stage_Stopped, dmworkerpb.Stage_Stopping:
		return "it is " + st.GetStage().String()
	case dmworkerpb.Stage_Paused, dmworkerpb.Stage_Pausing:
		if st.GetResult().GetIsCanceled() {
			return "it is paused by a user"
		}
		for _, e := range st.GetResult().GetErrors() {
			if e.GetErrLevel() == "high" {
				return "it is paused by an error auto-resume does not resume: " + errorsOf(st)
			}
		}
	}
	return ""
}

// WaitDMTask asks for the status of task name until it is done
// (dmWaitDone), for at most d, printing progress to progress about once a
// second. It fails at once when the task is gone or stuck (dmWaitStuck),
// and on timeout with the task's last status. A status that cannot be had
// (no server answers) is asked again until d has passed.
func (c *Client) WaitDMTask(ctx context.Context, name string, d time.Duration, progress io.Writer) (dmWaitResult, error) {
	start := time.Now()
	lastReport := start
	var res dmWaitResult
	for {
		last := ""
		resp, err := c.DMQueryStatus(ctx, name)
		res.Seconds = time.Since(start).Seconds()
		switch {
		case err != nil:
			last = "status: " + err.Error()
		case len(resp.GetSubTaskStatus()) == 0 || resp.GetSubTaskStatus()[0].GetMsg() != "":
			msg := resp.GetMsg()
			if len(resp.GetSubTaskStatus()) > 0 {
				msg = resp.GetSubTaskStatus()[0].GetMsg()
			}
			return res, fmt.Errorf("task %q is gone (stopped while waiting?): %s", name, msg)
		default:
			st := resp.GetSubTaskStatus()[0]
			res.Stage, res.Unit, res.Progress = st.GetStage().String(), st.GetUnit().String(), progressOf(st)
			if dmWaitDone(st) {
				return res, nil
			}
			if why := dmWaitStuck(st); why != "" {
				return res, fmt.Errorf("task %q will not finish without an operator: %s", name, why)
			}
			last = fmt.Sprintf("%s in %s: %s", res.Stage, res.Unit, res.Progress)
			if e := errorsOf(st); e != "" {
				last += "; " + e
			}
		}
		elapsed := time.Since(start)
		if elapsed >= d {
			return res, fmt.Errorf("timed out after %s waiting for task %q to finish (mode full) or catch up in Sync (mode all): %s", d, name, last)
		}
		if time.Since(lastReport) >= waitReport {
			lastReport = time.Now()
			fmt.Fprintf(progress, "waiting (%s of %s): task %s %s\n", elapsed.Round(time.Second), d, name, last)
		}
		if !sleepCtx(ctx, min(waitPoll, d-elapsed)) {
			return res, ctx.Err()
		}
	}
}
