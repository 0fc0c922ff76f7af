package test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/chunkraft/chunkraft/chunkserver"
)

// readmeConfig returns the README's configuration example: the first yaml
// block after "Configuration keys".
func readmeConfig(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	readme, err := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(file)), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "Configuration keys")
	if ok {
		_, rest, ok = strings.Cut(rest, "```yaml\n")
	}
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("README.md has no ```yaml block after \"Configuration keys\"")
	}
	return block
}

// startWithConfig starts a chunkserver under dir whose data dir holds
// chunkserver.yaml with config (loaded at start, what Set persists to) and
// stops it when the test ends.
func startWithConfig(t *testing.T, dir, config string) *Proc {
	t.Helper()
	p, err := NewProc(filepath.Join(binDir, "chunkserver"), dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(p.DataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p.DataDir, chunkserver.ConfigFileName), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.StartFirst(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Kill(syscall.SIGTERM) })
	return p
}

// The README's config block is the defaults, a chunkserver starts from it
// as is (only the ports and data dir given as flags), and `config set`
// rewrites only the key's line of that comment-laden file; a bad value is
// one sentence and changes nothing.
func TestReadmeConfig(t *testing.T) {
	block := readmeConfig(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "readme.yaml")
	if err := os.WriteFile(path, []byte(block), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := chunkserver.LoadConfigFile(path)
	if err != nil {
		t.Fatalf("README config: %v", err)
	}
	def := chunkserver.DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("README config: %v", err)
	}
	if err := def.Validate(); err != nil {
		t.Fatal(err)
	}
	got, _ := yaml.Marshal(cfg)
	want, _ := yaml.Marshal(def)
	if string(got) != string(want) {
		t.Fatalf("README config is not the defaults:\n%s\ndefaults:\n%s", got, want)
	}

	p := startWithConfig(t, dir, block)
	file := filepath.Join(p.DataDir, chunkserver.ConfigFileName)

	ctl := func(args ...string) (string, string, int) {
		return runBin(t, "chunkctl", append([]string{"--servers", p.Addr, "--timeout", "5s"}, args...)...)
	}
	for _, kv := range [][2]string{{"max_inflight", "123"}, {"raft.trailing_logs", "4321"}} {
		if out, errOut, code := ctl("config", "set", "--all", "--key", kv[0], "--value", kv[1]); code != 0 || !strings.Contains(out, kv[1]) {
			t.Fatalf("config set %s: exit %d\n%s%s", kv[0], code, out, errOut)
		}
	}
	gotFile, _ := os.ReadFile(file)
	if string(gotFile) != strings.Replace(strings.Replace(block, "max_inflight: 5000", "max_inflight: 123", 1), "trailing_logs: 10240", "trailing_logs: 4321", 1) {
		t.Fatalf("config file after set:\n%s\nwant the README block with only those two values changed", gotFile)
	}

	_, errOut, code := ctl("config", "set", "--server", p.Addr, "--key", "max_inflight", "--value", "abc")
	wantErr := "chunkctl: set max_inflight on " + p.Addr + `: CONFIG_OP_STATUS_FAILURE_UNKNOWN: max_inflight: "abc" is not a whole number; nothing changed` + "\n"
	if code == 0 || errOut != wantErr {
		t.Fatalf("set max_inflight=abc: exit %d, stderr\n%s\nwant\n%s", code, errOut, wantErr)
	}
	if now, _ := os.ReadFile(file); string(now) != string(gotFile) {
		t.Fatalf("a refused set changed the file:\n%s", now)
	}
	if out, _, code := ctl("config", "get", "--key", "max_inflight"); code != 0 || !strings.Contains(out, "123") {
		t.Fatalf("config get max_inflight: exit %d\n%s", code, out)
	}

	// A bad config file at startup: one sentence naming file, line and key.
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("# bad\nraft:\n  max_append_entries: lots\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = runBin(t, "chunkserver", "--config", bad)
	wantErr = "chunkserver: config file " + bad + ` line 3: raft.max_append_entries: "lots" is not a whole number` + "\n"
	if code == 0 || errOut != wantErr {
		t.Fatalf("bad config file: exit %d, stderr\n%s\nwant\n%s", code, errOut, wantErr)
	}
}
