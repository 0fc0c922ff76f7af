package kvproto

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	kvdisagg "github.com/pingcap/kvproto/pkg/disaggregated"
	kvtikv "github.com/pingcap/kvproto/pkg/tikvpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/chunkraft/chunkraft/internal/objstore"
	"github.com/chunkraft/chunkraft/internal/objstore/fakes3"
	"github.com/chunkraft/chunkraft/internal/testwait"
	"github.com/chunkraft/chunkraft/test"
)

var binDir string

func TestMain(m *testing.M) { os.Exit(test.RunWithBinaries(m, &binDir)) }

// s3Servers starts n chunkservers whose object store is one in-process S3
// server over HTTP (bucket tiflash, prefix cluster1), creates copyset 1/1
// on them (the lock copyset), and returns them with a store on the bucket
// and a kvproto Tikv client per server.
func s3Servers(t testing.TB, ctx context.Context, n int) ([]*test.Proc, objstore.Store, objstore.S3Config, []kvtikv.TikvClient) {
	t.Helper()
	s3 := objstore.S3Config{Endpoint: fakes3.Start(t, nil), Bucket: "tiflash", Prefix: "cluster1", AccessKey: "a", SecretKey: "b",
		Region: "us-east-1", BucketLookup: "path", CreateBucket: true}
	st, err := objstore.NewS3(ctx, s3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	config := fmt.Sprintf("object_store:\n  kind: s3\n  s3:\n    endpoint: %s\n    bucket: tiflash\n    prefix: cluster1\n    access_key: a\n    secret_key: b\n    region: us-east-1\n    bucket_lookup: path\n", s3.Endpoint)
	var procs []*test.Proc
	var addrs []string
	for i := range n {
		p, err := test.NewProc(filepath.Join(binDir, "chunkserver"), filepath.Join(t.TempDir(), fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(p.DataDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p.DataDir, "chunkserver.yaml"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := p.StartFirst(ctx); err != nil {
			t.Fatal(err)
		}
		procs, addrs = append(procs, p), append(addrs, p.Addr)
	}
	t.Cleanup(func() {
		for _, p := range procs {
			if err := p.Kill(syscall.SIGTERM); err != nil {
				t.Error(err)
			}
			if t.Failed() {
				t.Logf("log of %s:\n%s", p.Addr, p.LogTail())
			}
		}
	})
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "chunkctl"), "copyset", "create", "--pool", "1", "--copyset", "1",
		"--peers", strings.Join(addrs, ",")).CombinedOutput()
	if err != nil {
		t.Fatalf("copyset create: %v\n%s", err, out)
	}
	var clients []kvtikv.TikvClient
	for _, a := range addrs {
		cc, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		clients = append(clients, kvtikv.NewTikvClient(cc))
	}
	return procs, st, s3, clients
}

// TestKvprotoClient: upstream's generated client, unchanged, drives the
// lock service of a one-server cluster whose object store is an S3
// server over HTTP: GetDisaggConfig, tryAddLock's conflicts and success
// (the lock object under upstream's name), tryMarkDelete's conflict, a
// non-data-file key as a gRPC INTERNAL error.
func TestKvprotoClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	_, st, s3, clients := s3Servers(t, ctx, 1)
	c := clients[0]

	cfg, err := c.GetDisaggConfig(ctx, &kvdisagg.GetDisaggConfigRequest{})
	if s := cfg.GetS3Config(); err != nil || s.GetBucket() != "tiflash" || s.GetRoot() != "cluster1/" || s.GetEndpoint() != s3.Endpoint {
		t.Fatalf("GetDisaggConfig: %v %v", cfg, err)
	}

	const key = "s7/data/t_42/dmf_3"
	lock := func() *kvdisagg.S3LockResult {
		t.Helper()
		// The copyset has just been created: until it has a leader the
		// answer is not_owner, and the client retries, as upstream's does.
		var r *kvdisagg.S3LockResult
		end, _ := ctx.Deadline()
		testwait.Until(t, time.Until(end), func() error {
			resp, err := c.TryAddLock(ctx, &kvdisagg.TryAddLockRequest{DataFileKey: []byte(key), LockStoreId: 8, LockSeq: 12})
			if err != nil {
				t.Fatalf("tryAddLock: %v", err)
			}
			if r = resp.GetResult(); r.GetNotOwner() != nil {
				return errors.New("no owner")
			}
			return nil
		})
		return r
	}
	if r := lock(); !strings.HasPrefix(r.GetConflict().GetReason(), "data file not exist, key="+key) {
		t.Fatalf("lock on a missing DTFile: %v", r)
	}
	if err := st.Put(ctx, key+"/meta", bytes.NewReader([]byte("m")), 1); err != nil {
		t.Fatal(err)
	}
	if r := lock(); r.GetSuccess() == nil {
		t.Fatalf("lock: %v", r)
	}
	if _, err := st.Stat(ctx, "lock/s7/t_42/dmf_3.lock_s8_12"); err != nil {
		t.Fatalf("the lock object: %v", err)
	}
	md, err := c.TryMarkDelete(ctx, &kvdisagg.TryMarkDeleteRequest{DataFileKey: []byte(key)})
	if err != nil || md.GetResult().GetConflict().GetReason() != "data file is locked, key="+key+" lock_by=lock/s7/t_42/dmf_3.lock_s8_12" {
		t.Fatalf("mark a locked file: %v %v", md, err)
	}
	_, err = c.TryMarkDelete(ctx, &kvdisagg.TryMarkDeleteRequest{DataFileKey: []byte("s7/manifest/mf_1")})
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "not a data file key") {
		t.Fatalf("a manifest key: %v", err)
	}
}

