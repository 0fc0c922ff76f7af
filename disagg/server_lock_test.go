package disagg_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/chunkraft/chunkraft/chunkserver"
	"github.com/chunkraft/chunkraft/chunkserver/chunkservertest"
	"github.com/chunkraft/chunkraft/internal/objstore"
	"github.com/chunkraft/chunkraft/internal/objstore/fakes3"
	"github.com/chunkraft/chunkraft/internal/testwait"
	disaggpb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
	kvdisagg "github.com/chunkraft/chunkraft/proto/kvproto/disaggregated"
	kvtikv "github.com/chunkraft/chunkraft/proto/kvproto/tikvpb"
)

// testCluster is a chunkservertest cluster serving the disagg services, with this
// package's helpers.
type testCluster struct{ *chunkservertest.Cluster }

func startTestCluster(t *testing.T, n int, opts ...func(*chunkserver.Config)) *testCluster {
	t.Helper()
	return &testCluster{chunkservertest.Start(t, n, opts...)}
}

// The disagg tests call the servers with the client generated from
// kvproto's .proto files (the same wire as pingcap/kvproto's own client,
// which test/kvproto runs against the built binaries: its gogo types
// register the same proto names, so it cannot share a binary with the
// server).

// s3Cluster starts n servers whose object store is one in-process S3
// server over HTTP, and returns the cluster and a store on that bucket.
func s3Cluster(t *testing.T, n int, opts ...func(*chunkserver.Config)) (*testCluster, objstore.Store, objstore.S3Config) {
	t.Helper()
	cfg := objstore.S3Config{Endpoint: fakes3.Start(t, nil), Bucket: "tiflash", Prefix: "root/", AccessKey: "a", SecretKey: "b",
		Region: "us-east-1", BucketLookup: "path", CreateBucket: true}
	st, err := objstore.NewS3(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c := startTestCluster(t, n, append([]func(*chunkserver.Config){func(c *chunkserver.Config) { c.ObjectStore = objstore.Config{Kind: objstore.KindS3, S3: cfg} }}, opts...)...)
	return c, st, cfg
}

func (c *testCluster) tikv(i int) kvtikv.TikvClient { return kvtikv.NewTikvClient(c.Conns[i]) }

// lockAnswer is one S3LockResult as a word: success, not_owner or
// conflict: <reason>.
func lockAnswer(r *kvdisagg.S3LockResult) string {
	switch {
	case r.GetSuccess() != nil:
		return "success"
	case r.GetNotOwner() != nil:
		return "not_owner"
	case r.GetConflict() != nil:
		return "conflict: " + r.GetConflict().GetReason()
	}
	return fmt.Sprintf("no result: %v", r)
}

// onOwner runs call on the servers in turn until one answers other than
// not_owner (a leader change under load moves the owner), as a client
// does.
func (c *testCluster) onOwner(t *testing.T, call func(i int) string) string {
	t.Helper()
	var answer string
	i := 0
	testwait.Until(t, 20*time.Second, func() error {
		if answer = call(i % len(c.Servers)); answer == "not_owner" {
			i++
			return errors.New("no server answered as the owner")
		}
		return nil
	})
	return answer
}

// addLock is tryAddLock on server i, or on the owner when i < 0.
func (c *testCluster) addLock(t *testing.T, i int, key string, store, seq uint64) string {
	t.Helper()
	if i < 0 {
		return c.onOwner(t, func(i int) string { return c.addLock(t, i, key, store, seq) })
	}
	resp, err := c.tikv(i).TryAddLock(t.Context(), &kvdisagg.TryAddLockRequest{DataFileKey: []byte(key), LockStoreId: store, LockSeq: seq})
	if err != nil {
		t.Fatalf("tryAddLock %s on %d: %v", key, i, err)
	}
	return lockAnswer(resp.GetResult())
}

// markDelete is tryMarkDelete on server i, or on the owner when i < 0.
func (c *testCluster) markDelete(t *testing.T, i int, key string) string {
	t.Helper()
	if i < 0 {
		return c.onOwner(t, func(i int) string { return c.markDelete(t, i, key) })
	}
	resp, err := c.tikv(i).TryMarkDelete(t.Context(), &kvdisagg.TryMarkDeleteRequest{DataFileKey: []byte(key)})
	if err != nil {
		t.Fatalf("tryMarkDelete %s on %d: %v", key, i, err)
	}
	return lockAnswer(resp.GetResult())
}

// onOwnerIndex runs call on the servers in turn until it reports the
// owner answered, and returns that server.
func (c *testCluster) onOwnerIndex(t *testing.T, call func(i int) bool) int {
	t.Helper()
	owner := -1
	c.onOwner(t, func(i int) string {
		if call(i) {
			owner = i
			return "done"
		}
		return "not_owner"
	})
	return owner
}

// follower returns a server that does not lead the lock copyset now.
func (c *testCluster) follower(t *testing.T) int {
	t.Helper()
	for i, srv := range c.Servers {
		if n := srv.Copysets().Get(c.Group); n != nil && !n.IsLeader() {
			return i
		}
	}
	t.Fatal("no follower")
	return -1
}

func putObject(t *testing.T, st objstore.Store, name string) {
	t.Helper()
	if err := st.Put(t.Context(), name, bytes.NewReader([]byte("x")), 1); err != nil {
		t.Fatal(err)
	}
}

func objectNames(t *testing.T, st objstore.Store, prefix string) []string {
	t.Helper()
	objs, err := st.List(t.Context(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, o.Name)
	}
	return out
}

func expect(t *testing.T, what, got, want string) {
	t.Helper()
	if !strings.HasPrefix(got, want) {
		t.Errorf("%s: %q, want %q", what, got, want)
	}
}

// The lock service through kvproto's client on a 3-server cluster over
// S3: the conflict table end to end with the objects upstream writes,
// not_owner from the followers, bad keys, release, GetDisaggConfig.
func TestDisaggLockService(t *testing.T) {
	c, st, cfg := s3Cluster(t, 3)
	f := c.follower(t)
	const dat, dmf = "s1/data/dat_5_0", "s2/data/ks_3_t_100/dmf_7"

	got, err := c.tikv(f).GetDisaggConfig(t.Context(), &kvdisagg.GetDisaggConfigRequest{})
	if s := got.GetS3Config(); err != nil || s.GetBucket() != "tiflash" || s.GetRoot() != "root/" || s.GetEndpoint() != cfg.Endpoint {
		t.Errorf("GetDisaggConfig: %v %v", got, err)
	}

	expect(t, "lock on a missing file", c.addLock(t, -1, dat, 9, 1), "conflict: data file not exist, key="+dat)
	putObject(t, st, dat)
	putObject(t, st, dmf) // a DTFile exists when its meta does
	expect(t, "lock on a DTFile without meta", c.addLock(t, -1, dmf, 9, 1), "conflict: data file not exist")
	putObject(t, st, dmf+"/meta")

	expect(t, "lock from a follower", c.addLock(t, f, dat, 9, 1), "not_owner")
	f = c.follower(t)
	expect(t, "mark from a follower", c.markDelete(t, f, dat), "not_owner")
	expect(t, "lock", c.addLock(t, -1, dat, 9, 1), "success")
	expect(t, "the same lock again", c.addLock(t, -1, dat, 9, 1), "success")
	expect(t, "lock the DTFile", c.addLock(t, -1, dmf, 4, 2), "success")
	if got := objectNames(t, st, "lock/"); strings.Join(got, " ") != "lock/s1/dat_5_0.lock_s9_1 lock/s2/ks_3_t_100/dmf_7.lock_s4_2" {
		t.Errorf("lock objects: %v", got)
	}
	expect(t, "mark a locked file", c.markDelete(t, -1, dat), "conflict: data file is locked, key=s1/data/dat_5_0 lock_by=lock/s1/dat_5_0.lock_s9_1")

	for _, bad := range []string{"s1/data/dat_5_0.del", "lock/s1/dat_5_0.lock_s9_1", "s1/manifest/mf_1", "nonsense", ""} {
		_, err := c.tikv(0).TryAddLock(t.Context(), &kvdisagg.TryAddLockRequest{DataFileKey: []byte(bad), LockStoreId: 1, LockSeq: 1})
		_, err2 := c.tikv(1).TryMarkDelete(t.Context(), &kvdisagg.TryMarkDeleteRequest{DataFileKey: []byte(bad)})
		for _, e := range []error{err, err2} {
			if grpcstatus.Code(e) != codes.Internal || !strings.Contains(e.Error(), "not a data file key") {
				t.Errorf("key %q: %v, want INTERNAL not a data file key", bad, e)
			}
		}
	}

	// Release store 9's locks up to seq 1: the table entry and its object go.
	var rel *disaggpb.ReleaseResponse
	c.onOwner(t, func(i int) string {
		var err error
		rel, err = disaggpb.NewDisaggInternalClient(c.Conns[i]).Release(t.Context(), &disaggpb.ReleaseRequest{LockStoreId: 9, UpToSeq: 1})
		if err != nil || rel.GetNotOwner() {
			return "not_owner"
		}
		return "done"
	})
	if strings.Join(rel.GetReleased(), " ") != "lock/s1/dat_5_0.lock_s9_1" {
		t.Fatalf("release: %v", rel)
	}
	if got := objectNames(t, st, "lock/s1/"); len(got) != 0 {
		t.Errorf("lock objects after release: %v", got)
	}
	expect(t, "mark after release", c.markDelete(t, -1, dat), "success")
	expect(t, "mark again", c.markDelete(t, -1, dat), "success")
	if got := objectNames(t, st, dat); strings.Join(got, " ") != dat+" "+dat+".del" {
		t.Errorf("objects of %s: %v", dat, got)
	}
	expect(t, "lock a marked file", c.addLock(t, -1, dat, 9, 2), "conflict: data file is mark deleted, key=s1/data/dat_5_0 delmark=s1/data/dat_5_0.del")

	// Every replica holds the table; List answers on the leader only.
	var list *disaggpb.ListResponse
	l := c.onOwnerIndex(t, func(i int) bool {
		var err error
		list, err = disaggpb.NewDisaggInternalClient(c.Conns[i]).List(t.Context(), &disaggpb.ListRequest{})
		return err == nil && !list.GetNotOwner()
	})
	if len(list.GetFiles()) != 2 || !list.GetFiles()[0].GetDeleted() || len(list.GetFiles()[1].GetLocks()) != 1 {
		t.Fatalf("list: %v", list)
	}
	// chunkraft_disagg_requests_total counted every answer above.
	// (Summed over the servers: a leader change under load moves the
	// owner; not_owner answers count the retries too.)
	for _, m := range []struct {
		op, result string
		want       float64
	}{
		{"lock", "success", 3}, {"lock", "conflict", 3}, {"lock", "not_owner", 1}, {"lock", "error", 5},
		{"mark_delete", "conflict", 1}, {"mark_delete", "success", 2}, {"mark_delete", "not_owner", 1}, {"mark_delete", "error", 5},
		{"release", "success", 1},
	} {
		got := 0.0
		for _, srv := range c.Servers {
			got += disaggRequests(t, srv, m.op, m.result)
		}
		if got != m.want && (m.result != "not_owner" || got < m.want) {
			t.Errorf("requests{%s,%s} = %v, want %v", m.op, m.result, got, m.want)
		}
	}
	f = (l + 1) % 3
	if fl, err := disaggpb.NewDisaggInternalClient(c.Conns[f]).List(t.Context(), &disaggpb.ListRequest{}); err != nil || !fl.GetNotOwner() || fl.GetLeader() != string(c.Servers[l].Local()) {
		t.Errorf("list on a follower: %v %v", fl, err)
	}
}

// With the local-directory object store GetDisaggConfig is UNIMPLEMENTED.
func TestDisaggConfigLocalStore(t *testing.T) {
	c := startTestCluster(t, 1)
	_, err := c.tikv(0).GetDisaggConfig(t.Context(), &kvdisagg.GetDisaggConfigRequest{})
	if grpcstatus.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "no S3 object store is configured") {
		t.Fatalf("GetDisaggConfig: %v", err)
	}
	// The read views need no object store: cancelling an unknown task is
	// an empty answer (idempotent).
	if _, err := c.tikv(0).CancelDisaggTask(t.Context(), &kvdisagg.CancelDisaggTaskRequest{}); err != nil {
		t.Errorf("CancelDisaggTask: %v", err)
	}
}

