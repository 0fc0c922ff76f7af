package test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chunkraft/chunkraft/cli"
)

// TestDMStartTaskWait: `chunkctl dm start-task --wait` of a task-mode full
// task returns once the task is Finished, the target then equals the
// source; of a task whose export has a packet with a bad CRC it fails at
// once (the share pauses, not resumable), naming the packet; a --wait
// that is not a duration starts nothing.
func TestDMStartTaskWait(t *testing.T) {
	c := startCluster(t, 1)
	srv := c.addrs()
	src := c.createCopysets(t, 2)
	seedSyncChunks(t, c.client, src)
	dir := filepath.Join(t.TempDir(), "export")
	mustCtl(t, srv, nil, "sync", "create", "--pool", "1", "--name", "full", "--mode", "full", "--dest", "file://"+dir, "--wait", "60s")
	for _, p := range []string{"2", "3", "4"} {
		mustCtl(t, srv, nil, "copyset", "create", "--pool", p, "--copyset", "1-2", "--peers", srv[0])
	}

	// A copy of the export with the last byte of a packet of copyset 1 flipped.
	bad := filepath.Join(t.TempDir(), "bad")
	copyDirFiles(t, dir, bad)
	pkts, err := filepath.Glob(filepath.Join(bad, "pool-1", "copyset-1", "*.pkt"))
	if err != nil || len(pkts) == 0 {
		t.Fatalf("the export's packets of copyset 1: %v %v", pkts, err)
	}
	b, err := os.ReadFile(pkts[0])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 0xff
	if err := os.WriteFile(pkts[0], b, 0o644); err != nil {
		t.Fatal(err)
	}

	task := func(name, export string, pool int) string {
		f := filepath.Join(t.TempDir(), name+".yaml")
		y := fmt.Sprintf("name: %s\ntask-mode: full\nsource:\n  pool: 1\n  export: file://%s\ntarget-pool: %d\n", name, export, pool)
		if err := os.WriteFile(f, []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}

	out, code := ctl(t, srv, "dm", "start-task", "--wait=60s", task("broken", bad, 3))
	if code == 0 || !strings.Contains(out, "task started, but") || !strings.Contains(out, "auto-resume does not resume") ||
		!strings.Contains(out, "code=46002") || !strings.Contains(out, filepath.Base(pkts[0])) {
		t.Fatalf("dm start-task --wait of an export with a bad packet: exit %d\n%s", code, out)
	}
	mustCtl(t, srv, nil, "dm", "stop-task", "broken")

	out, code = ctl(t, srv, "dm", "start-task", "--wait", "soon", task("never", dir, 4))
	if code == 0 || !strings.Contains(out, `--wait: "soon" is not a duration`) {
		t.Fatalf("dm start-task --wait soon: exit %d\n%s", code, out)
	}
	out, code = ctl(t, srv, "dm", "start-task", task("never", dir, 4), "--wait=0s")
	if code == 0 || !strings.Contains(out, "--wait: must be positive, got 0s") {
		t.Fatalf("dm start-task --wait=0s: exit %d\n%s", code, out)
	}
	if out, code := ctl(t, srv, "dm", "query-status", "never"); code == 0 {
		t.Fatalf("a task was started by a refused command:\n%s", out)
	}

	out = mustCtl(t, srv, nil, "-o", "json", "dm", "start-task", task("mig", dir, 2), "--wait", "60s")
	var res struct {
		Start struct {
			Result bool `json:"result"`
		} `json:"start"`
		Wait struct {
			Stage    string  `json:"stage"`
			Unit     string  `json:"unit"`
			Progress string  `json:"progress"`
			Seconds  float64 `json:"seconds"`
		} `json:"wait"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("dm start-task --wait -o json: %v\n%s", err, out)
	}
	if !res.Start.Result || res.Wait.Stage != "Finished" || res.Wait.Unit != "Load" ||
		!strings.HasPrefix(res.Wait.Progress, "2 copysets loaded; ") || res.Wait.Seconds <= 0 {
		t.Fatalf("dm start-task --wait -o json: %+v\n%s", res, out)
	}
	var dst []cli.CopysetID
	for _, cs := range src {
		dst = append(dst, cli.CopysetID{Pool: 2, Copyset: cs.Copyset})
	}
	if d := chunksDiffer(t, c.client, c.client, src, dst); d != "" {
		t.Fatalf("pool 2 after the wait: %s", d)
	}
}
