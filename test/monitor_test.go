package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/chunkraft/chunkraft/internal/testwait"
)

// deployDir is the repository's deploy/ directory.
func deployDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(filepath.Dir(file)), "deploy")
}

// prometheusBinaries finds promtool and prometheus (Debian's package);
// their absence fails the test: make test installs them first
// (scripts/deps.sh).
func prometheusBinaries(t *testing.T) (promtool, prometheus string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found (apt-get install -y prometheus; make test installs it as root: scripts/deps.sh)")
	}
	prometheus = os.Getenv("PROMETHEUS")
	if prometheus == "" {
		prometheus = "/usr/bin/prometheus"
	}
	if _, err := os.Stat(prometheus); err != nil {
		t.Fatalf("prometheus not found at %s (apt-get install -y prometheus): %v", prometheus, err)
	}
	return promtool, prometheus
}

func runTool(t *testing.T, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = filepath.Join(deployDir(), "prometheus")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// alertRules reads the alerts of deploy/prometheus/rules/*.yml.
func alertRules(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(deployDir(), "prometheus", "rules", "*.yml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no rule files in deploy/prometheus/rules (%v)", err)
	}
	rules := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Groups []struct {
				Rules []struct {
					Alert string `yaml:"alert"`
					Expr  string `yaml:"expr"`
				} `yaml:"rules"`
			} `yaml:"groups"`
		}
		if err := yaml.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, g := range doc.Groups {
			for _, r := range g.Rules {
				if r.Alert != "" {
					rules[r.Alert] = r.Expr
				}
			}
		}
	}
	return rules
}

// dashboardExprs returns every query of deploy/grafana/chunkraft.json,
// with Grafana's variables replaced so that Prometheus can run them.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir(), "grafana", "chunkraft.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("deploy/grafana/chunkraft.json: %v", err)
	}
	vars := strings.NewReplacer("$__rate_interval", "1m", "$instance", ".*")
	var out []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			out = append(out, vars.Replace(tg.Expr))
		}
	}
	if len(out) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	return out
}

// selectorRe finds the series selectors of a PromQL expression (metric
// name and label matchers).
var selectorRe = regexp.MustCompile(`\b(up|chunkraft_[a-z0-9_]+)(\{[^}]*\})?`)

// promQuery runs an instant query against Prometheus at base.
func promQuery(ctx context.Context, base, query string) ([]map[string]any, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/query?query="+url.QueryEscape(query), nil)
	if err != nil {
		return nil, err
	}
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []map[string]any `json:"result"`
		} `json:"data"`
	}
	if err := promGet(req, &out); err != nil {
		return nil, fmt.Errorf("query %s: %w", query, err)
	}
	if out.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", query, out.Error)
	}
	return out.Data.Result, nil
}

func promGet(req *http.Request, v any) error {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w: %s", resp.Status, err, b)
	}
	return nil
}

// promAlerts returns the alerts Prometheus has pending or firing, as
// "name{instance}" strings.
func promAlerts(ctx context.Context, base string) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/alerts", nil)
	if err != nil {
		return nil, err
	}
	var out struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if err := promGet(req, &out); err != nil {
		return nil, fmt.Errorf("alerts: %w", err)
	}
	var alerts []string
	for _, a := range out.Data.Alerts {
		alerts = append(alerts, fmt.Sprintf("%s{%s}", a.Labels["alertname"], a.Labels["instance"]))
	}
	return alerts, nil
}

// scrape returns a server's /metrics page.
func scrape(t *testing.T, addr string) []byte {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// metricNames returns the metric names a server's /metrics exposes.
func metricNames(t *testing.T, addr string) map[string]bool {
	t.Helper()
	b := scrape(t, addr)
	names := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}

// metricValue returns the value of an unlabelled metric on a server's
// /metrics (the test fails when it is missing).
func metricValue(t *testing.T, addr, name string) float64 {
	t.Helper()
	b := scrape(t, addr)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s on %s: %q", name, addr, line)
			}
			return f
		}
	}
	t.Fatalf("%s is not on %s/metrics", name, addr)
	return 0
}

