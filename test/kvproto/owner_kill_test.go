package kvproto

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
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

// TestLockOrMarkAcrossOwnerKill: two lockers (stores 5 and 6) and a
// marker work through the same keys at once, each retrying every server
// on not_owner and gRPC errors, while the owner is killed with SIGKILL in
// the middle. For every key either the mark wins and both locks are
// refused, or the mark is refused and at least one lock wins; and the
// object store agrees: each winner's object exists, each loser's not.
func TestLockOrMarkAcrossOwnerKill(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	procs, st, _, clients := s3Servers(t, ctx, 3)
	const keys = 80
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
		locks := [2][]string{make([]string, keys), make([]string, keys)} // stores 5 and 6
		marks := make([]string, keys)
		var locked, marked atomic.Int32 // keys decided by each
		var wg sync.WaitGroup
		for l := range locks {
			wg.Go(func() {
				for j := range keys {
					i := (j + l*keys/3) % keys // the second locker starts a third of the way in
					locks[l][i] = retry(ctx, clients, func(ctx context.Context, c kvtikv.TikvClient) (*kvdisagg.S3LockResult, error) {
						resp, err := c.TryAddLock(ctx, &kvdisagg.TryAddLockRequest{DataFileKey: []byte(key(i)), LockStoreId: uint64(5 + l), LockSeq: uint64(10 + round)})
						return resp.GetResult(), err
					})
					locked.Add(1)
				}
			})
		}
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
		t.Logf("round %d: %d answers were not_owner or a gRPC error (retried)", round, retried.Load())
		retried.Store(0)
		exists := func(name string) bool {
			_, err := st.Stat(ctx, name)
			if err != nil && !errors.Is(err, objstore.ErrNotExist) {
				t.Fatal(err)
			}
			return err == nil
		}
		for i := range keys {
			l5, l6, m := locks[0][i], locks[1][i], marks[i]
			for _, a := range []string{l5, l6, m} {
				if a != "success" && a != "conflict" {
					t.Fatalf("round %d key %s: an answer %q", round, key(i), a)
				}
			}
			if (m == "success") == (l5 == "success" || l6 == "success") {
				t.Fatalf("round %d key %s: lock by 5 %s, lock by 6 %s, mark %s: the mark or the locks must win", round, key(i), l5, l6, m)
			}
			for l, a := range []string{l5, l6} {
				if obj := fmt.Sprintf("lock/s1/dat_%d_%d.lock_s%d_%d", round, i, 5+l, 10+round); (a == "success") != exists(obj) {
					t.Fatalf("round %d key %s: lock by %d %s, its object there: %v", round, key(i), 5+l, a, exists(obj))
				}
			}
			if (m == "success") != exists(key(i)+".del") {
				t.Fatalf("round %d key %s: mark %s, the .del there: %v", round, key(i), m, exists(key(i)+".del"))
			}
		}
		t.Logf("round %d: killed server %d; %d keys, marks won %d, locks won %d and %d", round, o, keys, count(marks, "success"),
			count(locks[0], "success"), count(locks[1], "success"))
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
