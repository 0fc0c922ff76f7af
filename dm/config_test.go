package dm

import (
	"strings"
	"testing"

	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	"google.golang.org/protobuf/proto"
)

const clusterTask = `
name: mig1
task-mode: all
source:
  cluster: ["127.0.0.1:8200", "127.0.0.1:8201"]
  pool: 1
  relay: file:///var/lib/relay/mig1/
  send-interval: 0.5s
target-pool: 2
copysets: [3, 1, 2]
sync:
  throttle-bytes-per-sec: 1048576
validator:
  mode: full
  row-error-delay: 2s
`

func TestParseTaskYAML(t *testing.T) {
	c, err := ParseTaskYAML([]byte(clusterTask))
	if err != nil {
		t.Fatal(err)
	}
	want := &pb.TaskConfig{Name: "mig1", Mode: pb.Mode_ALL, TargetPool: 2, Copysets: []uint32{1, 2, 3},
		Source: &pb.Source{Cluster: []string{"127.0.0.1:8200", "127.0.0.1:8201"}, Pool: 1, Relay: "file:///var/lib/relay/mig1", SendIntervalMs: 500},
		Sync:   &pb.SyncSettings{ThrottleBytesPerSec: 1 << 20}, Validator: &pb.Validator{Mode: "full", RowErrorDelayMs: 2000}}
	if !proto.Equal(c, want) {
		t.Fatalf("parsed %v\nwant %v", c, want)
	}
	// The TOML form of a config reads back as the same config.
	s, err := TaskTOML(c)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseTaskTOML(s)
	if err != nil {
		t.Fatalf("%v in\n%s", err, s)
	}
	if !proto.Equal(back, c) {
		t.Fatalf("TOML round trip: %v\nwant %v\n%s", back, c, s)
	}
}

func TestParseTaskBad(t *testing.T) {
	for _, tc := range []struct{ name, file, want string }{
		{"empty", "", "empty"},
		{"unknown key", "name: a\ntask-mode: all\nsource: {pool: 1, export: file:///e}\ntarget-pool: 2\nmeta-schema: x\n", "line 5: unknown key meta-schema"},
		{"two documents", "name: a\n---\nname: b\n", "more than one YAML document"},
		{"no name", "task-mode: all\n", "name: required"},
		{"bad name", "name: 'a b'\ntask-mode: all\n", "only letters"},
		{"bad mode", "name: a\ntask-mode: some\n", `task-mode: "some" is not one of`},
		{"no source pool", "name: a\ntask-mode: all\nsource: {export: file:///e}\ntarget-pool: 2\n", "source.pool: required"},
		{"no target", "name: a\ntask-mode: all\nsource: {pool: 1, export: file:///e}\n", "target-pool: required"},
		{"no source", "name: a\ntask-mode: all\nsource: {pool: 1}\ntarget-pool: 2\n", "one of cluster (with relay) or export"},
		{"validator of an export", "name: a\ntask-mode: all\nsource: {pool: 1, export: file:///e}\ntarget-pool: 2\nvalidator: {mode: fast}\n", "validator.mode: fast compares with the live source cluster"},
		{"validator mode", "name: a\ntask-mode: all\nsource: {pool: 1, cluster: ['h:1'], relay: file:///r}\ntarget-pool: 2\nvalidator: {mode: slow}\n", `validator.mode: "slow" is not one of none, fast, full`},
		{"row delay", "name: a\ntask-mode: all\nsource: {pool: 1, cluster: ['h:1'], relay: file:///r}\ntarget-pool: 2\nvalidator: {mode: full, row-error-delay: 10ms}\n", "validator.row-error-delay: \"10ms\": want a duration of at least 1s"},
		{"row delay without mode", "name: a\ntask-mode: all\nsource: {pool: 1, cluster: ['h:1'], relay: file:///r}\ntarget-pool: 2\nvalidator: {row-error-delay: 1m}\n", "only with validator.mode fast or full"},
		{"both sources", "name: a\ntask-mode: all\nsource: {pool: 1, export: file:///e, cluster: ['h:1']}\ntarget-pool: 2\n", "exclude each other"},
		{"cluster without relay", "name: a\ntask-mode: all\nsource: {pool: 1, cluster: ['h:1']}\ntarget-pool: 2\n", "source.relay: required"},
		{"bad seed", "name: a\ntask-mode: all\nsource: {pool: 1, cluster: ['h'], relay: file:///r}\ntarget-pool: 2\n", "not host:port"},
		{"bad export", "name: a\ntask-mode: all\nsource: {pool: 1, export: relative/path}\ntarget-pool: 2\n", "source.export"},
		{"copyset 0", "name: a\ntask-mode: all\nsource: {pool: 1, export: file:///e}\ntarget-pool: 2\ncopysets: [0]\n", "start at 1"},
		{"copyset twice", "name: a\ntask-mode: all\nsource: {pool: 1, export: file:///e}\ntarget-pool: 2\ncopysets: [2, 2]\n", "listed twice"},
		{"incremental without start", "name: a\ntask-mode: incremental\nsource: {pool: 1, export: file:///e}\ntarget-pool: 2\n", "incremental-from: required"},
		{"start without incremental", "name: a\ntask-mode: all\nsource: {pool: 1, export: file:///e}\ntarget-pool: 2\nincremental-from: file:///m\n", "only with task-mode incremental"},
		{"unknown sync key", "name: a\ntask-mode: all\nsource: {pool: 1, export: file:///e}\ntarget-pool: 2\nsync: {apply-concurrency: 4}\n", "unknown key apply-concurrency"},
		{"short send interval", "name: a\ntask-mode: all\nsource: {pool: 1, cluster: ['h:1'], relay: file:///r, send-interval: 10ms}\ntarget-pool: 2\n", "source.send-interval: \"10ms\": want a duration from 100ms to 1h"},
		{"send interval of an export", "name: a\ntask-mode: all\nsource: {pool: 1, export: file:///e, send-interval: 1s}\ntarget-pool: 2\n", "source.send-interval: only with source.cluster"},
		{"bad throttle", "name: a\ntask-mode: all\nsource: {pool: 1, export: file:///e}\ntarget-pool: 2\nsync: {throttle-bytes-per-sec: -1}\n", "cannot unmarshal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTaskYAML([]byte(tc.file))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := ParseTaskTOML("name = \"a\"\ntask-mode = \"all\"\ntarget-pool = 2\nsurprise = 1\n[source]\npool = 1\nexport = \"file:///e\"\n"); err == nil || !strings.Contains(err.Error(), "unknown keys surprise") {
		t.Fatalf("TOML with an unknown key: %v", err)
	}
}

func TestCanUpdate(t *testing.T) {
	cur := testConfig("a")
	next := proto.CloneOf(cur)
	next.Sync.ThrottleBytesPerSec = 1 << 20
	if why := CanUpdate(cur, next); len(why) > 0 {
		t.Fatalf("sync settings may change: %v", why)
	}
	next.TargetPool, next.Mode = 9, pb.Mode_FULL
	why := CanUpdate(cur, next)
	if len(why) != 2 || !strings.Contains(why[0], "task-mode") || !strings.Contains(why[1], "target-pool") {
		t.Fatalf("why = %v", why)
	}
}
