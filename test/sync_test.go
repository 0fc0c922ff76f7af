package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	gosync "sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/cli"
)

// syncChunks are the chunks the sync tests write on each copyset: chunk 1
// takes a COW snapshot (written at sn 1, then at sn 2), chunks 2 and 3 stay
// at sn 1.
const syncChunks = 3

// syncSpan is the part of each chunk the sync tests write: 16 blocks.
const syncSpan = 16 * cli.BlockSize

// syncWriter writes random blocks of the sync tests' chunks until stopped.
type syncWriter struct {
	c        *cli.Client
	copysets []cli.CopysetID
	stop     atomic.Bool
	wg       gosync.WaitGroup
	n        atomic.Int64
}

func (w *syncWriter) start(seed uint64) {
	for g := range 4 {
		w.wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			for !w.stop.Load() {
				cs := w.copysets[rng.IntN(len(w.copysets))]
				chunk := uint64(1 + rng.IntN(syncChunks))
				sn := uint64(1)
				if chunk == 1 {
					sn = 2
				}
				data := bytes.Repeat([]byte{byte(rng.Uint32())}, cli.BlockSize)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				// A write that fails (its leader killed) may or may not have
				// been applied: the comparison is with what the source reads.
				if err := w.c.WriteChunk(ctx, cli.ChunkID{CopysetID: cs, Chunk: chunk}, uint32(rng.IntN(16))*cli.BlockSize, data, sn); err == nil {
					w.n.Add(1)
				}
				cancel()
			}
		})
	}
}

func (w *syncWriter) halt() { w.stop.Store(true); w.wg.Wait() }

// seedSyncChunks writes every sync test chunk once, chunk 1 twice (its COW
// snapshot at sn 1).
func seedSyncChunks(t *testing.T, c *cli.Client, copysets []cli.CopysetID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, cs := range copysets {
		for chunk := uint64(1); chunk <= syncChunks; chunk++ {
			id := cli.ChunkID{CopysetID: cs, Chunk: chunk}
			if err := c.WriteChunk(ctx, id, 0, bytes.Repeat([]byte{byte(chunk)}, syncSpan), 1); err != nil {
				t.Fatalf("write %v: %v", id, err)
			}
		}
		if err := c.WriteChunk(ctx, cli.ChunkID{CopysetID: cs, Chunk: 1}, 0, bytes.Repeat([]byte{9}, cli.BlockSize), 2); err != nil {
			t.Fatalf("write at sn 2: %v", err)
		}
	}
}

// syncStatus is `chunkctl sync status -o json`.
type syncStatus struct {
	Pool          uint32 `json:"pool"`
	Copyset       uint32 `json:"copyset"`
	Status        string `json:"status"`
	Point         string `json:"point"`
	Count         uint64 `json:"count"`
	DataCollector string `json:"data_collector"`
	Info          string `json:"info"`
}

func syncStatusOf(t *testing.T, servers []string) []syncStatus {
	t.Helper()
	out := mustCtl(t, servers, nil, "-o", "json", "sync", "status")
	var st []syncStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("sync status: %v\n%s", err, out)
	}
	return st
}

// syncTestConfig paces caught-up exports at 1 s (the default is 5 s), so
// that waitSynced's 3 s without movement means caught up.
const syncTestConfig = "sync:\n  send_interval: 1s\n"

// waitSynced waits until the task has one sub-task per copyset, none
// FAILED, every one past its snapshot phase and none of their points moved
// over 3 s (the writes have stopped, so the exports have caught up).
func waitSynced(t *testing.T, servers []string, copysets int, done func([]syncStatus) bool) []syncStatus {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var last []syncStatus
	for time.Now().Before(deadline) {
		st := syncStatusOf(t, servers)
		for _, s := range st {
			if s.Status == "FAILED" {
				t.Fatalf("sub-task %d/%d failed: %s", s.Pool, s.Copyset, s.Info)
			}
		}
		if len(st) == copysets && done(st) && slices.EqualFunc(st, last, func(a, b syncStatus) bool { return a.Point == b.Point && a.Status == b.Status }) {
			return st
		}
		last = st
		time.Sleep(3 * time.Second)
	}
	t.Fatalf("the export did not settle: %+v", last)
	return nil
}

