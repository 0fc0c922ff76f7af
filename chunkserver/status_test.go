package chunkserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/testwait"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	commonpb "github.com/chunkraft/chunkraft/proto/curve/common"
	"google.golang.org/protobuf/proto"
)

// cfgCall runs one ConfigService call on server i.
func (c *testCluster) cfgCall(t *testing.T, i int, op, key, value string) (pb.CONFIG_OP_STATUS, string) {
	t.Helper()
	cl := pb.NewConfigServiceClient(c.Conns[i])
	req := &pb.ConfigRequest{Key: proto.String(key), Value: proto.String(value)}
	var (
		resp *pb.ConfigResponse
		err  error
	)
	ctx := context.Background()
	switch op {
	case "get":
		resp, err = cl.Get(ctx, req)
	case "set":
		resp, err = cl.Set(ctx, req)
	case "dump":
		resp, err = cl.Dump(ctx, req)
	}
	if err != nil {
		t.Fatalf("config %s %s: %v", op, key, err)
	}
	return resp.GetStatus(), resp.GetValue()
}

func (c *testCluster) cfgSet(t *testing.T, i int, key, value string) {
	t.Helper()
	if st, msg := c.cfgCall(t, i, "set", key, value); st != pb.CONFIG_OP_STATUS_CONFIG_OP_STATUS_SUCCESS {
		t.Fatalf("set %s=%s: %v %s", key, value, st, msg)
	}
}

func (c *testCluster) cfgGet(t *testing.T, i int, key string) string {
	t.Helper()
	st, v := c.cfgCall(t, i, "get", key, "")
	if st != pb.CONFIG_OP_STATUS_CONFIG_OP_STATUS_SUCCESS {
		t.Fatalf("get %s: %v %s", key, st, v)
	}
	return v
}

func (c *testCluster) cfgRefused(t *testing.T, i int, key, value, want string) {
	t.Helper()
	dump := func() string { _, v := c.cfgCall(t, i, "dump", "", ""); return v }
	was := dump()
	st, msg := c.cfgCall(t, i, "set", key, value)
	if st != pb.CONFIG_OP_STATUS_CONFIG_OP_STATUS_FAILURE_UNKNOWN || !strings.Contains(msg, want) {
		t.Fatalf("set %s=%q: %v %q, want FAILURE_UNKNOWN mentioning %q", key, value, st, msg, want)
	}
	if now := dump(); now != was {
		t.Fatalf("refused set %s=%q changed the configuration", key, value)
	}
}