// TestLocksAndMarksAreObjects: the lock and delete-mark objects in S3 say
// which locks and marks exist, as upstream. A lock released the way
// TiFlash's GC releases it (its object deleted in S3) no longer blocks
// the mark, which then writes the .del; a lock object written directly
// blocks a mark; a .del written directly refuses a lock; a file whose
// objects are all deleted leaves nothing behind in the state.
func TestLocksAndMarksAreObjects(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	procs, st, _, clients := s3Servers(t, ctx, 3)
	o, err := owner(ctx, clients, -1)
	if err != nil {
		t.Fatal(err)
	}
	c := clients[o]
	var addrs []string
	for _, p := range procs {
		addrs = append(addrs, p.Addr)
	}
	// Another server answers not_owner and names the owner in a header.
	var md metadata.MD
	resp, err := clients[(o+1)%3].TryMarkDelete(ctx, &kvdisagg.TryMarkDeleteRequest{DataFileKey: []byte("s101/data/dat_9_0")}, grpc.Header(&md))
	if err != nil || resp.GetResult().GetNotOwner() == nil || len(md.Get("chunkraft-owner")) != 1 || md.Get("chunkraft-owner")[0] != addrs[o] {
		t.Fatalf("tryMarkDelete on a server that is not the owner: %v %v, header %v (owner %s)", resp, err, md, addrs[o])
	}
	put := func(name string) {
		t.Helper()
		if err := st.Put(ctx, name, bytes.NewReader(nil), 0); err != nil {
			t.Fatal(err)
		}
	}
	lock := func(key string, store, seq uint64) *kvdisagg.S3LockResult {
		t.Helper()
		resp, err := c.TryAddLock(ctx, &kvdisagg.TryAddLockRequest{DataFileKey: []byte(key), LockStoreId: store, LockSeq: seq})
		if err != nil {
			t.Fatalf("tryAddLock %s: %v", key, err)
		}
		return resp.GetResult()
	}
	mark := func(key string) *kvdisagg.S3LockResult {
		t.Helper()
		resp, err := c.TryMarkDelete(ctx, &kvdisagg.TryMarkDeleteRequest{DataFileKey: []byte(key)})
		if err != nil {
			t.Fatalf("tryMarkDelete %s: %v", key, err)
		}
		return resp.GetResult()
	}
	exists := func(name string) bool {
		t.Helper()
		_, err := st.Stat(ctx, name)
		if err != nil && !errors.Is(err, objstore.ErrNotExist) {
			t.Fatal(err)
		}
		return err == nil
	}

	// Locked, the lock object deleted in S3, then marked.
	const a = "s101/data/dat_1_0"
	put(a)
	if r := lock(a, 2, 7); r.GetSuccess() == nil {
		t.Fatalf("lock: %v", r)
	}
	if err := st.Delete(ctx, "lock/s101/dat_1_0.lock_s2_7"); err != nil {
		t.Fatal(err)
	}
	if r := mark(a); r.GetSuccess() == nil || !exists(a+".del") {
		t.Fatalf("mark after the lock object was deleted: %v (.del there: %v)", r, exists(a+".del"))
	}
	if r := lock(a, 3, 1); !strings.HasPrefix(r.GetConflict().GetReason(), "data file is mark deleted, key="+a) {
		t.Fatalf("lock of a marked file: %v", r)
	}

	// A lock object written directly blocks a mark.
	const b = "s101/data/dat_2_0"
	put(b)
	put("lock/s101/dat_2_0.lock_s5_9")
	if r := mark(b); r.GetConflict().GetReason() != "data file is locked, key="+b+" lock_by=lock/s101/dat_2_0.lock_s5_9" || exists(b+".del") {
		t.Fatalf("mark of a file with a lock object: %v", r)
	}

	// A .del written directly refuses a lock.
	const d = "s101/data/dat_3_0"
	put(d)
	put(d + ".del")
	if r := lock(d, 2, 8); r.GetConflict().GetReason() != "data file is mark deleted, key="+d+" delmark="+d+".del" || exists("lock/s101/dat_3_0.lock_s2_8") {
		t.Fatalf("lock of a file with a .del: %v", r)
	}

	// TiFlash's GC removes the files and their .del: nothing stays in the
	// lock table (only decisions in flight ever were).
	for _, name := range []string{a, a + ".del", d, d + ".del"} {
		if err := st.Delete(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Until(t, time.Minute, func() error {
		var entries []struct {
			Key     string `json:"key"`
			Deleted bool   `json:"deleted"`
			Locks   []struct {
				Store uint64 `json:"store"`
				Seq   uint64 `json:"seq"`
			} `json:"locks"`
			Pending []any `json:"pending"`
		}
		out := chunkctl(t, ctx, addrs, "disagg", "lock", "list", "--prefix", "s101/", "-o", "json")
		if err := json.Unmarshal(out, &entries); err != nil {
			t.Fatalf("disagg lock list -o json: %v\n%s", err, out)
		}
		if len(entries) != 1 || entries[0].Key != b || entries[0].Deleted || len(entries[0].Locks) != 1 || entries[0].Locks[0].Store != 5 ||
			len(entries[0].Pending) != 0 {
			return fmt.Errorf("lock list: %s, want only %s locked by s5_9, nothing pending", out, b)
		}
		return nil
	})
}
