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