// TestConfigServiceRuntimeKeys: each runtime key takes effect at once;
// restart-needed keys, unknown keys and bad values are refused and change
// nothing; Get and Dump report the configuration.
func TestConfigServiceRuntimeKeys(t *testing.T) {
	c := startTestCluster(t, 3)
	ctx := context.Background()
	l := c.Leader(t)
	cl := c.Chunk(l)
	srv := c.Servers[l]
	data := bytes.Repeat([]byte{5}, 4096)
	resp, err := cl.WriteChunk(ctx, writeReq(1, 0, data))
	mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)

	// Get and Dump.
	if v := c.cfgGet(t, l, "listen"); v != c.Cfgs[l].Listen {
		t.Fatalf("get listen = %q, want %q", v, c.Cfgs[l].Listen)
	}
	if v := c.cfgGet(t, l, "raft.heartbeat_timeout"); v != c.Cfgs[l].Raft.HeartbeatTimeout.String() {
		t.Fatalf("get raft.heartbeat_timeout = %q, want %v (the harness's)", v, c.Cfgs[l].Raft.HeartbeatTimeout)
	}
	_, all := c.cfgCall(t, l, "dump", "", "")
	lines := strings.Split(strings.TrimSpace(all), "\n")
	for i := 1; i < len(lines); i++ {
		if lines[i-1] >= lines[i] {
			t.Fatalf("dump not sorted: %q before %q", lines[i-1], lines[i])
		}
	}
	if !strings.Contains(all, "max_inflight=5000\n") || !strings.Contains(all, "raft.trailing_logs=10240\n") ||
		!strings.Contains(all, "copyset_load_margin=2000\n") {
		t.Fatalf("dump misses keys:\n%s", all)
	}
	_, raftDump := c.cfgCall(t, l, "dump", "raft", "")
	for _, line := range strings.Split(strings.TrimSpace(raftDump), "\n") {
		if !strings.HasPrefix(line, "raft.") {
			t.Fatalf("dump raft: %q", line)
		}
	}

	// max_inflight: 0 refuses every chunk request, then back.
	c.cfgSet(t, l, "max_inflight", "0")
	resp, err = cl.WriteChunk(ctx, writeReq(1, 0, data))
	mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_OVERLOAD)
	if v := c.cfgGet(t, l, "max_inflight"); v != "0" {
		t.Fatalf("max_inflight = %q", v)
	}
	c.cfgSet(t, l, "max_inflight", "100")
	resp, err = cl.WriteChunk(ctx, writeReq(1, 0, data))
	mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)

	// log_level.
	c.cfgSet(t, l, "log_level", "debug")
	if v := c.cfgGet(t, l, "log_level"); v != "debug" || srv.LogLevelVar().Level() != slog.LevelDebug {
		t.Fatalf("log_level = %q, LevelVar %v", v, srv.LogLevelVar().Level())
	}

	// min_free_bytes: a floor above the free space turns the copyset
	// read-only at once; lowering it makes it writable again.
	c.cfgSet(t, l, "min_free_bytes", "1000000000000000000")
	resp, err = cl.WriteChunk(ctx, writeReq(1, 0, data))
	mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_NOSPACE)
	if st := c.stCopyset(t, l, false); !st.GetReadOnly() {
		t.Fatal("status not readOnly below the floor")
	}
	c.cfgSet(t, l, "min_free_bytes", "1024")
	resp, err = cl.WriteChunk(ctx, writeReq(1, 0, data))
	mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)

	// raft snapshot settings: reloaded on the open copyset, used by copysets
	// opened later, and effective (a snapshot truncates the log).
	c.cfgSet(t, l, "raft.snapshot_threshold", "4")
	c.cfgSet(t, l, "raft.trailing_logs", "2")
	c.cfgSet(t, l, "raft.snapshot_interval", "50ms")
	c.cfgSet(t, l, "raft.snapshot_bytes", "5000000")
	c.cfgSet(t, l, "raft.trailing_bytes", "6000000")
	want := copyset.RaftReload{SnapshotThreshold: 4, TrailingLogs: 2, SnapshotInterval: 50 * time.Millisecond,
		SnapshotBytes: 5000000, TrailingBytes: 6000000}
	if got := srv.Copysets().Get(c.Group).RaftSettings(); got != want {
		t.Fatalf("copyset raft settings %+v, want %+v", got, want)
	}
	other := copyset.NewGroupID(1, 99)
	if _, err := srv.Copysets().Create(ctx, other, []copyset.PeerID{srv.Local()}); err != nil {
		t.Fatal(err)
	}
	if got := srv.Copysets().Get(other).RaftSettings(); got != want {
		t.Fatalf("new copyset raft settings %+v, want %+v", got, want)
	}
	// The open copyset: a snapshot now keeps only 2 trailing entries (raft
	// re-arms its snapshot timer with the new interval after the current
	// wait, so that is not observable quickly here).
	for i := 0; i < 10; i++ {
		resp, err = cl.WriteChunk(ctx, writeReq(2, uint32(i%8)*4096, data))
		mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	}
	if err := srv.Copysets().Get(c.Group).Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if st := srv.Copysets().Get(c.Group).Status(); st.LastIndex-st.FirstIndex > 4 {
		t.Fatalf("snapshot kept more than the trailing logs: %+v", st)
	}
	// The new copyset: raft snapshots by itself after 4 entries (50ms
	// checks) and truncates the log.
	testwait.Until(t, 10*time.Second, func() error {
		if !srv.Copysets().Get(other).IsLeader() {
			return errors.New("the new copyset has not elected itself")
		}
		return nil
	})
	for i := 0; i < 20; i++ {
		w := writeReq(3, uint32(i%8)*4096, data)
		w.CopysetId = proto.Uint32(other.Copyset())
		resp, err = cl.WriteChunk(ctx, w)
		mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	}
	testwait.Until(t, 10*time.Second, func() error {
		if first := srv.Copysets().Get(other).Status().FirstIndex; first <= 1 {
			return fmt.Errorf("no raft snapshot truncated the new copyset's log: it starts at %d", first)
		}
		return nil
	})

	// Restart-needed keys, unknown keys, bad values: refused, no change.
	for _, key := range []string{"listen", "data_dir", "raft.heartbeat_timeout", "raft.log_store", "raft.log_spare_segments", "copyset_load_margin", "chunk_file_pool"} {
		c.cfgRefused(t, l, key, c.cfgGet(t, l, key), "restart")
	}
	c.cfgRefused(t, l, "no_such_key", "1", "unknown config key")
	c.cfgRefused(t, l, "raft", "1", "section")
	c.cfgRefused(t, l, "max_inflight", "many", `max_inflight: "many" is not a whole number; nothing changed`)
	c.cfgRefused(t, l, "max_inflight", "-1", "invalid value")
	c.cfgRefused(t, l, "log_level", "loud", "invalid value")
	c.cfgRefused(t, l, "min_free_bytes", "-5", `min_free_bytes: "-5" is not a whole number of 0 or more; nothing changed`)
	c.cfgRefused(t, l, "raft.snapshot_interval", "1ms", "invalid value")
	c.cfgRefused(t, l, "raft.snapshot_interval", "10", `raft.snapshot_interval: "10" is not a duration`)
	c.cfgRefused(t, l, "raft.snapshot_threshold", "0", "invalid value")
	c.cfgRefused(t, l, "raft.trailing_bytes", "1000", "invalid value")
	if st, msg := c.cfgCall(t, l, "get", "nope", ""); st != pb.CONFIG_OP_STATUS_CONFIG_OP_STATUS_FAILURE_UNKNOWN ||
		!strings.Contains(msg, "unknown") {
		t.Fatalf("get unknown key: %v %q", st, msg)
	}
	file, err := os.ReadFile(filepath.Join(c.Cfgs[l].DataDir, ConfigFileName))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(file), "listen") || !strings.Contains(string(file), "snapshot_interval: 50ms") {
		t.Fatalf("config file:\n%s", file)
	}
}

