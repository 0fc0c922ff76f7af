package dm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/chunkserver"
	"github.com/chunkraft/chunkraft/chunkserver/chunkservertest"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/dm"
	"github.com/chunkraft/chunkraft/internal/testwait"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	dmpb "github.com/chunkraft/chunkraft/proto/dm/pb"
)

// TestWorkerScript drives every pb.Worker RPC through the client generated
// from upstream's dmworker.proto (proto/dm/pb), asked of a server that
// leads nothing the task touches, over a task's life: no task, a task
// migrating pool 1 into pool 2 of the same cluster (a cluster source, so
// the validator runs), paused by the user, paused by an error the target
// refused (NOSPACE), resumed by a handled error, stopped. The script,
// testdata/worker_rpcs, holds each request, each precondition and message
// and the stage each transition leaves (go test -run TestWorkerScript
// -rewrite rewrites the expected output).
//
// Commands:
//
//	start-task            input: the task file; {{cluster}} is the cluster's servers, {{relay}} a relay location
//	operate-task op=OP    pb.TaskOp on task mig (Pause, Resume, Stop)
//	wait stage=S [unit=U] [error] until task mig's subtask is there (error: with a process error)
//	write chunk=N sn=N    a 4 KiB write to the source copyset 1/1, at the leader
//	disk-full on|off      the target copyset's leader reports no free space (its admission refuses writes)
//	rpc METHOD [only=P,...] [positions]
//	                      input: the request as prototext; output: the response (or the gRPC error),
//	                      as indented JSON, or only the values at the dotted paths P (positions: source
//	                      positions P/C:index.op shown as P/C:I.O, where the index is the log's)
//	check-update          input: a task file; CheckSubtasksCanUpdate with its subtask config
func TestWorkerScript(t *testing.T) {
	c := chunkservertest.Start(t, 3, func(cfg *chunkserver.Config) {
		cfg.Sync.SendInterval = 200 * time.Millisecond
		cfg.DM.ResumeBackoffMin, cfg.DM.ResumeBackoffMax = 200*time.Millisecond, 400*time.Millisecond
	})
	ctx := context.Background()
	src, dst := c.Group, copyset.NewGroupID(2, 1)
	createCopyset(t, c, dst)
	write(t, c, src, 1, 1, 0, 0x01)
	moveSourceLeader(t, c, src, dst)
	var seeds []string
	for _, s := range c.Servers {
		seeds = append(seeds, "'"+s.Local().Addr()+"'")
	}
	relay := "file://" + filepath.Join(t.TempDir(), "relay")
	fill := func(text string) string {
		return strings.NewReplacer("{{cluster}}", "["+strings.Join(seeds, ", ")+"]", "{{relay}}", relay).Replace(text)
	}
	// The worker asked: a server leading neither copyset when the script
	// starts.
	asked := 0
	for i := range c.Servers {
		if i != leaderOf(t, c, src) && i != leaderOf(t, c, dst) {
			asked = i
		}
	}
	w := dmpb.NewWorkerClient(c.Conns[asked])
	ctl := pb.NewDMControlClient(c.Conns[asked])
	status := func() *dmpb.SubTaskStatus {
		qs, err := w.QueryStatus(ctx, &dmpb.QueryStatusRequest{Name: "mig"})
		if err != nil || len(qs.GetSubTaskStatus()) != 1 {
			return nil
		}
		return qs.GetSubTaskStatus()[0]
	}

	datadriven.RunTest(t, "testdata/worker_rpcs", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "start-task":
			r, err := ctl.StartTask(ctx, &pb.StartTaskRequest{Task: fill(d.Input)})
			return scriptOut(r, err, nil)
		case "operate-task":
			var op string
			d.ScanArgs(t, "op", &op)
			v, ok := dmpb.TaskOp_value[op]
			if !ok {
				d.Fatalf(t, "no task op %q", op)
			}
			r, err := ctl.OperateTask(ctx, &pb.OperateTaskRequest{Name: "mig", Op: dmpb.TaskOp(v)})
			return scriptOut(r, err, []string{"result", "msg"})
		case "wait":
			var stage, unit string
			d.ScanArgs(t, "stage", &stage)
			d.MaybeScanArgs(t, "unit", &unit)
			withError := d.HasArg("error")
			testwait.Until(t, 60*time.Second, func() error {
				st := status()
				switch {
				case st == nil:
					return fmt.Errorf("no status of task mig")
				case st.GetStage().String() != stage || unit != "" && st.GetUnit().String() != unit:
					return fmt.Errorf("stage %v unit %v, want %s %s", st.GetStage(), st.GetUnit(), stage, unit)
				case withError != (len(st.GetResult().GetErrors()) > 0):
					return fmt.Errorf("errors %v, want some: %v", st.GetResult().GetErrors(), withError)
				}
				return nil
			})
			return "ok"
		case "write":
			var chunk, sn uint64
			d.ScanArgs(t, "chunk", &chunk)
			d.ScanArgs(t, "sn", &sn)
			write(t, c, src, chunk, sn, 0, byte(chunk))
			return "ok"
		case "disk-full":
			diskFull(c, dst, d.CmdArgs[0].Key == "on")
			return "ok"
		case "check-update":
			cfg, err := dm.ParseTaskYAML([]byte(fill(d.Input)))
			if err != nil {
				d.Fatalf(t, "the task file: %v", err)
			}
			s, err := dm.TaskTOML(cfg)
			if err != nil {
				d.Fatalf(t, "its TOML: %v", err)
			}
			r, err := w.CheckSubtasksCanUpdate(ctx, &dmpb.CheckSubtasksCanUpdateRequest{SubtaskCfgTomlString: s})
			return scriptOut(r, err, nil)
		case "rpc":
			var only []string
			for _, a := range d.CmdArgs {
				if a.Key == "only" {
					for _, v := range a.Vals {
						only = append(only, strings.Split(v, ",")...)
					}
				}
			}
			r, err := callWorker(ctx, w, d.CmdArgs[0].Key, d.Input)
			if r == nil && err == nil {
				d.Fatalf(t, "pb.Worker has no method %s", d.CmdArgs[0].Key)
			}
			out := scriptOut(r, err, only)
			if d.HasArg("positions") {
				out = stablePos.ReplaceAllString(out, "$1:I.O")
			}
			return out
		}
		d.Fatalf(t, "unknown command %s", d.Cmd)
		return ""
	})
}

