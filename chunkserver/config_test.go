package chunkserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoadConfigFile(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg, err := LoadConfigFile(write("listen: 127.0.0.1:7000\ndata_dir: /d\nraft:\n  heartbeat_timeout: 2s\n  election_timeout: 3s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "127.0.0.1:7000" || cfg.DataDir != "/d" || cfg.Raft.HeartbeatTimeout != 2*time.Second ||
		cfg.Raft.ElectionTimeout != 3*time.Second || cfg.Raft.CommitTimeout != time.Second {
		t.Fatalf("unexpected config %+v", cfg)
	}
	if err := cfg.Validate(); err != nil || cfg.Advertise != cfg.Listen {
		t.Fatalf("validate: %v, advertise %q", err, cfg.Advertise)
	}
	if got := cfg.Raft.LeaseTimeout(); got != 2*time.Second {
		t.Fatalf("leader lease timeout %v with none set, want heartbeat_timeout's 2s", got)
	}
	// A heartbeat timeout below the lease timeout's default alone is valid:
	// the lease timeout follows it.
	cfg, err = LoadConfigFile(write("data_dir: /d\nraft:\n  heartbeat_timeout: 400ms\n  election_timeout: 400ms\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil || cfg.Raft.LeaseTimeout() != 400*time.Millisecond {
		t.Fatalf("validate: %v, lease timeout %v", err, cfg.Raft.LeaseTimeout())
	}
	if _, err := LoadConfigFile(write("")); err != nil {
		t.Fatalf("empty file: %v", err)
	}
	if _, err := LoadConfigFile(write("lisen: x\n")); err == nil || !strings.Contains(err.Error(), "lisen") {
		t.Fatalf("unknown key: want error naming it, got %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"ok", func(*Config) {}, ""},
		{"no listen", func(c *Config) { c.Listen = "" }, "listen"},
		{"wildcard advertise", func(c *Config) { c.Listen = "0.0.0.0:8200" }, "advertise"},
		{"no data dir", func(c *Config) { c.DataDir = "" }, "data_dir"},
		{"bad log level", func(c *Config) { c.LogLevel = "loud" }, "log level"},
		{"bad raft log level", func(c *Config) { c.Raft.LogLevel = "loud" }, `raft.log_level "loud"`},
		{"raft log level off", func(c *Config) { c.Raft.LogLevel = "off" }, ""},
		{"small messages", func(c *Config) { c.MaxMessageSize = 1 << 20 }, "max_message_size"},
		{"lease over heartbeat", func(c *Config) { c.Raft.LeaderLeaseTimeout = 2 * time.Second }, "leader_lease_timeout"},
		{"negative lease", func(c *Config) { c.Raft.LeaderLeaseTimeout = -time.Second }, "raft.leader_lease_timeout -1s must not be negative"},
		{"lease as set", func(c *Config) { c.Raft.LeaderLeaseTimeout = 300 * time.Millisecond }, ""},
		{"election under heartbeat", func(c *Config) { c.Raft.ElectionTimeout = time.Millisecond }, "election_timeout"},
		{"gc percent zero", func(c *Config) { c.GCPercent = 0 }, "gc_percent"},
		{"gc percent below -1", func(c *Config) { c.GCPercent = -2 }, "gc_percent"},
		{"gc off", func(c *Config) { c.GCPercent = -1 }, ""},
		{"no pinned entries", func(c *Config) { c.Raft.MaxPinnedEntries = 0 }, "raft.max_pinned_entries 0 must be at least 1"},
		{"snapshot bytes under 1 MiB", func(c *Config) { c.Raft.SnapshotBytes = 1<<20 - 1 }, "raft.snapshot_bytes 1048575 must be at least 1048576"},
		{"trailing bytes under 1 MiB", func(c *Config) { c.Raft.TrailingBytes = 0 }, "raft.trailing_bytes 0 must be at least 1048576"},
		{"trailing bytes 1 MiB", func(c *Config) { c.Raft.TrailingBytes = 1 << 20 }, ""},
		{"no spare segments", func(c *Config) { c.Raft.LogSpareSegments = 0 }, "raft.log_spare_segments 0 must be at least 1"},
		{"sync check period too short", func(c *Config) { c.Sync.CheckPeriod = time.Millisecond }, "sync.check_period 1ms must be at least 100ms"},
		{"sync send interval zero", func(c *Config) { c.Sync.SendInterval = 0 }, "sync.send_interval 0s must be at least 10ms"},
		{"no retained bytes", func(c *Config) { c.Sync.MaxRetainedBytes = 0 }, "sync.max_retained_bytes 0 must be at least 1048576 (1 MiB)"},
		{"retained bytes under 1 MiB", func(c *Config) { c.Sync.MaxRetainedBytes = 1<<20 - 1 }, "sync.max_retained_bytes 1048575"},
		{"no snapshot exports", func(c *Config) { c.Sync.SnapshotExports = 0 }, "sync.snapshot_exports 0 must be at least 1"},
		{"retained bytes 1 MiB", func(c *Config) { c.Sync.MaxRetainedBytes = 1 << 20 }, ""},
		{"cluster seeds", func(c *Config) { c.ClusterSeeds = []string{"10.0.0.1:8200", "10.0.0.2:8200:0"} }, ""},
		{"bad cluster seed", func(c *Config) { c.ClusterSeeds = []string{"10.0.0.1"} }, "cluster_seeds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mutate(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want error mentioning %q", err, tt.want)
			}
		})
	}
}

// disagg.lock_copyset is read from the config file; a zero id is refused.
func TestDisaggConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	for _, c := range []struct{ yaml, want string }{
		{"disagg:\n  lock_copyset: {pool: 2, copyset: 5}\n", ""},
		{"disagg:\n  lock_copyset: {pool: 0, copyset: 5}\n", "disagg.lock_copyset {pool: 0, copyset: 5}: pool and copyset must not be 0"},
	} {
		cfg, err := loadValidated(t, path, c.yaml)
		switch {
		case c.want == "" && (err != nil || cfg.Disagg.LockCopyset.Pool != 2 || cfg.Disagg.LockCopyset.Copyset != 5):
			t.Errorf("%q: %+v %v", c.yaml, cfg.Disagg, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: %v, want %q", c.yaml, err, c.want)
		}
	}
	if d := DefaultConfig().Disagg.LockCopyset; d.Pool != 1 || d.Copyset != 1 {
		t.Errorf("default lock copyset %+v", d)
	}
}

// disagg.views is read from the config file, its unset keys keep their
// defaults, and a bound out of range is refused.
func TestDisaggViewsConfigFile(t *testing.T) {
	path := t.TempDir() + "/c.yaml"
	for _, c := range []struct{ yaml, want string }{
		{"disagg:\n  views:\n    max_per_copyset: 2\n    lease_check: 5s\n", ""},
		{"disagg:\n  views:\n    max_per_copyset: 0\n", "disagg.views.max_per_copyset 0"},
		{"disagg:\n  views:\n    max_preimage_bytes: 1000\n", "disagg.views.max_preimage_bytes 1000"},
	} {
		cfg, err := loadValidated(t, path, c.yaml)
		v := cfg.Disagg.Views
		switch {
		case c.want == "" && (err != nil || v.MaxPerCopyset != 2 || v.LeaseCheck != 5*time.Second || v.MaxPreimageBytes != 256<<20 || v.PacketBytes != 512<<10):
			t.Errorf("%q: %+v %v", c.yaml, v, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: %v, want %q", c.yaml, err, c.want)
		}
	}
}

// loadValidated writes yaml to path and loads it, validated with a
// temporary data dir.
func loadValidated(t *testing.T, path, yaml string) (Config, error) {
	t.Helper()
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfigFile(path)
	if err == nil {
		cfg.DataDir = t.TempDir()
		err = cfg.Validate()
	}
	return cfg, err
}
