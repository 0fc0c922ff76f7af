package dm_test

import (
	"context"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/chunkserver/chunkservertest"
	"github.com/chunkraft/chunkraft/dm"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	dmpb "github.com/chunkraft/chunkraft/proto/dm/pb"
)

// startShare starts task name's share on the cluster's copyset through
// its leader's DMInternal, as the control path does.
func startShare(t *testing.T, c *chunkservertest.Cluster, op *pb.Op) *pb.ProposeResponse {
	t.Helper()
	l := c.Leader(t)
	resp, err := pb.NewDMInternalClient(c.Conns[l]).Propose(context.Background(),
		&pb.ProposeRequest{Pool: c.Group.Pool(), Copyset: c.Group.Copyset(), Op: op})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func exportTask(name string) *pb.TaskConfig {
	c, err := dm.TaskFile{Name: name, TaskMode: "all", TargetPool: 1,
		Source: dm.SourceFile{Pool: 1, Export: "file:///exports/" + name}}.Config()
	if err != nil {
		panic(err)
	}
	return c
}

// An upstream pb.Worker client (proto/dm/pb is generated from upstream's
// dmworker.proto) reads the worker of any server: with no task, upstream's
// answers; with a share on the copyset, its stage, unit and figures from
// the copyset's leader, asked of a follower.
func TestWorkerRPCs(t *testing.T) {
	c := chunkservertest.Start(t, 3)
	ctx := context.Background()
	follower := (c.Leader(t) + 1) % 3
	w := dmpb.NewWorkerClient(c.Conns[follower])

	qs, err := w.QueryStatus(ctx, &dmpb.QueryStatusRequest{})
	if err != nil || qs.GetResult() || !strings.Contains(qs.GetMsg(), "code=40070") {
		t.Fatalf("QueryStatus with no task: %v %v", qs, err)
	}
	cfg, err := w.GetWorkerCfg(ctx, &dmpb.GetWorkerCfgRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var parsed struct {
		Name          string `toml:"name"`
		CheckInterval string `toml:"check-interval"`
	}
	if _, err := toml.Decode(cfg.GetCfg(), &parsed); err != nil || parsed.Name == "" || parsed.CheckInterval != "5s" {
		t.Fatalf("GetWorkerCfg %q: %+v %v", cfg.GetCfg(), parsed, err)
	}
	v1, err := w.OperateV1Meta(ctx, &dmpb.OperateV1MetaRequest{Op: dmpb.V1MetaOp_GetV1Meta})
	if err != nil || !v1.GetResult() || len(v1.GetMeta()) != 0 {
		t.Fatalf("OperateV1Meta get: %v %v", v1, err)
	}
	v1, err = w.OperateV1Meta(ctx, &dmpb.OperateV1MetaRequest{Op: dmpb.V1MetaOp_RemoveV1Meta})
	if err != nil || !v1.GetResult() {
		t.Fatalf("OperateV1Meta remove: %v %v", v1, err)
	}
	if v1, err = w.OperateV1Meta(ctx, &dmpb.OperateV1MetaRequest{}); err != nil || v1.GetResult() {
		t.Fatalf("OperateV1Meta without an op: %v %v", v1, err)
	}
	purge, err := w.PurgeRelay(ctx, &dmpb.PurgeRelayRequest{Inactive: true})
	if err != nil || !purge.GetResult() || !strings.Contains(purge.GetMsg(), "no relay to purge") {
		t.Fatalf("PurgeRelay with no task: %v %v", purge, err)
	}
	schema, err := w.OperateSchema(ctx, &dmpb.OperateWorkerSchemaRequest{})
	if err != nil || schema.GetResult() || !strings.Contains(schema.GetMsg(), "no task name") {
		t.Fatalf("OperateSchema without a task: %v %v", schema, err)
	}
	schema, err = w.OperateSchema(ctx, &dmpb.OperateWorkerSchemaRequest{Op: dmpb.SchemaOp_ListSchema, Task: "mig"})
	if err != nil || schema.GetResult() || !strings.Contains(schema.GetMsg(), "no sub task with name mig has started") {
		t.Fatalf("OperateSchema of no task: %v %v", schema, err)
	}
	if _, err := w.GetWorkerValidatorStatus(ctx, &dmpb.GetValidationStatusRequest{TaskName: "mig"}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetWorkerValidatorStatus of no task: %v, want NotFound", err)
	}

	task := exportTask("mig")
	toml0, err := dm.TaskTOML(task)
	if err != nil {
		t.Fatal(err)
	}
	up, err := w.CheckSubtasksCanUpdate(ctx, &dmpb.CheckSubtasksCanUpdateRequest{SubtaskCfgTomlString: toml0})
	if err != nil || up.GetSuccess() || !strings.Contains(up.GetMsg(), "no sub task with name mig has started") {
		t.Fatalf("CheckSubtasksCanUpdate of no task: %v %v", up, err)
	}
	up, err = w.CheckSubtasksCanUpdate(ctx, &dmpb.CheckSubtasksCanUpdateRequest{SubtaskCfgTomlString: "name = [1"})
	if err != nil || up.GetSuccess() || !strings.Contains(up.GetMsg(), "subtask config") {
		t.Fatalf("CheckSubtasksCanUpdate of bad TOML: %v %v", up, err)
	}

	start := &pb.Op{Op: &pb.Op_Start{Start: &pb.Start{Config: task, Copyset: 1, SourceCopyset: 1,
		Stage: dmpb.Stage_Running, Unit: dmpb.UnitType_Load, NowMs: 1}}}
	if r := startShare(t, c, start); r.GetCode() != 0 || r.GetSubtask().GetStage() != dmpb.Stage_Running {
		t.Fatalf("start: %v", r)
	}
	if r := startShare(t, c, start); r.GetCode() != 0 {
		t.Fatalf("the same start again: %v", r)
	}
	other := proto.CloneOf(start)
	other.GetStart().Config.TargetPool = 7
	if r := startShare(t, c, other); r.GetCode() == 0 || !strings.Contains(r.GetMsg(), "another config") {
		t.Fatalf("a start of another config under the name: %v", r)
	}

	qs, err = w.QueryStatus(ctx, &dmpb.QueryStatusRequest{})
	if err != nil || !qs.GetResult() || len(qs.GetSubTaskStatus()) != 1 {
		t.Fatalf("QueryStatus: %v %v", qs, err)
	}
	st := qs.GetSubTaskStatus()[0]
	if st.GetName() != "mig" || st.GetStage() != dmpb.Stage_Running || st.GetUnit() != dmpb.UnitType_Load || st.GetLoad() == nil {
		t.Fatalf("QueryStatus of the share: %v", st)
	}
	qs, err = w.QueryStatus(ctx, &dmpb.QueryStatusRequest{Name: "nope"})
	if err != nil || len(qs.GetSubTaskStatus()) != 1 || qs.GetSubTaskStatus()[0].GetMsg() != "no sub task with name nope has started" {
		t.Fatalf("QueryStatus of an unknown name: %v %v", qs, err)
	}
	up, err = w.CheckSubtasksCanUpdate(ctx, &dmpb.CheckSubtasksCanUpdateRequest{SubtaskCfgTomlString: toml0})
	if err != nil || up.GetSuccess() || !strings.Contains(up.GetMsg(), "not Sync") {
		t.Fatalf("CheckSubtasksCanUpdate in the Load unit: %v %v", up, err)
	}

	pause := &pb.Op{Op: &pb.Op_SetStage{SetStage: &pb.SetStage{Name: "mig", Stage: dmpb.Stage_Paused, ByUser: true, NowMs: 2}}}
	if r := startShare(t, c, pause); r.GetCode() != 0 || !r.GetSubtask().GetResult().GetIsCanceled() {
		t.Fatalf("pause: %v", r)
	}
	qs, err = w.QueryStatus(ctx, &dmpb.QueryStatusRequest{Name: "mig"})
	if err != nil || qs.GetSubTaskStatus()[0].GetStage() != dmpb.Stage_Paused || !qs.GetSubTaskStatus()[0].GetResult().GetIsCanceled() {
		t.Fatalf("QueryStatus after the pause: %v %v", qs, err)
	}
	finish := &pb.Op{Op: &pb.Op_Advance{Advance: &pb.Advance{Name: "mig", From: &pb.Checkpoint{}, To: &pb.Checkpoint{Record: 1}, Unit: dmpb.UnitType_Load}}}
	if r := startShare(t, c, finish); r.GetCode() == 0 || !strings.Contains(r.GetMsg(), "not Running") {
		t.Fatalf("an advance of a paused share: %v", r)
	}
	if r := startShare(t, c, &pb.Op{Op: &pb.Op_Delete{Delete: &pb.Delete{Name: "mig"}}}); r.GetCode() != 0 {
		t.Fatalf("delete: %v", r)
	}
	qs, err = w.QueryStatus(ctx, &dmpb.QueryStatusRequest{})
	if err != nil || qs.GetResult() || !strings.Contains(qs.GetMsg(), "code=40070") {
		t.Fatalf("QueryStatus after the delete: %v %v", qs, err)
	}
}
