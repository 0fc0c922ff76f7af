package cli

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	disaggpb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
	dpb "github.com/chunkraft/chunkraft/proto/kvproto/disaggregated"
	"github.com/chunkraft/chunkraft/proto/kvproto/tikvpb"
)

// fakeLockServer is one server of a fake lock service: the owner keeps a
// table of locks per key; the others answer not_owner (List and Release
// naming the owner).
type fakeLockServer struct {
	tikvpb.UnimplementedTikvServer
	disaggpb.UnimplementedDisaggInternalServer
	owner *fakeLockServer
	addr  string

	mu     sync.Mutex
	locks  map[string][]*disaggpb.Lock
	clones []*disaggpb.DataFile // listed after locks
	calls  int
	config *dpb.DisaggS3Config
}

func (f *fakeLockServer) isOwner() bool { return f.owner == f }

func (f *fakeLockServer) TryAddLock(_ context.Context, req *dpb.TryAddLockRequest) (*dpb.TryAddLockResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if !f.isOwner() {
		return &dpb.TryAddLockResponse{Result: notOwner()}, nil
	}
	k := string(req.GetDataFileKey())
	f.locks[k] = append(f.locks[k], &disaggpb.Lock{StoreId: req.GetLockStoreId(), Seq: req.GetLockSeq(), Index: 7})
	return &dpb.TryAddLockResponse{Result: success()}, nil
}

func (f *fakeLockServer) TryMarkDelete(_ context.Context, req *dpb.TryMarkDeleteRequest) (*dpb.TryMarkDeleteResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if !f.isOwner() {
		return &dpb.TryMarkDeleteResponse{Result: notOwner()}, nil
	}
	return &dpb.TryMarkDeleteResponse{Result: &dpb.S3LockResult{Error: &dpb.S3LockResult_Conflict{
		Conflict: &dpb.Conflict{Reason: "data file is locked, key=" + string(req.GetDataFileKey()) + " lock_by=lock/x"}}}}, nil
}

func (f *fakeLockServer) GetDisaggConfig(context.Context, *dpb.GetDisaggConfigRequest) (*dpb.GetDisaggConfigResponse, error) {
	if f.config == nil {
		return nil, status.Error(codes.Unimplemented, "no S3 object store is configured")
	}
	return &dpb.GetDisaggConfigResponse{S3Config: f.config}, nil
}

func (f *fakeLockServer) List(context.Context, *disaggpb.ListRequest) (*disaggpb.ListResponse, error) {
	if !f.isOwner() {
		return &disaggpb.ListResponse{NotOwner: true, Leader: f.owner.addr + ":0"}, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := &disaggpb.ListResponse{}
	for k, ls := range f.locks {
		out.Files = append(out.Files, &disaggpb.DataFile{Key: k, Locks: ls})
	}
	out.Files = append(out.Files, f.clones...)
	return out, nil
}

func (f *fakeLockServer) Release(_ context.Context, req *disaggpb.ReleaseRequest) (*disaggpb.ReleaseResponse, error) {
	if !f.isOwner() {
		return &disaggpb.ReleaseResponse{NotOwner: true, Leader: f.owner.addr + ":0"}, nil
	}
	return &disaggpb.ReleaseResponse{Released: []string{"lock/s1/dat_1_0.lock_s2_3"}}, nil
}

func notOwner() *dpb.S3LockResult {
	return &dpb.S3LockResult{Error: &dpb.S3LockResult_NotOwner{NotOwner: &dpb.NotOwner{}}}
}

func success() *dpb.S3LockResult {
	return &dpb.S3LockResult{Error: &dpb.S3LockResult_Success{Success: &dpb.Success{}}}
}

// startFakeLockService starts n fake servers; the last is the owner.
func startFakeLockService(t *testing.T, n int) ([]*fakeLockServer, []string) {
	t.Helper()
	var fs []*fakeLockServer
	var addrs []string
	for range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		f := &fakeLockServer{addr: lis.Addr().String(), locks: map[string][]*disaggpb.Lock{}}
		g := grpc.NewServer()
		tikvpb.RegisterTikvServer(g, f)
		disaggpb.RegisterDisaggInternalServer(g, f)
		go g.Serve(lis)
		t.Cleanup(g.Stop)
		fs, addrs = append(fs, f), append(addrs, f.addr)
	}
	for _, f := range fs {
		f.owner = fs[n-1]
	}
	return fs, addrs
}

