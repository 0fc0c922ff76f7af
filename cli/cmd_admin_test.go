package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

var cs3 = CopysetID{Pool: 1, Copyset: 3}

func (c *fakeCluster) membersOf(cs CopysetID) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.replicas(cs)
}

func (c *fakeCluster) ids(idx ...int) []string {
	out := make([]string, len(idx))
	for k, i := range idx {
		out[k] = c.servers[i].id
	}
	return out
}

func TestCommandPeer(t *testing.T) {
	fc := newFakeCluster(t, 5)
	fc.with(func() {
		fc.members[cs3] = []int{0, 1, 2}
		fc.csLeaders[cs3] = 0
	})
	srv := fc.addrs()
	args := func(cmd string, tail ...string) []string {
		return append([]string{"peer", cmd, "--pool", "1", "--copyset", "3"}, tail...)
	}

	// Add the 4th server: an empty replica is made there with the current
	// peers, then the leader adds it; old and new peers are printed.
	out := mustRun(t, srv, nil, args("add", "--peer", srv[3])...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "POOL") || !strings.Contains(lines[1], strings.Join(fc.ids(0, 1, 2), ",")) ||
		!strings.Contains(lines[1], strings.Join(fc.ids(0, 1, 2, 3), ",")) {
		t.Errorf("peer add table:\n%s", out)
	}
	fc.with(func() {
		if got := fc.created[cs3][3]; !slices.Equal(got, fc.ids(0, 1, 2)) {
			t.Errorf("the empty replica was created with peers %v", got)
		}
	})
	if got := fc.membersOf(cs3); !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Errorf("members after add: %v", got)
	}
	// Again, as host:port:0, in JSON: nothing changes.
	out = mustRun(t, srv, nil, append([]string{"-o", "json"}, args("add", "--peer", srv[3]+":0")...)...)
	var mj membershipJSON
	if err := json.Unmarshal([]byte(out), &mj); err != nil || mj.Leader != fc.servers[0].id || len(mj.OldPeers) != 4 ||
		len(mj.NewPeers) != 4 || mj.Copyset != 3 || mj.NewReplica != "existed" {
		t.Errorf("peer add json: %v\n%s", err, out)
	}

	// Remove the leader itself: the change is made by it, then it is gone.
	out = mustRun(t, srv, nil, append([]string{"-o", "json"}, args("remove", "--peer", srv[0])...)...)
	mj = membershipJSON{}
	if err := json.Unmarshal([]byte(out), &mj); err != nil || !slices.Equal(mj.NewPeers, fc.ids(1, 2, 3)) || mj.Leader != fc.servers[0].id || mj.NewReplica != "" {
		t.Errorf("peer remove json: %v\n%s", err, out)
	}
	if got := fc.membersOf(cs3); !slices.Equal(got, []int{1, 2, 3}) {
		t.Errorf("members after remove: %v", got)
	}

	// Change to an explicit set; the new leader (1) is found first.
	out = mustRun(t, srv, nil, args("change", "--peers", srv[1]+","+srv[2])...)
	if !strings.Contains(out, strings.Join(fc.ids(1, 2), ",")) {
		t.Errorf("peer change table:\n%s", out)
	}
	if got := fc.membersOf(cs3); !slices.Equal(got, []int{1, 2}) {
		t.Errorf("members after change: %v", got)
	}
	// A change that brings in a new server makes its empty replica first.
	mustRun(t, srv, nil, args("change", "--peers", srv[1]+","+srv[2]+","+srv[4])...)
	if got := fc.membersOf(cs3); !slices.Equal(got, []int{1, 2, 4}) {
		t.Errorf("members after change: %v", got)
	}
	fc.with(func() {
		if got := fc.created[cs3][4]; !slices.Equal(got, fc.ids(1, 2)) {
			t.Errorf("the empty replica was created with peers %v", got)
		}
	})

	// A stale leader answer sends the first request to a follower: it says
	// FailedPrecondition and the client finds the leader again.
	fc.with(func() { fc.stale, fc.staleTo = 3, 2 })
	mustRun(t, srv, nil, args("add", "--peer", srv[0])...)
	if n := fc.count(2, "AddPeer"); n < 1 {
		t.Errorf("follower saw %d AddPeer calls, want >= 1", n)
	}
	if got := fc.membersOf(cs3); !slices.Equal(got, []int{0, 1, 2, 4}) {
		t.Errorf("members after add via a stale leader: %v", got)
	}

	// Without --create the new server has no replica: said plainly, not
	// retried.
	cs5 := CopysetID{Pool: 1, Copyset: 5}
	fc.with(func() { fc.members[cs5] = []int{0, 1, 2}; fc.csLeaders[cs5] = 1 })
	before := fc.count(1, "AddPeer")
	_, err := run(t, srv, nil, "peer", "add", "--pool", "1", "--copyset", "5", "--create=false", "--peer", srv[3])
	if err == nil || !strings.Contains(err.Error(), fc.servers[3].id+" does not host a replica of copyset 1/5") ||
		!strings.Contains(err.Error(), "has no replica of pool 1 copyset 5 yet") {
		t.Errorf("add without a replica on the new server: %v", err)
	}
	if err != nil && strings.Contains(err.Error(), "rpc error") {
		t.Errorf("error repeats the gRPC code: %v", err)
	}
	if n := fc.count(1, "AddPeer") - before; n != 1 {
		t.Errorf("%d AddPeer calls for a missing replica, want 1", n)
	}
	if n := fc.count(3, "CreateCopysetNode"); n != 2 {
		t.Errorf("%d CreateCopysetNode calls on the new server, want 2 (not with --create=false)", n)
	}

	// A copyset nobody hosts fails fast, naming why.
	fc.with(func() { fc.members[CopysetID{Pool: 1, Copyset: 99}] = []int{} })
	start := time.Now()
	_, err = run(t, srv, nil, "peer", "add", "--pool", "1", "--copyset", "99", "--peer", srv[3])
	if err == nil || !strings.Contains(err.Error(), "no server in --servers has a replica of it") || time.Since(start) > 2*time.Second {
		t.Errorf("add to a copyset nobody hosts: %v after %s", err, time.Since(start))
	}
	_, err = run(t, srv, nil, "peer", "add", "--pool", "1", "--copyset", "99", "--peer", srv[3], "--create=false")
	if err == nil || !strings.HasSuffix(err.Error(), ": COPYSET_NOTEXIST: copyset 1/99 is hosted by none of the 5 servers") {
		t.Errorf("add to a copyset nobody hosts: %v", err)
	}
}