// TestConfigChunkFilePool: on a server with a chunk file pool,
// chunk_file_pool changes the pool's target at runtime (the pool formats
// up to a larger one; a smaller one keeps the ready files); 0 is refused
// as needing a restart and changes nothing. (A server started without a
// pool refuses the key: TestConfigServiceRuntimeKeys.)
func TestConfigChunkFilePool(t *testing.T) {
	c := startTestCluster(t, 1, func(cfg *Config) { cfg.ChunkFilePool = 1 })
	pool := c.Servers[0].Chunks().Pool()
	testwait.Until(t, 20*time.Second, func() error {
		if st := pool.Stats(); st.Ready != 1 {
			return fmt.Errorf("the pool has not formatted its file: %+v", st)
		}
		return nil
	})
	c.cfgSet(t, 0, "chunk_file_pool", "3")
	testwait.Until(t, 20*time.Second, func() error {
		if st := pool.Stats(); st.Target != 3 || st.Ready != 3 {
			return fmt.Errorf("the pool has not formatted up to 3: %+v", st)
		}
		return nil
	})
	c.cfgSet(t, 0, "chunk_file_pool", "2")
	if st := pool.Stats(); st.Target != 2 || st.Ready != 3 {
		t.Fatalf("after chunk_file_pool=2: %+v", st)
	}
	c.cfgRefused(t, 0, "chunk_file_pool", "0", "restart")
	c.cfgRefused(t, 0, "chunk_file_pool", "-1", "invalid value")
	if st := pool.Stats(); st.Target != 2 {
		t.Fatalf("after the refused sets: %+v", st)
	}
}

