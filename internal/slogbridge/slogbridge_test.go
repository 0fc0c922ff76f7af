package slogbridge

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

func records(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, line)
		}
		out = append(out, m)
	}
	return out
}

func TestHclog(t *testing.T) {
	var buf bytes.Buffer
	// The handler is at error: the adapter's own level (info) decides.
	base := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError})).With("copyset", 7)
	l := Hclog(base, "raft", hclog.Info)
	l.Debug("dropped")
	l.Info("initial configuration", "index", 1, "servers", hclog.Fmt("%d servers", 3))
	l.With("peer", "a:1").Named("snap").Warn("odd", "err", errors.New("boom"), "dangling")
	if l.IsDebug() || !l.IsInfo() {
		t.Fatal("IsDebug/IsInfo disagree with the level")
	}
	l.SetLevel(hclog.Error)
	l.Info("dropped after SetLevel")
	l.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Error}).Print("from log")

	got := records(t, &buf)
	want := []map[string]any{
		{"level": "INFO", "msg": "initial configuration", "copyset": 7.0, "component": "raft", "index": 1.0, "servers": "3 servers"},
		{"level": "WARN", "msg": "odd", "copyset": 7.0, "component": "raft.snap", "peer": "a:1", "err": "boom", hclog.MissingKey: "dangling"},
		{"level": "ERROR", "msg": "from log", "copyset": 7.0, "component": "raft"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d:\n%s", len(got), len(want), buf.String())
	}
	for i, w := range want {
		if _, ok := got[i]["time"].(string); !ok {
			t.Errorf("record %d has no time: %v", i, got[i])
		}
		delete(got[i], "time")
		if len(got[i]) != len(w) {
			t.Errorf("record %d = %v, want %v", i, got[i], w)
		}
		for k, v := range w {
			if got[i][k] != v {
				t.Errorf("record %d: %s = %v, want %v", i, k, got[i][k], v)
			}
		}
	}
}

func TestGRPC(t *testing.T) {
	var buf bytes.Buffer
	t.Setenv("GRPC_GO_LOG_SEVERITY_LEVEL", "")
	g := GRPC(slog.New(slog.NewJSONHandler(&buf, nil)))
	g.Infof("channel %d created", 1)
	g.Warning("reconnecting")
	g.Errorf("transport: %v", "closed")
	if g.V(0) {
		t.Error("V(0) on at gRPC's default severity (errors only)")
	}
	got := records(t, &buf)
	if len(got) != 1 || got[0]["level"] != "ERROR" || got[0]["msg"] != "transport: closed" || got[0]["component"] != "grpc" {
		t.Fatalf("default severity: %s", buf.String())
	}

	buf.Reset()
	t.Setenv("GRPC_GO_LOG_SEVERITY_LEVEL", "info")
	g = GRPC(slog.New(slog.NewJSONHandler(&buf, nil)))
	g.Infoln("a", "b")
	g.Warningf("w%d", 2)
	if got := records(t, &buf); len(got) != 2 || got[0]["msg"] != "a b" || got[1]["level"] != "WARN" || !g.V(0) || g.V(1) {
		t.Fatalf("info severity: %s", buf.String())
	}
}
