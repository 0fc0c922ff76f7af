package chunkserver

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/chunkraft/chunkraft/chunkstore"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/atomicfile"
	"go.yaml.in/yaml/v3"
)

// Runtime configuration (ConfigService).
//
// Every leaf of the YAML configuration is a key, named by its YAML path with
// dots for nesting ("max_inflight", "raft.snapshot_threshold",
// "object_store.s3.bucket"). Get and Dump report the server's effective
// configuration: the file and flags it started with, derived defaults filled
// in (advertise, object_store.local.root), and every runtime change since.
// Values are YAML scalars as the config file spells them ("1s", "5000",
// "info"); lists are YAML flow sequences ("[a:1, b:2]"); a non-empty
// object_store.s3.secret_key reads as "<redacted>".
//
// Set changes a key while the server runs only if the key is in the
// runtime table (registerBuiltinKeys, extended with registerRuntimeKey). The
// new value is decoded with the field's type, checked (the key's own check,
// then the whole configuration's Validate), written to the config file, and
// only then made effective; a value failing any step changes nothing. Any
// other known key is refused with a message saying it needs a restart (edit
// the config file, then restart); nothing changes.
//
// Persistence: only the key that was Set is written, into the server's
// config file (--config, or <data_dir>/chunkserver.yaml without one, which
// the chunkserver command then also loads at startup), keeping the file's
// other keys and comments. The file is replaced atomically (temp file in the
// same directory, fsync, rename, fsync of the directory). Flags override the
// file at startup, so a persisted log_level is masked by --log-level.

// runtimeKey makes one configuration key changeable while the server runs.
type runtimeKey struct {
	// check validates a new value: next is the whole configuration with the
	// key's new value decoded into it. Nil accepts every value the field's
	// type decodes (the whole configuration's Validate still runs).
	check func(next *Config) error
	// apply makes next's value of the key take effect. It runs after the
	// value was checked and persisted, under the configuration lock, and
	// cannot refuse: it logs what it could not do.
	apply func(next *Config)
}

// runtimeState is the server's live configuration and operator state: the
// ConfigService's view of the configuration, the copyset load check behind
// ChunkServerStatus.
type runtimeState struct {
	log      *slog.Logger
	admit    *chunkstore.Admission
	copysets *copyset.Manager
	local    copyset.PeerID
	conns    *connCache // the server's connections to the other chunkservers

	mu    sync.Mutex // serializes Set; guards cfg, path, level and keys
	cfg   Config
	path  string
	level *slog.LevelVar
	keys  map[string]runtimeKey

	load loadState
}

// setupRuntime sets up the runtime state (ConfigService and
// ChunkServerService, registered in services.go) from the server's
// configuration.
func (s *Server) setupRuntime() {
	level := new(slog.LevelVar)
	if l, err := ParseLogLevel(s.cfg.LogLevel); err == nil {
		level.Set(l)
	}
	rt := &runtimeState{
		log: s.log, admit: s.admit, copysets: s.copysets, local: s.local, conns: s.peers,
		cfg: s.cfg, path: filepath.Join(s.cfg.DataDir, ConfigFileName), level: level,
		keys: map[string]runtimeKey{},
	}
	rt.load.margin = s.cfg.CopysetLoadMargin
	rt.registerBuiltinKeys()
	s.rt = rt
}

// SetConfigFile sets the file ConfigService Set persists runtime changes
// to: the --config file, or the path LoadConfig returned. The default is
// <data_dir>/chunkserver.yaml. Call it before Run.
func (s *Server) SetConfigFile(path string) {
	s.rt.mu.Lock()
	s.rt.path = path
	s.rt.mu.Unlock()
}

// SetLogLevelVar hands the server the level of the logger it was created
// with, so that ConfigService can change log_level at runtime. Without it
// a Set of log_level changes only the server's own LevelVar (see
// LogLevelVar), which no logger reads. Call it before Run.
func (s *Server) SetLogLevelVar(v *slog.LevelVar) {
	s.rt.mu.Lock()
	v.Set(s.rt.level.Level())
	s.rt.level = v
	s.rt.mu.Unlock()
}

// LogLevelVar returns the level that log_level controls.
func (s *Server) LogLevelVar() *slog.LevelVar {
	s.rt.mu.Lock()
	defer s.rt.mu.Unlock()
	return s.rt.level
}

