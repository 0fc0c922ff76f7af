package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/cli"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/internal/testwait"
)

// dmStatus is `chunkctl dm query-status -o json` (pb.Worker's
// QueryStatusResponse).
type dmStatus struct {
	Result        bool   `json:"result"`
	Msg           string `json:"msg"`
	SubTaskStatus []struct {
		Name   string `json:"name"`
		Stage  string `json:"stage"`
		Unit   string `json:"unit"`
		Result struct {
			Errors []struct {
				Message string `json:"Message"`
			} `json:"errors"`
		} `json:"result"`
		Sync struct {
			TotalRows string `json:"totalRows"` // int64: a string in protobuf JSON
		} `json:"sync"`
	} `json:"subTaskStatus"`
}

// relayRecords counts the records of every packet of the export at dir.
func relayRecords(t *testing.T, dir string) int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "pool-*", "copyset-*", "*"+exportfmt.PacketSuffix))
	if err != nil || len(files) == 0 {
		t.Fatalf("no packets in %s: %v", dir, err)
	}
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		p, err := exportfmt.Decode(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		n += len(p.Records)
	}
	return n
}

func dmQueryStatus(t *testing.T, servers []string) dmStatus {
	t.Helper()
	out, _, _ := chunkctl(t, servers, nil, "-o", "json", "dm", "query-status")
	var st dmStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("dm query-status -o json: %v\n%s", err, out)
	}
	return st
}

// chunksDiffer says how the sync test chunks of src (read with client
// sc) and dst (with dc) differ, "" when they are the same (chunk info,
// hash, data, COW snapshot).
func chunksDiffer(t *testing.T, sc, dc *cli.Client, src, dst []cli.CopysetID) string {
	t.Helper()
	// Either side may be settling after a kill (a replica catching up):
	// a read that fails is a difference for now.
	a, err := readSyncChunksErr(sc, src)
	if err != nil {
		return "source: " + err.Error()
	}
	b, err := readSyncChunksErr(dc, dst)
	if err != nil {
		return "target: " + err.Error()
	}
	for i := range a {
		id := cli.ChunkID{CopysetID: dst[i/syncChunks], Chunk: uint64(i%syncChunks + 1)}
		switch {
		case !slices.Equal(a[i].info, b[i].info):
			return fmt.Sprintf("%v: chunk info %v, the source's %v", id, b[i].info, a[i].info)
		case a[i].hash != b[i].hash || !bytes.Equal(a[i].data, b[i].data):
			return fmt.Sprintf("%v: data differs from the source's", id)
		case !bytes.Equal(a[i].snap, b[i].snap):
			return fmt.Sprintf("%v: COW snapshot differs from the source's", id)
		}
	}
	return ""
}