// sameSyncChunks compares every sync test chunk of the source and the
// restore: GetChunkInfo (sn, snapshot sn), the data written and chunk 1's
// COW snapshot as ReadChunkSnapshot reads it.
func sameSyncChunks(t *testing.T, src, dst *cli.Client, copysets []cli.CopysetID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var snaps int
	for _, cs := range copysets {
		for chunk := uint64(1); chunk <= syncChunks; chunk++ {
			id := cli.ChunkID{CopysetID: cs, Chunk: chunk}
			want, err := src.GetChunkInfo(ctx, id)
			if err != nil {
				t.Fatalf("source %v: %v", id, err)
			}
			got, err := dst.GetChunkInfo(ctx, id)
			if err != nil || !slices.Equal(got, want) {
				t.Fatalf("restored %v: chunk info %v %v, the source's %v", id, got, err, want)
			}
			a, err := src.ReadChunk(ctx, id, 0, syncSpan)
			if err != nil {
				t.Fatalf("read source %v: %v", id, err)
			}
			b, err := dst.ReadChunk(ctx, id, 0, syncSpan)
			if err != nil || !bytes.Equal(a, b) {
				t.Fatalf("restored %v: data differs from the source's (%v)", id, err)
			}
			if len(want) == 2 { // sn and the COW snapshot's sn
				snaps++
				a, err := src.ReadChunkSnapshot(ctx, id, want[0], 0, syncSpan)
				if err != nil {
					t.Fatalf("read source snapshot of %v: %v", id, err)
				}
				b, err := dst.ReadChunkSnapshot(ctx, id, want[0], 0, syncSpan)
				if err != nil || !bytes.Equal(a, b) {
					t.Fatalf("restored %v: snapshot sn %d differs from the source's (%v)", id, want[0], err)
				}
			}
		}
	}
	if snaps == 0 {
		t.Fatal("no COW snapshot was compared")
	}
}

// restoreInto restores pool 1 of the export in dir into a fresh one-server
// cluster of the same copysets and returns its client and the summary.
func restoreInto(t *testing.T, dir string, copysets int, extra ...string) (*cluster, map[string]any) {
	t.Helper()
	dst := startCluster(t, 1)
	dst.createCopysets(t, copysets)
	out := mustCtl(t, dst.addrs(), nil, append([]string{"-o", "json", "sync", "restore", "--from", "file://" + dir, "--pool", "1", "--progress", "never"}, extra...)...)
	var sum map[string]any
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("restore summary: %v\n%s", err, out)
	}
	return dst, sum
}

