package chunkserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A commented file with odd indentation, blank lines, a flow mapping and
// quoted values: the cases below change one line or add lines, and every
// other byte stays.
const editBase = `# chunkserver config, hand-written

listen:   127.0.0.1:7000      # the gRPC port
max_inflight:    10   # low, on purpose

log_level: "info"  # quoted
min_free_bytes:     # unset: default

raft:
    # four-space indentation
    trailing_logs: 5   # few

    snapshot_threshold: 'x'  # replaced below
object_store: {kind: local, local: {root: "/tmp/o"}}
# trailing comment
`

func TestEditConfigKey(t *testing.T) {
	tests := []struct {
		name, in, key, value string
		old, new             string // the line(s) replaced: in with old replaced by new is the result
	}{
		{"top-level plain", editBase, "max_inflight", "20",
			"max_inflight:    10   # low", "max_inflight:    20   # low"},
		{"quoted", editBase, "log_level", "debug",
			`log_level: "info"  # quoted`, `log_level: debug  # quoted`},
		{"empty value", editBase, "min_free_bytes", "4096",
			"min_free_bytes:     # unset", "min_free_bytes: 4096     # unset"},
		{"nested, 4 spaces", editBase, "raft.trailing_logs", "77",
			"    trailing_logs: 5   # few", "    trailing_logs: 77   # few"},
		{"single-quoted", editBase, "raft.snapshot_threshold", "9",
			"    snapshot_threshold: 'x'  # replaced", "    snapshot_threshold: 9  # replaced"},
		{"inside a flow mapping", editBase, "object_store.local.root", `""`,
			`local: {root: "/tmp/o"}}`, `local: {root: ""}}`},
		{"new key in an existing section: after its last line, its indentation", editBase, "raft.snapshot_interval", "7s",
			"    snapshot_threshold: 'x'  # replaced below\n", "    snapshot_threshold: 'x'  # replaced below\n    snapshot_interval: 7s\n"},
		{"new top-level key: at the end", editBase, "gc_percent", "200",
			"# trailing comment\n", "# trailing comment\ngc_percent: 200\n"},
		{"new section", "listen: 127.0.0.1:7000", "tls.admin_ou", "ops",
			"listen: 127.0.0.1:7000", "listen: 127.0.0.1:7000\ntls:\n  admin_ou: ops\n"},
		{"section without keys", "raft:\n# nothing yet\nlisten: a:1\n", "raft.trailing_logs", "3",
			"raft:\n", "raft:\n  trailing_logs: 3\n"},
		{"CRLF", "# c\r\nmax_inflight: 1\r\nraft:\r\n  trailing_logs: 2\r\n", "raft.snapshot_threshold", "5",
			"  trailing_logs: 2\r\n", "  trailing_logs: 2\r\n  snapshot_threshold: 5\r\n"},
		{"CRLF replace", "max_inflight: 1 # c\r\n", "max_inflight", "2", "max_inflight: 1 # c\r\n", "max_inflight: 2 # c\r\n"},
		{"empty file", "", "max_inflight", "2", "", "max_inflight: 2\n"},
		{"comments only", "# nothing\n\n", "raft.trailing_logs", "2", "# nothing\n\n", "# nothing\n\nraft:\n  trailing_logs: 2\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if strings.Count(tt.in, tt.old) != 1 && tt.old != "" {
				t.Fatalf("test case: %q is not once in the input", tt.old)
			}
			want := strings.Replace(tt.in, tt.old, tt.new, 1)
			if tt.old == "" {
				want = tt.new
			}
			got, err := editConfigKey([]byte(tt.in), tt.key, tt.value)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != want {
				t.Fatalf("got\n%s\nwant\n%s", got, want)
			}
		})
	}
	for _, in := range []string{"max_inflight: |\n  10\n", "raft: {trailing_logs: 1}\n", "- a\n"} {
		key := "max_inflight"
		if strings.HasPrefix(in, "raft") {
			key = "raft.snapshot_threshold"
		}
		if out, err := editConfigKey([]byte(in), key, "5"); err == nil {
			t.Errorf("edit %s of %q: no error, got %q", key, in, out)
		}
	}
}

// persistConfigKey on the hand-written file: one line changes, the others
// stay byte-identical, and the file loads with the new value.
func TestPersistConfigKeyKeepsOtherLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), ConfigFileName)
	base := strings.Replace(editBase, "'x'", "8000", 1)
	if err := os.WriteFile(path, []byte(base), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfigFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Raft.TrailingLogs = 4321
	if err := persistConfigKey(path, &cfg, "raft.trailing_logs"); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if want := strings.Replace(base, "trailing_logs: 5 ", "trailing_logs: 4321 ", 1); string(got) != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if loaded, err := LoadConfigFile(path); err != nil || loaded.Raft.TrailingLogs != 4321 || loaded.MaxInflight != 10 {
		t.Fatalf("reload: %v %+v", err, loaded)
	}
}

// Values a key cannot hold are explained in a sentence, both in a config
// file (with its line) and in a runtime Set.
func TestConfigValueErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct{ file, want string }{
		{"max_inflight: abc\n", `line 1: max_inflight: "abc" is not a whole number`},
		{"# c\nraft:\n  commit_timeout: 10\n", `line 3: raft.commit_timeout: "10" is not a duration (like 500ms, 1s or 2m)`},
		{"min_free_bytes: -5\n", `line 1: min_free_bytes: "-5" is not a whole number of 0 or more`},
		{"max_inflight: 99999999999999999999\n", `line 1: max_inflight: "99999999999999999999" is not a whole number from -9223372036854775808 to 9223372036854775807`},
		{"raft:\n  read_lease: maybe\n", `line 2: raft.read_lease: "maybe" is not true or false`},
		{"raft: 5\n", `line 1: raft: "5" is not a section of keys`},
		{"log_level: [a]\n", `line 1: log_level: a list is not a single value`},
		{"\nlisen: x\n", `line 2: unknown key "lisen"`},
		{"raft:\n  hartbeat: 1s\n", `line 2: unknown key "raft.hartbeat"`},
	} {
		p := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(p, []byte(tt.file), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := LoadConfigFile(p)
		if want := "config file " + p + " " + tt.want; err == nil || err.Error() != want {
			t.Errorf("%q:\n got %v\nwant %s", tt.file, err, want)
		}
	}
	for _, tt := range []struct{ key, value, want string }{
		{"max_inflight", "abc", `max_inflight: "abc" is not a whole number`},
		{"max_inflight", "", `max_inflight: "" is not a whole number`},
		{"raft.snapshot_interval", "10", `raft.snapshot_interval: "10" is not a duration (like 500ms, 1s or 2m)`},
		{"min_free_bytes", "{a: 1}", `min_free_bytes: a section of keys is not a whole number of 0 or more`},
	} {
		cfg := DefaultConfig()
		if err := setConfigValue(&cfg, tt.key, tt.value); err == nil || err.Error() != tt.want {
			t.Errorf("set %s=%q:\n got %v\nwant %s", tt.key, tt.value, err, tt.want)
		}
	}
}