func TestCommandPeerReset(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.with(func() { fc.members[cs3] = []int{1} })
	srv := fc.addrs()

	out := mustRun(t, srv, nil, "peer", "reset", "--pool", "1", "--copyset", "3", "--server", srv[1], "--peers", srv[1])
	if !strings.Contains(out, "NEW-PEERS") || !strings.Contains(out, fc.servers[1].id) {
		t.Errorf("reset table:\n%s", out)
	}
	fc.with(func() {
		r := fc.resets[1]
		if r == nil || r.GetRequestPeer().GetAddress() != fc.servers[1].id || len(r.GetNewPeers()) != 1 ||
			r.GetNewPeers()[0].GetAddress() != fc.servers[1].id || r.GetCopysetId() != 3 {
			t.Errorf("reset request: %v", r)
		}
		if fc.resets[0] != nil || fc.resets[2] != nil {
			t.Error("reset sent to another server")
		}
	})

	// --peers must include --server.
	_, err := run(t, srv, nil, "peer", "reset", "--pool", "1", "--copyset", "3", "--server", srv[1], "--peers", srv[2])
	if err == nil || !strings.Contains(err.Error(), "do not include the server itself") {
		t.Errorf("reset without the server: %v", err)
	}
	// A server without the replica: NotFound, at once.
	_, err = run(t, srv, nil, "peer", "reset", "--pool", "1", "--copyset", "3", "--server", srv[0], "--peers", srv[0])
	if err == nil || !strings.Contains(err.Error(), "reset peers of pool 1 copyset 3 on "+srv[0]) || !strings.Contains(err.Error(), "NotFound") {
		t.Errorf("reset on a server without the replica: %v", err)
	}
}

func TestCommandLeaderBalance(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.with(func() {
		for i := uint32(1); i <= 6; i++ {
			fc.csLeaders[CopysetID{Pool: 1, Copyset: i}] = 0
		}
	})
	srv := fc.addrs()

	// Dry run: the plan, nothing moved.
	out := mustRun(t, srv, nil, "leader", "balance", "--copyset", "1-6", "--dry-run")
	if strings.Count(out, "planned") != 4 || fc.count(0, "TransferLeader") != 0 {
		t.Errorf("dry run:\n%s", out)
	}
	out = mustRun(t, srv, nil, "-o", "json", "leader", "balance", "--copyset", "1-6")
	var j balanceJSON
	if err := json.Unmarshal([]byte(out), &j); err != nil || len(j.Moves) != 4 || len(j.Leaders) != 3 {
		t.Fatalf("balance json: %v\n%s", err, out)
	}
	for _, l := range j.Leaders {
		if l.After != 2 || (l.Server == fc.servers[0].id) != (l.Before == 6) {
			t.Errorf("leaders: %+v", l)
		}
	}
	for _, m := range j.Moves {
		if m.Result != "done" || m.From != fc.servers[0].id {
			t.Errorf("move: %+v", m)
		}
	}
	fc.with(func() {
		n := map[int]int{}
		for i := uint32(1); i <= 6; i++ {
			n[fc.csLeaders[CopysetID{Pool: 1, Copyset: i}]]++
		}
		if n[0] != 2 || n[1] != 2 || n[2] != 2 {
			t.Errorf("leaders after balance: %v", n)
		}
	})
	out = mustRun(t, srv, nil, "leader", "balance", "--copyset", "1-6")
	if !strings.Contains(out, "leaders are balanced") || !strings.Contains(out, "LEADERS-AFTER") {
		t.Errorf("balanced:\n%s", out)
	}

	// A copyset without a leader is left alone and said so; a refused
	// transfer fails the command.
	fc.with(func() {
		fc.csLeaders[CopysetID{Pool: 1, Copyset: 1}] = -1
		for i := uint32(2); i <= 6; i++ {
			fc.csLeaders[CopysetID{Pool: 1, Copyset: i}] = 2
		}
		fc.refuse["TransferLeader"] = codes.InvalidArgument
	})
	out, err := run(t, srv, nil, "leader", "balance", "--copyset", "1-6")
	if err == nil || !strings.Contains(err.Error(), "leader transfers failed") || !strings.Contains(err.Error(), "transfer refused") {
		t.Errorf("refused transfers: %v", err)
	}
	if !strings.Contains(out, "without a leader, left alone: copysets 1") || !strings.Contains(out, "failed") {
		t.Errorf("balance with failures:\n%s", out)
	}
}