// TestConfigSetSurvivesRestart: runtime changes are persisted to
// <data_dir>/chunkserver.yaml and are in effect after a restart that loads
// it.
func TestConfigSetSurvivesRestart(t *testing.T) {
	c := startTestCluster(t, 3)
	f := (c.Leader(t) + 1) % 3
	c.cfgSet(t, f, "log_level", "warn")
	c.cfgSet(t, f, "max_inflight", "777")
	c.cfgSet(t, f, "min_free_bytes", "4096")
	c.cfgSet(t, f, "raft.trailing_logs", "4321")
	c.cfgSet(t, f, "raft.snapshot_threshold", "999")
	c.cfgSet(t, f, "raft.snapshot_interval", "7s")
	c.cfgSet(t, f, "raft.snapshot_bytes", "3000000")
	c.cfgSet(t, f, "raft.trailing_bytes", "2000000")
	c.Stop(f)

	// What the chunkserver command does without --config: the file in the
	// data dir over the defaults (the harness's settings play the flags).
	path := filepath.Join(c.Cfgs[f].DataDir, ConfigFileName)
	loaded, gotPath, err := LoadConfig("", c.Cfgs[f].DataDir)
	if err != nil || gotPath != path {
		t.Fatalf("LoadConfig: %v %s", err, gotPath)
	}
	if loaded.MaxInflight != 777 || loaded.Raft.TrailingLogs != 4321 || loaded.LogLevel != "warn" {
		t.Fatalf("loaded %+v", loaded)
	}
	cfg := c.Cfgs[f]
	if err := cfg.overlayFile(path); err != nil {
		t.Fatal(err)
	}
	c.Cfgs[f] = cfg
	c.Start(f, nil)

	for key, want := range map[string]string{
		"log_level": "warn", "max_inflight": "777", "min_free_bytes": "4096",
		"raft.trailing_logs": "4321", "raft.snapshot_threshold": "999", "raft.snapshot_interval": "7s",
		"raft.snapshot_bytes": "3000000", "raft.trailing_bytes": "2000000",
	} {
		if v := c.cfgGet(t, f, key); v != want {
			t.Fatalf("after restart %s = %q, want %q", key, v, want)
		}
	}
	srv := c.Servers[f]
	if srv.Chunks().Admission().MaxInflight() != 777 || srv.LogLevelVar().Level() != slog.LevelWarn {
		t.Fatalf("after restart max_inflight %d, level %v", srv.Chunks().Admission().MaxInflight(), srv.LogLevelVar().Level())
	}
	want := copyset.RaftReload{SnapshotThreshold: 999, TrailingLogs: 4321, SnapshotInterval: 7 * time.Second,
		SnapshotBytes: 3000000, TrailingBytes: 2000000}
	if got := srv.Copysets().Get(c.Group).RaftSettings(); got != want {
		t.Fatalf("after restart copyset raft settings %+v, want %+v", got, want)
	}
}

// TestPersistConfigKey: a Set rewrites only its key, keeps the file's other
// keys and comments, creates sections as needed, leaves no temp file, and
// LoadConfig finds the file in the data dir.
func TestPersistConfigKey(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, ConfigFileName)
	orig := "# my chunkserver\nlisten: 127.0.0.1:7000 # port\nmax_inflight: 10 # low\n"
	if err := os.WriteFile(path, []byte(orig), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.MaxInflight = 20
	cfg.Raft.TrailingLogs = 77
	if err := persistConfigKey(path, &cfg, "max_inflight"); err != nil {
		t.Fatal(err)
	}
	if err := persistConfigKey(path, &cfg, "raft.trailing_logs"); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# my chunkserver", "listen: 127.0.0.1:7000 # port", "max_inflight: 20 # low", "raft:\n  trailing_logs: 77"} {
		if !strings.Contains(string(got), want) {
			t.Fatalf("file lacks %q:\n%s", want, got)
		}
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("leftover files: %v", entries)
	}
	loaded, p, err := LoadConfig("", dir)
	if err != nil || p != path || loaded.MaxInflight != 20 || loaded.Raft.TrailingLogs != 77 ||
		loaded.Listen != "127.0.0.1:7000" || loaded.Raft.SnapshotThreshold != DefaultConfig().Raft.SnapshotThreshold {
		t.Fatalf("LoadConfig: %v %s %+v", err, p, loaded)
	}
	if cfg, p, err := LoadConfig("", t.TempDir()); err != nil || cfg.MaxInflight != DefaultConfig().MaxInflight || p == "" {
		t.Fatalf("LoadConfig without file: %v %+v", err, cfg)
	}
	if _, _, err := LoadConfig(filepath.Join(dir, "missing.yaml"), ""); err == nil {
		t.Fatal("LoadConfig of a missing --config file succeeded")
	}
	// A new file gets created.
	fresh := filepath.Join(t.TempDir(), ConfigFileName)
	if err := persistConfigKey(fresh, &cfg, "log_level"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(fresh); string(got) != "log_level: info\n" {
		t.Fatalf("fresh file %q", got)
	}
}

