package cli

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
)

// A sub-task's readable info (upstream's "key=value;..." string) gives
// sync status its last update time, what the export covers, its last
// packet's time and its export id; JSON names them in camel case
// (coveredIndex, coveredTime, coveredTimeMs, lastPacketTime,
// lastPacketTimeMs, exportId). Unknown, empty and bad values are left out.
func TestSyncStatusReadsInfo(t *testing.T) {
	j := syncSubTaskJSON{Info: "lastUpdateTime=1796488200000;coveredIndex=42;coveredTime=1796488199123;lastPacketTime=1796488199500;" +
		"exportId=0123456789abcdef0123456789abcdef;progressPath=copyset 1/3 sync machine (sync/state.jsonl), leader a:1;message=x=1;y"}
	j.readInfo()
	if j.LastUpdate != "2026-12-05T16:30:00Z" || j.CoveredIndex != 42 || j.CoveredTime != "2026-12-05T16:29:59.123Z" || j.CoveredTimeMs != 1796488199123 ||
		j.LastPacketTime != "2026-12-05T16:29:59.500Z" || j.LastPacketTimeMs != 1796488199500 || j.ExportID != "0123456789abcdef0123456789abcdef" {
		t.Fatalf("read %+v", j)
	}
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"coveredIndex":42`, `"coveredTime":"2026-12-05T16:29:59.123Z"`, `"coveredTimeMs":1796488199123`,
		`"lastPacketTimeMs":1796488199500`, `"exportId":"0123456789abcdef0123456789abcdef"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("json %s lacks %s", b, want)
		}
	}

	// Before the binlog phase (and from a server that does not say):
	// nothing covered, no time.
	for _, info := range []string{"lastUpdateTime=5;coveredIndex=0;coveredTime=0;lastPacketTime=0;exportId=;progressPath=p", "lastUpdateTime=5;coveredIndex=0;coveredTime=0;progressPath=p", "lastUpdateTime=5;progressPath=p", "coveredIndex=x;coveredTime=-4"} {
		j := syncSubTaskJSON{Info: info}
		j.readInfo()
		if j.CoveredIndex != 0 || j.CoveredTime != "" || j.CoveredTimeMs != 0 || j.LastPacketTimeMs != 0 || j.ExportID != "" {
			t.Errorf("info %q read as %+v", info, j)
		}
		b, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"coveredIndex":0`) || strings.Contains(string(b), `"coveredTime`) || strings.Contains(string(b), `"exportId`) {
			t.Errorf("info %q: json %s", info, b)
		}
	}
}

// fakeSyncTool is a SyncTool that creates nothing and answers TaskStatus
// with tasks.
type fakeSyncTool struct {
	dspb.UnimplementedSyncToolServer
	tasks []*dspb.Task
	info  []string
}

func (f *fakeSyncTool) CreateSyncTask(context.Context, *dspb.CreateSyncTaskRequest) (*dspb.GeneralResponse, error) {
	return &dspb.GeneralResponse{Code: proto.Int32(0), Msg: proto.String("ok: 1 sub-tasks")}, nil
}

func (f *fakeSyncTool) TaskStatus(context.Context, *dspb.TaskStatusRequest) (*dspb.TaskStatusResponse, error) {
	return &dspb.TaskStatusResponse{Response: &dspb.GeneralResponse{Code: proto.Int32(0)}, Task: f.tasks, ReadableInfo: f.info}, nil
}

func startFakeSyncTool(t *testing.T, f *fakeSyncTool) []string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	dspb.RegisterSyncToolServer(g, f)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return []string{lis.Addr().String()}
}

// With two tasks on a pool, sync status shows each sub-task's task and
// export id, and sync create --wait waits for its own task only: another
// task's FAILED sub-task does not fail it.
func TestCommandSyncTwoTasks(t *testing.T) {
	task := func(name, id, status string) *dspb.Task {
		return &dspb.Task{Status: proto.String(status), Count: proto.Uint64(3), DataCollector: proto.String("127.0.0.1:8200"),
			Progress: &dspb.AddSyncTaskRequest{Tid: proto.Uint32(1), Pid: proto.Uint32(1), Mode: dspb.SyncMode_kFull.Enum(),
				SyncPoint: &dspb.SyncPoint{Type: dspb.SyncType_kBINLOG.Enum(), Offset: proto.Uint64(9)}, Token: proto.String("t"),
				Dest: proto.String("file:///x/" + name), TaskName: proto.String(name), ExportId: proto.String(id)}}
	}
	idA, idB := strings.Repeat("a", 32), strings.Repeat("b", 32)
	f := &fakeSyncTool{
		tasks: []*dspb.Task{task("backup", idA, "SUCCESS"), task("migrate", idB, "FAILED")},
		info: []string{"lastUpdateTime=1796488200000;coveredIndex=8;coveredTime=0;lastPacketTime=1796488199000;exportId=" + idA + ";progressPath=p",
			"lastUpdateTime=1796488200000;coveredIndex=8;coveredTime=0;lastPacketTime=0;exportId=" + idB + ";progressPath=p;message=export " + idB + " refused"},
	}
	addrs := startFakeSyncTool(t, f)
	out := mustRun(t, addrs, nil, "sync", "status")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "POOL  NAME") || !strings.HasSuffix(lines[0], "EXPORT ID") ||
		!strings.Contains(lines[1], "backup") || !strings.HasSuffix(lines[1], idA) || !strings.Contains(lines[2], "migrate") || !strings.HasSuffix(lines[2], idB) {
		t.Fatalf("sync status:\n%s", out)
	}
	var js []syncSubTaskJSON
	if err := json.Unmarshal([]byte(mustRun(t, addrs, nil, "-o", "json", "sync", "status")), &js); err != nil || len(js) != 2 ||
		js[0].Name != "backup" || js[0].ExportID != idA || js[0].LastPacketTimeMs != 1796488199000 || js[1].Name != "migrate" || js[1].ExportID != idB {
		t.Fatalf("sync status -o json: %+v %v", js, err)
	}

	out = mustRun(t, addrs, nil, "-o", "json", "sync", "create", "--pool", "1", "--name", "backup", "--mode", "full", "--dest", "file:///x/backup", "--wait", "5s")
	if !strings.Contains(out, `"sub_tasks": 1`) || !strings.Contains(out, `"done": 1`) {
		t.Fatalf("sync create --wait of backup: %s", out)
	}
	if _, err := run(t, addrs, nil, "sync", "create", "--pool", "1", "--name", "migrate", "--mode", "full", "--dest", "file:///x/migrate", "--wait", "5s"); err == nil ||
		!strings.Contains(err.Error(), `sub-task of task "migrate" on copyset 1/1 FAILED: export `+idB+" refused") {
		t.Fatalf("sync create --wait of migrate: %v", err)
	}
}
