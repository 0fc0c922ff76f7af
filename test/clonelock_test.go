package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/cli"
	"github.com/chunkraft/chunkraft/internal/objstore"
	"github.com/chunkraft/chunkraft/internal/objstore/fakes3"
	"github.com/chunkraft/chunkraft/internal/testwait"
)

// cloneLockClones is how many @s3 clones TestCloneLocksAcrossKill
// creates, spread over copysets 1/1 (the lock copyset) and 1/2.
const cloneLockClones = 12

// cloneSource is the object clone i reads from.
func cloneSource(i int) string { return fmt.Sprintf("src/%02d", i) }

// cloneChunk is clone i's chunk: even ones in 1/1, odd ones in 1/2.
func cloneChunk(i int) cli.ChunkID {
	return cli.ChunkID{CopysetID: cli.CopysetID{Pool: pool, Copyset: uint32(1 + i%2)}, Chunk: uint64(100 + i)}
}

// cloneHolders maps each object under prefix to its clone holders.
func cloneHolders(ctx context.Context, c *cli.Client, prefix string) (map[string][]string, error) {
	resp, err := c.DisaggList(ctx, prefix)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, f := range resp.GetFiles() {
		for _, l := range f.GetCloneLocks() {
			out[f.GetKey()] = append(out[f.GetKey()], fmt.Sprintf("clone:%d/%d/%d", l.GetPool(), l.GetCopyset(), l.GetChunk()))
		}
	}
	return out, nil
}

