package test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/cli"
)

// Every line a chunkserver writes is one JSON object with time, level and
// msg, raft's own lines included: those carry component "raft" and the
// copyset's pool and copyset.
func TestLogsAreJSON(t *testing.T) {
	// raft at debug: it logs its start, elections and configuration.
	p := startWithConfig(t, t.TempDir(), "raft:\n  log_level: debug\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := cli.New(cli.Options{Servers: []string{p.Addr}, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	id := cli.CopysetID{Pool: pool, Copyset: 7}
	if _, err := client.CreateCopysets(ctx, []cli.CopysetID{id}, []string{p.Addr}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.GetLeader(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}

	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	var raftLines int
	for i, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line %d is not JSON: %v\n%s", i+1, err, line)
		}
		for _, k := range []string{"time", "level", "msg"} {
			if _, ok := rec[k].(string); !ok {
				t.Fatalf("line %d has no string %q:\n%s", i+1, k, line)
			}
		}
		if rec["component"] == "raft" {
			raftLines++
			if rec["pool"] != float64(pool) || rec["copyset"] != float64(id.Copyset) {
				t.Fatalf("raft line %d lacks pool %d, copyset %d:\n%s", i+1, pool, id.Copyset, line)
			}
		}
	}
	if raftLines == 0 {
		t.Fatalf("no raft lines in the log:\n%s", data)
	}
}