// callWorker calls method of the generated pb.Worker client with the
// request in prototext; nil and no error when there is no such method.
func callWorker(ctx context.Context, w dmpb.WorkerClient, method, text string) (proto.Message, error) {
	m := reflect.ValueOf(w).MethodByName(method)
	if !m.IsValid() {
		return nil, nil
	}
	req := reflect.New(m.Type().In(1).Elem()).Interface().(proto.Message)
	if err := prototext.Unmarshal([]byte(text), req); err != nil {
		return nil, fmt.Errorf("the request: %w", err)
	}
	out := m.Call([]reflect.Value{reflect.ValueOf(ctx), reflect.ValueOf(req)})
	if err, _ := out[1].Interface().(error); err != nil {
		return nil, err
	}
	return out[0].Interface().(proto.Message), nil
}

// scriptOut renders a response for the script: the gRPC error's code and
// message, or the response as indented JSON (every field, defaults
// included), or only the values at the dotted paths of only, one line
// each; addresses, directories and times made stable.
func scriptOut(r proto.Message, err error, only []string) string {
	if err != nil {
		st, _ := status.FromError(err)
		return stable(fmt.Sprintf("error: %v: %s", st.Code(), st.Message()))
	}
	b, err := protojson.MarshalOptions{EmitUnpopulated: true, UseProtoNames: false}.Marshal(r)
	if err != nil {
		return "marshal: " + err.Error()
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return "unmarshal: " + err.Error()
	}
	if len(only) == 0 {
		out, _ := json.MarshalIndent(v, "", "  ")
		return stable(string(out))
	}
	var lines []string
	for _, p := range only {
		for _, x := range jsonAt(v, strings.Split(p, ".")) {
			s, _ := json.Marshal(x)
			if str, ok := x.(string); ok {
				s = []byte(strconv.Quote(str))
			}
			lines = append(lines, p+": "+string(s))
		}
	}
	return stable(strings.Join(lines, "\n"))
}

// jsonAt is the values at path in v, arrays mapped over.
func jsonAt(v any, path []string) []any {
	if arr, ok := v.([]any); ok {
		var out []any
		for _, e := range arr {
			out = append(out, jsonAt(e, path)...)
		}
		return out
	}
	if len(path) == 0 {
		return []any{v}
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	return jsonAt(m[path[0]], path[1:])
}

var (
	stableAddr = regexp.MustCompile(`127\.0\.0\.1:\d+`)
	stableDir  = regexp.MustCompile(`/tmp/[^ "',\]]*`)
	stableTime = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)
	stableMs   = regexp.MustCompile(`(\\?"addedMs\\?":)\d+`)
	stablePos  = regexp.MustCompile(`(\d+/\d+):\d+\.\d+`)
)

// stable replaces what changes from run to run: addresses, temporary
// directories, times.
func stable(s string) string {
	s = stableAddr.ReplaceAllString(s, "ADDR")
	s = stableDir.ReplaceAllString(s, "TMP")
	s = stableMs.ReplaceAllString(s, "${1}MS")
	return stableTime.ReplaceAllString(s, "TIME")
}