func TestCommandCopysetAdmin(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(1)
	srv := fc.addrs()
	mustRun(t, srv, block("some data"), cmdArgs([]string{"chunk", "write"}, 9)...)

	// status --hash: equal hashes.
	out := mustRun(t, srv, nil, "copyset", "status", "--pool", "1", "--copyset", "3", "--hash")
	if !strings.Contains(out, "HASH") || strings.Count(out, " ok") != 3 {
		t.Errorf("status --hash:\n%s", out)
	}
	// Server 2 differs: marked, non-zero exit.
	fc.with(func() { fc.corrupt[2] = true })
	out, err := run(t, srv, nil, "-o", "json", "copyset", "status", "--pool", "1", "--copyset", "3", "--hash")
	var rows []replicaJSON
	if jerr := json.Unmarshal([]byte(out), &rows); jerr != nil || len(rows) != 3 || !rows[2].Mismatch || rows[0].Mismatch || rows[0].Hash == "" {
		t.Errorf("status --hash json: %v\n%s", jerr, out)
	}
	if err == nil || !strings.Contains(err.Error(), "replica hashes differ at the same applied index in 1 of 1 copysets") {
		t.Errorf("status --hash with a diverged replica: %v", err)
	}
	out, _ = run(t, srv, nil, "copyset", "status", "--pool", "1", "--copyset", "3", "--hash")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 4 || !strings.Contains(lines[3], "MISMATCH") {
		t.Errorf("status --hash table:\n%s", out)
	}
	fc.with(func() { fc.corrupt[2] = false; fc.noHash = true })
	out = mustRun(t, srv, nil, "copyset", "status", "--pool", "1", "--copyset", "3", "--hash")
	if strings.Count(out, "no hash") != 3 {
		t.Errorf("status --hash without hashes:\n%s", out)
	}

	// list: per server, what it hosts and leads.
	fc.with(func() {
		fc.members[CopysetID{Pool: 1, Copyset: 2}] = []int{0, 1}
		fc.members[CopysetID{Pool: 1, Copyset: 4}] = []int{2}
		fc.csLeaders[CopysetID{Pool: 1, Copyset: 4}] = 2
	})
	out = mustRun(t, srv, nil, "copyset", "list", "--copyset", "1-4")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := [][]string{{srv[0], "3", "1-3", "-"}, {srv[1], "3", "1-3", "1-3"}, {srv[2], "3", "1,3-4", "4"}}
	if len(lines) != 4 {
		t.Fatalf("list:\n%s", out)
	}
	for i, w := range want {
		if f := strings.Fields(lines[i+1]); !slices.Equal(f, w) {
			t.Errorf("list row %d: %v, want %v", i, f, w)
		}
	}
	out = mustRun(t, srv, nil, "-o", "json", "copyset", "list", "--copyset", "1-4")
	var list []serverCopysetsJSON
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 3 || !slices.Equal(list[2].Leaders, []uint32{4}) {
		t.Errorf("list json: %v\n%s", err, out)
	}
	dead := deadAddr(t)
	_, err = run(t, append(srv, dead), nil, "copyset", "list", "--copyset", "1-2")
	if err == nil || !strings.Contains(err.Error(), "could not list the copysets of 1 of 4 servers: "+dead) {
		t.Errorf("list with a dead server: %v", err)
	}

	// delete-broken: only a broken replica goes.
	fc.with(func() { fc.states[1] = StateError })
	out = mustRun(t, srv, nil, "copyset", "delete-broken", "--server", srv[1], "--pool", "1", "--copyset", "3")
	if !strings.Contains(out, "deleted") {
		t.Errorf("delete-broken:\n%s", out)
	}
	if got := fc.membersOf(cs3); !slices.Equal(got, []int{0, 2}) {
		t.Errorf("members after delete-broken: %v", got)
	}
	_, err = run(t, srv, nil, "copyset", "delete-broken", "--server", srv[0], "--pool", "1", "--copyset", "3")
	if err == nil || err.Error() != "delete broken pool 1 copyset 3 on "+srv[0]+": COPYSET_OP_STATUS_COPYSET_IS_HEALTHY" {
		t.Errorf("delete-broken of a healthy replica: %v", err)
	}
	out, err = run(t, srv, nil, "copyset", "delete-broken", "--server", srv[2], "--pool", "1", "--copyset", "3-4")
	if err == nil || !strings.Contains(err.Error(), "2 of 2 copysets not deleted") || strings.Count(out, "IS_HEALTHY") != 2 {
		t.Errorf("delete-broken of a range (%v):\n%s", err, out)
	}
}

