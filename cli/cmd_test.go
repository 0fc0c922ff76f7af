package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// run executes chunkctl with args against servers and returns stdout.
func run(t *testing.T, servers []string, stdin []byte, args ...string) (string, error) {
	t.Helper()
	root := NewRootCommand()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetIn(bytes.NewReader(stdin))
	root.SetArgs(append([]string{"--servers", strings.Join(servers, ","), "--timeout", "3s", "--attempt-timeout", "1s"}, args...))
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func mustRun(t *testing.T, servers []string, stdin []byte, args ...string) string {
	t.Helper()
	out, err := run(t, servers, stdin, args...)
	if err != nil {
		t.Fatalf("chunkctl %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func TestCommandWriteRead(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(1)
	srv := fc.addrs()
	dir := t.TempDir()

	data := make([]byte, 8192)
	rand.Read(data)
	in := filepath.Join(dir, "in")
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out := mustRun(t, srv, nil, "chunk", "write", "--pool", "1", "--copyset", "3", "--chunk", "9", "--offset", "4k", "--in", in)
	if !strings.Contains(out, "OFFSET") || !strings.Contains(out, "4096") || !strings.Contains(out, "8192") {
		t.Errorf("write output:\n%s", out)
	}

	// Raw bytes, and only them, on stdout.
	out = mustRun(t, srv, nil, "chunk", "read", "--pool", "1", "--copyset", "3", "--chunk", "9", "--offset", "4KiB", "--size", "8k")
	if !bytes.Equal([]byte(out), data) {
		t.Errorf("read %d bytes to stdout, not the %d written", len(out), len(data))
	}

	// JSON: base64 data in an object.
	out = mustRun(t, srv, nil, "-o", "json", "chunk", "read", "--pool", "1", "--copyset", "3", "--chunk", "9", "--offset", "4096", "--size", "8192")
	var j chunkIOJSON
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatalf("json read: %v\n%s", err, out)
	}
	if !bytes.Equal(j.Data, data) || j.Chunk != 9 || j.Pool != 1 || j.Copyset != 3 {
		t.Errorf("json read: %+v", j)
	}

	// --out FILE.
	dst := filepath.Join(dir, "out")
	out = mustRun(t, srv, nil, "chunk", "read", "--pool", "1", "--copyset", "3", "--chunk", "9", "--offset", "4k", "--size", "8k", "--out", dst)
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, data) {
		t.Error("--out file differs from what was written")
	}
	if !strings.Contains(out, dst) {
		t.Errorf("read --out output:\n%s", out)
	}

	// stdin.
	mustRun(t, srv, block("from stdin"), "chunk", "write", "--pool", "1", "--copyset", "3", "--chunk", "10")
	if out := mustRun(t, srv, nil, "chunk", "read", "--pool", "1", "--copyset", "3", "--chunk", "10", "--size", "4k"); out != string(block("from stdin")) {
		t.Errorf("read back %q", out)
	}
	if _, err := run(t, srv, nil, "chunk", "write", "--pool", "1", "--copyset", "3", "--chunk", "10"); err == nil || !strings.Contains(err.Error(), "empty input") {
		t.Errorf("empty stdin: %v", err)
	}

	// chunk info as JSON.
	out = mustRun(t, srv, nil, "-o", "json", "chunk", "info", "--pool", "1", "--copyset", "3", "--chunk", "9")
	var info chunkInfoJSON
	if err := json.Unmarshal([]byte(out), &info); err != nil || len(info.Sn) != 1 || info.Sn[0] != 1 {
		t.Errorf("chunk info json: %v\n%s", err, out)
	}

	// Bad request: one line naming the rule it breaks; nothing is sent.
	before := fc.count(1, "WriteChunk")
	_, err := run(t, srv, block("x"), "chunk", "write", "--pool", "1", "--copyset", "3", "--chunk", "9", "--offset", "16m")
	if err == nil || err.Error() != "write pool 1 copyset 3 chunk 9: offset 16777216 + size 4096 ends at 16781312, beyond the end of the 16 MiB chunk (16777216)" {
		t.Errorf("write past the end: %v", err)
	}
	if n := fc.count(1, "WriteChunk") - before; n != 0 {
		t.Errorf("a write past the end was sent %d times", n)
	}

	// Delete, then the chunk is gone.
	mustRun(t, srv, nil, "chunk", "delete", "--pool", "1", "--copyset", "3", "--chunk", "9")
	_, err = run(t, srv, nil, "chunk", "read", "--pool", "1", "--copyset", "3", "--chunk", "9", "--size", "4k")
	if err == nil || !strings.Contains(err.Error(), "CHUNK_OP_STATUS_CHUNK_NOTEXIST") {
		t.Errorf("read after delete: %v", err)
	}
}

func TestCommandLeader(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(0)
	srv := fc.addrs()

	out := mustRun(t, srv, nil, "-o", "json", "leader", "get", "--pool", "1", "--copyset", "1-3")
	var leaders []leaderJSON
	if err := json.Unmarshal([]byte(out), &leaders); err != nil {
		t.Fatalf("leader get json: %v\n%s", err, out)
	}
	if len(leaders) != 3 {
		t.Fatalf("%d leaders, want 3", len(leaders))
	}
	for i, l := range leaders {
		if l.Copyset != uint32(i+1) || l.Leader != fc.servers[0].id || l.Error != "" {
			t.Errorf("leader %d: %+v", i, l)
		}
	}

	out = mustRun(t, srv, nil, "leader", "transfer", "--pool", "1", "--copyset", "2", "--to", srv[2])
	if !strings.Contains(out, fc.servers[0].id) || !strings.Contains(out, fc.servers[2].id) {
		t.Errorf("transfer output:\n%s", out)
	}
	if fc.getLeader() != 2 {
		t.Errorf("leader is %d after transfer, want 2", fc.getLeader())
	}

	out = mustRun(t, srv, nil, "leader", "get", "--pool", "1", "--copyset", "2")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], "POOL") {
		t.Errorf("leader get table:\n%s", out)
	}

	fc.setLeader(-1)
	_, err := run(t, srv, nil, "--timeout", "300ms", "leader", "get", "--pool", "1", "--copyset", "1-2")
	if err == nil || !strings.Contains(err.Error(), "no leader for 2 of 2 copysets") {
		t.Errorf("leader get without leader: %v", err)
	}
}