// registerRuntimeKey makes key (a leaf of Config, named by its YAML path)
// changeable at runtime. Services that own runtime settings (scan settings,
// say) add their field to Config and register it when the server is built:
//
//	s.rt.registerRuntimeKey("scan.interval", runtimeKey{
//		check: func(next *Config) error { ... },
//		apply: func(next *Config) { scanner.setInterval(next.Scan.Interval) },
//	})
func (rt *runtimeState) registerRuntimeKey(key string, k runtimeKey) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	vals, err := flattenConfig(&rt.cfg)
	if err != nil {
		panic(err)
	}
	if _, ok := vals[key]; !ok {
		panic(fmt.Sprintf("registerRuntimeKey: %q is not a configuration key", key))
	}
	if k.apply == nil {
		panic(fmt.Sprintf("registerRuntimeKey: %q has no apply", key))
	}
	rt.keys[key] = k
}

// registerBuiltinKeys registers the keys that change at runtime:
//
//	log_level              the server logger's level (slog.LevelVar)
//	max_inflight           in-flight chunk request limit (0 refuses all: drain)
//	min_free_bytes         free-space floor of the read-only state, re-evaluated at once
//	raft.snapshot_threshold  raft.ReloadConfig on every open copyset, and copysets opened later
//	raft.snapshot_interval   likewise (at least 5ms; raft re-arms its snapshot timer with it after the current wait)
//	raft.trailing_logs       every open copyset's log retention (copyset/logretain.go), and copysets opened later (at least 1)
//	raft.snapshot_bytes      likewise (at least 1 MiB)
//	raft.trailing_bytes      likewise (at least 1 MiB)
//
// and, on a server with a chunk file pool, chunk_file_pool (the pool's
// target, at least 1: Server.registerPoolKey).
func (rt *runtimeState) registerBuiltinKeys() {
	rt.registerRuntimeKey("log_level", runtimeKey{
		check: func(next *Config) error { _, err := ParseLogLevel(next.LogLevel); return err },
		apply: func(next *Config) {
			l, _ := ParseLogLevel(next.LogLevel)
			rt.level.Set(l)
		},
	})
	rt.registerRuntimeKey("max_inflight", runtimeKey{
		check: func(next *Config) error {
			if next.MaxInflight < 0 {
				return fmt.Errorf("max_inflight %d must not be negative", next.MaxInflight)
			}
			return nil
		},
		apply: func(next *Config) { rt.admit.SetMaxInflight(int64(next.MaxInflight)) },
	})
	rt.registerRuntimeKey("min_free_bytes", runtimeKey{
		apply: func(next *Config) { rt.admit.SetMinFree(next.MinFreeBytes) },
	})
	reload := func(r copyset.RaftReload) {
		if err := rt.copysets.ReloadRaft(r); err != nil {
			rt.log.Error("reload raft settings of copysets", "err", err)
		}
	}
	rt.registerRuntimeKey("raft.snapshot_threshold", runtimeKey{
		check: func(next *Config) error {
			if next.Raft.SnapshotThreshold < 1 {
				return errors.New("raft.snapshot_threshold must be at least 1")
			}
			return nil
		},
		apply: func(next *Config) { reload(copyset.RaftReload{SnapshotThreshold: next.Raft.SnapshotThreshold}) },
	})
	rt.registerRuntimeKey("raft.snapshot_interval", runtimeKey{
		check: func(next *Config) error {
			if next.Raft.SnapshotInterval < 5*time.Millisecond {
				return fmt.Errorf("raft.snapshot_interval %v must be at least 5ms", next.Raft.SnapshotInterval)
			}
			return nil
		},
		apply: func(next *Config) { reload(copyset.RaftReload{SnapshotInterval: next.Raft.SnapshotInterval}) },
	})
	rt.registerRuntimeKey("raft.trailing_logs", runtimeKey{
		check: func(next *Config) error {
			if next.Raft.TrailingLogs < 1 {
				return errors.New("raft.trailing_logs must be at least 1")
			}
			return nil
		},
		apply: func(next *Config) { reload(copyset.RaftReload{TrailingLogs: next.Raft.TrailingLogs}) },
	})
	for _, k := range []struct {
		key    string
		get    func(*Config) uint64
		reload func(uint64) copyset.RaftReload
	}{
		{"raft.snapshot_bytes", func(c *Config) uint64 { return c.Raft.SnapshotBytes },
			func(v uint64) copyset.RaftReload { return copyset.RaftReload{SnapshotBytes: v} }},
		{"raft.trailing_bytes", func(c *Config) uint64 { return c.Raft.TrailingBytes },
			func(v uint64) copyset.RaftReload { return copyset.RaftReload{TrailingBytes: v} }},
	} {
		rt.registerRuntimeKey(k.key, runtimeKey{
			check: func(next *Config) error {
				if k.get(next) < minRetainBytes {
					return fmt.Errorf("%s must be at least %d (1 MiB)", k.key, minRetainBytes)
				}
				return nil
			},
			apply: func(next *Config) { reload(k.reload(k.get(next))) },
		})
	}
}

