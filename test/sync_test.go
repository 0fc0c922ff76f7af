package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/cli"
	"github.com/chunkraft/chunkraft/datasync/dest"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/datasync/restore"
	"github.com/chunkraft/chunkraft/internal/objstore"
	"github.com/chunkraft/chunkraft/internal/objstore/fakes3"
	"github.com/chunkraft/chunkraft/internal/testwait"
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
	wg       sync.WaitGroup
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
	Name          string `json:"name"`
	ExportID      string `json:"exportId"`
	Dest          string `json:"dest"`
	Status        string `json:"status"`
	Point         string `json:"point"`
	Count         uint64 `json:"count"`
	DataCollector string `json:"data_collector"`
	Token         string `json:"token"`
	CoveredIndex  uint64 `json:"coveredIndex"`
	CoveredTime   string `json:"coveredTime"`
	CoveredTimeMs int64  `json:"coveredTimeMs"`
	Info          string `json:"info"`
}

// exportRetries counts per copyset the exports that failed and are tried
// again ("sync export interrupted; retrying" in the servers' logs).
func exportRetries(procs []*Proc) map[uint32]int {
	out := map[uint32]int{}
	for _, p := range procs {
		for line := range strings.SplitSeq(readLog(p), "\n") {
			if !strings.Contains(line, `"msg":"sync export interrupted; retrying"`) {
				continue
			}
			var rec struct {
				Copyset uint32 `json:"copyset"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil {
				out[rec.Copyset]++
			}
		}
	}
	return out
}

// A partial status (a copyset without a leader that answers, as in an
// election) is asked again for up to 30 s.
func syncStatusOf(t *testing.T, servers []string) []syncStatus {
	t.Helper()
	var out string
	testwait.Until(t, 30*time.Second, func() error {
		var errOut string
		var code int
		out, errOut, code = chunkctl(t, servers, nil, "-o", "json", "sync", "status")
		switch {
		case code == 0:
			return nil
		case !strings.Contains(errOut, "(partial)"):
			t.Fatalf("sync status: exit %d\n%s%s", code, out, errOut)
		}
		return fmt.Errorf("sync status: exit %d\n%s%s", code, out, errOut)
	})
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

// syncChunk is what a client reads of one sync test chunk: GetChunkInfo
// (sn, and the COW snapshot's sn when it has one), GetChunkHash and the
// data of the part written, and the COW snapshot as ReadChunkSnapshot
// reads it.
type syncChunk struct {
	info       []uint64
	hash       string
	data, snap []byte
}

// readSyncChunks reads every sync test chunk of copysets, in copyset then
// chunk order.
func readSyncChunks(t *testing.T, c *cli.Client, copysets []cli.CopysetID) []syncChunk {
	t.Helper()
	out, err := readSyncChunksErr(c, copysets)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// readSyncChunksErr is readSyncChunks returning the first failure.
func readSyncChunksErr(c *cli.Client, copysets []cli.CopysetID) ([]syncChunk, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out []syncChunk
	for _, cs := range copysets {
		for chunk := uint64(1); chunk <= syncChunks; chunk++ {
			id := cli.ChunkID{CopysetID: cs, Chunk: chunk}
			var s syncChunk
			var err error
			if s.info, err = c.GetChunkInfo(ctx, id); err != nil {
				return nil, fmt.Errorf("chunk info of %v: %w", id, err)
			}
			// The hash most replicas report (one still catching up after a
			// restart may lag behind the others).
			_, hc, err := c.SettledChunkHashes(ctx, id, 0, syncSpan, 10*time.Second)
			if err != nil || hc.Diverged || hc.Hash == "" {
				return nil, fmt.Errorf("hash of %v: %+v %v", id, hc, err)
			}
			s.hash = hc.Hash
			if s.data, err = c.ReadChunk(ctx, id, 0, syncSpan); err != nil {
				return nil, fmt.Errorf("read %v: %w", id, err)
			}
			if len(s.info) == 2 { // sn and the COW snapshot's sn
				if s.snap, err = c.ReadChunkSnapshot(ctx, id, s.info[0], 0, syncSpan); err != nil {
					return nil, fmt.Errorf("read the snapshot of %v: %w", id, err)
				}
			}
			out = append(out, s)
		}
	}
	return out, nil
}

// sameChunkStates compares what readSyncChunks read of copysets (want,
// the source) and of their restore (got); at least one COW snapshot must
// have been compared.
func sameChunkStates(t *testing.T, want, got []syncChunk, copysets []cli.CopysetID) {
	t.Helper()
	var snaps int
	for i, w := range want {
		id := cli.ChunkID{CopysetID: copysets[i/syncChunks], Chunk: uint64(i%syncChunks + 1)}
		g := got[i]
		switch {
		case !slices.Equal(g.info, w.info):
			t.Fatalf("restored %v: chunk info %v, the source's %v", id, g.info, w.info)
		case g.hash != w.hash:
			t.Fatalf("restored %v: GetChunkHash %s, the source's %s", id, g.hash, w.hash)
		case !bytes.Equal(g.data, w.data):
			t.Fatalf("restored %v: data differs from the source's", id)
		case !bytes.Equal(g.snap, w.snap):
			t.Fatalf("restored %v: snapshot sn %d differs from the source's", id, w.info[0])
		}
		if w.snap != nil {
			snaps++
		}
	}
	if snaps == 0 {
		t.Fatal("no COW snapshot was compared")
	}
}

// sameSyncChunks compares every sync test chunk of the source and the
// restore (the same copysets): GetChunkInfo (sn, snapshot sn),
// GetChunkHash, the data written and chunk 1's COW snapshot as
// ReadChunkSnapshot reads it.
func sameSyncChunks(t *testing.T, src, dst *cli.Client, copysets []cli.CopysetID) {
	t.Helper()
	sameChunkStates(t, readSyncChunks(t, src, copysets), readSyncChunks(t, dst, copysets), copysets)
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

// checkExportChains checks the export in d of every sub-task in st (all
// settled past their snapshot phase): a copyset's packets, in name order,
// form an unbroken chain of points (exportfmt.Chain: each name is its
// start point's, names strictly increase, each packet starts where the one
// before ends) from the start to the sub-task's point; its manifest is a
// chain too, names no packet twice and lists the export's first packets.
func checkExportChains(t *testing.T, d dest.Dest, st []syncStatus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, s := range st {
		objs, err := d.List(ctx, exportfmt.CopysetPrefix(s.Pool, s.Copyset))
		if err != nil {
			t.Fatal(err)
		}
		chain := exportfmt.NewChain(s.Pool, s.Copyset)
		var names []string
		for _, o := range objs {
			if !strings.HasSuffix(o.Name, exportfmt.PacketSuffix) {
				continue
			}
			b, err := d.Get(ctx, o.Name)
			if err != nil {
				t.Fatal(err)
			}
			p, err := exportfmt.Decode(b)
			if err != nil {
				t.Fatalf("packet %s: %v", o.Name, err)
			}
			if err := chain.AddPacket(o.Name, p); err != nil {
				t.Fatalf("copyset %d/%d: %v", s.Pool, s.Copyset, err)
			}
			names = append(names, o.Name)
		}
		first, _ := chain.Start()
		next, _ := chain.Next()
		if first != exportfmt.StartPoint() || next.Phase != exportfmt.PhaseBinlog || "binlog "+strconv.FormatUint(next.Index, 10) != s.Point {
			t.Fatalf("copyset %d/%d: %d packets from %v to %v, the sub-task is at %s", s.Pool, s.Copyset, chain.Len(), first, next, s.Point)
		}
		m, err := restore.ReadManifest(ctx, d, s.Pool, s.Copyset) // manifest.pb and its sealed parts
		if err != nil {
			t.Fatal(err)
		}
		if m == nil || len(m.Packets) == 0 || len(m.Packets) > len(names) {
			t.Fatalf("copyset %d/%d: manifest %v for %d packets", s.Pool, s.Copyset, m, len(names))
		}
		if _, err := exportfmt.CheckManifest(m); err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for i, e := range m.Packets {
			if seen[e.Name] || e.Name != names[i] {
				t.Fatalf("copyset %d/%d: manifest entry %d is %s (seen before: %v), the export's packet %d is %s", s.Pool, s.Copyset, i, e.Name, seen[e.Name], i, names[i])
			}
			seen[e.Name] = true
		}
	}
}

// openDest opens an export's dest as the restore does.
func openDest(t *testing.T, url string, server objstore.Config) dest.Dest {
	t.Helper()
	u, err := dest.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dest.Open(context.Background(), u, server)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// leaderApplied returns the raft index copyset cs's leader has applied.
func leaderApplied(t *testing.T, c *cli.Client, cs cli.CopysetID) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := c.CopysetStatus(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Err == nil && r.Hosted && r.Leader != "" && r.Peer == r.Leader {
			return uint64(r.Applied)
		}
	}
	t.Fatalf("no leader of %v in %+v", cs, rows)
	return 0
}

// TestSyncExportRestore: a pool of 16 copysets exported with chunkctl sync
// create (continuous) to file:// while clients write (COW snapshots
// included) and a copyset leader is killed with SIGKILL mid-export; the
// task resumes on the new leader with a new token. Then, the writes paused,
// copyset 1's state at its applied raft index N is read, and writes resume
// (changing its chunks, and creating one). Once the writes stop and the
// export has caught up, every copyset's packets form an unbroken chain to
// its sub-task's point and its manifest names no packet twice; chunkctl
// sync restore into a second cluster gives every chunk's GetChunkInfo,
// data and COW snapshot of the source, and sync restore --copysets 1
// --until-index N gives copyset 1 as it was at N. Then the task is deleted
// everywhere.
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
	// The victim comes back once the new leader has taken copyset 1's
	// sub-task over (another collector, a new token).
	testwait.Until(t, 30*time.Second, func() error {
		for _, s := range syncStatusOf(t, others) {
			if s.Copyset != copysets[0].Copyset {
				continue
			}
			for _, b := range before {
				if b.Copyset == s.Copyset && s.DataCollector != victim.Addr && s.Token != b.Token && s.Token != "" {
					return nil
				}
			}
			return fmt.Errorf("copyset %d's sub-task is not taken over from %s: %+v", s.Copyset, victim.Addr, s)
		}
		return fmt.Errorf("no sub-task of copyset %d listed", copysets[0].Copyset)
	})
	if err := victim.Start(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	w.halt()
	if w.n.Load() == 0 {
		t.Fatal("no write succeeded during the export")
	}

	// Copyset 1 at raft index N (no write in flight; the log may go on
	// with the sync service's own entries, which change no chunk), once
	// its new collector is past the snapshot phase (whose reads an
	// --until-index must not precede).
	at := copysets[:1]
	testwait.Until(t, 30*time.Second, func() error {
		st := syncStatusOf(t, others)
		i := slices.IndexFunc(st, func(s syncStatus) bool { return s.Copyset == at[0].Copyset })
		if i < 0 || st[i].DataCollector == victim.Addr || !strings.HasPrefix(st[i].Point, "binlog ") {
			return fmt.Errorf("copyset %d's sub-task is not past its snapshot phase on a new collector: %+v", at[0].Copyset, st)
		}
		return nil
	})
	untilIndex := leaderApplied(t, src.client, at[0])
	atN := readSyncChunks(t, src.client, at)
	// Writes after N: random ones again, chunk 2's first block changed for
	// sure, and a chunk that did not exist at N.
	w = &syncWriter{c: src.client, copysets: copysets}
	w.start(2)
	flipped := bytes.Clone(atN[1].data[:cli.BlockSize])
	for i := range flipped {
		flipped[i] ^= 0xff
	}
	newChunk := cli.ChunkID{CopysetID: at[0], Chunk: syncChunks + 1}
	if err := src.client.WriteChunk(ctx, cli.ChunkID{CopysetID: at[0], Chunk: 2}, 0, flipped, 1); err != nil {
		t.Fatal(err)
	}
	if err := src.client.WriteChunk(ctx, newChunk, 0, syncBlock(7), 1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	w.halt()

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
				if b.Copyset == s.Copyset && b.DataCollector == victim.Addr && s.DataCollector != victim.Addr && s.Token != b.Token && s.Token != "" {
					moved = true
				}
			}
			var next uint64
			if _, err := fmt.Sscanf(s.Point, "binlog %d", &next); err != nil || next <= untilIndex+1 {
				t.Fatalf("copyset %d's export is at %q, not past index %d", s.Copyset, s.Point, untilIndex)
			}
		}
	}
	if !moved {
		t.Errorf("copyset %d's sub-task did not move off the killed leader %s with a new token: before %+v, after %+v", copysets[0].Copyset, victim.Addr, before, st)
	}
	checkExportChains(t, openDest(t, "file://"+dir, objstore.Config{}), st)

	dst, sum := restoreInto(t, dir, len(copysets))
	if fmt.Sprint(sum["copysets"]) == "" {
		t.Fatalf("restore summary %v", sum)
	}
	sameSyncChunks(t, src.client, dst.client, copysets)

	// Copyset 1 as of index N, into pool 2 of the second cluster.
	toAt := []cli.CopysetID{{Pool: 2, Copyset: at[0].Copyset}}
	if _, err := dst.client.CreateCopysets(ctx, toAt, dst.addrs()); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.client.GetLeader(ctx, toAt[0]); err != nil {
		t.Fatal(err)
	}
	out := mustCtl(t, dst.addrs(), nil, "-o", "json", "sync", "restore", "--from", "file://"+dir, "--pool", "1", "--to-pool", "2",
		"--copysets", fmt.Sprint(at[0].Copyset), "--until-index", fmt.Sprint(untilIndex), "--progress", "never")
	var untilSum struct {
		Copysets []struct{ Copyset, UntilIndex uint64 }
	}
	if err := json.Unmarshal([]byte(out), &untilSum); err != nil || len(untilSum.Copysets) != 1 || untilSum.Copysets[0].UntilIndex != untilIndex {
		t.Fatalf("restore --until-index %d: %v\n%s", untilIndex, err, out)
	}
	sameChunkStates(t, atN, readSyncChunks(t, dst.client, toAt), at)
	if now := readSyncChunks(t, src.client, at); bytes.Equal(now[1].data, atN[1].data) {
		t.Fatal("chunk 2 of copyset 1 did not change after index N")
	}
	if sns, err := dst.client.GetChunkInfo(ctx, cli.ChunkID{CopysetID: toAt[0], Chunk: newChunk.Chunk}); err != nil || len(sns) != 0 {
		t.Fatalf("chunk %d, written after index %d, restored as of it: %v %v", newChunk.Chunk, untilIndex, sns, err)
	}

	mustCtl(t, src.addrs(), nil, "sync", "delete", "--pool", "1", "--name", "backup")
	if st := syncStatusOf(t, src.addrs()); len(st) != 0 {
		t.Fatalf("sub-tasks after delete: %+v", st)
	}
	_, errOut, code := chunkctl(t, src.addrs(), nil, "sync", "delete", "--pool", "1", "--name", "backup")
	if code == 0 || !strings.Contains(errOut, "no such task") {
		t.Fatalf("second delete: exit %d %s", code, errOut)
	}
}

// seededSyncCluster starts a one-server cluster paced for the sync tests
// (syncTestConfig) with n copysets of pool 1, writes the sync test chunks
// on each and returns it with a context for its calls (2 minutes).
func seededSyncCluster(t *testing.T, n int) (*cluster, []cli.CopysetID, context.Context) {
	t.Helper()
	src := startClusterWithConfig(t, 1, syncTestConfig)
	copysets := src.createCopysets(t, n)
	seedSyncChunks(t, src.client, copysets)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return src, copysets, ctx
}

// TestSyncCoveredAndEarliestTime: sync create --wait of a continuous
// export returns once every sub-task covers the writes acknowledged before
// the wait began (its covered time, -o json coveredTimeMs, is at or after
// it); a write acknowledged afterwards, with no write after it, is covered
// (coveredIndex at least its index, coveredTimeMs after it) within a few
// send intervals. A restore --until-time T, T before the export began but
// after a write that the export's starting state holds, is refused naming
// the earliest time it can restore and writes nothing; that time, as
// printed, restores that state.
func TestSyncCoveredAndEarliestTime(t *testing.T) {
	src, copysets, ctx := seededSyncCluster(t, 2)
	before := time.Now().UnixMilli()
	testwait.Until(t, time.Second, func() error {
		if now := time.Now().UnixMilli(); now <= before {
			return fmt.Errorf("the clock is at %d ms, not past %d", now, before)
		}
		return nil
	})
	late := cli.ChunkID{CopysetID: copysets[0], Chunk: syncChunks + 1} // created after before
	if err := src.client.WriteChunk(ctx, late, 0, syncBlock(5), 1); err != nil {
		t.Fatal(err)
	}

	dir := filepath.Join(t.TempDir(), "export")
	waitFrom := time.Now().UnixMilli()
	var created struct {
		Wait struct {
			Done        int    `json:"done"`
			CoveredTime string `json:"coveredTime"`
		} `json:"wait"`
	}
	out := mustCtl(t, src.addrs(), nil, "-o", "json", "sync", "create", "--pool", "1", "--name", "backup", "--mode", "continuous",
		"--dest", "file://"+dir, "--wait", "1m")
	if err := json.Unmarshal([]byte(out), &created); err != nil || created.Wait.Done != len(copysets) || created.Wait.CoveredTime == "" {
		t.Fatalf("sync create --wait: %v: %s", err, out)
	}
	for _, s := range syncStatusOf(t, src.addrs()) {
		if !strings.HasPrefix(s.Point, "binlog ") || s.CoveredTimeMs < waitFrom || s.CoveredIndex == 0 || s.CoveredTime == "" {
			t.Fatalf("after sync create --wait from %d ms: %+v", waitFrom, s)
		}
	}

	w := cli.ChunkID{CopysetID: copysets[1], Chunk: 2}
	if err := src.client.WriteChunk(ctx, w, 0, syncBlock(6), 1); err != nil {
		t.Fatal(err)
	}
	acked, index := time.Now().UnixMilli(), leaderApplied(t, src.client, copysets[1])
	testwait.Until(t, 10*time.Second, func() error {
		for _, s := range syncStatusOf(t, src.addrs()) {
			if s.Copyset == copysets[1].Copyset && (s.CoveredIndex < index || s.CoveredTimeMs <= acked) {
				return fmt.Errorf("copyset %d covers index %d at %d ms; want index %d at %d ms or later", s.Copyset, s.CoveredIndex, s.CoveredTimeMs, index, acked+1)
			}
		}
		return nil
	})

	dst := startCluster(t, 1)
	dst.createCopysets(t, len(copysets))
	restoreUntil := func(until string) (string, string, int) {
		return chunkctl(t, dst.addrs(), nil, "sync", "restore", "--from", "file://"+dir, "--pool", "1", "--copysets", "1",
			"--until-time", until, "--progress", "never")
	}
	_, errOut, code := restoreUntil(time.UnixMilli(before).UTC().Format(time.RFC3339Nano))
	m := regexp.MustCompile(`cannot be restored from this export: the earliest time it can restore is (\S+) \(Unix ms (\d+)\)`).FindStringSubmatch(errOut)
	if code == 0 || m == nil || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
		t.Fatalf("restore --until-time %d ms: exit %d, stderr %q: want one line naming the earliest time", before, code, errOut)
	}
	// The export began (its starting state was taken) after sync create
	// was run.
	if earliest, err := strconv.ParseInt(m[2], 10, 64); err != nil || earliest < waitFrom || earliest > time.Now().UnixMilli() {
		t.Fatalf("the earliest time %s (%s ms) is not between sync create at %d ms and now", m[1], m[2], waitFrom)
	}
	if sns, err := dst.client.GetChunkInfo(ctx, cli.ChunkID{CopysetID: copysets[0], Chunk: 1}); err != nil || len(sns) != 0 {
		t.Fatalf("the refused restore wrote chunk 1: %v %v", sns, err)
	}
	if out, errOut, code := restoreUntil(m[1]); code != 0 {
		t.Fatalf("restore --until-time %s: exit %d\n%s%s", m[1], code, out, errOut)
	}
	if sns, err := dst.client.GetChunkInfo(ctx, late); err != nil || len(sns) == 0 {
		t.Fatalf("chunk %d, written before the export began, is not restored as of its earliest time: %v %v", late.Chunk, sns, err)
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
		{"--pool", "1", "--name", "x", "--mode", "full", "--dest", "file://" + dir, "--wait", "soon"},
	} {
		_, errOut, code := chunkctl(t, src.addrs(), nil, append([]string{"sync", "create"}, bad...)...)
		if code == 0 || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
			t.Errorf("create %v: exit %d, stderr %q: want one line and a non-zero exit", bad, code, errOut)
		}
	}
	if st := syncStatusOf(t, src.addrs()); len(st) != 0 {
		t.Fatalf("bad input created sub-tasks: %+v", st)
	}

	// Two creates of one task at once: a create that fails leaves nothing
	// behind and takes nothing of the other's, so the pool ends with all
	// of one create's sub-tasks (one export) or none.
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i, d := range []string{dir + "-a", dir + "-b"} {
		wg.Go(func() {
			_, _, codes[i] = chunkctl(t, src.addrs(), nil, "sync", "create", "--pool", "1", "--name", "race", "--mode", "continuous", "--dest", "file://"+d)
		})
	}
	wg.Wait()
	ok := 0
	for _, c := range codes {
		if c == 0 {
			ok++
		}
	}
	st := syncStatusOf(t, src.addrs())
	if ok > 1 || len(st) != ok*len(copysets) {
		t.Fatalf("two creates at once: exits %v, then %d sub-tasks: %+v", codes, len(st), st)
	}
	for _, s := range st {
		if s.Name != "race" || s.ExportID != st[0].ExportID || s.Dest != st[0].Dest {
			t.Fatalf("two creates at once left sub-tasks of two exports: %+v", st)
		}
	}
	_, _, _ = chunkctl(t, src.addrs(), nil, "sync", "delete", "--pool", "1", "--name", "race")
	if st := syncStatusOf(t, src.addrs()); len(st) != 0 {
		t.Fatalf("sub-tasks after deleting the raced task: %+v", st)
	}

	// --wait returns once every sub-task is SUCCESS, and says so.
	var created struct {
		Wait struct {
			SubTasks int `json:"sub_tasks"`
			Done     int `json:"done"`
		} `json:"wait"`
	}
	out, progress, code := chunkctl(t, src.addrs(), nil, "-o", "json", "sync", "create", "--pool", "1", "--name", "full", "--mode", "full",
		"--dest", "file://"+dir, "--wait", "2m")
	if code != 0 {
		t.Fatalf("sync create --wait: exit %d\n%s%s", code, out, progress)
	}
	if err := json.Unmarshal([]byte(out), &created); err != nil || created.Wait.SubTasks != len(copysets) || created.Wait.Done != len(copysets) {
		t.Fatalf("sync create --wait: %v: %s", err, out)
	}
	for _, s := range syncStatusOf(t, src.addrs()) {
		if s.Status != "SUCCESS" {
			t.Fatalf("after sync create --wait: copyset %d is %s", s.Copyset, s.Status)
		}
	}
	dst, _ := restoreInto(t, dir, len(copysets))
	sameSyncChunks(t, src.client, dst.client, copysets)
	_, errOut, code := chunkctl(t, src.addrs(), nil, "sync", "create", "--pool", "1", "--name", "full", "--mode", "full", "--dest", "file://"+dir+"-2")
	if code == 0 || !strings.Contains(errOut, "sync task already exists(creating or created)") {
		t.Fatalf("the task again: exit %d %s", code, errOut)
	}
	// A second task of the pool is created, but its export cannot go
	// where the first one's is: it fails, naming both exports, and the
	// first export still restores exactly.
	first := syncStatusOf(t, src.addrs())[0].ExportID
	_, errOut, code = chunkctl(t, src.addrs(), nil, "sync", "create", "--pool", "1", "--name", "again", "--mode", "full", "--dest", "file://"+dir, "--wait", "1m")
	if code == 0 || !strings.Contains(errOut, `sub-task of task "again"`) || !strings.Contains(errOut, "FAILED") || !strings.Contains(errOut, "of export "+first) {
		t.Fatalf("a second task to the first one's dest: exit %d %s", code, errOut)
	}
	again, _ := restoreInto(t, dir, len(copysets))
	sameSyncChunks(t, src.client, again.client, copysets)
}

// TestSyncS3ExportRestore: a kFull export to an s3:// dest on the servers'
// S3 endpoint (an in-process S3 server over real HTTP) finishes with an
// unbroken chain of packets and a manifest per copyset; chunkctl sync
// restore --from s3:// (on its own --s3-endpoint) restores it into another
// pool exactly. A missing bucket is refused by create and by restore with
// one line, and nothing is created.
func TestSyncS3ExportRestore(t *testing.T) {
	endpoint := fakes3.Start(t, nil)
	s3cfg := objstore.S3Config{Endpoint: endpoint, Bucket: "exports", AccessKey: "a", SecretKey: "b",
		Region: "us-east-1", BucketLookup: "path", CreateBucket: true}
	mk, err := objstore.NewS3(t.Context(), s3cfg) // the bucket of the export
	if err != nil {
		t.Fatal(err)
	}
	mk.Close()
	src := startClusterWithConfig(t, 1, fmt.Sprintf(`object_store:
  kind: s3
  s3:
    endpoint: %s
    bucket: server-bucket
    access_key: a
    secret_key: b
    region: us-east-1
    bucket_lookup: path
    create_bucket: true
`, endpoint))
	copysets := src.createCopysets(t, 4)
	seedSyncChunks(t, src.client, copysets)
	const url = "s3://exports/cluster-a"

	_, errOut, code := chunkctl(t, src.addrs(), nil, "sync", "create", "--pool", "1", "--name", "s3", "--mode", "full", "--dest", "s3://no-such-bucket/x")
	if code == 0 || !strings.Contains(errOut, "no-such-bucket") || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Fatalf("create with a missing bucket: exit %d, stderr %q", code, errOut)
	}
	if st := syncStatusOf(t, src.addrs()); len(st) != 0 {
		t.Fatalf("the refused create left %+v", st)
	}
	mustCtl(t, src.addrs(), nil, "sync", "create", "--pool", "1", "--name", "s3", "--mode", "full", "--dest", url)
	st := waitSynced(t, src.addrs(), len(copysets), func(st []syncStatus) bool {
		return !slices.ContainsFunc(st, func(s syncStatus) bool { return s.Status != "SUCCESS" })
	})
	checkExportChains(t, openDest(t, url, objstore.Config{S3: s3cfg}), st)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var to []cli.CopysetID
	for _, cs := range copysets {
		to = append(to, cli.CopysetID{Pool: 2, Copyset: cs.Copyset})
	}
	if _, err := src.client.CreateCopysets(ctx, to, src.addrs()); err != nil {
		t.Fatal(err)
	}
	for _, cs := range to {
		if _, err := src.client.GetLeader(ctx, cs); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "a")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "b")
	s3flags := []string{"--s3-endpoint", endpoint, "--s3-region", "us-east-1", "--s3-bucket-lookup", "path", "--progress", "never"}
	out, errOut, code := chunkctl(t, src.addrs(), nil, append([]string{"sync", "restore", "--from", "s3://no-such-bucket/x", "--pool", "1", "--to-pool", "2"}, s3flags...)...)
	if code == 0 || out != "" || !strings.Contains(errOut, "no-such-bucket") || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Fatalf("restore from a missing bucket: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	mustCtl(t, src.addrs(), nil, append([]string{"sync", "restore", "--from", url, "--pool", "1", "--to-pool", "2"}, s3flags...)...)
	sameChunkStates(t, readSyncChunks(t, src.client, copysets), readSyncChunks(t, src.client, to), copysets)
}

// TestSyncFullExportUnderWrites: a kFull export of 16 copysets while
// writes go on, restored into a second cluster, equals the source. Each
// copyset's chunk 1 is made bigger than a packet, so that its export's
// first packet holds chunk 1 alone (its image taken before the writes
// begin); the name the second packet will have is blocked (a non-empty
// directory there: the SyncTool cannot put it), so every export stalls in
// its snapshot phase and retries, reading chunks 2 and 3 again and again
// while the writes land. Then the writes stop and the block goes: the
// rest of the snapshot phase, and a binlog phase from the pin through the
// index committed when it began, must add up to exactly what the source
// reads.
func TestSyncFullExportUnderWrites(t *testing.T) {
	src, copysets, ctx := seededSyncCluster(t, 16)
	big := bytes.Repeat([]byte{7}, 4<<20+cli.BlockSize) // more than a packet (4 MiB)
	for _, cs := range copysets {
		if err := src.client.WriteChunk(ctx, cli.ChunkID{CopysetID: cs, Chunk: 1}, syncSpan, big, 2); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "export")
	blocked := func(cs cli.CopysetID) string { // where the second packet of cs goes
		return filepath.Join(dir, exportfmt.PacketName(1, cs.Copyset, exportfmt.SnapshotPoint(2, 0)))
	}
	for _, cs := range copysets {
		block := blocked(cs)
		if err := os.MkdirAll(block, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(block, "block"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	w := &syncWriter{c: src.client, copysets: copysets}
	mustCtl(t, src.addrs(), nil, "sync", "create", "--pool", "1", "--name", "full", "--mode", "full", "--dest", "file://"+dir)
	testwait.Until(t, time.Minute, func() error {
		st := syncStatusOf(t, src.addrs())
		at := 0
		for _, s := range st {
			if s.Point == "snapshot chunk 2 offset 0" {
				at++
			}
		}
		if at != len(copysets) {
			return fmt.Errorf("the exports did not all reach their blocked second packet: %+v", st)
		}
		return nil
	})
	// The stalled exports retry every second, reading chunks 2 and 3
	// under the writes: every one retries twice while they go on.
	retried := exportRetries(src.procs)
	w.start(7)
	testwait.Until(t, time.Minute, func() error {
		now := exportRetries(src.procs)
		for _, cs := range copysets {
			if n := now[cs.Copyset] - retried[cs.Copyset]; n < 2 {
				return fmt.Errorf("copyset %d's export retried %d times under the writes, want 2", cs.Copyset, n)
			}
		}
		return nil
	})
	w.halt()
	if w.n.Load() == 0 {
		t.Fatal("no write succeeded during the export")
	}
	for _, st := range syncStatusOf(t, src.addrs()) {
		if st.Status == "SUCCESS" || st.Point != "snapshot chunk 2 offset 0" {
			t.Fatalf("an export got past its blocked packet: %+v", st)
		}
	}
	for _, cs := range copysets {
		if err := os.RemoveAll(blocked(cs)); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Until(t, 2*time.Minute, func() error {
		st := syncStatusOf(t, src.addrs())
		done := len(st) == len(copysets)
		for _, s := range st {
			if s.Status == "FAILED" {
				t.Fatalf("the export did not finish: %+v", st)
			}
			done = done && s.Status == "SUCCESS"
		}
		if !done {
			return fmt.Errorf("the export did not finish: %+v", st)
		}
		return nil
	})
	dst, _ := restoreInto(t, dir, len(copysets))
	sameSyncChunks(t, src.client, dst.client, copysets)
	id := cli.ChunkID{CopysetID: copysets[0], Chunk: 1}
	got, err := dst.client.ReadChunk(ctx, id, syncSpan, uint32(len(big)))
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("restored %v past the written span: %v", id, err)
	}
}
