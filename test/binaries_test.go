package test

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// runBin runs a built binary and returns its stdout, stderr and exit code.
func runBin(t *testing.T, name string, args ...string) (string, string, int) {
	t.Helper()
	return runBinIn(t, nil, name, args...)
}

// runBinIn is runBin with stdin; the binary gets a minute.
func runBinIn(t *testing.T, stdin []byte, name string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, name), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Stdin = &stdout, &stderr, bytes.NewReader(stdin)
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), stderr.String(), 0
	case errors.As(err, &exit):
		return stdout.String(), stderr.String(), exit.ExitCode()
	}
	t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	return "", "", -1
}

// Every binary prints its build: module, commit when the toolchain stamped
// one (it must then be this checkout's HEAD), Go version.
func TestBinariesVersion(t *testing.T) {
	head, _ := exec.Command("git", "rev-parse", "HEAD").Output()
	commitRE := regexp.MustCompile(`commit ([0-9a-f]{40})`)
	for _, name := range []string{"chunkserver", "chunkctl", "chunkbench"} {
		out, errOut, code := runBin(t, name, "--version")
		if code != 0 || errOut != "" {
			t.Fatalf("%s --version: exit %d, stderr %q", name, code, errOut)
		}
		if !strings.HasPrefix(out, name+" github.com/chunkraft/chunkraft ") || !strings.Contains(out, runtime.Version()) ||
			!strings.Contains(out, "commit ") || strings.Count(out, "\n") != 1 {
			t.Fatalf("%s --version = %q: want one line with the module, the commit and %s", name, out, runtime.Version())
		}
		if m := commitRE.FindStringSubmatch(out); m != nil && len(head) > 0 && m[1] != strings.TrimSpace(string(head)) {
			t.Fatalf("%s --version names commit %s, HEAD is %s", name, m[1], head)
		}
	}
}

// chunkserver takes GNU-style flags; --help describes the daemon and exits
// 0; the single-dash long forms of earlier versions still work.
func TestChunkserverFlags(t *testing.T) {
	out, _, code := runBin(t, "chunkserver", "--help")
	for _, want := range []string{"storage daemon", "--listen", "--metrics-listen", "--data-dir", "--config", "--version"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("chunkserver --help: exit %d, want %q in\n%s", code, want, out)
		}
	}
	if out, _, code := runBin(t, "chunkserver", "-version"); code != 0 || !strings.HasPrefix(out, "chunkserver ") {
		t.Fatalf("chunkserver -version: exit %d, %q", code, out)
	}
	_, errOut, code := runBin(t, "chunkserver", "--listen", "127.0.0.1:1", "--no-such-flag")
	if code == 0 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "no-such-flag") {
		t.Fatalf("unknown flag: exit %d, stderr %q: want one line naming it", code, errOut)
	}
	// A bad value given the old way is still read as that flag.
	_, errOut, code = runBin(t, "chunkserver", "-log-level=loud", "-data-dir", t.TempDir())
	if code == 0 || !strings.Contains(errOut, `"loud"`) {
		t.Fatalf("-log-level=loud: exit %d, stderr %q", code, errOut)
	}
}
