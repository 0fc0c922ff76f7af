package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// clusterScript runs scripts/cluster.sh on one cluster dir, with the
// settings variables of the caller's environment removed.
type clusterScript struct {
	t    *testing.T
	root string
	dir  string
}

// scriptEnv is the environment of the script and chunkctl: the caller's,
// without anything that would choose another cluster or other ports.
func (s *clusterScript) scriptEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case name == "BASE_PORT", name == "METRICS_BASE_PORT", name == "COPYSETS",
			name == "CHUNKSERVER_CONFIG", name == "CLUSTER_DIR", name == "PROMETHEUS", name == "PROMETHEUS_PORT",
			strings.HasPrefix(name, "CHUNKCTL_"):
			continue
		}
		env = append(env, kv)
	}
	return append(append(env, "CLUSTER_DIR="+s.dir), extra...)
}

// run runs cluster.sh args with extra environment variables and returns
// its combined output.
func (s *clusterScript) run(extra []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(s.root, "scripts", "cluster.sh"), args...)
	cmd.Dir = s.dir
	cmd.Env = s.scriptEnv(extra...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		err = fmt.Errorf("cluster.sh %s: %w", strings.Join(args, " "), err)
	}
	return string(out), err
}

// must runs cluster.sh args and fails the test unless it succeeds.
func (s *clusterScript) must(extra []string, args ...string) string {
	s.t.Helper()
	out, err := s.run(extra, args...)
	if err != nil {
		s.t.Fatalf("%v\n%s", err, out)
	}
	return out
}

// ctl runs the bin/ chunkctl the script built against servers.
func (s *clusterScript) ctl(servers []string, args ...string) string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args = append([]string{"--servers", strings.Join(servers, ",")}, args...)
	cmd := exec.CommandContext(ctx, filepath.Join(s.root, "bin", "chunkctl"), args...)
	cmd.Env = s.scriptEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		s.t.Fatalf("chunkctl %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return string(out)
}

// pids returns the pids of the cluster dir's pid files.
func (s *clusterScript) pids() []int {
	s.t.Helper()
	files, err := filepath.Glob(filepath.Join(s.dir, "cs*.pid"))
	if err != nil {
		s.t.Fatal(err)
	}
	var out []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			s.t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			s.t.Fatalf("%s: %v", f, err)
		}
		out = append(out, pid)
	}
	return out
}

// freePortRuns returns the first ports of two runs of n consecutive
// loopback ports that were all free a moment ago.
func freePortRuns(t *testing.T, n int) (int, int) {
	t.Helper()
	free := func(base int) bool {
		for p := base; p < base+n; p++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				return false
			}
			l.Close()
		}
		return true
	}
	// Below Linux's ephemeral range (32768-60999), so outgoing connections
	// do not take them meanwhile.
	for range 100 {
		a := 20000 + rand.IntN(600)*20
		b := a + 10
		if free(a) && free(b) {
			return a, b
		}
	}
	t.Fatal("no free port runs found")
	return 0, 0
}

// zombie reports whether pid has exited and waits for its parent to reap it.
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	_, rest, ok := strings.Cut(string(b[bytes.LastIndexByte(b, ')')+1:]), " ")
	return ok && strings.HasPrefix(rest, "Z")
}

// hostedCopysets is a row of chunkctl -o json copyset list.
type hostedCopysets struct {
	Server   string
	Copysets []int
}