// stFakeReplica is a loadReplica whose status a test controls.
type stFakeReplica struct {
	g  copyset.GroupID
	mu sync.Mutex
	st copyset.Status
}

func (f *stFakeReplica) Group() copyset.GroupID { return f.g }
func (f *stFakeReplica) Status() copyset.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st
}
func (f *stFakeReplica) set(fn func(*copyset.Status)) { f.mu.Lock(); fn(&f.st); f.mu.Unlock() }

// TestLoadCheck: a replica trailing its leader by more than the margin is
// not loaded until it catches up; a replica without a reachable leader is
// given up on after the retries; a leader, or a broken replica, is loaded.
func TestLoadCheck(t *testing.T) {
	const self, other = copyset.PeerID("127.0.0.1:1:0"), copyset.PeerID("127.0.0.1:2:0")
	var committed atomic.Uint64
	committed.Store(10_000)
	var probes atomic.Int64
	probeErr := atomic.Pointer[error]{}
	c := &loadCheck{
		local: self, margin: 100, retries: 3, interval: 5 * time.Millisecond,
		log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		probe: func(ctx context.Context, g copyset.GroupID, leader copyset.PeerID) (uint64, error) {
			probes.Add(1)
			if leader != other {
				return 0, errors.New("wrong leader asked")
			}
			if e := probeErr.Load(); e != nil {
				return 0, *e
			}
			return committed.Load(), nil
		},
	}
	runFor := func(d time.Duration, rs ...loadReplica) bool {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		return c.run(ctx, rs)
	}

	lagging := &stFakeReplica{g: 1, st: copyset.Status{Leader: other, AppliedIndex: 5_000, LastIndex: 5_000}}
	if runFor(100*time.Millisecond, lagging) {
		t.Fatal("a replica 5000 entries behind counted as loaded")
	}
	if probes.Load() < 3 {
		t.Fatalf("leader asked %d times", probes.Load())
	}
	// Within the margin: loaded.
	lagging.set(func(s *copyset.Status) { s.AppliedIndex = 9_900 })
	if !runFor(time.Second, lagging) {
		t.Fatal("a replica within the margin is not loaded")
	}
	// Catching up while the check runs: it asks the leader round after
	// round and finishes only once the replica is within the margin.
	lagging.set(func(s *copyset.Status) { s.AppliedIndex = 100 })
	done := make(chan bool)
	asked := probes.Load()
	go func() { done <- runFor(5*time.Second, lagging) }()
	testwait.Until(t, 5*time.Second, func() error {
		select {
		case <-done:
			t.Fatal("finished before catching up")
		default:
		}
		if n := probes.Load() - asked; n < 3 {
			return fmt.Errorf("the check asked the leader %d times, want 3 rounds", n)
		}
		return nil
	})
	lagging.set(func(s *copyset.Status) { s.AppliedIndex = 9_950 })
	if !<-done {
		t.Fatal("did not finish after catching up")
	}

	// This server leads: its own committed index is the reference.
	leader := &stFakeReplica{g: 2, st: copyset.Status{Leader: self, CommittedIndex: 500, AppliedIndex: 450}}
	if !runFor(time.Second, leader) {
		t.Fatal("leader not loaded")
	}
	leader.set(func(s *copyset.Status) { s.AppliedIndex = 10 })
	if runFor(50*time.Millisecond, leader) {
		t.Fatal("leader with an apply backlog beyond the margin counted as loaded")
	}

	// No leader, or the leader does not answer: given up after retries.
	noLeader := &stFakeReplica{g: 3, st: copyset.Status{AppliedIndex: 1}}
	start := time.Now()
	if !runFor(time.Second, noLeader) {
		t.Fatal("replica without a leader never counted as loaded")
	}
	if time.Since(start) < 2*c.interval {
		t.Fatal("gave up without retrying")
	}
	e := errors.New("connection refused")
	probeErr.Store(&e)
	unreachable := &stFakeReplica{g: 4, st: copyset.Status{Leader: other, AppliedIndex: 1}}
	if !runFor(time.Second, unreachable) {
		t.Fatal("replica with an unreachable leader never counted as loaded")
	}
	probeErr.Store(nil)

	// Broken: not waited for. All together: the slowest decides.
	broken := &stFakeReplica{g: 5, st: copyset.Status{Broken: errors.New("disk")}}
	lagging.set(func(s *copyset.Status) { s.AppliedIndex = 0 })
	if runFor(100*time.Millisecond, broken, lagging, noLeader) {
		t.Fatal("loaded while one replica lags")
	}
	lagging.set(func(s *copyset.Status) { s.AppliedIndex = 10_000 })
	if !runFor(time.Second, broken, lagging, noLeader) {
		t.Fatal("not loaded once every replica is caught up or given up")
	}
}

