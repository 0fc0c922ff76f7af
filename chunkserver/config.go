package chunkserver

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/copyset/sharedlog"
	"github.com/chunkraft/chunkraft/datasync"
	"github.com/chunkraft/chunkraft/disagg"
	"github.com/chunkraft/chunkraft/dm"
	"github.com/chunkraft/chunkraft/internal/objstore"
	"go.yaml.in/yaml/v3"
)

// Config is the chunkserver configuration. It is read from a YAML file
// (--config) and overridden by command-line flags that were set.
type Config struct {
	// Listen is the gRPC address serving every client service and the raft
	// traffic of all copysets.
	Listen string `yaml:"listen"`
	// Advertise is the address peers and clients reach this server at; it
	// forms the peer id "ip:port:0". Defaults to Listen.
	Advertise string `yaml:"advertise"`
	// MetricsListen is the HTTP address of /metrics, /healthz and
	// /debug/pprof/. Empty disables it.
	MetricsListen string `yaml:"metrics_listen"`
	// DataDir holds every copyset of this server.
	DataDir string `yaml:"data_dir"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `yaml:"log_level"`
	// MaxMessageSize bounds one gRPC message, in bytes. The one port also
	// carries raft AppendEntries, which batch up to raft.max_append_entries
	// chunk writes of up to 16 MiB each, hence the large default (1 GiB).
	MaxMessageSize int `yaml:"max_message_size"`

	// MaxInflight bounds the chunk requests being served at once; more get
	// CHUNK_OP_STATUS_OVERLOAD. 0 refuses every chunk request (a drain,
	// usually set at runtime through ConfigService).
	MaxInflight int `yaml:"max_inflight"`
	// MinFreeBytes is the free space on the data dir's filesystem below
	// which copysets turn read-only (mutations get NOSPACE, reads work).
	MinFreeBytes uint64 `yaml:"min_free_bytes"`

	// ChunkFilePool is how many preallocated chunk files the server keeps
	// formatted under <data_dir>/chunkfilepool (0 disables the pool:
	// chunks are then created as sparse files on the write path).
	ChunkFilePool int `yaml:"chunk_file_pool"`
	// ReadCacheBytes sizes the block cache shared by all copysets (0 = off).
	ReadCacheBytes int64 `yaml:"read_cache_bytes"`
	// ObjectStore is where <object>@s3 clone sources are read from.
	ObjectStore objstore.Config `yaml:"object_store"`
	// CloneSourceServers are asked for the leader of a @cs clone source's
	// copyset when this server does not host it.
	CloneSourceServers []string `yaml:"clone_source_servers"`
	// ClusterSeeds are servers (host:port) the cluster map asks besides
	// those copyset memberships lead to (cluster_map.go): name servers that
	// host no copyset yet here, or they are found only once they do.
	ClusterSeeds []string `yaml:"cluster_seeds"`

	// CopysetLoadMargin is how many committed log entries a copyset
	// replica may trail its leader by and still count as loaded after a
	// start (Curve's finishload_margin); ChunkServerStatus reports
	// copysetLoadFin once every copyset on disk is within it.
	CopysetLoadMargin uint64 `yaml:"copyset_load_margin"`
	// StaleReplicaCheck is how often the server looks for replicas that
	// have heard from no leader for that long, asks their copyset's leader
	// whether this server is still a member, and moves those the leader no
	// longer lists to the trash (stale_sweep.go). 0 turns the sweep off
	// (copyset delete-broken still removes them).
	StaleReplicaCheck time.Duration `yaml:"stale_replica_check"`

	// MaxConcurrentStreams bounds the concurrent gRPC streams (calls) on one
	// client connection; more wait for a free one instead of piling up in
	// the server. Raft pipelines take one stream per copyset and peer on the
	// connection between two servers, so keep it above the copysets a server
	// leads. 0 = gRPC's default (unbounded).
	MaxConcurrentStreams uint32 `yaml:"max_concurrent_streams"`
	// GCPercent is the Go garbage collector's target (what GOGC sets): how
	// far the heap grows over the live heap before a collection. Every
	// request allocates its buffers and messages, so a higher value trades
	// memory for CPU; -1 turns the collector off. The GOGC environment
	// variable, when set, wins. Default 100 (Go's own): with 400 the heap
	// of a server that has been idle grows to five times its live data at
	// the first burst of large writes, and the page faults of that fresh
	// memory cost more CPU than the collections save (docs/benchmarks.md,
	// "The Go collector's target, 400 → 100": 1 MiB writes and 4 KiB
	// randwrite 25-45% slower on a new cluster, no difference once warm).
	GCPercent int `yaml:"gc_percent"`
	// TLS, when set, turns on mutual TLS for every gRPC connection (tls.go).
	TLS TLSConfig `yaml:"tls"`

	Raft RaftConfig `yaml:"raft"`
	// Sync configures the sync service (package sync).
	Sync SyncConfig `yaml:"sync"`
	// Disagg configures the disagg service (package disagg).
	Disagg disagg.Config `yaml:"disagg"`
	// DM configures the dm service (package dm).
	DM dm.Config `yaml:"dm"`
}

// SyncConfig configures the sync service.
type SyncConfig struct {
	// CheckPeriod is how often a leader looks at its copysets' export
	// sub-tasks; one with no packet for twice that is reassigned with a
	// new token (upstream SyncTool's check period). Default 10s.
	CheckPeriod time.Duration `yaml:"check_period"`
	// SendInterval paces a continuous export once it has caught up: a
	// copyset's binlog packet waits this long for more entries, and an
	// idle sub-task sends a heartbeat this often (upstream DataCollector's
	// long interval). Fewer packets cost the chunk path less; the export
	// lags the writes by up to this. Default 5s; at most half of
	// check_period is used (a sub-task silent for twice that is reassigned).
	SendInterval time.Duration `yaml:"send_interval"`
	// MaxRetainedBytes bounds the raft log a live sub-task keeps from
	// truncation on each replica of its copyset: about the bytes of entry
	// data from its cursor to the last index (copyset/logpin.go,
	// RaftOptions.MaxPinnedBytes; raft.max_pinned_entries bounds the
	// entries). Past it the sub-task turns FAILED and its log goes; the
	// copyset goes on. Default 1 GiB: a stalled export costs each copyset
	// at most that much disk, while it holds ~20 s of the whole cluster's
	// 1 MiB write rate aimed at one copyset (~50 MB/s on the VM of
	// docs/benchmarks.md, "Whole runs after the export's buffer reuse";
	// minutes when writes spread over the copysets):
	// as long as a stalled sub-task takes to be reassigned (2 x
	// check_period), far longer than a leader change. At least 1 MiB.
	MaxRetainedBytes uint64 `yaml:"max_retained_bytes"`
	// SnapshotExports bounds the snapshot phases this server's collectors
	// export at once; the others wait, heartbeating (sync.SnapshotGate).
	// Each phase keeps a few chunk-sized buffers live: the bound keeps a
	// server leading many copysets from holding them all at once, and its
	// heap (so the chunk path's) from growing after. Default 2, at least 1.
	SnapshotExports int `yaml:"snapshot_exports"`
}

// minRetainedBytes is the least sync.max_retained_bytes.
const minRetainedBytes = 1 << 20

// minRetainBytes is the least raft.snapshot_bytes and raft.trailing_bytes:
// below an entry's size (up to 1 MiB) the log would snapshot on every
// entry.
const minRetainBytes = 1 << 20

// RaftConfig holds the raft settings shared by every copyset.
type RaftConfig struct {
	HeartbeatTimeout   time.Duration `yaml:"heartbeat_timeout"`
	ElectionTimeout    time.Duration `yaml:"election_timeout"`
	LeaderLeaseTimeout time.Duration `yaml:"leader_lease_timeout"`
	CommitTimeout      time.Duration `yaml:"commit_timeout"`
	MaxAppendEntries   int           `yaml:"max_append_entries"`
	// MaxInflightEntries: raft entries a copyset leader keeps proposed but
	// not yet applied; further writes wait and share the next entry
	// (-1: no bound).
	MaxInflightEntries int    `yaml:"max_inflight_entries"`
	LogLevel           string `yaml:"log_level"`
	// SnapshotThreshold: log entries since the last snapshot that trigger
	// one; SnapshotInterval: how often raft checks; TrailingLogs: entries
	// kept after a snapshot so a lagging replica can catch up from the log.
	// SnapshotBytes: bytes of log entries since the last snapshot that
	// trigger one (checked as entries are stored); TrailingBytes: the
	// entries kept after a snapshot hold at most this many bytes (the fewer
	// of trailing_logs entries and trailing_bytes bytes stay). Both bound
	// the log of large writes, so that the shared log frees segments and
	// recycles them instead of zero-filling new ones (copyset/logretain.go).
	// LogStore is "boltdb" (one raft-boltdb file per copyset) or "shared"
	// (one group-committing log per server, LogShards files written in
	// parallel). Changing it on a server with copysets loses their logs.
	LogStore  string `yaml:"log_store"`
	LogShards int    `yaml:"log_shards"`
	// LogSpareSegments: spare segments each shard of the shared log keeps
	// at most (copyset/sharedlog/spare.go): freed segments are kept up to
	// this many for the next rolls, so that a burst of frees is not
	// removed and written with zeros again later. Each costs a segment
	// (64 MiB) of disk.
	LogSpareSegments  int           `yaml:"log_spare_segments"`
	SnapshotThreshold uint64        `yaml:"snapshot_threshold"`
	SnapshotInterval  time.Duration `yaml:"snapshot_interval"`
	TrailingLogs      uint64        `yaml:"trailing_logs"`
	SnapshotBytes     uint64        `yaml:"snapshot_bytes"`
	TrailingBytes     uint64        `yaml:"trailing_bytes"`
	// MaxPinnedEntries bounds a log retention pin (copyset/logpin.go): a
	// pin may hold back truncation of at most this many entries behind a
	// copyset's last index; a compaction moves a pin further behind up
	// and its holder is told.
	MaxPinnedEntries uint64 `yaml:"max_pinned_entries"`
	// ReadLease lets a leader serve linearizable reads without a quorum
	// round while a quorum acknowledged its heartbeats within the last
	// 3/4 heartbeat_timeout (copyset/lease.go); false asks a quorum
	// (VerifyLeader) for every batch of reads. Relies on every server
	// using the same heartbeat_timeout and on clocks advancing at about
	// the same rate.
	ReadLease bool `yaml:"read_lease"`
}

// LeaseTimeout is raft.leader_lease_timeout, or heartbeat_timeout when it
// is 0 (the default).
func (r RaftConfig) LeaseTimeout() time.Duration {
	if r.LeaderLeaseTimeout == 0 {
		return r.HeartbeatTimeout
	}
	return r.LeaderLeaseTimeout
}

// DefaultConfig returns the configuration used when nothing is set.
func DefaultConfig() Config {
	return Config{
		Listen:            "127.0.0.1:8200",
		MetricsListen:     "127.0.0.1:9200",
		DataDir:           "./data",
		LogLevel:          "info",
		MaxMessageSize:    1 << 30,
		MaxInflight:       5000,
		ChunkFilePool:     16,
		ReadCacheBytes:    64 << 20,
		MinFreeBytes:      256 << 20,
		CopysetLoadMargin: 2000,
		StaleReplicaCheck: 10 * time.Second,
		Raft: RaftConfig{
			HeartbeatTimeout:   time.Second,
			ElectionTimeout:    time.Second,
			LeaderLeaseTimeout: 0, // heartbeat_timeout
			CommitTimeout:      time.Second,
			MaxAppendEntries:   64,
			MaxInflightEntries: 1,
			LogLevel:           "warn",
			LogStore:           "shared",
			LogShards:          2,
			LogSpareSegments:   sharedlog.DefaultSpareSegments,
			SnapshotThreshold:  8192,
			SnapshotInterval:   120 * time.Second,
			TrailingLogs:       10240,
			SnapshotBytes:      copyset.DefaultSnapshotBytes,
			TrailingBytes:      copyset.DefaultTrailingBytes,
			MaxPinnedEntries:   copyset.DefaultMaxPinnedEntries,
			ReadLease:          true,
		},
		MaxConcurrentStreams: 1024,
		GCPercent:            100,
		Sync: SyncConfig{CheckPeriod: 10 * time.Second, SendInterval: 5 * time.Second, MaxRetainedBytes: copyset.DefaultMaxPinnedBytes,
			SnapshotExports: datasync.DefaultSnapshotExports},
		Disagg: disagg.DefaultConfig(),
		DM:     dm.DefaultConfig(),
	}
}

// ConfigFileName is the file in the data dir that a server started without
// a config file (--config) loads at startup and persists runtime changes
// (ConfigService Set) to.
const ConfigFileName = "chunkserver.yaml"

// LoadConfigFile reads path over the defaults. Unknown keys are an error.
func LoadConfigFile(path string) (Config, error) {
	cfg := DefaultConfig()
	err := cfg.overlayFile(path)
	return cfg, err
}

// LoadConfig returns the configuration a server starts from, before the
// command-line flags that were set are applied over it, and the file that
// runtime changes are persisted to. Precedence: defaults < config file <
// flags. With path set the file is path and must exist. Without, it is
// <dataDir>/chunkserver.yaml (dataDir "" means the default data dir, so
// pass the --data-dir flag's value), loaded if it exists: a server started
// without --config finds the changes it persisted again on restart.
func LoadConfig(path, dataDir string) (Config, string, error) {
	if path != "" {
		cfg, err := LoadConfigFile(path)
		return cfg, path, err
	}
	if dataDir == "" {
		dataDir = DefaultConfig().DataDir
	}
	path = filepath.Join(dataDir, ConfigFileName)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return DefaultConfig(), path, nil
	}
	cfg, err := LoadConfigFile(path)
	return cfg, path, err
}

// overlayFile decodes the YAML file path over c: keys present in the file
// replace c's values, the others stay. Unknown keys are an error.
func (c *Config) overlayFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("load config: %w", err)
	}
	defer f.Close()
	return c.overlay(f, path)
}

func (c *Config) overlay(r io.Reader, name string) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("load config %s: %w", name, err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("config file %s is not valid YAML: %w", name, err)
	}
	if len(doc.Content) > 0 {
		if err := checkValue("", doc.Content[0], reflect.TypeFor[Config]()); err != nil {
			return fmt.Errorf("config file %s %w", name, err)
		}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("load config %s: %w", name, err)
	}
	return nil
}

// A valueError is a YAML value that a configuration key cannot hold, said
// in a sentence: `max_inflight: "abc" is not a whole number`.
type valueError struct {
	key   string // dotted path
	value string // the scalar as written; "" for a list or section
	kind  yaml.Kind
	want  string // what the key holds: "a whole number", ...
}

func (e *valueError) Error() string {
	var what string
	switch e.kind {
	case yaml.MappingNode:
		what = "a section of keys"
	case yaml.SequenceNode:
		what = "a list"
	default:
		what = strconv.Quote(e.value)
	}
	key := e.key
	if key == "" {
		key = "the top level"
	}
	return fmt.Sprintf("%s: %s is not %s", key, what, e.want)
}

// lineError prefixes an error found at a line of the config file.
type lineError struct {
	line int
	err  error
}

func (e *lineError) Error() string { return fmt.Sprintf("line %d: %v", e.line, e.err) }
func (e *lineError) Unwrap() error { return e.err }

var durationType = reflect.TypeFor[time.Duration]()

// wantOf says what a value of type t is, for "... is not <wantOf>".
func wantOf(t reflect.Type) string {
	if t == durationType {
		return "a duration (like 500ms, 1s or 2m)"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number of 0 or more"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a single value"
	case reflect.Slice:
		return "a list (like [a, b])"
	case reflect.Struct:
		return "a section of keys"
	}
	return "a " + t.String()
}

// yamlField returns the field of struct type t that YAML key name maps to.
func yamlField(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); tag == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// fieldType returns the type of the configuration key (a dotted path).
func fieldType(key string) (reflect.Type, bool) {
	t := reflect.TypeFor[Config]()
	for _, seg := range strings.Split(key, ".") {
		if t.Kind() != reflect.Struct || t == durationType {
			return nil, false
		}
		f, ok := yamlField(t, seg)
		if !ok {
			return nil, false
		}
		t = f.Type
	}
	return t, true
}

// checkValue checks that n decodes into a value of type t at key, and
// returns the first key that does not (an unknown key, or a value of the
// wrong kind, as a valueError) with its line.
func checkValue(key string, n *yaml.Node, t reflect.Type) error {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if isEmptyNull(n) {
		return nil // "key:" alone keeps the default
	}
	if t.Kind() == reflect.Struct && t != durationType {
		if n.Kind != yaml.MappingNode {
			return &lineError{n.Line, &valueError{key: key, value: n.Value, kind: n.Kind, want: wantOf(t)}}
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			sub := k.Value
			if key != "" {
				sub = key + "." + sub
			}
			f, ok := yamlField(t, k.Value)
			if !ok {
				return &lineError{k.Line, fmt.Errorf("unknown key %q", sub)}
			}
			if err := checkValue(sub, n.Content[i+1], f.Type); err != nil {
				return err
			}
		}
		return nil
	}
	if err := n.Decode(reflect.New(t).Interface()); err != nil {
		ve := &valueError{key: key, value: n.Value, kind: n.Kind, want: wantOf(t)}
		if n.Kind == yaml.ScalarNode && t != durationType && wholeNumber.MatchString(n.Value) {
			switch k := t.Kind(); {
			case k >= reflect.Int && k <= reflect.Int64:
				ve.want = fmt.Sprintf("a whole number from %d to %d", int64(-1)<<(t.Bits()-1), uint64(1)<<(t.Bits()-1)-1)
			case k >= reflect.Uint && k <= reflect.Uint64 && !strings.HasPrefix(n.Value, "-"):
				ve.want = fmt.Sprintf("a whole number from 0 to %d", ^uint64(0)>>(64-t.Bits()))
			}
		}
		return &lineError{n.Line, ve}
	}
	return nil
}

var wholeNumber = regexp.MustCompile(`^[-+]?[0-9]+$`)

// Validate checks the configuration and fills derived defaults.
func (c *Config) Validate() error {
	if c.Listen == "" {
		return errors.New("config: listen is required")
	}
	if c.Advertise == "" {
		c.Advertise = c.Listen
	}
	if strings.HasPrefix(c.Advertise, "0.0.0.0:") || strings.HasPrefix(c.Advertise, ":") {
		return fmt.Errorf("config: advertise address %q is not reachable by peers; set advertise", c.Advertise)
	}
	if c.DataDir == "" {
		return errors.New("config: data_dir is required")
	}
	if c.GCPercent == 0 || c.GCPercent < -1 {
		return fmt.Errorf("config: gc_percent %d: want a positive percentage or -1 (collector off)", c.GCPercent)
	}
	if _, err := ParseLogLevel(c.LogLevel); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if c.MaxMessageSize < 17<<20 {
		return fmt.Errorf("config: max_message_size %d is below one 16 MiB chunk write plus headers", c.MaxMessageSize)
	}
	switch strings.ToLower(c.Raft.LogLevel) {
	case "trace", "debug", "info", "warn", "error", "off":
	default:
		return fmt.Errorf("config: raft.log_level %q: want trace, debug, info, warn, error or off", c.Raft.LogLevel)
	}
	if c.Raft.SnapshotBytes < minRetainBytes {
		return fmt.Errorf("config: raft.snapshot_bytes %d must be at least %d (1 MiB)", c.Raft.SnapshotBytes, minRetainBytes)
	}
	if c.Raft.TrailingBytes < minRetainBytes {
		return fmt.Errorf("config: raft.trailing_bytes %d must be at least %d (1 MiB)", c.Raft.TrailingBytes, minRetainBytes)
	}
	if c.Raft.LogSpareSegments < 1 {
		return fmt.Errorf("config: raft.log_spare_segments %d must be at least 1", c.Raft.LogSpareSegments)
	}
	if c.Raft.MaxPinnedEntries < 1 {
		return fmt.Errorf("config: raft.max_pinned_entries %d must be at least 1", c.Raft.MaxPinnedEntries)
	}
	if c.Raft.LogStore != "boltdb" && c.Raft.LogStore != "shared" {
		return fmt.Errorf("config: raft.log_store %q: want boltdb or shared", c.Raft.LogStore)
	}
	if c.ChunkFilePool < 0 || c.ReadCacheBytes < 0 {
		return errors.New("config: chunk_file_pool and read_cache_bytes must not be negative")
	}
	c.ObjectStore.ApplyDefaults(c.DataDir)
	if err := c.ObjectStore.Validate(); err != nil {
		return fmt.Errorf("config: object_store: %w", err)
	}
	for _, s := range c.ClusterSeeds {
		if _, _, err := copyset.ParsePeer(s); err != nil {
			return fmt.Errorf("config: cluster_seeds: %w", err)
		}
	}
	if c.Sync.CheckPeriod < 100*time.Millisecond {
		return fmt.Errorf("config: sync.check_period %v must be at least 100ms", c.Sync.CheckPeriod)
	}
	if c.Sync.SendInterval < 10*time.Millisecond {
		return fmt.Errorf("config: sync.send_interval %v must be at least 10ms", c.Sync.SendInterval)
	}
	if c.Sync.MaxRetainedBytes < minRetainedBytes {
		return fmt.Errorf("config: sync.max_retained_bytes %d must be at least %d (1 MiB)", c.Sync.MaxRetainedBytes, minRetainedBytes)
	}
	if c.Sync.SnapshotExports < 1 {
		return fmt.Errorf("config: sync.snapshot_exports %d must be at least 1", c.Sync.SnapshotExports)
	}
	if err := c.Disagg.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := c.DM.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if c.StaleReplicaCheck < 0 {
		return fmt.Errorf("config: stale_replica_check %v must not be negative (0 turns the sweep off)", c.StaleReplicaCheck)
	}
	if c.MaxInflight < 0 {
		return fmt.Errorf("config: max_inflight %d must not be negative", c.MaxInflight)
	}
	if err := c.TLS.validate(); err != nil {
		return fmt.Errorf("config: tls: %w", err)
	}
	if c.Raft.LeaderLeaseTimeout < 0 {
		return fmt.Errorf("config: raft.leader_lease_timeout %v must not be negative (0 means heartbeat_timeout)", c.Raft.LeaderLeaseTimeout)
	}
	if c.Raft.LeaderLeaseTimeout > c.Raft.HeartbeatTimeout {
		return fmt.Errorf("config: raft.leader_lease_timeout %v exceeds raft.heartbeat_timeout %v",
			c.Raft.LeaderLeaseTimeout, c.Raft.HeartbeatTimeout)
	}
	if c.Raft.ElectionTimeout < c.Raft.HeartbeatTimeout {
		return fmt.Errorf("config: raft.election_timeout %v is below raft.heartbeat_timeout %v",
			c.Raft.ElectionTimeout, c.Raft.HeartbeatTimeout)
	}
	return nil
}

// ParseLogLevel maps debug|info|warn|error to a slog level.
func ParseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("log level %q: want debug, info, warn or error", s)
	}
	return l, nil
}
