package disagg

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/objstore"
	"github.com/chunkraft/chunkraft/internal/testwait"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
)

// lockService is a started service on a one-server lock copyset with a
// local object store.
func lockService(t *testing.T) (*Service, *copyset.Node, *Machine, objstore.Store) {
	t.Helper()
	c, n := lockCopyset(t)
	st, err := objstore.Open(t.Context(), objstore.Config{Kind: objstore.KindLocal, Local: objstore.LocalConfig{Root: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Clones.Disabled = true
	s := New(Deps{Config: cfg, Objects: st, Logger: slog.New(slog.DiscardHandler)})
	s.Attach(c.Servers[0].Mgr)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	m, _ := MachineOf(n)
	return s, n, m, st
}

func putObject(t *testing.T, st objstore.Store, name string) {
	t.Helper()
	if err := st.Put(t.Context(), name, bytes.NewReader(nil), 0); err != nil {
		t.Fatal(err)
	}
}

// Decisions left pending with no request to finish them (a leader that
// lost its leadership after the commit, a request that gave up) are
// completed by the settler: decided by the objects, their objects
// written, then settled. A mark that meets such a pending lock waits for
// it and is then refused by its lock object.
func TestOrphanedDecisionsCompleted(t *testing.T) {
	s, n, m, st := lockService(t)
	ctx := t.Context()
	const a, b, d = "s1/data/dat_1_0", "s1/data/dat_2_0", "s1/data/dat_3_0"
	putObject(t, st, a)
	putObject(t, st, b)
	for _, op := range []*pb.Op{pendLock(a, 4, 9), pendMark(b), pendLock(d, 4, 9)} { // d does not exist
		if _, ok, err := s.propose(ctx, n, op); err != nil || !ok {
			t.Fatalf("propose %v: %v %v", op, ok, err)
		}
	}
	k, _ := ParseKey(a)
	r, err := s.TryMarkDelete(ctx, []byte(a)) // waits for the pending lock
	if err != nil || r.GetConflict().GetReason() != lockedReason(a, k.LockKey(4, 9)) {
		t.Fatalf("mark behind an orphaned lock: %v %v", r, err)
	}
	testwait.Until(t, 10*time.Second, func() error {
		if p := m.pendings(""); len(p) != 0 {
			return fmt.Errorf("still pending: %v", p)
		}
		return nil
	})
	for name, want := range map[string]bool{k.LockKey(4, 9): true, b + DelMarkSuffix: true, "lock/s1/dat_3_0.lock_s4_9": false} {
		if got, err := s.exists(ctx, name); err != nil || got != want {
			t.Errorf("%s exists: %v %v, want %v", name, got, err, want)
		}
	}
}

// Files through TiFlash's GC cycle (lock, lock object deleted, mark, the
// file and its .del deleted), by four workers: every answer a success,
// and at the end nothing is pending, the table holds no entry and the
// state file stays near its compaction threshold, however many files went
// through.
func TestGcCycleLeavesNoState(t *testing.T) {
	old := compactMinBytes
	compactMinBytes = 64 << 10
	t.Cleanup(func() { compactMinBytes = old })
	s, _, m, st := lockService(t)
	ctx := t.Context()
	const files, workers = 4500, 4 // more than the 4096 files the table of older builds held
	cycle := func(ctx context.Context, i int) error {
		key := fmt.Sprintf("s7/data/dat_%d_0", i)
		if err := st.Put(ctx, key, bytes.NewReader(nil), 0); err != nil {
			return err
		}
		if r, err := s.TryAddLock(ctx, []byte(key), 3, uint64(i)); err != nil || r.GetSuccess() == nil {
			return fmt.Errorf("lock %s: %v %v", key, r, err)
		}
		k, _ := ParseKey(key)
		if err := st.Delete(ctx, k.LockKey(3, uint64(i))); err != nil {
			return err
		}
		if r, err := s.TryMarkDelete(ctx, []byte(key)); err != nil || r.GetSuccess() == nil {
			return fmt.Errorf("mark %s: %v %v", key, r, err)
		}
		if err := st.Delete(ctx, key); err != nil {
			return err
		}
		return st.Delete(ctx, k.DelMarkKey())
	}
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < files; i += workers {
				if err := cycle(ctx, i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, func() error {
		if p := m.pendings(""); len(p) != 0 {
			return fmt.Errorf("%d decisions still pending", len(p))
		}
		return nil
	})
	if n := m.size(); n != 0 {
		t.Fatalf("%d table entries after the cycle", n)
	}
	fi, err := os.Stat(filepath.Join(m.dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > 2*compactMinBytes {
		t.Fatalf("state file of %d bytes after %d files (compaction above %d)", fi.Size(), files, compactMinBytes)
	}
	t.Logf("state file: %d bytes after %d files", fi.Size(), files)
}