// Concurrent tryAddLock and tryMarkDelete on one key, each retried on
// not_owner on every server, while the lock copyset's leadership moves:
// never both a success, and the table agrees with the answers.
func TestDisaggLockOrMarkAcrossLeaderChange(t *testing.T) {
	c, st, _ := s3Cluster(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for round := range 6 {
		key := fmt.Sprintf("s1/data/dat_%d_0", round)
		putObject(t, st, key)
		var wg sync.WaitGroup
		var lock, mark string
		try := func(call func(i int) string) string {
			for i := 0; ctx.Err() == nil; i++ {
				if a := call(i % 3); a != "not_owner" {
					return a
				}
				time.Sleep(20 * time.Millisecond)
			}
			return "timeout"
		}
		wg.Go(func() {
			lock = try(func(i int) string {
				resp, err := c.tikv(i).TryAddLock(ctx, &kvdisagg.TryAddLockRequest{DataFileKey: []byte(key), LockStoreId: 2, LockSeq: uint64(round)})
				if err != nil {
					return "not_owner" // a gRPC error: upstream's client retries too
				}
				return lockAnswer(resp.GetResult())
			})
		})
		wg.Go(func() {
			mark = try(func(i int) string {
				resp, err := c.tikv(i).TryMarkDelete(ctx, &kvdisagg.TryMarkDeleteRequest{DataFileKey: []byte(key)})
				if err != nil {
					return "not_owner"
				}
				return lockAnswer(resp.GetResult())
			})
		})
		l := c.Leader(t)
		if err := c.Servers[l].Copysets().Get(c.Group).TransferLeaderAny(ctx); err != nil {
			t.Logf("round %d: transfer: %v", round, err)
		}
		wg.Wait()
		if (lock == "success") == (mark == "success") {
			t.Fatalf("round %d: lock %q, mark %q: exactly one must win", round, lock, mark)
		}
		var list *disaggpb.ListResponse
		var err error
		end, _ := ctx.Deadline()
		testwait.Until(t, time.Until(end), func() error {
			list, err = disaggpb.NewDisaggInternalClient(c.Conns[c.Leader(t)]).List(ctx, &disaggpb.ListRequest{Prefix: key})
			if err == nil && list.GetNotOwner() {
				return fmt.Errorf("round %d: list: the leader of the lock copyset is not the owner", round)
			}
			return nil
		})
		if err != nil || len(list.GetFiles()) != 1 {
			t.Fatalf("round %d: list: %v %v", round, list, err)
		}
		e := list.GetFiles()[0]
		if e.GetDeleted() != (mark == "success") || (len(e.GetLocks()) == 1) != (lock == "success") {
			t.Fatalf("round %d: lock %q, mark %q, table %v", round, lock, mark, e)
		}
	}
}

// disaggRequests reads chunkraft_disagg_requests_total{op, result} from
// the server's metrics registry.
func disaggRequests(t *testing.T, srv *chunkserver.Server, op, result string) float64 {
	t.Helper()
	fams, err := srv.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "chunkraft_disagg_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["op"] == op && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no chunkraft_disagg_requests_total{op=%q,result=%q}", op, result)
	return 0
}