// configError is a refused Get or Set; its message is the response value.
type configError struct{ msg string }

func (e *configError) Error() string { return e.msg }

func configErrorf(format string, args ...any) error {
	return &configError{msg: fmt.Sprintf(format, args...)}
}

// get returns the current value of key.
func (rt *runtimeState) get(key string) (string, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	vals, err := flattenConfig(&rt.cfg)
	if err != nil {
		return "", err
	}
	v, ok := vals[key]
	if !ok {
		return "", unknownKey(key, vals)
	}
	return v, nil
}

func unknownKey(key string, vals map[string]string) error {
	for k := range vals {
		if strings.HasPrefix(k, key+".") {
			return configErrorf("unknown config key %q: it is a section; Dump %q lists its keys", key, key)
		}
	}
	return configErrorf("unknown config key %q (Dump lists every key)", key)
}

// dump returns "key=value" lines, sorted by key, of every key equal to
// prefix or under it ("raft" gives raft.*); an empty prefix gives all.
func (rt *runtimeState) dump(prefix string) (string, error) {
	rt.mu.Lock()
	vals, err := flattenConfig(&rt.cfg)
	rt.mu.Unlock()
	if err != nil {
		return "", err
	}
	keys := make([]string, 0, len(vals))
	for k := range vals {
		if prefix == "" || k == prefix || strings.HasPrefix(k, prefix+".") {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return "", configErrorf("no config key is %q or under it", prefix)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(vals[k])
		b.WriteByte('\n')
	}
	return b.String(), nil
}

// set changes key to value at runtime (see the section comment) and
// returns the value as the configuration now reads it.
func (rt *runtimeState) set(key, value string) (string, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	vals, err := flattenConfig(&rt.cfg)
	if err != nil {
		return "", err
	}
	old, ok := vals[key]
	if !ok {
		return "", unknownKey(key, vals)
	}
	rk, ok := rt.keys[key]
	if !ok {
		return "", configErrorf("config key %q cannot change while the server runs: restart needed "+
			"(set it in %s and restart the chunkserver); nothing changed", key, rt.path)
	}
	next := rt.cfg
	if err := setConfigValue(&next, key, value); err != nil {
		return "", configErrorf("%v; nothing changed", err)
	}
	if rk.check != nil {
		if err := rk.check(&next); err != nil {
			return "", configErrorf("invalid value %q for %s: %v; nothing changed", value, key, err)
		}
	}
	probe := next
	if err := probe.Validate(); err != nil {
		return "", configErrorf("invalid value %q for %s: %v; nothing changed", value, key, err)
	}
	if err := persistConfigKey(rt.path, &next, key); err != nil {
		return "", configErrorf("%s not changed: %v", key, err)
	}
	rt.cfg = next
	rk.apply(&next)
	nv, err := flattenConfig(&next)
	if err != nil {
		return "", err
	}
	rt.log.Info("config changed at runtime", "key", key, "old", old, "new", nv[key], "file", rt.path)
	return nv[key], nil
}

// flattenConfig returns every leaf key of cfg with its value as a string.
func flattenConfig(cfg *Config) (map[string]string, error) {
	var root yaml.Node
	if err := root.Encode(cfg); err != nil {
		return nil, fmt.Errorf("encode config: %w", err)
	}
	out := map[string]string{}
	var walk func(prefix string, n *yaml.Node) error
	walk = func(prefix string, n *yaml.Node) error {
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, val := n.Content[i].Value, n.Content[i+1]
			if prefix != "" {
				key = prefix + "." + key
			}
			switch val.Kind {
			case yaml.MappingNode:
				if err := walk(key, val); err != nil {
					return err
				}
			case yaml.ScalarNode:
				out[key] = val.Value
			default:
				val.Style = yaml.FlowStyle
				b, err := yaml.Marshal(val)
				if err != nil {
					return fmt.Errorf("encode config key %s: %w", key, err)
				}
				out[key] = strings.TrimSpace(string(b))
			}
		}
		return nil
	}
	if err := walk("", &root); err != nil {
		return nil, err
	}
	for k, v := range out {
		if strings.HasSuffix(k, "secret_key") && v != "" {
			out[k] = "<redacted>"
		}
	}
	return out, nil
}