// promWait waits up to d until cond returns nil; a failure names what.
func promWait(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	testwait.Until(t, d, func() error {
		if err := cond(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	})
}

// freePorts returns the first of n consecutive loopback ports that were
// free a moment ago (cluster.sh gives server i port base+i).
func freePorts(t *testing.T, n int) int {
	t.Helper()
	for range 20 {
		base, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ok := true
		for i := 1; i < n && ok; i++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+i))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatalf("no %d consecutive free ports", n)
	return 0
}

// TestMonitoring: deploy/prometheus passes promtool (config, rules, the
// rules' unit tests). scripts/cluster.sh up --monitor without Prometheus
// fails at once, saying how to install it; with it, the Prometheus it
// starts (deploy/'s config and rules) scrapes every server (up == 1) and
// its URL is printed. Every series an alert selects exists on fresh
// servers, on each of them (so the first event is seen); every metric is
// in the reference (docs/operations.md); every dashboard query runs; the
// healthy cluster raises no alert; a stopped server gets up == 0 and
// ChunkserverDown; down stops Prometheus.
func TestMonitoring(t *testing.T) {
	promtool, prometheus := prometheusBinaries(t)
	runTool(t, promtool, "check", "config", "prometheus.yml")
	rulesFiles, _ := filepath.Glob(filepath.Join(deployDir(), "prometheus", "rules", "*.yml"))
	runTool(t, promtool, append([]string{"check", "rules"}, rulesFiles...)...)
	runTool(t, promtool, "test", "rules", "tests/chunkraft.yml")

	script := filepath.Join(filepath.Dir(deployDir()), "scripts", "cluster.sh")
	dir := t.TempDir()
	grpcBase, metricsBase, promPort := freePorts(t, 3), freePorts(t, 3), freePorts(t, 1)
	env := append(os.Environ(), "CLUSTER_DIR="+dir, "COPYSETS=1-4", "PROMETHEUS="+prometheus,
		fmt.Sprintf("BASE_PORT=%d", grpcBase), fmt.Sprintf("METRICS_BASE_PORT=%d", metricsBase),
		fmt.Sprintf("PROMETHEUS_PORT=%d", promPort))
	run := func(env []string, args ...string) (string, error) {
		cmd := exec.Command(script, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run(append(env, "PROMETHEUS=/nonexistent/prometheus"), "up", "--monitor")
	if err == nil || !strings.Contains(out, "apt-get install -y prometheus") || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Fatalf("up --monitor without Prometheus: err %v, want one line naming the install; output:\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "cs0.pid")); err == nil {
		t.Fatal("up --monitor without Prometheus started servers")
	}

	t.Cleanup(func() {
		if out, err := run(env, "down", "--clean"); err != nil {
			t.Errorf("down: %v\n%s", err, out)
		}
	})
	out, err = run(env, "up", "--monitor")
	if err != nil {
		t.Fatalf("up --monitor: %v\n%s", err, out)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", promPort)
	if !strings.Contains(out, "Prometheus: "+base) {
		t.Fatalf("up --monitor does not print %s:\n%s", base, out)
	}
	defer func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "prometheus", "prometheus.log"))
			t.Logf("prometheus log:\n%s", b)
		}
	}()
	var servers []string
	for i := range 3 {
		servers = append(servers, fmt.Sprintf("127.0.0.1:%d", metricsBase+i))
	}

	// Fresh servers (copysets, no I/O): every metric an alert or the
	// dashboard names is on /metrics, and in the reference.
	rules := alertRules(t)
	names := metricNames(t, servers[0])
	names["up"] = true
	for alert, expr := range rules {
		for _, m := range selectorRe.FindAllStringSubmatch(expr, -1) {
			if !names[m[1]] {
				t.Errorf("alert %s uses %s, which a fresh server does not export", alert, m[1])
			}
		}
	}
	ref, err := os.ReadFile(filepath.Join(filepath.Dir(deployDir()), "docs", "operations.md"))
	if err != nil {
		t.Fatalf("the metrics reference: %v", err)
	}
	for name := range names {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		if strings.HasPrefix(name, "chunkraft_") && !strings.Contains(string(ref), "`"+base+"`") {
			t.Errorf("metric %s is not in the metrics reference (docs/operations.md)", base)
		}
	}
	exprs := dashboardExprs(t)
	for _, e := range exprs {
		for _, m := range selectorRe.FindAllStringSubmatch(e, -1) {
			if !names[m[1]] {
				t.Errorf("dashboard query %q uses %s, which a fresh server does not export", e, m[1])
			}
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Every server is scraped.
	promWait(t, 20*time.Second, "up == 1 for every server", func() error {
		res, err := promQuery(ctx, base, `up{job="chunkraft"}`)
		if err != nil {
			return err
		}
		var ok []string
		for _, r := range res {
			m, _ := r["metric"].(map[string]any)
			v, _ := r["value"].([]any)
			if len(v) == 2 && v[1] == "1" {
				ok = append(ok, fmt.Sprint(m["instance"]))
			}
		}
		for _, s := range servers {
			if !slices.Contains(ok, s) {
				return fmt.Errorf("%s is not up (up == 1 for %v)", s, ok)
			}
		}
		return nil
	})

	// Every series an alert selects (label matchers included) is there,
	// on every server.
	for alert, expr := range rules {
		for _, m := range selectorRe.FindAllString(expr, -1) {
			res, err := promQuery(ctx, base, "count by (instance) ("+m+")")
			if err != nil {
				t.Fatalf("alert %s: %v", alert, err)
			}
			if len(res) != len(servers) {
				t.Errorf("alert %s: %s is exported by %d of %d servers", alert, m, len(res), len(servers))
			}
		}
	}
	// Every dashboard query is valid PromQL over the cluster.
	for _, e := range exprs {
		if _, err := promQuery(ctx, base, e); err != nil {
			t.Errorf("dashboard: %v", err)
		}
	}
	// Per-copyset figures: 4 copysets x 3 replicas, one leader each.
	promWait(t, 10*time.Second, "12 replicas, one leader per copyset", func() error {
		for q, want := range map[string]string{`count(chunkraft_copyset_role)`: "12", `count(chunkraft_copyset_role == 2)`: "4"} {
			res, err := promQuery(ctx, base, q)
			if err != nil {
				return err
			}
			if len(res) != 1 || res[0]["value"].([]any)[1] != want {
				return fmt.Errorf("%s = %v, want %s", q, res, want)
			}
		}
		return nil
	})

	// A healthy cluster raises no alert.
	promWait(t, 15*time.Second, "no alert on a healthy cluster", func() error {
		alerts, err := promAlerts(ctx, base)
		if err != nil {
			return err
		}
		if len(alerts) > 0 {
			return fmt.Errorf("alerts pending or firing: %v", alerts)
		}
		return nil
	})

	// A stopped server: ChunkserverDown (pending: it fires after 1m).
	b, err := os.ReadFile(filepath.Join(dir, "cs2.pid"))
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Sscan(string(b), &pid); err != nil {
		t.Fatalf("cs2.pid %q: %v", b, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	promWait(t, 15*time.Second, "ChunkserverDown for the stopped server", func() error {
		alerts, err := promAlerts(ctx, base)
		if err != nil {
			return err
		}
		if want := "ChunkserverDown{" + servers[2] + "}"; !slices.Contains(alerts, want) {
			return fmt.Errorf("want %s among %v", want, alerts)
		}
		return nil
	})

	// down stops Prometheus too.
	if b, err = os.ReadFile(filepath.Join(dir, "prometheus", "prometheus.pid")); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscan(string(b), &pid); err != nil {
		t.Fatalf("prometheus.pid %q: %v", b, err)
	}
	if out, err := run(env, "down"); err != nil || !strings.Contains(out, "prometheus: stopped") {
		t.Fatalf("down: %v\n%s", err, out)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatalf("Prometheus (pid %d) still runs after down", pid)
	}
}