// TestClusterScriptRestartsChangedCluster: after add-server and a copyset
// moved from cs0 to cs3, `down` then `up` without the port variables
// repeated restarts all four servers, creates no copyset again (cs0 does not
// get the moved copyset back) and every copyset has a leader; status and
// down find the ports on their own.
func TestClusterScriptRestartsChangedCluster(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("cluster.sh needs curl")
	}
	s := &clusterScript{t: t, root: RepoRoot(), dir: t.TempDir()}
	t.Cleanup(func() {
		if out, err := s.run(nil, "down"); err != nil {
			t.Errorf("%v\n%s", err, out)
		}
	})
	base, metricsBase := freePortRuns(t, 4)
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", base+i) }
	all := []string{addr(0), addr(1), addr(2), addr(3)}

	s.must([]string{"BASE_PORT=" + strconv.Itoa(base), "METRICS_BASE_PORT=" + strconv.Itoa(metricsBase),
		"COPYSETS=1-2"}, "up")
	if out := s.must(nil, "add-server"); !strings.Contains(out, "cs3 healthy") {
		t.Fatalf("add-server did not start cs3:\n%s", out)
	}
	block := filepath.Join(s.dir, "block")
	data := bytes.Repeat([]byte("chunkraft"), 4096/9+1)[:4096]
	if err := os.WriteFile(block, data, 0o644); err != nil {
		t.Fatal(err)
	}
	s.ctl(all, "chunk", "write", "--pool", "1", "--copyset", "2", "--chunk", "1", "--in", block)
	// --wait: the new replica has caught up (holds raft state) before the
	// cluster goes down; a replica stopped before it stored anything is
	// dropped at its next start (a membership defect of its own).
	s.ctl(all, "peer", "add", "--wait", "30s", "--pool", "1", "--copyset", "2", "--peer", addr(3))
	s.ctl(all, "peer", "remove", "--pool", "1", "--copyset", "2", "--peer", addr(0))
	// The removal is committed when peer remove returns; cs0 drops its
	// replica once it applies it. Stopped before that (seen under load), it
	// keeps the replica across the restart: nothing tells a replica that
	// missed its removal (noted, not what this test is about).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitFor(t, ctx, "cs0 dropped its replica of copyset 2", func() (bool, error) {
		var hosted []hostedCopysets
		if err := json.Unmarshal([]byte(s.ctl(all, "-o", "json", "copyset", "list", "--copyset", "1-2")), &hosted); err != nil {
			return false, err
		}
		i := slices.IndexFunc(hosted, func(h hostedCopysets) bool { return h.Server == addr(0) })
		return i >= 0 && slices.Equal(hosted[i].Copysets, []int{1}), fmt.Errorf("copyset list: %+v", hosted)
	})
	s.must(nil, "down")

	up := s.must(nil, "up")
	if strings.Contains(up, "creating") {
		t.Errorf("the second up created copysets again:\n%s", up)
	}
	status := s.must(nil, "status")
	for i := range 4 {
		row := fmt.Sprintf("cs%d ", i)
		if !slices.ContainsFunc(strings.Split(status, "\n"), func(l string) bool {
			return strings.HasPrefix(l, row) && strings.Contains(l, " alive ") && strings.Contains(l, addr(i))
		}) {
			t.Errorf("status: cs%d is not alive on %s:\n%s", i, addr(i), status)
		}
	}

	var hosted []hostedCopysets
	if err := json.Unmarshal([]byte(s.ctl(all, "-o", "json", "copyset", "list", "--copyset", "1-2")), &hosted); err != nil {
		t.Fatal(err)
	}
	want := map[string][]int{addr(0): {1}, addr(1): {1, 2}, addr(2): {1, 2}, addr(3): {2}}
	for _, h := range hosted {
		if !slices.Equal(h.Copysets, want[h.Server]) {
			t.Errorf("after the restart %s hosts copysets %v, want %v", h.Server, h.Copysets, want[h.Server])
		}
	}
	if len(hosted) != len(want) {
		t.Errorf("copyset list answered for %d servers, want %d", len(hosted), len(want))
	}
	var leaders []struct {
		Copyset int
		Leader  string
	}
	if err := json.Unmarshal([]byte(s.ctl(all, "-o", "json", "leader", "get", "--pool", "1", "--copyset", "1-2")), &leaders); err != nil {
		t.Fatal(err)
	}
	for _, l := range leaders {
		if l.Leader == "" {
			t.Errorf("copyset %d has no leader", l.Copyset)
		}
	}
	if got := s.ctl(all, "chunk", "read", "--pool", "1", "--copyset", "2", "--chunk", "1", "--size", "4k"); got != string(data) {
		t.Errorf("copyset 2 chunk 1 after the restart: %d bytes, not the block written", len(got))
	}

	// Bad input: one line, non-zero exit, the recorded settings unchanged.
	state, err := os.ReadFile(filepath.Join(s.dir, "cluster.state"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{"BASE_PORT=" + strconv.Itoa(base+100)}, []string{"status"}, "BASE_PORT"},
		{nil, []string{"up", "0"}, "positive number"},
		{nil, []string{"frob"}, "unknown command 'frob'"},
	} {
		out, err := s.run(c.env, c.args...)
		if err == nil || strings.Count(strings.TrimSpace(out), "\n") != 0 || !strings.Contains(out, c.want) {
			t.Errorf("%v cluster.sh %v: err %v, want one line naming %q, got:\n%s", c.env, c.args, err, c.want, out)
		}
	}
	if after, _ := os.ReadFile(filepath.Join(s.dir, "cluster.state")); !bytes.Equal(after, state) {
		t.Errorf("bad input changed cluster.state:\n%s\nto\n%s", state, after)
	}

	pids := s.pids()
	if len(pids) != 4 {
		t.Fatalf("%d pid files, want 4", len(pids))
	}
	s.must(nil, "down")
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) && !zombie(pid) {
			t.Errorf("pid %d still runs after down (kill -0: %v)", pid, err)
		}
	}
	if out, err := s.run(nil, "status"); err == nil {
		t.Errorf("status after down succeeded:\n%s", out)
	}
}