// TestDMMigrateExport: pool 1 of a 3-server cluster, written to all the
// while, is exported continuously and migrated by a dm task into pool 2
// (chunkctl dm start-task); the leader of a target copyset is killed -9
// right after start-task (in Load, or just past it: the pool is small) and
// again once the task is in Sync, with an operator set (chunkctl dm
// binlog inject), which the kill loses nothing of. Once the writes stop, every chunk of
// pool 2 equals pool 1's (info, data, COW snapshot); client writes to pool
// 2 are refused until stop-task, and accepted after it.
func TestDMMigrateExport(t *testing.T) {
	c := startClusterWithConfig(t, 3, syncTestConfig)
	src := c.createCopysets(t, 4)
	var dst []cli.CopysetID
	for _, cs := range src {
		dst = append(dst, cli.CopysetID{Pool: 2, Copyset: cs.Copyset})
	}
	mustCtl(t, c.addrs(), nil, "copyset", "create", "--pool", "2", "--copyset", "1-4", "--peers", strings.Join(c.addrs(), ","))
	seedSyncChunks(t, c.client, src)
	w := &syncWriter{c: c.client, copysets: src}
	w.start(3)
	dir := filepath.Join(t.TempDir(), "export")
	mustCtl(t, c.addrs(), nil, "sync", "create", "--pool", "1", "--name", "mig", "--mode", "continuous", "--dest", "file://"+dir, "--wait", "60s")

	task := filepath.Join(t.TempDir(), "task.yaml")
	if err := os.WriteFile(task, fmt.Appendf(nil, "name: mig\ntask-mode: all\nsource:\n  pool: 1\n  export: file://%s\ntarget-pool: 2\n", dir), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCtl(t, c.addrs(), nil, "dm", "check-task", task)
	mustCtl(t, c.addrs(), nil, "dm", "start-task", task)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kill := func(when string) {
		t.Helper()
		leader, err := c.client.GetLeader(ctx, dst[0])
		if err != nil {
			t.Fatal(err)
		}
		victim := c.proc(leader)
		if err := victim.Kill(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		t.Logf("killed %s, the leader of 2/1, during %s", victim.Addr, when)
		if err := victim.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	kill("the start")
	testwait.Until(t, 60*time.Second, func() error {
		st := dmQueryStatus(t, c.addrs())
		if len(st.SubTaskStatus) != 1 || st.SubTaskStatus[0].Unit != "Sync" {
			return fmt.Errorf("not in Sync: %+v", st)
		}
		return nil
	})
	// An operator set with chunkctl survives the kill of the leader.
	ahead := "1/1:999999999.0"
	// (A copyset electing a leader after the kill is named and nothing set:
	// set it again.)
	testwait.Until(t, 60*time.Second, func() error {
		if _, stderr, code := chunkctl(t, c.addrs(), nil, "dm", "binlog", "inject", "mig", "--binlog-pos", ahead, "write 9 0 4096 sn=1 data=zero"); code != 0 {
			return fmt.Errorf("dm binlog inject: exit %d: %s", code, stderr)
		}
		return nil
	})
	kill("Sync")
	testwait.Until(t, 60*time.Second, func() error {
		out, stderr, code := chunkctl(t, c.addrs(), nil, "-o", "json", "dm", "binlog", "list", "mig")
		if code != 0 {
			return fmt.Errorf("dm binlog list: exit %d: %s", code, stderr)
		}
		var ops []struct {
			Position string   `json:"position"`
			Op       string   `json:"op"`
			Ops      []string `json:"ops"`
		}
		if err := json.Unmarshal([]byte(out), &ops); err != nil {
			return fmt.Errorf("dm binlog list -o json: %w\n%s", err, out)
		}
		if len(ops) != 1 || ops[0].Position != ahead || ops[0].Op != "Inject" || len(ops[0].Ops) != 1 {
			return fmt.Errorf("operators after the kill: %+v", ops)
		}
		return nil
	})
	mustCtl(t, c.addrs(), nil, "dm", "binlog", "revert", "mig", "--binlog-pos", ahead)
	w.halt()
	if w.n.Load() == 0 {
		t.Fatal("no write succeeded during the migration")
	}
	testwait.Until(t, 90*time.Second, func() error {
		if d := chunksDiffer(t, c.client, c.client, src, dst); d != "" {
			return fmt.Errorf("pool 2 is not pool 1 yet: %s", d)
		}
		return nil
	})
	// binlog-schema on the paused task: the copysets, a chunk's schema, an
	// override and its removal; a malformed schema changes nothing.
	mustCtl(t, c.addrs(), nil, "dm", "pause-task", "mig")
	if out := mustCtl(t, c.addrs(), nil, "-o", "json", "dm", "binlog-schema", "list", "mig"); !strings.Contains(out, `"pool-1/copyset-4"`) {
		t.Fatalf("dm binlog-schema list: %s", out)
	}
	schemaOf := func() string {
		t.Helper()
		var v struct {
			Exists bool   `json:"exists"`
			Schema string `json:"schema"`
		}
		out := mustCtl(t, c.addrs(), nil, "-o", "json", "dm", "binlog-schema", "get", "mig", "pool-1/copyset-1", "1")
		if err := json.Unmarshal([]byte(out), &v); err != nil || !v.Exists {
			t.Fatalf("dm binlog-schema get: %v\n%s", err, out)
		}
		return v.Schema
	}
	if s := schemaOf(); s != "normal" {
		t.Fatalf("chunk 1's schema %q", s)
	}
	if out, code := ctl(t, c.addrs(), "dm", "binlog-schema", "update", "mig", "pool-1/copyset-1", "1", "clone sn=0 csn=1"); code == 0 || !strings.Contains(out, "sn is at least 1") {
		t.Fatalf("a malformed schema: exit %d\n%s", code, out)
	}
	mustCtl(t, c.addrs(), nil, "dm", "binlog-schema", "update", "mig", "pool-1/copyset-1", "1", "clone sn=9 csn=1 written=0-7")
	if s := schemaOf(); s != "clone sn=9 csn=1 written=0-7" {
		t.Fatalf("chunk 1's schema after update %q", s)
	}
	mustCtl(t, c.addrs(), nil, "dm", "binlog-schema", "delete", "mig", "pool-1/copyset-1", "1")
	if s := schemaOf(); s != "normal" {
		t.Fatalf("chunk 1's schema after delete %q", s)
	}
	// An export source has no validator: the validation commands say so.
	if out, code := ctl(t, c.addrs(), "dm", "validation", "status", "mig"); code == 0 || !strings.Contains(out, "validator not found for task mig") {
		t.Fatalf("dm validation status of a task without a validator: exit %d\n%s", code, out)
	}
	if out, code := ctl(t, c.addrs(), "dm", "validation", "show-error", "mig", "--error", "some"); code == 0 || !strings.Contains(out, `--error "some"`) {
		t.Fatalf("dm validation show-error --error some: exit %d\n%s", code, out)
	}
	mustCtl(t, c.addrs(), nil, "dm", "resume-task", "mig")
	st := dmQueryStatus(t, c.addrs())
	if !st.Result || len(st.SubTaskStatus) != 1 || st.SubTaskStatus[0].Stage != "Running" || len(st.SubTaskStatus[0].Result.Errors) > 0 {
		t.Fatalf("dm query-status after the migration: %+v", st)
	}

	block := filepath.Join(t.TempDir(), "block")
	if err := os.WriteFile(block, syncBlock(5), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := ctl(t, c.addrs(), "chunk", "write", "--pool", "2", "--copyset", "1", "--chunk", "9", "--in", block)
	if code == 0 || !strings.Contains(out, "EPOCH_TOO_OLD") {
		t.Fatalf("a client write into the migrating pool: exit %d\n%s", code, out)
	}
	mustCtl(t, c.addrs(), nil, "dm", "stop-task", "mig")
	out, code = ctl(t, c.addrs(), "chunk", "write", "--pool", "2", "--copyset", "1", "--chunk", "9", "--in", block)
	if code != 0 {
		t.Fatalf("a client write after stop-task: exit %d\n%s", code, out)
	}
	if out, code := ctl(t, c.addrs(), "dm", "query-status"); code == 0 || !strings.Contains(out, "code=40070") {
		t.Fatalf("dm query-status after stop-task: exit %d\n%s", code, out)
	}
}

// TestDMClusterSource: a backup sync task and a dm task on the same
// source pool at once, each restoring/migrating exactly. Two clusters A
// and B; a dm task on B whose source is pool 1 of A (written to all the
// while) has A export it to a relay (sync task dm-mig, beside A's own
// continuous backup task to a file location); a target leader on B is
// killed -9 right after start-task (in Load) and again in Sync; the writes
// stop; chunkctl dm cutover commits and reports the write downtime; then
// pool 2 of B equals pool 1 of A, A refuses writes to pool 1 and B takes
// them; the task applied each relay record exactly once; stop-task deletes
// A's relay task and keeps its backup. Once the backup's covered index
// (sync status) reaches what each copyset of A's fenced pool 1 applied,
// chunkctl sync restore of the backup into an empty pool 3 of B gives
// A's pool 1 exactly (chunk info, data, COW snapshot).
func TestDMClusterSource(t *testing.T) {
	a := startClusterWithConfig(t, 3, syncTestConfig)
	b := startClusterWithConfig(t, 3, syncTestConfig)
	src := a.createCopysets(t, 4)
	var dst []cli.CopysetID
	for _, cs := range src {
		dst = append(dst, cli.CopysetID{Pool: 2, Copyset: cs.Copyset})
	}
	mustCtl(t, b.addrs(), nil, "copyset", "create", "--pool", "2", "--copyset", "1-4", "--peers", strings.Join(b.addrs(), ","))
	seedSyncChunks(t, a.client, src)
	backup := filepath.Join(t.TempDir(), "backup")
	mustCtl(t, a.addrs(), nil, "sync", "create", "--pool", "1", "--name", "backup", "--mode", "continuous", "--dest", "file://"+backup)
	w := &syncWriter{c: a.client, copysets: src}
	w.start(4)
	relay := filepath.Join(t.TempDir(), "relay")
	task := filepath.Join(t.TempDir(), "task.yaml")
	if err := os.WriteFile(task, fmt.Appendf(nil, "name: mig\ntask-mode: all\nsource:\n  cluster: [%s]\n  pool: 1\n  relay: file://%s\ntarget-pool: 2\nvalidator:\n  mode: full\n  row-error-delay: 2s\n",
		strings.Join(a.addrs(), ", "), relay), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCtl(t, b.addrs(), nil, "dm", "start-task", task)
	if out := mustCtl(t, a.addrs(), nil, "sync", "status"); !strings.Contains(out, "dm-mig") || !strings.Contains(out, "backup") {
		t.Fatalf("the source's tasks after start-task:\n%s", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kill := func(cs cli.CopysetID, when string) {
		t.Helper()
		leader, err := b.client.GetLeader(ctx, cs)
		if err != nil {
			t.Fatal(err)
		}
		victim := b.proc(leader)
		if err := victim.Kill(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		t.Logf("killed %s, the leader of %v, during %s", victim.Addr, cs, when)
		if err := victim.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	kill(dst[0], "Load")
	testwait.Until(t, 60*time.Second, func() error {
		st := dmQueryStatus(t, b.addrs())
		if len(st.SubTaskStatus) != 1 || st.SubTaskStatus[0].Unit != "Sync" {
			return fmt.Errorf("not in Sync: %+v", st)
		}
		return nil
	})
	kill(dst[1], "Sync")
	w.halt()
	if w.n.Load() == 0 {
		t.Fatal("no write succeeded during the migration")
	}
	// A standby copy of the relay: restored, with markers, once the task
	// has applied every write (the relay holds them all then).
	testwait.Until(t, 90*time.Second, func() error {
		if d := chunksDiffer(t, a.client, b.client, src, dst); d != "" {
			return errors.New(d)
		}
		return nil
	})
	standby := make([]cli.CopysetID, len(src))
	for i, cs := range src {
		standby[i] = cli.CopysetID{Pool: 4, Copyset: cs.Copyset}
	}
	mustCtl(t, b.addrs(), nil, "copyset", "create", "--pool", "4", "--copyset", "1-4", "--peers", strings.Join(b.addrs(), ","))
	markers := "file://" + t.TempDir()
	mustCtl(t, b.addrs(), nil, "sync", "restore", "--from", "file://"+relay, "--pool", "1", "--to-pool", "4", "--marker", markers, "--progress", "never")
	checkValidator(t, ctx, a, b, src[0], kill)
	// The cutover waits for the leaders B elects after the kill.
	var out string
	testwait.Until(t, 90*time.Second, func() error {
		var stderr string
		var code int
		if out, stderr, code = chunkctl(t, b.addrs(), nil, "dm", "cutover", "mig", "--timeout", "60s"); code != 0 {
			return fmt.Errorf("dm cutover: exit %d\n%s%s", code, out, stderr)
		}
		return nil
	})
	if !strings.Contains(out, "committed: write downtime") {
		t.Fatalf("dm cutover:\n%s", out)
	}
	t.Logf("dm cutover:\n%s", out)
	if d := chunksDiffer(t, a.client, b.client, src, dst); d != "" {
		t.Fatalf("after the cutover, B's pool 2 is not A's pool 1: %s", d)
	}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	block := bytes.Repeat([]byte{9}, cli.BlockSize)
	if err := a.client.WriteChunk(wctx, cli.ChunkID{CopysetID: src[0], Chunk: 2}, 0, block, 1); err == nil || !strings.Contains(err.Error(), "EPOCH_TOO_OLD") {
		t.Fatalf("a write to A's pool 1 after the cutover: %v, want EPOCH_TOO_OLD", err)
	}
	if err := b.client.WriteChunk(wctx, cli.ChunkID{CopysetID: dst[0], Chunk: 2}, 0, block, 1); err != nil {
		t.Fatalf("a write to B's pool 2 after the cutover: %v", err)
	}
	if st := mustCtl(t, b.addrs(), nil, "dm", "query-status", "mig"); !strings.Contains(st, "cutover committed, write downtime") {
		t.Fatalf("dm query-status after the cutover:\n%s", st)
	}
	// Exactly once: the records the task applied, across the kills, are
	// the relay's records, each once.
	applied := dmQueryStatus(t, b.addrs()).SubTaskStatus[0].Sync.TotalRows
	if exported := relayRecords(t, relay); applied != fmt.Sprint(exported) {
		t.Fatalf("the task applied %s records, the relay holds %d", applied, exported)
	}
	purgeRelayResume(t, a, b, src, standby, relay, markers)
	mustCtl(t, b.addrs(), nil, "dm", "stop-task", "mig")
	if out := mustCtl(t, a.addrs(), nil, "sync", "status"); strings.Contains(out, "dm-mig") || !strings.Contains(out, "backup") {
		t.Fatalf("the source's tasks after stop-task:\n%s", out)
	}

	// The backup, which ran beside the relay all along, restores A's pool
	// 1 exactly too. The fences keep every client write out of pool 1, so
	// what its leaders have applied by now holds every chunk op it will
	// ever have; once each backup sub-task's covered index reaches that
	// index, the export holds them all.
	final := map[uint32]uint64{}
	for _, cs := range src {
		final[cs.Copyset] = leaderApplied(t, a.client, cs)
	}
	testwait.Until(t, 60*time.Second, func() error {
		var subTasks int
		for _, s := range syncStatusOf(t, a.addrs()) {
			if s.Name != "backup" {
				continue
			}
			if s.Status == "FAILED" {
				t.Fatalf("backup sub-task %d/%d failed: %s", s.Pool, s.Copyset, s.Info)
			}
			if s.CoveredIndex < final[s.Copyset] {
				return fmt.Errorf("the backup of copyset %d/%d covers index %d (point %s), pool 1 applied %d", s.Pool, s.Copyset, s.CoveredIndex, s.Point, final[s.Copyset])
			}
			subTasks++
		}
		if subTasks != len(src) {
			return fmt.Errorf("%d backup sub-tasks, want %d", subTasks, len(src))
		}
		return nil
	})
	restored := make([]cli.CopysetID, len(src))
	for i, cs := range src {
		restored[i] = cli.CopysetID{Pool: 3, Copyset: cs.Copyset}
	}
	if _, err := b.client.CreateCopysets(ctx, restored, b.addrs()); err != nil {
		t.Fatal(err)
	}
	for _, id := range restored {
		if _, err := b.client.GetLeader(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	out = mustCtl(t, b.addrs(), nil, "sync", "restore", "--from", "file://"+backup, "--pool", "1", "--to-pool", "3", "--progress", "never")
	t.Logf("sync restore of the backup into B's pool 3:\n%s", out)
	if d := chunksDiffer(t, a.client, b.client, src, restored); d != "" {
		t.Fatalf("the backup restored into B's pool 3 is not A's pool 1: %s", d)
	}
}

// checkValidator: task mig's validator (mode full, row-error-delay 2s),
// once the writes have stopped, finds every chunk equal; one byte changed
// offline in a chunk of 2/C (each server in turn stopped, its replica's
// file changed, the server started again) gives exactly one error row,
// which a kill -9 of 2/C's leader keeps; the block written again on the
// source heals the chunk, and clear-error removes the row.
func checkValidator(t *testing.T, ctx context.Context, a, b *cluster, src cli.CopysetID, kill func(cli.CopysetID, string)) {
	t.Helper()
	type validator struct {
		Source    string `json:"source"`
		Stage     string `json:"stage"`
		Processed string `json:"processedRowsStatus"`
		Pending   string `json:"pendingRowsStatus"`
	}
	caughtUp := func() {
		t.Helper()
		testwait.Until(t, 90*time.Second, func() error {
			out, stderr, code := chunkctl(t, b.addrs(), nil, "-o", "json", "dm", "validation", "status", "mig")
			if code != 0 {
				return fmt.Errorf("dm validation status: exit %d: %s", code, stderr)
			}
			var st struct {
				Validators []validator `json:"validators"`
			}
			if err := json.Unmarshal([]byte(out), &st); err != nil {
				return fmt.Errorf("%w\n%s", err, out)
			}
			if len(st.Validators) != 4 {
				return fmt.Errorf("validators %+v", st.Validators)
			}
			for _, v := range st.Validators {
				var n, eq uint64
				if _, err := fmt.Sscanf(v.Processed, "compared %d, equal %d", &n, &eq); err != nil || n == 0 || n != eq ||
					!strings.HasPrefix(v.Pending, "pending 0, differing 0") || v.Stage != "Running" {
					return fmt.Errorf("validator %+v", v)
				}
			}
			return nil
		})
	}
	type row struct {
		ID       string `json:"id"`
		Source   string `json:"source"`
		SrcTable string `json:"srcTable"`
		Status   string `json:"status"`
	}
	rows := func(which string) ([]row, error) {
		out, stderr, code := chunkctl(t, b.addrs(), nil, "-o", "json", "dm", "validation", "show-error", "mig", "--error", which)
		if code != 0 {
			return nil, fmt.Errorf("dm validation show-error: exit %d: %s", code, stderr)
		}
		var r struct {
			Error []row `json:"error"`
		}
		err := json.Unmarshal([]byte(out), &r)
		return r.Error, err
	}
	caughtUp()
	// Offline, one server at a time: stopped, one byte of its replica of
	// chunk 2 of 2/<C> changed, started again (a raft snapshot first, so
	// that a restart does not replay the write that made the block).
	g := copyset.NewGroupID(2, src.Copyset)
	target := cli.CopysetID{Pool: 2, Copyset: src.Copyset}
	mustChunkctl(t, b.addrs(), "snapshot", "--pool", "2", "--copyset", fmt.Sprint(src.Copyset))
	for _, p := range b.procs {
		if err := p.Kill(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(p.DataDir, "copysets", g.String(), "data", "chunk_2")
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		var one [1]byte
		const at = 4096 + 7 // a byte of the chunk's first block
		if _, err := f.ReadAt(one[:], at); err != nil {
			t.Fatal(err)
		}
		one[0] ^= 0xff
		if _, err := f.WriteAt(one[:], at); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var first row
	testwait.Until(t, 60*time.Second, func() error {
		got, err := rows("unprocessed")
		if err == nil && (len(got) != 1 || got[0].SrcTable != "2" || got[0].Source != fmt.Sprintf("pool-1/copyset-%d", src.Copyset)) {
			st, _, _ := chunkctl(t, b.addrs(), nil, "dm", "validation", "status", "mig")
			err = fmt.Errorf("rows %+v\n%s", got, st)
		}
		if err == nil {
			first = got[0]
		}
		return err
	})
	kill(target, "the validator's error row")
	testwait.Until(t, 60*time.Second, func() error {
		got, err := rows("all")
		if err == nil && (len(got) != 1 || got[0] != first) {
			err = fmt.Errorf("rows after the kill %+v, want %+v", got, first)
		}
		return err
	})
	if err := a.client.WriteChunk(ctx, cli.ChunkID{CopysetID: src, Chunk: 2}, 0, bytes.Repeat([]byte{2}, cli.BlockSize), 1); err != nil {
		t.Fatal(err)
	}
	caughtUp()
	mustCtl(t, b.addrs(), nil, "dm", "validation", "clear-error", "mig", "--all")
	if got, err := rows("all"); err != nil || len(got) != 0 {
		t.Fatalf("rows after clear-error: %+v %v", got, err)
	}
}

// purgeRelayResume: `dm purge-relay` deletes, of each copyset of task
// mig's relay, the packets before the one a standby restore (into
// standby, with its markers at markers) goes on from (or before the
// share's, if that comes first); a restore of the
// purged relay from its start is refused, naming the purge; `sync restore
// --resume-from` restores the range the purge kept onto the standby,
// which then equals the source (A's pool 1, fenced by the cutover).
func purgeRelayResume(t *testing.T, a, b *cluster, src, standby []cli.CopysetID, relay, markers string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	purged := 0
	for _, cs := range src {
		m := readMarker(ctx, t, markers, cs.Copyset)
		next := exportfmt.PacketName(1, cs.Copyset, mustPoint(t, m.GetNextPoint()))
		dir, file := filepath.Split(next)
		out := mustCtl(t, b.addrs(), nil, "dm", "purge-relay", "--filename", file, "--sub-dir", dir)
		var n int
		if _, err := fmt.Sscanf(out[strings.Index(out, "purged "):], "purged %d packets", &n); err != nil {
			t.Fatalf("dm purge-relay --filename %s --sub-dir %s:\n%s", file, dir, out)
		}
		purged += n
	}
	if purged == 0 {
		t.Fatal("dm purge-relay purged no packet")
	}
	out, code := ctl(t, b.addrs(), "sync", "restore", "--from", "file://"+relay, "--pool", "1", "--to-pool", "4", "--progress", "never")
	if code == 0 || !strings.Contains(out, "were purged (by dm task mig at") {
		t.Fatalf("sync restore of the purged relay from its start: exit %d\n%s", code, out)
	}
	out = mustCtl(t, b.addrs(), nil, "sync", "restore", "--from", "file://"+relay, "--pool", "1", "--to-pool", "4", "--resume-from", markers, "--progress", "never")
	t.Logf("sync restore --resume-from of the purged relay (%d packets purged):\n%s", purged, out)
	if d := chunksDiffer(t, a.client, b.client, src, standby); d != "" {
		t.Fatalf("the purged relay resumed onto B's pool 4 is not A's pool 1: %s", d)
	}
}