func TestCommandSnapshot(t *testing.T) {
	fc := newFakeCluster(t, 3)
	srv := fc.addrs()

	out := mustRun(t, srv, nil, "snapshot", "--pool", "1", "--copyset", "3")
	if strings.Count(out, "done") != 3 {
		t.Errorf("snapshot:\n%s", out)
	}
	for i := range 3 {
		if n := fc.count(i, "Snapshot"); n != 1 {
			t.Errorf("server %d got %d snapshot calls", i, n)
		}
	}
	fc.with(func() { fc.members[cs3] = []int{1, 2} })
	out = mustRun(t, srv, nil, "-o", "json", "snapshot", "--pool", "1", "--copyset", "3")
	var js []snapshotJSON
	if err := json.Unmarshal([]byte(out), &js); err != nil || len(js) != 2 || js[0].Server != srv[1] || js[0].CopysetID == nil || js[0].Copyset != 3 {
		t.Errorf("snapshot json: %v\n%s", err, out)
	}

	// A broken replica fails its row and the command.
	fc.with(func() { fc.states[2] = StateError })
	out, err := run(t, srv, nil, "snapshot", "--pool", "1", "--copyset", "3")
	if err == nil || !strings.Contains(err.Error(), "snapshot pool 1 copyset 3: failed on 1 of 3 servers: "+srv[2]+": Internal: replica is broken") {
		t.Errorf("snapshot with a broken replica: %v", err)
	}
	if !strings.Contains(out, "failed") || !strings.Contains(out, "ERROR") {
		t.Errorf("snapshot table with a failure:\n%s", out)
	}
	fc.with(func() { fc.states = map[int]uint32{} })
	out = mustRun(t, srv, nil, "snapshot", "--pool", "1", "--copyset", "5-6")
	if strings.Count(out, "done") != 6 {
		t.Errorf("snapshot of a range:\n%s", out)
	}
	fc.with(func() { fc.members[CopysetID{Pool: 1, Copyset: 99}] = []int{} })
	_, err = run(t, srv, nil, "snapshot", "--pool", "1", "--copyset", "99")
	if err == nil || !strings.Contains(err.Error(), "no server in --servers hosts it") {
		t.Errorf("snapshot of a copyset nobody hosts: %v", err)
	}

	out = mustRun(t, srv, nil, "snapshot", "--all")
	if strings.Count(out, "done") != 3 || strings.Contains(out, "COPYSET") {
		t.Errorf("snapshot --all:\n%s", out)
	}
	for i := range 3 {
		if n := fc.count(i, "SnapshotAll"); n != 1 {
			t.Errorf("server %d got %d SnapshotAll calls", i, n)
		}
	}
	for _, args := range [][]string{{"snapshot"}, {"snapshot", "--all", "--copyset", "1"}, {"snapshot", "--copyset", "1"}} {
		if _, err := run(t, srv, nil, args...); err == nil {
			t.Errorf("chunkctl %v: no error", args)
		}
	}
}