// forEachClone runs op on every clone in turn, each retried until it
// succeeds (one cut by a kill may or may not have committed: every op
// here is idempotent), and counts those done; an error only once ctx
// ends.
func forEachClone(ctx context.Context, done *atomic.Int32, op func(i int) error) error {
	for i := range cloneLockClones {
		for err := op(i); err != nil; err = op(i) {
			if ctx.Err() != nil {
				return fmt.Errorf("clone %d: %w", i, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		done.Add(1)
	}
	return nil
}

// killLeaderDuring kills -9 the leader of cs once three clones are done,
// and starts it again once three more are (done without it).
func (c *cluster) killLeaderDuring(t *testing.T, ctx context.Context, cs cli.CopysetID, done *atomic.Int32) {
	t.Helper()
	waitFor(t, ctx, "three clones done", func() (bool, error) { return done.Load() >= 3, nil })
	leader, err := c.client.GetLeader(ctx, cs)
	if err != nil {
		t.Fatalf("leader of %v: %v", cs, err)
	}
	p := c.proc(leader)
	if p == nil {
		t.Fatalf("leader %s of %v is none of the servers", leader, cs)
	}
	if err := p.Kill(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "six clones done, the leader of "+cs.String()+" killed", func() (bool, error) { return done.Load() >= 6, nil })
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitFor waits until cond holds, for as long as ctx lasts.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() (bool, error)) {
	t.Helper()
	end, ok := ctx.Deadline()
	if !ok {
		t.Fatalf("waitFor %s: ctx has no deadline", what)
	}
	testwait.Until(t, time.Until(end), func() error {
		if ok, err := cond(); !ok {
			return fmt.Errorf("%s: never happened (last error: %v)", what, err)
		}
		return nil
	})
}

// s3CloneCluster starts n servers on an in-process S3 server over HTTP
// (bucket, no prefix), with clone locks of a 2 s grace looked at every
// 200 ms, and returns them with a store on the bucket.
func s3CloneCluster(t *testing.T, ctx context.Context, n int, bucket string) (*cluster, objstore.Store) {
	t.Helper()
	endpoint := fakes3.Start(t, nil)
	st, err := objstore.NewS3(ctx, objstore.S3Config{Endpoint: endpoint, Bucket: bucket, AccessKey: "a", SecretKey: "b",
		Region: "us-east-1", BucketLookup: "path", CreateBucket: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c := startClusterWithConfig(t, n, fmt.Sprintf(`object_store:
  kind: s3
  s3:
    endpoint: %s
    bucket: %s
    access_key: a
    secret_key: b
    region: us-east-1
    bucket_lookup: path
disagg:
  clone_locks:
    grace: 2s
    interval: 200ms
`, endpoint, bucket))
	return c, st
}

// TestCloneLocksAcrossKill: @s3 clones over an S3 server on real HTTP,
// their source locks taken and released across kill -9. Clones are
// created while the lock owner is killed and restarted: afterwards every
// clone's source is locked, and gc keeps them all and collects only an
// object no clone reads. Then the clones are recovered or deleted while
// gc runs over and over and the clone copyset's leader is killed and
// restarted: no run removes a source whose clone was still there when it
// began (nor marks it in a run it outlived). At the end (after the grace,
// 2 s here) every lock has gone and gc collects every source.
func TestCloneLocksAcrossKill(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process kill test")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, st := s3CloneCluster(t, ctx, 3, "clones")
	copysets := c.createCopysets(t, 2) // 1/1 is the lock copyset
	for i := range cloneLockClones {
		if err := st.Put(ctx, cloneSource(i), bytes.NewReader([]byte("source")), 6); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Put(ctx, "src/unused", bytes.NewReader([]byte("x")), 1); err != nil {
		t.Fatal(err)
	}

	// Create the clones one after another and kill the owner after the
	// third.
	var created atomic.Int32
	var wg sync.WaitGroup
	var createErr error
	wg.Go(func() {
		createErr = forEachClone(ctx, &created, func(i int) error {
			return c.client.CreateCloneChunk(ctx, cloneChunk(i), cloneSource(i)+"@s3", 1, 0)
		})
	})
	c.killLeaderDuring(t, ctx, copysets[0], &created)
	wg.Wait()
	if createErr != nil {
		t.Fatal(createErr)
	}
	holders, err := cloneHolders(ctx, c.client, "src/")
	if err != nil {
		t.Fatal(err)
	}
	for i := range cloneLockClones {
		want := fmt.Sprintf("clone:%d/%d/%d", pool, cloneChunk(i).Copyset, cloneChunk(i).Chunk)
		if !slices.Contains(holders[cloneSource(i)], want) {
			t.Fatalf("clone %d exists, its source %s is not locked by it: %v", i, cloneSource(i), holders)
		}
	}
	// gc keeps every source in use and collects the unused object (marked
	// by the first run, removed by the second).
	for run := range 2 {
		r, err := c.client.DisaggGc(ctx, "src/", 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.GetLocked()) != cloneLockClones {
			t.Fatalf("gc run %d kept %d objects, want the %d sources: %v", run, len(r.GetLocked()), cloneLockClones, r)
		}
		for _, o := range append(r.GetMarked(), r.GetRemoved()...) {
			if o.GetName() != "src/unused" {
				t.Fatalf("gc run %d collected %s, a source in use", run, o.GetName())
			}
		}
	}
	if _, err := st.Stat(ctx, "src/unused"); !errors.Is(err, objstore.ErrNotExist) {
		t.Fatalf("src/unused after two gc runs: %v", err)
	}

	// Recover the even clones fully, delete the odd ones, while gc runs
	// over and over; kill the leader of 1/2 after the first few. Until its
	// recover or delete is sent, a clone surely exists: a run that began
	// before must not remove its source (a removal takes a mark in an
	// earlier run), one that ended before must not mark it.
	started := make([]atomic.Bool, cloneLockClones)
	var done atomic.Int32
	var opErr error
	wg.Go(func() {
		opErr = forEachClone(ctx, &done, func(i int) error {
			started[i].Store(true)
			if i%2 == 0 {
				return c.client.RecoverChunk(ctx, cloneChunk(i), 0, cli.CloneChunkSize)
			}
			return c.client.DeleteChunk(ctx, cloneChunk(i), 0)
		})
	})
	stopGc := make(chan struct{})
	var gcRuns atomic.Int32
	var gcErr error
	var gcWG sync.WaitGroup
	gcWG.Go(func() {
		for {
			select {
			case <-stopGc:
				return
			default:
			}
			inUse := func() []string {
				var out []string
				for i := range started {
					if !started[i].Load() {
						out = append(out, cloneSource(i))
					}
				}
				return out
			}
			before := inUse()
			r, err := c.client.DisaggGc(ctx, "src/", 0)
			if err != nil {
				time.Sleep(50 * time.Millisecond) // the owner killed or moving: the next run retries
				continue
			}
			after := inUse()
			for _, o := range r.GetRemoved() {
				if slices.Contains(before, o.GetName()) {
					gcErr = fmt.Errorf("a gc run removed %s, whose clone existed when the run began", o.GetName())
					return
				}
			}
			for _, o := range r.GetMarked() {
				if slices.Contains(after, o.GetName()) {
					gcErr = fmt.Errorf("a gc run marked %s, whose clone existed throughout the run", o.GetName())
					return
				}
			}
			for _, name := range after {
				if _, err := st.Stat(ctx, name); err != nil {
					gcErr = fmt.Errorf("source %s of an existing clone: %w", name, err)
					return
				}
			}
			gcRuns.Add(1)
			time.Sleep(20 * time.Millisecond)
		}
	})
	c.killLeaderDuring(t, ctx, copysets[1], &done)
	wg.Wait()
	if opErr != nil {
		t.Fatal(opErr)
	}
	// Every lock goes (after the grace), then gc collects every source.
	waitFor(t, ctx, "the clone locks released", func() (bool, error) {
		h, err := cloneHolders(ctx, c.client, "src/")
		return err == nil && len(h) == 0, err
	})
	close(stopGc)
	gcWG.Wait()
	if gcErr != nil {
		t.Fatal(gcErr)
	}
	t.Logf("%d gc runs while the clones went", gcRuns.Load())
	waitFor(t, ctx, "every source collected", func() (bool, error) {
		if _, err := c.client.DisaggGc(ctx, "src/", 0); err != nil {
			return false, err
		}
		objs, err := st.List(ctx, "src/")
		return err == nil && len(objs) == 0, err
	})
	if resp, err := c.client.DisaggList(ctx, ""); err != nil || len(resp.GetFiles()) != 0 {
		t.Fatalf("the lock table at the end: %v %v", resp.GetFiles(), err)
	}
}
