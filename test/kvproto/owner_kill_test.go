package kvproto

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	gosync "sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	kvdisagg "github.com/pingcap/kvproto/pkg/disaggregated"
	kvtikv "github.com/pingcap/kvproto/pkg/tikvpb"

	"github.com/chunkraft/chunkraft/internal/objstore"
	"github.com/chunkraft/chunkraft/internal/testwait"
)

// owner returns the index of the server that answers as the lock owner:
// a lock on a file that does not exist is a conflict there (nothing is
// proposed) and not_owner elsewhere.
func owner(ctx context.Context, clients []kvtikv.TikvClient, skip int) (int, error) {
	end, ok := ctx.Deadline()
	if !ok {
		return -1, errors.New("owner: ctx has no deadline")
	}
	found := -1
	err := testwait.For(time.Until(end), func() error {
		for i, c := range clients {
			if i == skip {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			resp, err := c.TryAddLock(cctx, &kvdisagg.TryAddLockRequest{DataFileKey: []byte("s999/data/dat_0_0"), LockStoreId: 1, LockSeq: 1})
			cancel()
			if err == nil && resp.GetResult().GetConflict() != nil {
				found = i
				return nil
			}
		}
		return errors.New("no owner")
	})
	return found, err
}

// retried counts the answers retry retried.
var retried atomic.Int64

// retry calls op on the servers in turn until one answers other than
// not_owner or a gRPC error (what upstream's S3LockClient does) and
// returns "success" or "conflict".
func retry(ctx context.Context, clients []kvtikv.TikvClient, op func(ctx context.Context, c kvtikv.TikvClient) (*kvdisagg.S3LockResult, error)) string {
	for i := 0; ctx.Err() == nil; i++ {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		r, err := op(cctx, clients[i%len(clients)])
		cancel()
		switch {
		case err != nil || r.GetNotOwner() != nil:
			retried.Add(1)
			time.Sleep(10 * time.Millisecond)
		case r.GetSuccess() != nil:
			return "success"
		case r.GetConflict() != nil:
			return "conflict"
		}
	}
	return "timeout"
}

// TestLockOrMarkAcrossOwnerKill: a locker and a marker work through the
// same keys at once, each retrying every server on not_owner and gRPC
// errors, while the owner is killed with SIGKILL in the middle. For every
// key exactly one of them wins, and the object store agrees: the lock
// object and no .del, or the .del and no lock object.
func TestLockOrMarkAcrossOwnerKill(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	procs, st, _, clients := s3Servers(t, ctx, 3)
	const keys = 40
	for round := range 2 {
		key := func(i int) string { return fmt.Sprintf("s1/data/dat_%d_%d", round, i) }
		for i := range keys {
			if err := st.Put(ctx, key(i), bytes.NewReader([]byte("d")), 1); err != nil {
				t.Fatal(err)
			}
		}
		o, err := owner(ctx, clients, -1)
		if err != nil {
			t.Fatal(err)
		}
		locks, marks := make([]string, keys), make([]string, keys)
		var locked, marked atomic.Int32 // keys decided by each
		var wg gosync.WaitGroup
		wg.Go(func() {
			for i := range keys {
				locks[i] = retry(ctx, clients, func(ctx context.Context, c kvtikv.TikvClient) (*kvdisagg.S3LockResult, error) {
					resp, err := c.TryAddLock(ctx, &kvdisagg.TryAddLockRequest{DataFileKey: []byte(key(i)), LockStoreId: 5, LockSeq: uint64(10 + round)})
					return resp.GetResult(), err
				})
				locked.Add(1)
			}
		})
		wg.Go(func() {
			for i := keys - 1; i >= 0; i-- { // from the other end: they meet in the middle
				marks[i] = retry(ctx, clients, func(ctx context.Context, c kvtikv.TikvClient) (*kvdisagg.S3LockResult, error) {
					resp, err := c.TryMarkDelete(ctx, &kvdisagg.TryMarkDeleteRequest{DataFileKey: []byte(key(i))})
					return resp.GetResult(), err
				})
				marked.Add(1)
			}
		})
		// The owner dies once both are under way.
		testwait.Until(t, time.Minute, func() error {
			if l, m := locked.Load(), marked.Load(); l < 2 || m < 2 {
				return fmt.Errorf("round %d: %d keys locked or refused, %d marked or refused; want 2 each before the kill", round, l, m)
			}
			return nil
		})
		if err := procs[o].Kill(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if err := procs[o].Start(ctx); err != nil {
			t.Fatal(err)
		}
		won := 0
		t.Logf("round %d: %d answers were not_owner or a gRPC error (retried)", round, retried.Load())
		retried.Store(0)
		for i := range keys {
			l, m := locks[i], marks[i]
			if (l == "success") == (m == "success") || (l != "success" && l != "conflict") || (m != "success" && m != "conflict") {
				t.Fatalf("round %d key %s: lock %s, mark %s: exactly one must win", round, key(i), l, m)
			}
			lockObj := fmt.Sprintf("lock/s1/dat_%d_%d.lock_s5_%d", round, i, 10+round)
			_, lerr := st.Stat(ctx, lockObj)
			_, derr := st.Stat(ctx, key(i)+".del")
			if (l == "success") != (lerr == nil) || (m == "success") != (derr == nil) ||
				(lerr != nil && !errors.Is(lerr, objstore.ErrNotExist)) || (derr != nil && !errors.Is(derr, objstore.ErrNotExist)) {
				t.Fatalf("round %d key %s: lock %s (object: %v), mark %s (.del: %v)", round, key(i), l, lerr, m, derr)
			}
			won++
		}
		t.Logf("round %d: killed server %d; %d keys decided, locks won %d", round, o, won, count(locks, "success"))
	}
}

func count(s []string, v string) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}