// exportNames lists the export's object names; none may appear twice
// (a packet resent after a crash replaces itself).
func exportNames(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if strings.HasPrefix(rel, ".") {
			return nil // the dest's temp files
		}
		names = append(names, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestSyncExportRestore: a pool of 16 copysets exported with chunkctl sync
// create to file:// while clients write (COW snapshots included) and a
// copyset leader is killed with SIGKILL mid-export; the task resumes on the
// new leader with a new token; once the writes stop and the export has
// caught up, chunkctl sync restore into a second cluster (checking every
// crc and the chain of points) gives every chunk's GetChunkInfo, data and
// COW snapshot of the source. Then the task is deleted everywhere.
func TestSyncExportRestore(t *testing.T) {
	src := startClusterWithConfig(t, 3, syncTestConfig)
	copysets := src.createCopysets(t, 16)
	seedSyncChunks(t, src.client, copysets)
	dir := filepath.Join(t.TempDir(), "export")

	w := &syncWriter{c: src.client, copysets: copysets}
	w.start(1)
	mustCtl(t, src.addrs(), nil, "sync", "create", "--pool", "1", "--name", "backup", "--mode", "continuous", "--dest", "file://"+dir)
	time.Sleep(time.Second)

	// Kill the leader of copyset 1 mid-export; the new leader takes over.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leader, err := src.client.GetLeader(ctx, copysets[0])
	if err != nil {
		t.Fatal(err)
	}
	before := syncStatusOf(t, src.addrs())
	victim := src.proc(leader)
	if err := victim.Kill(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	others := slices.DeleteFunc(src.addrs(), func(a string) bool { return a == victim.Addr })
	time.Sleep(2 * time.Second)
	if err := victim.Start(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	w.halt()
	if w.n.Load() == 0 {
		t.Fatal("no write succeeded during the export")
	}

	st := waitSynced(t, others, len(copysets), func(st []syncStatus) bool {
		for _, s := range st {
			if !strings.HasPrefix(s.Point, "binlog ") {
				return false
			}
		}
		return true
	})
	var moved bool
	for _, s := range st {
		if s.Copyset == copysets[0].Copyset {
			for _, b := range before {
				if b.Copyset == s.Copyset && b.DataCollector == victim.Addr && s.DataCollector != victim.Addr {
					moved = true
				}
			}
		}
	}
	if !moved {
		t.Errorf("copyset %d's sub-task did not move off the killed leader %s: before %+v, after %+v", copysets[0].Copyset, victim.Addr, before, st)
	}
	names := exportNames(t, dir)
	if len(names) < len(copysets) {
		t.Fatalf("export holds %d objects", len(names))
	}

	dst, sum := restoreInto(t, dir, len(copysets))
	if fmt.Sprint(sum["copysets"]) == "" {
		t.Fatalf("restore summary %v", sum)
	}
	sameSyncChunks(t, src.client, dst.client, copysets)

	mustCtl(t, src.addrs(), nil, "sync", "delete", "--pool", "1", "--name", "backup")
	if st := syncStatusOf(t, src.addrs()); len(st) != 0 {
		t.Fatalf("sub-tasks after delete: %+v", st)
	}
	_, errOut, code := chunkctl(t, src.addrs(), nil, "sync", "delete", "--pool", "1", "--name", "backup")
	if code == 0 || !strings.Contains(errOut, "no such task") {
		t.Fatalf("second delete: exit %d %s", code, errOut)
	}
}

// TestSyncFullExport: a kFull export of a quiet pool finishes (every
// sub-task SUCCESS) and restores exactly; bad input to sync create is one
// line, a non-zero exit and nothing created.
func TestSyncFullExport(t *testing.T) {
	src := startClusterWithConfig(t, 1, syncTestConfig)
	copysets := src.createCopysets(t, 4)
	seedSyncChunks(t, src.client, copysets)
	dir := filepath.Join(t.TempDir(), "export")
	for _, bad := range [][]string{
		{"--pool", "1", "--name", "x", "--mode", "sometimes", "--dest", "file://" + dir},
		{"--pool", "9", "--name", "x", "--mode", "full", "--dest", "file://" + dir},
		{"--pool", "1", "--name", "x", "--mode", "full", "--dest", "file://relative"},
		{"--pool", "1", "--name", "x", "--mode", "full", "--dest", "s3://bucket/p"},
		{"--pool", "1", "--name", "", "--mode", "full", "--dest", "file://" + dir},
		{"--pool", "1", "--name", "x", "--mode", "incremental", "--dest", "file://" + dir},
	} {
		_, errOut, code := chunkctl(t, src.addrs(), nil, append([]string{"sync", "create"}, bad...)...)
		if code == 0 || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
			t.Errorf("create %v: exit %d, stderr %q: want one line and a non-zero exit", bad, code, errOut)
		}
	}
	if st := syncStatusOf(t, src.addrs()); len(st) != 0 {
		t.Fatalf("bad input created sub-tasks: %+v", st)
	}

	// Two tasks created for the pool at once: a create that fails leaves
	// nothing behind, so the pool ends with all of one task's sub-tasks or
	// none.
	var wg gosync.WaitGroup
	codes := make([]int, 2)
	for i, name := range []string{"race-a", "race-b"} {
		wg.Go(func() {
			_, _, codes[i] = chunkctl(t, src.addrs(), nil, "sync", "create", "--pool", "1", "--name", name, "--mode", "continuous", "--dest", "file://"+dir+"-"+name)
		})
	}
	wg.Wait()
	ok := 0
	for _, c := range codes {
		if c == 0 {
			ok++
		}
	}
	if st := syncStatusOf(t, src.addrs()); ok > 1 || len(st) != ok*len(copysets) {
		t.Fatalf("two creates at once: exits %v, then %d sub-tasks: %+v", codes, len(st), st)
	}
	_, _, _ = chunkctl(t, src.addrs(), nil, "sync", "delete", "--pool", "1", "--name", "race-a")
	_, _, _ = chunkctl(t, src.addrs(), nil, "sync", "delete", "--pool", "1", "--name", "race-b")
	if st := syncStatusOf(t, src.addrs()); len(st) != 0 {
		t.Fatalf("sub-tasks after deleting the raced tasks: %+v", st)
	}

	mustCtl(t, src.addrs(), nil, "sync", "create", "--pool", "1", "--name", "full", "--mode", "full", "--dest", "file://"+dir)
	waitSynced(t, src.addrs(), len(copysets), func(st []syncStatus) bool {
		for _, s := range st {
			if s.Status != "SUCCESS" {
				return false
			}
		}
		return true
	})
	dst, _ := restoreInto(t, dir, len(copysets))
	sameSyncChunks(t, src.client, dst.client, copysets)
	_, errOut, code := chunkctl(t, src.addrs(), nil, "sync", "create", "--pool", "1", "--name", "again", "--mode", "full", "--dest", "file://"+dir)
	if code == 0 || !strings.Contains(errOut, "already has sync task") {
		t.Fatalf("second task for the pool: exit %d %s", code, errOut)
	}
}