// keyNode builds the mapping {a: {b: {c: val}}} for key "a.b.c".
func keyNode(key string, val *yaml.Node) *yaml.Node {
	segs := strings.Split(key, ".")
	n := val
	for i := len(segs) - 1; i >= 0; i-- {
		n = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{
			{Kind: yaml.ScalarNode, Tag: "!!str", Value: segs[i]}, n,
		}}
	}
	return n
}

// setConfigValue decodes value, a YAML value, into cfg's field key with
// the field's type. A value the type cannot hold is a sentence
// (`max_inflight: "abc" is not a whole number`).
func setConfigValue(cfg *Config, key, value string) error {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(value), &doc); err != nil {
		return fmt.Errorf("%s: %q is not a valid YAML value", key, value)
	}
	val := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: ""}
	if len(doc.Content) > 0 {
		val = doc.Content[0]
	}
	if t, ok := fieldType(key); ok {
		if err := checkValue(key, val, t); err != nil {
			if le, ok := errors.AsType[*lineError](err); ok {
				return le.err // the line is the value's own: not worth saying
			}
			return err
		}
	}
	return keyNode(key, val).Decode(cfg)
}

// lookupNode returns the value node of key in mapping n, or nil.
func lookupNode(n *yaml.Node, key string) *yaml.Node {
	for _, seg := range strings.Split(key, ".") {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == seg {
				next = n.Content[i+1]
				break
			}
		}
		n = next
	}
	return n
}

// persistConfigKey writes cfg's value of key into the YAML file path
// (creating it if needed) by editing only the key's line or adding its
// lines (editConfigKey), then checks the result: it loads, key reads as
// cfg has it, and every other key reads as the file had it. Only then is
// the file replaced, atomically.
func persistConfigKey(path string, cfg *Config, key string) error {
	value, err := scalarText(cfg, key)
	if err != nil {
		return err
	}
	perm := fs.FileMode(0o644)
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("read config file: %w", err)
	default:
		if st, err := os.Stat(path); err == nil {
			perm = st.Mode().Perm()
		}
	}
	before := DefaultConfig()
	if err := before.overlay(bytes.NewReader(data), path); err != nil {
		return err
	}
	out, err := editConfigKey(data, key, value)
	if err != nil {
		return fmt.Errorf("cannot write %s into config file %s: %w", key, path, err)
	}
	after := DefaultConfig()
	if err := after.overlay(bytes.NewReader(out), path); err != nil {
		return fmt.Errorf("updated config file would not load: %w", err)
	}
	fb, err := flattenConfig(&before)
	if err != nil {
		return err
	}
	fa, err := flattenConfig(&after)
	if err != nil {
		return err
	}
	want, err := flattenConfig(cfg)
	if err != nil {
		return err
	}
	for k, v := range fa {
		if (k == key && v != want[k]) || (k != key && v != fb[k]) {
			return fmt.Errorf("cannot write %s into config file %s: editing it in place would change %s; edit the file by hand", key, path, k)
		}
	}
	return atomicfile.WriteFile(path, out, perm)
}

// scalarText is cfg's value of key as one line of YAML.
func scalarText(cfg *Config, key string) (string, error) {
	var full yaml.Node
	if err := full.Encode(cfg); err != nil {
		return "", fmt.Errorf("encode config: %w", err)
	}
	leaf := lookupNode(&full, key)
	if leaf == nil {
		return "", fmt.Errorf("encode config: no key %s", key)
	}
	if leaf.Kind != yaml.ScalarNode {
		leaf.Style = yaml.FlowStyle
	}
	b, err := yaml.Marshal(leaf)
	if err != nil {
		return "", fmt.Errorf("encode config key %s: %w", key, err)
	}
	text := strings.TrimSuffix(string(b), "\n")
	if strings.Contains(text, "\n") {
		return "", fmt.Errorf("encode config key %s: value %q does not fit on one line", key, text)
	}
	return text, nil
}