// chunkctl disagg finds the owner behind not_owner answers, prints rows
// and JSON, and a conflict or a server error is one line and exit 1.
func TestCommandDisagg(t *testing.T) {
	fs, addrs := startFakeLockService(t, 3)
	out := mustRun(t, addrs, nil, "disagg", "lock", "add", "--key", "s1/data/dat_1_0", "--store", "2", "--seq", "3")
	if !strings.Contains(out, "s1/data/dat_1_0  success") || len(fs[2].locks["s1/data/dat_1_0"]) != 1 {
		t.Fatalf("lock add: %q, owner's table %v", out, fs[2].locks)
	}
	out, err := run(t, addrs, nil, "disagg", "lock", "mark-delete", "--key", "s1/data/dat_1_0")
	if err == nil || err.Error() != "conflict: data file is locked, key=s1/data/dat_1_0 lock_by=lock/x" || !strings.Contains(out, "conflict") {
		t.Fatalf("mark-delete: %q %v", out, err)
	}
	out = mustRun(t, addrs[:1], nil, "-o", "json", "disagg", "lock", "list") // only a follower given: its not_owner names the owner
	var files []disaggFileJSON
	if err := json.Unmarshal([]byte(out), &files); err != nil || len(files) != 1 || files[0].Key != "s1/data/dat_1_0" ||
		len(files[0].Locks) != 1 || files[0].Locks[0] != (disaggLockJSON{Store: 2, Seq: 3, Index: 7}) {
		t.Fatalf("list: %q %v", out, err)
	}
	if out := mustRun(t, addrs[:1], nil, "disagg", "lock", "release", "--store", "2", "--up-to-seq", "3"); !strings.Contains(out, "lock/s1/dat_1_0.lock_s2_3") {
		t.Fatalf("release: %q", out)
	}
	if _, err := run(t, addrs, nil, "disagg", "config"); err == nil || !strings.Contains(err.Error(), "no S3 object store is configured") {
		t.Fatalf("config on a local store: %v", err)
	}
	for _, f := range fs {
		f.config = &dpb.DisaggS3Config{Bucket: "b", Root: "r/", Endpoint: "h:9000"}
	}
	if out := mustRun(t, addrs, nil, "disagg", "config"); !strings.Contains(out, "b       r/    h:9000") {
		t.Fatalf("config: %q", out)
	}
	calls := fs[2].calls
	if _, err := run(t, addrs, nil, "disagg", "lock", "add", "--key", "k", "--store", "1"); err == nil || !strings.Contains(err.Error(), `"seq" not set`) || fs[2].calls != calls {
		t.Fatalf("missing --seq: %v", err)
	}
}

func (f *fakeLockServer) Gc(_ context.Context, req *disaggpb.GcRequest) (*disaggpb.GcResponse, error) {
	if !f.isOwner() {
		return &disaggpb.GcResponse{NotOwner: true, Leader: f.owner.addr + ":0"}, nil
	}
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	resp := &disaggpb.GcResponse{
		Marked:  []*disaggpb.GcObject{{Name: req.GetPrefix() + "b", MarkedMs: 1_700_000_000_000}},
		Removed: []*disaggpb.GcObject{{Name: req.GetPrefix() + "c", MarkedMs: 1_600_000_000_000}},
		Locked:  []*disaggpb.GcObject{{Name: req.GetPrefix() + "a", LockBy: "clone:1/1/5"}},
		Skipped: 1,
	}
	if req.GetGraceMs() == 0 {
		resp.Stopped = "the lock table holds 3072 entries"
	}
	return resp, nil
}

// chunkctl disagg gc: rows and a summary, JSON, bad input refused before
// any call, a run that stopped early exits 1 after its report; the
// holders of clone locks in lock list.
func TestCommandDisaggGc(t *testing.T) {
	fs, addrs := startFakeLockService(t, 2)
	out := mustRun(t, addrs[:1], nil, "disagg", "gc", "--prefix", "img/", "--grace", "2h")
	for _, want := range []string{"marked   img/b   marked 2023-11-14T22:13:20Z", "removed  img/c", "kept     img/a   locked by clone:1/1/5",
		"marked 1, removed 1, kept 1 (locked), waiting 0, skipped 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("gc output lacks %q:\n%s", want, out)
		}
	}
	out = mustRun(t, addrs, nil, "-o", "json", "disagg", "gc", "--prefix", "img/")
	var js disaggGcJSON
	if err := json.Unmarshal([]byte(out), &js); err != nil || js.Grace != "1h0m0s" || len(js.Kept) != 1 || js.Kept[0].LockBy != "clone:1/1/5" || len(js.Waiting) != 0 {
		t.Fatalf("gc json: %q %v", out, err)
	}
	calls := fs[1].calls
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"disagg", "gc", "--prefix", ""}, "gc needs a prefix"},
		{[]string{"disagg", "gc"}, `"prefix" not set`},
		{[]string{"disagg", "gc", "--prefix", "x/", "--grace", "-1s"}, "must not be negative"},
	} {
		if _, err := run(t, addrs, nil, bad.args...); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: %v, want %q", bad.args, err, bad.want)
		}
	}
	if fs[1].calls != calls {
		t.Errorf("bad input reached the server")
	}
	fs[1].clones = []*disaggpb.DataFile{{Key: "img/a", CloneLocks: []*disaggpb.CloneLock{{Pool: 1, Copyset: 2, Chunk: 5, Index: 9, TimeMs: 1_700_000_000_000}}}}
	if out := mustRun(t, addrs, nil, "disagg", "lock", "list"); !strings.Contains(out, "img/a  false           clone:1/2/5") {
		t.Errorf("lock list of a clone lock: %q", out)
	}
	out = mustRun(t, addrs, nil, "-o", "json", "disagg", "lock", "list")
	var files []disaggFileJSON
	if err := json.Unmarshal([]byte(out), &files); err != nil || len(files) != 1 ||
		len(files[0].CloneLocks) != 1 || files[0].CloneLocks[0] != (disaggCloneLockJSON{Holder: "clone:1/2/5", Index: 9, Taken: "2023-11-14T22:13:20Z"}) {
		t.Errorf("lock list json: %q %v", out, err)
	}
	out, err := run(t, addrs, nil, "disagg", "gc", "--prefix", "img/", "--grace", "0s")
	if err == nil || !strings.Contains(err.Error(), "gc stopped early: the lock table holds 3072 entries") || !strings.Contains(out, "img/b") {
		t.Fatalf("stopped gc: %q %v", out, err)
	}
}