func TestCommandConfig(t *testing.T) {
	fc := newFakeCluster(t, 3)
	srv := fc.addrs()

	out := mustRun(t, srv, nil, "config", "get", "--key", "log_level")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 4 || strings.Count(out, "info") != 3 {
		t.Errorf("config get:\n%s", out)
	}
	out = mustRun(t, srv, nil, "config", "set", "--server", srv[1], "--key", "log_level", "--value", "debug")
	if !strings.Contains(out, "debug") {
		t.Errorf("config set:\n%s", out)
	}
	out = mustRun(t, srv, nil, "-o", "json", "config", "get", "--key", "log_level")
	var js []configJSON
	if err := json.Unmarshal([]byte(out), &js); err != nil || len(js) != 3 || js[1].Value != "debug" || js[0].Value != "info" {
		t.Errorf("config get json: %v\n%s", err, out)
	}
	out = mustRun(t, srv, nil, "config", "get", "--key", "log_level", "--server", srv[1])
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.Contains(lines[1], "debug") {
		t.Errorf("config get --server:\n%s", out)
	}

	// Refusals carry the server's message.
	_, err := run(t, srv, nil, "config", "set", "--server", srv[0], "--key", "listen", "--value", "x:1")
	if err == nil || err.Error() != "set listen on "+srv[0]+": CONFIG_OP_STATUS_FAILURE_UNKNOWN: listen cannot change at runtime: restart the server" {
		t.Errorf("config set of a restart-only key: %v", err)
	}
	_, err = run(t, srv, nil, "config", "get", "--key", "nope", "--server", srv[2])
	if err == nil || err.Error() != `get nope on `+srv[2]+`: CONFIG_OP_STATUS_FAILURE_UNKNOWN: unknown key "nope"` {
		t.Errorf("config get of an unknown key: %v", err)
	}
	out, err = run(t, srv, nil, "config", "get", "--key", "nope")
	if err == nil || !strings.Contains(err.Error(), "get nope failed on 3 of 3 servers") || strings.Count(out, "unknown key") != 3 {
		t.Errorf("config get of an unknown key everywhere (%v):\n%s", err, out)
	}
	for _, args := range [][]string{{}, {"--all", "--server", srv[0]}} {
		args = append([]string{"config", "set", "--key", "log_level", "--value", "warn"}, args...)
		if _, err := run(t, srv, nil, args...); err == nil || err.Error() != "give either --server host:port or --all" {
			t.Errorf("chunkctl %v: %v", args, err)
		}
	}

	// set --all: one row per server with its result; a failure on one
	// server is its row's error and a non-zero exit.
	out = mustRun(t, srv, nil, "config", "set", "--all", "--key", "max_inflight", "--value", "77")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 4 || strings.Count(out, " 77") != 3 || strings.Contains(out, "ERROR") {
		t.Errorf("config set --all:\n%s", out)
	}
	fc.with(func() { delete(fc.config[2], "max_inflight") })
	out, err = run(t, srv, nil, "config", "set", "--all", "--key", "max_inflight", "--value", "88")
	if err == nil || !strings.Contains(err.Error(), "set max_inflight failed on 1 of 3 servers: "+srv[2]) {
		t.Errorf("config set --all with a refusal: %v", err)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 4 ||
		!strings.Contains(lines[1], " 88 ") || !strings.Contains(lines[2], " 88 ") || !strings.HasPrefix(lines[3], srv[2]) || !strings.Contains(lines[3], `unknown key "max_inflight"`) {
		t.Errorf("config set --all with a refusal:\n%s", out)
	}
	fc.with(func() { fc.config[2]["max_inflight"] = "5000" })

	// Dump: a row per key and server; a dead server is one failed row.
	dead := deadAddr(t)
	out, err = run(t, append(srv, dead), nil, "config", "dump")
	if err == nil || !strings.Contains(err.Error(), "dump config failed on 1 of 4 servers: "+dead) {
		t.Errorf("config dump with a dead server: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 1+3*4+1 || strings.Count(out, "max_inflight") != 3 || !strings.Contains(out, "debug") ||
		!strings.HasPrefix(lines[len(lines)-1], dead) || !strings.Contains(lines[len(lines)-1], "unreachable") {
		t.Errorf("config dump:\n%s", out)
	}
	out = mustRun(t, srv, nil, "-o", "json", "config", "dump", "--server", srv[0], "--key", "raft")
	js = nil
	if err := json.Unmarshal([]byte(out), &js); err != nil || len(js) != 1 || js[0].Key != "raft.trailing_logs" || js[0].Value != "10240" {
		t.Errorf("config dump --key raft json: %v\n%s", err, out)
	}
	_, err = run(t, srv, nil, "config", "dump", "--server", srv[0], "--key", "nope")
	if err == nil || err.Error() != "dump config nope on "+srv[0]+`: CONFIG_OP_STATUS_FAILURE_UNKNOWN: no key under "nope"` {
		t.Errorf("config dump of a prefix nothing is under: %v", err)
	}
}

func TestCommandScan(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(2)
	fc.with(func() { fc.stale, fc.staleTo = 3, 0 }) // first discovery names a follower
	srv := fc.addrs()

	out := mustRun(t, srv, nil, "scan", "schedule", "--copyset", "3")
	if !strings.Contains(out, "WAITING") || !strings.HasPrefix(out, "COPYSET") {
		t.Errorf("scan schedule:\n%s", out)
	}
	if n := fc.count(0, "ScheduleJob"); n < 1 || fc.count(2, "ScheduleJob") != 1 {
		t.Errorf("the follower got %d ScheduleJob calls, the leader %d; want >= 1 (FailedPrecondition) and 1", n, fc.count(2, "ScheduleJob"))
	}
	at := time.Now().Add(time.Hour)
	mustRun(t, srv, nil, "scan", "schedule", "--copyset", "1-2", "--at", "1h")
	fc.with(func() {
		if len(fc.jobs) != 3 || fc.jobs[1].GetCopyset()+fc.jobs[2].GetCopyset() != 3 {
			t.Fatalf("jobs: %v", fc.jobs)
		}
		if d := int64(fc.jobs[1].GetSchedTime()) - at.Unix(); d < -5 || d > 5 {
			t.Errorf("sched_time %d, want about %d", fc.jobs[1].GetSchedTime(), at.Unix())
		}
		if fc.jobs[0].GetSchedTime() != 0 {
			t.Errorf("sched_time without --at: %d", fc.jobs[0].GetSchedTime())
		}
	})

	out = mustRun(t, srv, nil, "-o", "json", "scan", "list", "--copyset", "1-3")
	var js []scanJobJSON
	if err := json.Unmarshal([]byte(out), &js); err != nil || len(js) != 3 {
		t.Fatalf("scan list json: %v\n%s", err, out)
	}
	if js[0].Copyset != 1 || js[1].Copyset != 2 || js[2].Copyset != 3 || js[2].ID != 1 || js[0].Scheduled == "" || js[2].Scheduled != "" ||
		js[0].Pool != 1 || js[0].State != "WAITING" || js[0].Mismatches != nil {
		t.Errorf("scan list: %+v", js)
	}
	if out := mustRun(t, srv, nil, "scan", "list", "--copyset", "3"); !strings.Contains(out, "MISMATCHES") || !strings.Contains(out, "  -  ") {
		t.Errorf("scan list from a server that does not report mismatches:\n%s", out)
	}
	// Each job's mismatch count, from the reply's trailer.
	fc.with(func() {
		fc.mismatch = map[int32]int{}
		for _, j := range fc.jobs {
			if j.GetCopyset() == 1 {
				fc.mismatch[j.GetId()] = 5
			}
		}
	})
	out = mustRun(t, srv, nil, "-o", "json", "scan", "list", "--copyset", "1-3")
	if err := json.Unmarshal([]byte(out), &js); err != nil || len(js) != 3 || js[0].Mismatches == nil || *js[0].Mismatches != 5 ||
		js[2].Mismatches == nil || *js[2].Mismatches != 0 {
		t.Errorf("scan list with mismatches: %v\n%s", err, out)
	}
	out = mustRun(t, srv, nil, "scan", "list", "--copyset", "1")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || strings.Fields(lines[0])[4] != "MISMATCHES" || strings.Fields(lines[1])[4] != "5" {
		t.Errorf("scan list table:\n%s", out)
	}

	job := func(op string) []string { return []string{"scan", op, "--copyset", "3", "--job", "1"} }
	if out := mustRun(t, srv, nil, job("pause")...); !strings.Contains(out, "PAUSED") {
		t.Errorf("pause:\n%s", out)
	}
	if out := mustRun(t, srv, nil, job("resume")...); !strings.Contains(out, "RUNNING") {
		t.Errorf("resume:\n%s", out)
	}
	if out := mustRun(t, srv, nil, job("cancel")...); !strings.Contains(out, "CANCELED") {
		t.Errorf("cancel:\n%s", out)
	}
	_, err := run(t, srv, nil, job("resume")...)
	if err == nil || err.Error() != "resume scan job 1 of pool 1 copyset 3: INTEGRITY_OP_STATUS_FAILURE_UNKNOWN: resume: job 1 is CANCELED" {
		t.Errorf("resume of a canceled job: %v", err)
	}
	_, err = run(t, srv, nil, "scan", "cancel", "--copyset", "3", "--job", "7")
	if err == nil || !strings.HasSuffix(err.Error(), "FAILURE_UNKNOWN: cancel: no such integrity job") {
		t.Errorf("cancel of an unknown job: %v", err)
	}

	// The pool goes as metadata.
	mustRun(t, srv, nil, "scan", "list", "--pool", "2", "--copyset", "3")
	fc.with(func() {
		if fc.lastPool != 2 {
			t.Errorf("IntegrityService saw pool %d, want 2", fc.lastPool)
		}
	})

	// A follower that names no leader: the client asks for the leader again.
	fc.with(func() { fc.hints = false; fc.stale, fc.staleTo = 3, 1 })
	before := fc.count(1, "ListJobs")
	mustRun(t, srv, nil, "scan", "list", "--copyset", "3")
	if fc.count(1, "ListJobs") == before || fc.count(2, "ListJobs") == 0 {
		t.Errorf("ListJobs calls: follower %d, leader %d", fc.count(1, "ListJobs")-before, fc.count(2, "ListJobs"))
	}
	// Nobody leads: it gives up with the reason.
	fc.setLeader(-1)
	_, err = run(t, srv, nil, "--timeout", "300ms", "scan", "list", "--copyset", "3")
	if err == nil || !strings.Contains(err.Error(), "gave up") {
		t.Errorf("scan list without a leader: %v", err)
	}
	_, err = run(t, srv, nil, "scan", "pause", "--copyset", "3", "--job", "0")
	if err == nil || !strings.Contains(err.Error(), "--job: must be > 0") {
		t.Errorf("--job 0: %v", err)
	}
	_, err = run(t, srv, nil, "scan", "schedule", "--copyset", "3", "--at", "later")
	if err == nil || !strings.Contains(err.Error(), "--at") {
		t.Errorf("--at later: %v", err)
	}
}

func TestCommandScanRepair(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(1)
	srv := fc.addrs()
	data := bytes.Repeat([]byte("r"), 8192)
	mustRun(t, srv, data, cmdArgs([]string{"chunk", "write"}, 9, "--sn", "3")...)

	out := mustRun(t, srv, nil, cmdArgs([]string{"scan", "repair"}, 9, "--offset", "4k", "--length", "4k")...)
	if !strings.Contains(out, "rewritten") || !strings.Contains(out, "4096") {
		t.Errorf("repair:\n%s", out)
	}
	r := fc.lastRequest("WriteChunk")
	if r.GetSn() != 3 || r.GetOffset() != 4096 || r.GetSize() != 4096 || !bytes.Equal(r.GetData(), data[4096:]) {
		t.Errorf("repair wrote sn %d offset %d size %d", r.GetSn(), r.GetOffset(), r.GetSize())
	}
	out = mustRun(t, srv, nil, cmdArgs([]string{"-o", "json", "scan", "repair"}, 9)...)
	var j repairJSON
	if err := json.Unmarshal([]byte(out), &j); err != nil || j.Length != 16<<20 || j.Sn != 3 || j.Chunk != 9 {
		t.Errorf("repair json: %v\n%s", err, out)
	}
	fc.with(func() {
		if n := len(fc.snaps); n != 0 {
			t.Errorf("repair made %d COW snapshots", n)
		}
	})
	_, err := run(t, srv, nil, cmdArgs([]string{"scan", "repair"}, 404)...)
	if err == nil || err.Error() != "repair pool 1 copyset 3 chunk 404: the chunk does not exist on the leader" {
		t.Errorf("repair of a missing chunk: %v", err)
	}
	_, err = run(t, srv, nil, cmdArgs([]string{"scan", "repair"}, 9, "--length", "0")...)
	if err == nil || !strings.Contains(err.Error(), "--length: must be > 0") {
		t.Errorf("repair --length 0: %v", err)
	}
}

func TestCommandServerStatus(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.with(func() {
		fc.loading[1] = true
		fc.members[CopysetID{Pool: 1, Copyset: 4}] = []int{0, 1}
		fc.csLeaders[CopysetID{Pool: 1, Copyset: 2}] = 2
	})
	srv := fc.addrs()
	out := mustRun(t, srv, nil, "server", "status", "--copyset", "1-4")
	want := [][]string{{srv[0], "yes", "yes", "4", "3"}, {srv[1], "yes", "no", "4", "0"}, {srv[2], "yes", "yes", "3", "1"}}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("server status:\n%s", out)
	}
	for i, w := range want {
		if f := strings.Fields(lines[i+1]); !slices.Equal(f, w) {
			t.Errorf("row %d: %v, want %v", i, f, w)
		}
	}

	dead := deadAddr(t)
	out, err := run(t, append(srv, dead), nil, "-o", "json", "server", "status", "--copyset", "1-4")
	if err == nil || err.Error() != "1 of 4 servers unreachable: "+dead {
		t.Errorf("server status with a dead server: %v", err)
	}
	var js []serverStatusJSON
	if jerr := json.Unmarshal([]byte(out), &js); jerr != nil || len(js) != 4 || js[3].Reachable || js[3].Error == "" ||
		js[1].LoadFinished == nil || *js[1].LoadFinished || !slices.Equal(js[2].Leaders, []uint32{2}) || len(js[2].Copysets) != 3 {
		t.Errorf("server status json: %v\n%s", jerr, out)
	}
}

func TestCommandClusterStatus(t *testing.T) {
	fc := newFakeCluster(t, 3)
	srv := fc.addrs()

	out := mustRun(t, srv, nil, "cluster", "status", "--copyset", "1-4")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 || lines[5] != "4 copysets: 4 ok" || strings.Count(out, " ok ") != 4 || !strings.HasPrefix(lines[0], "COPYSET") {
		t.Errorf("healthy cluster status:\n%s", out)
	}

	cs := func(id uint32) CopysetID { return CopysetID{Pool: 1, Copyset: id} }
	fc.with(func() {
		fc.commit = 500
		fc.csApplied[cs(2)] = map[int]int64{2: 100}         // 2: lagging
		fc.members[cs(3)] = []int{0, 1}                     // 3: a replica is gone
		fc.csLeaders[cs(4)] = -1                            // 4: no leader
		fc.csStates[cs(5)] = map[int]uint32{1: StateError}  // 5: broken on server 1
		fc.members[cs(6)] = []int{}                         // 6: nowhere
		fc.csApplied[cs(1)] = map[int]int64{1: 400, 2: 450} // 1: behind, within --lag
	})
	out, err := run(t, srv, nil, "cluster", "status", "--copyset", "1-6")
	if err == nil || err.Error() != "cluster unhealthy: 5 of 6 copysets of pool 1 not ok (1 lagging, 1 under-replicated, 1 no-leader, 1 broken, 1 missing)" {
		t.Errorf("unhealthy cluster status: %v", err)
	}
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 8 || lines[7] != "6 copysets: 1 ok, 1 lagging, 1 under-replicated, 1 no-leader, 1 broken, 1 missing" {
		t.Errorf("unhealthy cluster status table:\n%s", out)
	}
	for i, want := range []string{HealthOK, HealthLagging, HealthUnderReplicated, HealthNoLeader, HealthBroken, HealthMissing} {
		if f := strings.Fields(lines[i+1]); len(f) < 8 || f[0] != fmt.Sprint(i+1) || !slices.Contains(f, want) {
			t.Errorf("row %d: %v, want health %s", i+1, f, want)
		}
	}
	if !strings.Contains(lines[2], fc.servers[2].id+" applied 100, 400 behind the leader's commit 500") ||
		!strings.Contains(lines[1], "400") {
		t.Errorf("lagging rows:\n%s\n%s", lines[1], lines[2])
	}

	out, _ = run(t, srv, nil, "-o", "json", "cluster", "status", "--copyset", "1-6", "--lag", "50")
	var j clusterStatusJSON
	if err := json.Unmarshal([]byte(out), &j); err != nil || len(j.Copysets) != 6 || j.Healthy || j.Counts[HealthLagging] != 2 {
		t.Fatalf("cluster status json: %v\n%s", err, out)
	}
	c1 := j.Copysets[0]
	if c1.Health != HealthLagging || c1.Leader != fc.servers[0].id || len(c1.Peers) != 3 || c1.Committed != 500 || c1.MinApplied != 400 || c1.Term != 3 || c1.Epoch != 1 {
		t.Errorf("copyset 1: %+v", c1)
	}
	if j.Copysets[5].Health != HealthMissing || len(j.Copysets[5].Peers) != 0 {
		t.Errorf("copyset 6: %+v", j.Copysets[5])
	}
	if j.Copysets[2].Health != HealthUnderReplicated || len(j.Copysets[2].Details) != 1 {
		t.Errorf("copyset 3: %+v", j.Copysets[2])
	}

	// A dead server in --servers: every copyset is under-replicated.
	fc.with(func() {
		fc.csApplied, fc.members, fc.csLeaders, fc.csStates = map[CopysetID]map[int]int64{}, map[CopysetID][]int{}, map[CopysetID]int{}, map[CopysetID]map[int]uint32{}
	})
	dead := deadAddr(t)
	_, err = run(t, append(srv, dead), nil, "cluster", "status", "--copyset", "1-2", "--replicas", "4")
	if err == nil || err.Error() != "cluster unhealthy: 2 of 2 copysets of pool 1 not ok (2 under-replicated)" {
		t.Errorf("cluster status with a dead server: %v", err)
	}
	out = mustRun(t, append(srv, dead), nil, "cluster", "status", "--copyset", "1-2")
	if !strings.Contains(out, "2 copysets: 2 ok; could not ask "+dead) {
		t.Errorf("cluster status with a dead server:\n%s", out)
	}
	if _, err := run(t, srv, nil, "cluster", "status", "--replicas", "0"); err == nil {
		t.Error("--replicas 0 accepted")
	}
}

func TestCommandCheckConsistency(t *testing.T) {
	fc := newFakeCluster(t, 3)
	srv := fc.addrs()
	mustRun(t, srv, block("nine"), cmdArgs([]string{"chunk", "write"}, 9)...)
	mustRun(t, srv, block("one"), "chunk", "write", "--pool", "1", "--copyset", "1", "--chunk", "5")
	check := []string{"cluster", "check-consistency", "--copyset", "1-3", "--wait", "1s"}

	out := mustRun(t, srv, nil, check...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || lines[4] != "3 copysets: 3 consistent" || strings.Count(out, "equal") != 3 {
		t.Errorf("consistent cluster:\n%s", out)
	}
	if n := totalCalls(fc, "GetChunkHash"); n != 0 {
		t.Errorf("%d GetChunkHash calls with equal copyset hashes", n)
	}

	// Server 2 sees different bytes: copysets 1 and 3 differ there, and the
	// chunks are named.
	fc.with(func() { fc.corrupt[2] = true })
	out, err := run(t, srv, nil, append([]string{"-o", "json"}, check...)...)
	if err == nil || !strings.HasPrefix(err.Error(), "replicas not consistent: 2 of 3 copysets of pool 1 (2 INCONSISTENT); first: pool 1 copyset 1: chunk 5 differs on "+srv[2]) {
		t.Errorf("diverged replica: %v", err)
	}
	var j struct {
		Copysets []consistencyJSON `json:"copysets"`
		Summary  string            `json:"summary"`
	}
	if jerr := json.Unmarshal([]byte(out), &j); jerr != nil || len(j.Copysets) != 3 {
		t.Fatalf("check json: %v\n%s", jerr, out)
	}
	c3 := j.Copysets[2]
	if c3.Result != resultInconsistent || c3.Hashes != "differ" || len(c3.Mismatches) != 1 || c3.Mismatches[0].Chunk != 9 ||
		!slices.Equal(c3.Mismatches[0].Servers, []string{srv[2]}) || c3.Chunks == nil || c3.Chunks.IDs != "1-64" || len(c3.Replicas) != 3 {
		t.Errorf("copyset 3: %+v", c3)
	}
	if j.Copysets[1].Result != resultConsistent {
		t.Errorf("copyset 2: %+v", j.Copysets[1])
	}

	// The differing chunk is not among --chunks.
	_, err = run(t, srv, nil, "cluster", "check-consistency", "--copyset", "3", "--chunks", "10-20")
	if err == nil || !strings.Contains(err.Error(), "copyset hashes differ at applied index 10, but chunks 10-20 agree (widen --chunks)") {
		t.Errorf("mismatch outside --chunks: %v", err)
	}

	// No copyset hash reported: the chunks are compared.
	fc.with(func() { fc.noHash = true })
	out, err = run(t, srv, nil, "cluster", "check-consistency", "--copyset", "3")
	if err == nil || !strings.Contains(err.Error(), "chunk 9 differs on "+srv[2]) || !strings.Contains(out, "not-reported") {
		t.Errorf("no copyset hash, diverged (%v):\n%s", err, out)
	}
	fc.with(func() { fc.corrupt[2] = false })
	out = mustRun(t, srv, nil, "cluster", "check-consistency", "--copyset", "3")
	if !strings.Contains(out, "compared chunks 1-64 only") || !strings.Contains(out, "consistent") {
		t.Errorf("no copyset hash, consistent:\n%s", out)
	}

	// Replicas that do not reach the same applied index: server 1 keeps
	// answering from one index back, with an older hash.
	fc.with(func() { fc.noHash = false; fc.behind[1] = 1 << 20 })
	start := time.Now()
	out, err = run(t, srv, nil, "cluster", "check-consistency", "--copyset", "3", "--wait", "300ms")
	if err == nil || !strings.Contains(err.Error(), "applied indices still differ after 300ms") || !strings.Contains(out, "not-converged") {
		t.Errorf("not converged (%v):\n%s", err, out)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 3*time.Second {
		t.Errorf("not converged took %s", d)
	}

	// A server that cannot be asked may hold a replica.
	fc.with(func() { fc.behind[1] = 0 })
	dead := deadAddr(t)
	_, err = run(t, append(srv, dead), nil, "cluster", "check-consistency", "--copyset", "3")
	if err == nil || !strings.Contains(err.Error(), "could not ask "+dead) {
		t.Errorf("dead server: %v", err)
	}
	fc.with(func() { fc.members[cs3] = []int{} })
	_, err = run(t, srv, nil, "cluster", "check-consistency", "--copyset", "3")
	if err == nil || !strings.Contains(err.Error(), "no server in --servers hosts it") || !strings.Contains(err.Error(), "1 error") {
		t.Errorf("nobody hosts it: %v", err)
	}
	if _, err := run(t, srv, nil, "cluster", "check-consistency", "--chunks", "x"); err == nil || !strings.Contains(err.Error(), "--chunks") {
		t.Errorf("--chunks x: %v", err)
	}
}

func TestCommandAdminFlags(t *testing.T) {
	fc := newFakeCluster(t, 1)
	srv := fc.addrs()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"peer", "add", "--pool", "1", "--copyset", "3"}, `"peer" not set`},
		{[]string{"peer", "add", "--pool", "1", "--copyset", "3", "--peer", "nowhere"}, "--peer: bad peer address"},
		{[]string{"peer", "remove", "--pool", "1", "--peer", "a:1"}, `"copyset" not set`},
		{[]string{"peer", "change", "--pool", "1", "--copyset", "3", "--peers", "a:1,a:1:0"}, "--peers: peer a:1:0 listed twice"},
		{[]string{"peer", "reset", "--pool", "1", "--copyset", "3", "--peers", "a:1"}, `"server" not set`},
		{[]string{"peer", "reset", "--pool", "1", "--copyset", "3", "--server", "a", "--peers", "a:1"}, "--server: bad peer address"},
		{[]string{"leader", "balance", "--copyset", "x"}, "--copyset: \"x\" is not a whole number"},
		{[]string{"copyset", "list", "--copyset", "3-1"}, `range "3-1" ends before it starts`},
		{[]string{"copyset", "delete-broken", "--pool", "1", "--copyset", "3"}, `"server" not set`},
		{[]string{"snapshot", "--pool", "1"}, "give --pool and --copyset, or --all"},
		{[]string{"config", "get"}, `"key" not set`},
		{[]string{"config", "set", "--server", "a:1", "--key", "k"}, `"value" not set`},
		{[]string{"config", "dump", "--server", "nowhere"}, "--server: bad peer address"},
		{[]string{"scan", "schedule"}, `"copyset" not set`},
		{[]string{"scan", "cancel", "--copyset", "3"}, `"job" not set`},
		{[]string{"scan", "repair", "--pool", "1", "--copyset", "3"}, `"chunk" not set`},
		{[]string{"scan", "repair", "--pool", "1", "--copyset", "3", "--chunk", "1", "--offset", "1q"}, "--offset: bad size"},
		{[]string{"server", "status", "--copyset", ""}, "--copyset: no ids in"},
		{[]string{"cluster", "status", "--lag", "-1"}, "--lag: must not be negative"},
		{[]string{"cluster", "check-consistency", "--chunks", ""}, "--chunks: no ids in"},
	} {
		_, err := run(t, srv, nil, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("chunkctl %v: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
	fc.with(func() {
		for m, n := range fc.calls[0] {
			t.Errorf("a usage error sent %d %s calls", n, m)
		}
	})
}
