package dm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/chunkserver/chunkservertest"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/dm"
	"github.com/chunkraft/chunkraft/internal/testwait"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	dmpb "github.com/chunkraft/chunkraft/proto/dm/pb"
)

// OperateSchema through pb.Worker: the routes while Running, the other ops
// refused until the task is paused; then the lists, a chunk's schema, an
// override that survives a restart of the target's leader and its removal;
// bad requests are refused with the reason and change nothing.
func TestOperateSchema(t *testing.T) {
	c := chunkservertest.Start(t, 3)
	src, dst := c.Group, copyset.NewGroupID(2, 1)
	createCopyset(t, c, dst)
	write(t, c, src, 1, 1, 0, 0x01)
	write(t, c, src, 3, 2, 1, 0x02)
	export := startMigration(t, c, src, dst)
	testwait.Until(t, 30*time.Second, func() error {
		if u := share(t, c, dst, "mig").GetUnit(); u != dmpb.UnitType_Sync {
			return fmt.Errorf("unit %v", u)
		}
		return nil
	})
	ctx := context.Background()
	worker := dmpb.NewWorkerClient(c.Conns[0])
	schema := func(req *dmpb.OperateWorkerSchemaRequest) *dmpb.CommonWorkerResponse {
		t.Helper()
		if req.Task == "" {
			req.Task = "mig"
		}
		r, err := worker.OperateSchema(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	db := "pool-1/copyset-1"

	// Running: the routes only.
	r := schema(&dmpb.OperateWorkerSchemaRequest{Op: dmpb.SchemaOp_ListMigrateTargets, Table: "^[13]$"})
	var routes []dm.MigrateTarget
	if err := json.Unmarshal([]byte(r.GetMsg()), &routes); err != nil || !r.GetResult() || len(routes) != 2 ||
		routes[0] != (dm.MigrateTarget{SourceSchema: db, SourceTable: "1", TargetSchema: "pool-2/copyset-1", TargetTable: "1"}) {
		t.Fatalf("list migrate targets: %v (%v)", r, err)
	}
	if r := schema(&dmpb.OperateWorkerSchemaRequest{Op: dmpb.SchemaOp_GetSchema, Database: db, Table: "1"}); r.GetResult() ||
		!strings.Contains(r.GetMsg(), "current stage is Running but not paused, invalid") {
		t.Fatalf("get-schema of a running task: %v", r)
	}
	if r, err := pb.NewDMControlClient(c.Conns[1]).OperateTask(ctx, &pb.OperateTaskRequest{Name: "mig", Op: dmpb.TaskOp_Pause}); err != nil || !r.GetResult() {
		t.Fatalf("pause-task: %v %v", r, err)
	}

	before := share(t, c, dst, "mig")
	for _, tc := range []struct {
		req  *dmpb.OperateWorkerSchemaRequest
		want string
	}{
		{&dmpb.OperateWorkerSchemaRequest{Op: dmpb.SchemaOp_InvalidSchemaOp}, "want GetSchema"},
		{&dmpb.OperateWorkerSchemaRequest{Op: dmpb.SchemaOp_ListSchema, Task: "nope"}, "no sub task with name nope has started"},
		{&dmpb.OperateWorkerSchemaRequest{Op: dmpb.SchemaOp_ListSchema, Source: "file:///elsewhere"}, "source of request does not match with source in worker"},
		{&dmpb.OperateWorkerSchemaRequest{Op: dmpb.SchemaOp_GetSchema, Table: "1"}, "needs the database"},
		{&dmpb.OperateWorkerSchemaRequest{Op: dmpb.SchemaOp_GetSchema, Database: "1/1", Table: "1"}, "want a source copyset, pool-P/copyset-C"},
		{&dmpb.OperateWorkerSchemaRequest{Op: dmpb.SchemaOp_GetSchema, Database: "pool-3/copyset-1", Table: "1"}, "task \"mig\" migrates pool 1"},
		{&dmpb.OperateWorkerSchemaRequest{Op: dmpb.SchemaOp_GetSchema, Database: "pool-1/copyset-9", Table: "1"}, "no share applying pool-1/copyset-9"},
		{&dmpb.OperateWorkerSchemaRequest{Op: dmpb.SchemaOp_GetSchema, Database: db, Table: "x"}, "table \"x\": want a chunk id"},
		{&dmpb.OperateWorkerSchemaRequest{Op: dmpb.SchemaOp_SetSchema, Database: db, Table: "1"}, "needs the schema"},
		{&dmpb.OperateWorkerSchemaRequest{Op: dmpb.SchemaOp_SetSchema, Database: db, Table: "1", Schema: "clone sn=1"}, "column 11: csn=<n> is missing"},
		{&dmpb.OperateWorkerSchemaRequest{Op: dmpb.SchemaOp_SetSchema, Database: db, Table: "1", FromSource: true}, "not read from the source or the target"},
		{&dmpb.OperateWorkerSchemaRequest{Op: dmpb.SchemaOp_RemoveSchema, Database: db, Table: "1"}, "no schema set for chunk 1"},
		{&dmpb.OperateWorkerSchemaRequest{Op: dmpb.SchemaOp_ListMigrateTargets, Database: "("}, "database pattern"},
	} {
		if r := schema(tc.req); r.GetResult() || !strings.Contains(r.GetMsg(), tc.want) {
			t.Errorf("%v: %v, want a refusal saying %q", tc.req, r, tc.want)
		}
	}
	if after := share(t, c, dst, "mig"); after.GetUpdatedIndex() != before.GetUpdatedIndex() {
		t.Fatalf("refused requests changed the share: %v", after)
	}

	if r := schema(&dmpb.OperateWorkerSchemaRequest{Op: dmpb.SchemaOp_ListSchema, Source: "file://" + export}); !r.GetResult() || r.GetMsg() != `["pool-1/copyset-1"]` {
		t.Fatalf("list schema: %v", r)
	}
	if r := schema(&dmpb.OperateWorkerSchemaRequest{Op: dmpb.SchemaOp_ListTable, Database: db}); !r.GetResult() || r.GetMsg() != `["1","3"]` {
		t.Fatalf("list table: %v", r)
	}
	tryGet := func(chunk string) (dm.SchemaView, error) {
		r := schema(&dmpb.OperateWorkerSchemaRequest{Op: dmpb.SchemaOp_GetSchema, Database: db, Table: chunk})
		var v dm.SchemaView
		if !r.GetResult() {
			return v, fmt.Errorf("get schema of chunk %s: %v", chunk, r)
		}
		return v, json.Unmarshal([]byte(r.GetMsg()), &v)
	}
	get := func(chunk string) dm.SchemaView {
		t.Helper()
		v, err := tryGet(chunk)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := get("3"); !v.Exists || v.Sn != 2 || v.Schema != "normal" || v.Target != "2/1" || v.Override != nil {
		t.Fatalf("chunk 3: %+v", v)
	}
	if v := get("4"); v.Exists || v.Schema != "normal" {
		t.Fatalf("chunk 4, which is not there: %+v", v)
	}

	// An override, through a restart of the target's leader.
	if r := schema(&dmpb.OperateWorkerSchemaRequest{Op: dmpb.SchemaOp_SetSchema, Database: db, Table: "3", Schema: "clone sn=5 csn=4 written=0-9"}); !r.GetResult() {
		t.Fatalf("set schema: %v", r)
	}
	leader := leaderOf(t, c, dst)
	c.Stop(leader)
	c.Restart(leader)
	testwait.Until(t, 30*time.Second, func() error {
		v, err := tryGet("3")
		if err != nil {
			return err
		}
		if v.Schema != "clone sn=5 csn=4 written=0-9" || v.Unwritten != "10-4095" || v.Override == nil || v.Override.Prior != "normal" {
			return fmt.Errorf("chunk 3 after the restart: %+v", v)
		}
		return nil
	})
	if sh := share(t, c, dst, "mig"); sh.GetClones()[3].GetSn() != 5 {
		t.Fatalf("the share does not track chunk 3 as set: %v", sh.GetClones())
	}
	if r := schema(&dmpb.OperateWorkerSchemaRequest{Op: dmpb.SchemaOp_RemoveSchema, Database: db, Table: "3"}); !r.GetResult() {
		t.Fatalf("remove schema: %v", r)
	}
	if v := get("3"); v.Schema != "normal" || v.Override != nil {
		t.Fatalf("chunk 3 after the removal: %+v", v)
	}
	if sh := share(t, c, dst, "mig"); len(sh.GetClones()) != 0 || len(sh.GetSchemas()) != 0 {
		t.Fatalf("the share after the removal: clones %v, schemas %v", sh.GetClones(), sh.GetSchemas())
	}
}