func TestCommandCopyset(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(1)
	srv := fc.addrs()
	peers := strings.Join(srv, ",")

	out := mustRun(t, srv, nil, "copyset", "create", "--pool", "1", "--copyset", "1-4", "--peers", peers)
	if n := strings.Count(out, "created"); n != 4 {
		t.Errorf("create output (%d created):\n%s", n, out)
	}
	out = mustRun(t, srv, nil, "-o", "json", "copyset", "create", "--pool", "1", "--copyset", "1-4", "--peers", peers)
	var created []createResultJSON
	if err := json.Unmarshal([]byte(out), &created); err != nil || len(created) != 4 {
		t.Fatalf("create json: %v\n%s", err, out)
	}
	for _, c := range created {
		if c.Result != "exists" || len(c.Peers) != 3 {
			t.Errorf("re-create: %+v", c)
		}
	}

	out = mustRun(t, srv, nil, "copyset", "status", "--pool", "1", "--copyset", "1-2")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 7 || !strings.HasPrefix(lines[0], "COPYSET") || strings.Count(out, "Leader") != 2 {
		t.Errorf("status table:\n%s", out)
	}
	out = mustRun(t, srv, nil, "-o", "json", "copyset", "status", "--pool", "1", "--copyset", "1")
	var rows []replicaJSON
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 3 {
		t.Fatalf("status json: %v\n%s", err, out)
	}
	if rows[1].State != "Leader" || rows[0].State != "Follower" || rows[0].Leader != fc.servers[1].id {
		t.Errorf("status rows: %+v", rows)
	}

	fc.with(func() { fc.notHosted[0], fc.notHosted[1], fc.notHosted[2] = true, true, true })
	if _, err := run(t, srv, nil, "copyset", "status", "--pool", "1", "--copyset", "5"); err == nil {
		t.Error("status of a copyset no server hosts succeeded")
	}
}

func TestCommandFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-o", "yaml", "leader", "get", "--pool", "1", "--copyset", "1"},
		{"leader", "get", "--pool", "1"},
		{"leader", "get", "--pool", "1", "--copyset", "3-1"},
		{"chunk", "read", "--pool", "1", "--copyset", "1", "--chunk", "1", "--size", "4q"},
		{"chunk", "read", "--pool", "1", "--copyset", "1", "--chunk", "1", "--size", "5g"},
		{"leader", "transfer", "--pool", "1", "--copyset", "1", "--to", "nowhere"},
		{"copyset", "create", "--pool", "1", "--copyset", "1", "--peers", "a:1,a:1"},
		{"--servers", "", "leader", "get", "--pool", "1", "--copyset", "1"},
	} {
		if _, err := run(t, []string{"127.0.0.1:1"}, nil, args...); err == nil {
			t.Errorf("chunkctl %v: no error", args)
		}
	}
}

func TestServersFromEnv(t *testing.T) {
	t.Setenv(EnvServers, "10.1.1.1:8200")
	if got := NewRootCommand().PersistentFlags().Lookup("servers").DefValue; got != "10.1.1.1:8200" {
		t.Errorf("--servers default %q", got)
	}
	t.Setenv(EnvServers, "")
	if got := NewRootCommand().PersistentFlags().Lookup("servers").DefValue; got != DefaultServers {
		t.Errorf("--servers default %q", got)
	}
}