func (c *testCluster) stLoadFin(t *testing.T, i int) bool {
	t.Helper()
	resp, err := pb.NewChunkServerServiceClient(c.Conns[i]).ChunkServerStatus(context.Background(), &pb.ChunkServerStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetCopysetLoadFin()
}

// TestChunkServerStatusLoadFin: copysetLoadFin is true on running servers,
// false once a server stops, and true again after a restarted follower,
// which had fallen behind, caught up with its leader (asked over gRPC).
func TestChunkServerStatusLoadFin(t *testing.T) {
	c := startTestCluster(t, 3)
	for i := range c.Servers {
		testwait.Until(t, 5*time.Second, func() error {
			if !c.stLoadFin(t, i) {
				return fmt.Errorf("server %d: copysetLoadFin is false", i)
			}
			return nil
		})
	}
	l := c.Leader(t)
	f := (l + 1) % 3
	c.Stop(f)
	if c.Servers[f].CopysetLoadFinished() {
		t.Fatal("copysetLoadFin true on a stopped server")
	}
	data := bytes.Repeat([]byte{9}, 4096)
	for i := 0; i < 50; i++ {
		resp, err := c.Chunk(l).WriteChunk(context.Background(), writeReq(uint64(i%5), uint32(i%4)*4096, data))
		mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	}
	target := c.Servers[l].Copysets().Get(c.Group).Status().CommittedIndex
	cfg := c.Cfgs[f]
	cfg.CopysetLoadMargin = 0 // only fully caught up counts
	c.Cfgs[f] = cfg
	c.Start(f, nil)
	testwait.Until(t, 10*time.Second, func() error {
		if !c.stLoadFin(t, f) {
			return errors.New("copysetLoadFin is false after the restart")
		}
		return nil
	})
	if st := c.Servers[f].Copysets().Get(c.Group).Status(); st.AppliedIndex < target {
		t.Fatalf("loaded with applied %d, leader committed %d", st.AppliedIndex, target)
	}
}

func (c *testCluster) stCopyset(t *testing.T, i int, hash bool) *pb.CopysetStatusResponse {
	t.Helper()
	st, err := pb.NewCopysetServiceClient(c.Conns[i]).GetCopysetStatus(context.Background(), &pb.CopysetStatusRequest{
		LogicPoolId: proto.Uint32(c.Group.Pool()), CopysetId: proto.Uint32(c.Group.Copyset()), QueryHash: proto.Bool(hash),
		Peer: &commonpb.Peer{Address: proto.String(string(c.Servers[i].Local()))}})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetStatus() != pb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_SUCCESS {
		t.Fatalf("copyset status on %d: %v", i, st.GetStatus())
	}
	return st
}

// settled waits until every replica applied the same index with nothing
// pending, and returns the replicas' hashes.
func (c *testCluster) stSettledHashes(t *testing.T) []string {
	t.Helper()
	var hashes []string
	testwait.Until(t, 10*time.Second, func() error {
		var applied []int64
		for i := range c.Servers {
			st := c.stCopyset(t, i, false)
			if st.GetApplyingIndex() != 0 {
				return fmt.Errorf("server %d is applying index %d", i, st.GetApplyingIndex())
			}
			applied = append(applied, st.GetKnownAppliedIndex())
		}
		for _, a := range applied {
			if a != applied[0] {
				return fmt.Errorf("replicas applied different indexes: %v", applied)
			}
		}
		return nil
	})
	for i := range c.Servers {
		hashes = append(hashes, c.stCopyset(t, i, true).GetHash())
	}
	return hashes
}

// TestCopysetStatusHash: queryHash is equal on replicas that applied the
// same index, covers chunk and chunk snapshot data, and differs on a
// replica whose chunk file was corrupted on disk. The other status fields
// are filled.
func TestCopysetStatusHash(t *testing.T) {
	c := startTestCluster(t, 3)
	ctx := context.Background()
	l := c.Leader(t)
	cl := c.Chunk(l)
	empty := c.stSettledHashes(t)
	for _, h := range empty {
		if h != "0" {
			t.Fatalf("empty copyset hashes %v", empty)
		}
	}

	for id := uint64(1); id <= 3; id++ {
		for b := uint32(0); b < 4; b++ {
			resp, err := cl.WriteChunk(ctx, writeReq(id, b*8192, bytes.Repeat([]byte{byte(id*16 + uint64(b))}, 8192)))
			mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
		}
	}
	h1 := c.stSettledHashes(t)
	if h1[0] == "0" || h1[0] != h1[1] || h1[1] != h1[2] {
		t.Fatalf("hashes after writes: %v", h1)
	}

	// A write at a newer sn makes a chunk snapshot (COW): the hash changes
	// and stays equal across replicas.
	w := writeReq(2, 0, bytes.Repeat([]byte{0xee}, 4096))
	w.Sn = proto.Uint64(2)
	resp, err := cl.WriteChunk(ctx, w)
	mustStatus(t, resp, err, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	h2 := c.stSettledHashes(t)
	if h2[0] == h1[0] || h2[0] != h2[1] || h2[1] != h2[2] {
		t.Fatalf("hashes after a COW write: %v (before %v)", h2, h1)
	}
	snaps, _ := filepath.Glob(filepath.Join(c.Cfgs[l].DataDir, "copysets", c.Group.String(), "data", "chunk_2_snap_*"))
	if len(snaps) != 1 {
		t.Fatalf("snapshot files %v", snaps)
	}

	// Other fields.
	for i := range c.Servers {
		st := c.stCopyset(t, i, false)
		if st.GetDiskIndex() != st.GetLastIndex() || st.GetApplyingIndex() != 0 || st.GetPendingQueueSize() != 0 ||
			st.GetPendingIndex() != 0 || st.GetReadOnly() || st.GetCommittedIndex() == 0 {
			t.Fatalf("status of %d: %v", i, st)
		}
	}

	// Flip one byte of a follower's chunk data on disk.
	f := (l + 1) % 3
	path := filepath.Join(c.Cfgs[f].DataDir, "copysets", c.Group.String(), "data", "chunk_3")
	file, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	off := int64(4096 + 100) // meta page, then data
	b := make([]byte, 1)
	if _, err := file.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x01
	if _, err := file.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	file.Close()
	h3 := c.stSettledHashes(t)
	for i := range h3 {
		if (i == f) == (h3[i] == h2[i]) {
			t.Fatalf("after corrupting replica %d: hashes %v, before %v", f, h3, h2)
		}
	}
}
