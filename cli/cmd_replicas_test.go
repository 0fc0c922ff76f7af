package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// Replica comparisons, membership views and waits.

// runStderr is run that also returns what the command wrote to stderr.
func runStderr(t *testing.T, servers []string, args ...string) (string, string, error) {
	t.Helper()
	root := NewRootCommand()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append([]string{"--servers", strings.Join(servers, ","), "--timeout", "3s", "--attempt-timeout", "1s"}, args...))
	err := root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// Right after an acknowledged write the followers have not applied it yet:
// their hashes differ from the leader's, at a lower applied index. That is
// not a divergence: the commands ask again until the replicas meet.
func TestCommandHashFollowersBehind(t *testing.T) {
	fc := newFakeCluster(t, 3)
	srv := fc.addrs()
	mustRun(t, srv, block("data"), cmdArgs([]string{"chunk", "write"}, 9)...)

	fc.with(func() { fc.behind[1], fc.behind[2] = 2, 2 })
	out := mustRun(t, srv, nil, cmdArgs([]string{"chunk", "hash"}, 9)...)
	if strings.Count(out, " ok") != 3 || strings.Contains(out, "MISMATCH") || !strings.Contains(out, "APPLIED") {
		t.Errorf("chunk hash, followers behind:\n%s", out)
	}
	fc.with(func() { fc.behind[1], fc.behind[2] = 2, 2 })
	out = mustRun(t, srv, nil, "copyset", "status", "--pool", "1", "--copyset", "3", "--hash")
	if strings.Count(out, " ok") != 3 || strings.Contains(out, "MISMATCH") {
		t.Errorf("copyset status --hash, followers behind:\n%s", out)
	}
	fc.with(func() { fc.behind[1], fc.behind[2] = 2, 2 })
	out = mustRun(t, srv, nil, "cluster", "check-consistency", "--copyset", "3")
	if !strings.Contains(out, "consistent") {
		t.Errorf("check-consistency, followers behind:\n%s", out)
	}

	// Followers that never catch up (writes keep coming): not compared, and
	// said so; nothing is called a mismatch.
	settle := hashSettle
	hashSettle = 500 * time.Millisecond
	t.Cleanup(func() { hashSettle = settle })
	fc.with(func() { fc.behind[1], fc.behind[2] = 1<<20, 1<<20 })
	out, err := run(t, srv, nil, cmdArgs([]string{"-o", "json", "chunk", "hash"}, 9)...)
	var j chunkHashJSON
	if jerr := json.Unmarshal([]byte(out), &j); jerr != nil || j.Consistent || !j.Unsettled || j.Replicas[0].Mismatch ||
		j.Replicas[0].Applied == nil || *j.Replicas[0].Applied != 10 || *j.Replicas[1].Applied != 9 {
		t.Errorf("chunk hash json, never settled: %v\n%s", jerr, out)
	}
	if err == nil || !strings.Contains(err.Error(), "not compared: the replicas did not reach a common applied index") ||
		strings.Contains(err.Error(), "disagree") {
		t.Errorf("chunk hash, never settled: %v", err)
	}
	out, err = run(t, srv, nil, "copyset", "status", "--pool", "1", "--copyset", "3", "--hash")
	if err == nil || !strings.Contains(err.Error(), "not compared") || strings.Contains(out, "MISMATCH") || strings.Count(out, "not compared") != 3 {
		t.Errorf("copyset status --hash, never settled (%v):\n%s", err, out)
	}

	// A replica at the leader's index with another hash is a divergence.
	fc.with(func() { fc.behind[1], fc.behind[2] = 0, 0; fc.corrupt[2] = true })
	out, err = run(t, srv, nil, cmdArgs([]string{"chunk", "hash"}, 9)...)
	if err == nil || !strings.Contains(err.Error(), "mismatch on "+srv[2]) || strings.Count(out, "MISMATCH") != 1 {
		t.Errorf("chunk hash, diverged (%v):\n%s", err, out)
	}
}

// A replica outside the leader's configuration is stale, named with its
// server; a member nobody reports is shown in copyset status.
func TestCommandStaleAndMembers(t *testing.T) {
	fc := newFakeCluster(t, 4)
	srv := fc.addrs()
	fc.with(func() { fc.conf[cs3] = []int{0, 1, 2} })
	out, err := run(t, srv, nil, "cluster", "status", "--copyset", "3")
	if err == nil || !strings.Contains(err.Error(), "1 stale") || !strings.Contains(out, " stale ") ||
		!strings.Contains(out, "copyset delete-broken --server "+srv[3]) {
		t.Errorf("cluster status with a stale replica (%v):\n%s", err, out)
	}
	out, _ = run(t, srv, nil, "-o", "json", "cluster", "status", "--copyset", "3")
	var j clusterStatusJSON
	if err := json.Unmarshal([]byte(out), &j); err != nil || len(j.Copysets) != 1 {
		t.Fatalf("cluster status json: %v\n%s", err, out)
	}
	if c := j.Copysets[0]; c.Health != HealthStale || !c.Configured || len(c.Peers) != 3 || len(c.Stale) != 1 ||
		c.Stale[0].Server != srv[3] || c.Stale[0].Peer != fc.servers[3].id {
		t.Errorf("stale copyset json: %+v", c)
	}
	out = mustRun(t, srv, nil, "-o", "json", "copyset", "status", "--pool", "1", "--copyset", "3")
	var rows []replicaJSON
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 4 || rows[3].Member == nil || *rows[3].Member || !*rows[0].Member {
		t.Errorf("copyset status json with a stale replica: %v\n%s", err, out)
	}

	// Server 3 is a member but hosts nothing: its row says so.
	fc.with(func() { fc.conf[cs3] = []int{0, 1, 2, 3}; fc.members[cs3] = []int{0, 1, 2} })
	out, _ = run(t, srv, nil, "copyset", "status", "--pool", "1", "--copyset", "3")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !strings.Contains(lines[4], srv[3]) || !strings.Contains(lines[4], stateNotAnswering) ||
		!strings.Contains(lines[4], "its server does not host the copyset") {
		t.Errorf("copyset status with a member not answering:\n%s", out)
	}
	out, _ = run(t, srv[:3], nil, "copyset", "status", "--pool", "1", "--copyset", "3")
	if !strings.Contains(out, stateNotAnswering) || !strings.Contains(out, "not in --servers") {
		t.Errorf("copyset status with a member not in --servers:\n%s", out)
	}
	_, err = run(t, srv, nil, "cluster", "status", "--copyset", "3")
	if err == nil || !strings.Contains(err.Error(), "1 under-replicated") {
		t.Errorf("cluster status with a member not answering: %v", err)
	}
	out, _ = run(t, srv, nil, "cluster", "status", "--copyset", "3")
	if !strings.Contains(out, "members that have no replica") || !strings.Contains(out, fc.servers[3].id) ||
		strings.Contains(out, "members not answering") {
		t.Errorf("cluster status with a member whose server hosts no replica:\n%s", out)
	}
	out, _ = run(t, srv[:3], nil, "cluster", "status", "--copyset", "3")
	if !strings.Contains(out, "members not answering: "+fc.servers[3].id) {
		t.Errorf("cluster status with a member not in --servers:\n%s", out)
	}
}

// A replica that has applied nothing of a copyset is not ok, whatever --lag.
func TestCommandClusterStatusEmptyReplica(t *testing.T) {
	fc := newFakeCluster(t, 3)
	srv := fc.addrs()
	fc.with(func() { fc.csApplied[cs3] = map[int]int64{2: 0} })
	out, err := run(t, srv, nil, "cluster", "status", "--copyset", "3", "--lag", "1000")
	if err == nil || !strings.Contains(err.Error(), "1 lagging") || !strings.Contains(out, fc.servers[2].id+" has applied nothing yet") {
		t.Errorf("cluster status, an empty replica (%v):\n%s", err, out)
	}
}

func TestCommandWait(t *testing.T) {
	fc := newFakeCluster(t, 3)
	srv := fc.addrs()
	fc.with(func() { fc.csApplied[cs3] = map[int]int64{2: 4} })
	go func() {
		time.Sleep(1200 * time.Millisecond)
		fc.with(func() { fc.csApplied[cs3] = map[int]int64{} })
	}()
	out, stderr, err := runStderr(t, srv, "cluster", "status", "--copyset", "3", "--wait", "5s")
	if err != nil || !strings.Contains(out, "1 copysets: 1 ok") {
		t.Errorf("cluster status --wait 5s (%v):\n%s", err, out)
	}
	if !strings.Contains(stderr, "1 of 3 replicas behind: pool 1 copyset 3 "+fc.servers[2].id+" applied 4 of 10") {
		t.Errorf("cluster status --wait progress:\n%s", stderr)
	}

	// Still behind when the time runs out: the table, then the error.
	fc.with(func() { fc.csApplied[cs3] = map[int]int64{1: 7} })
	out, _, err = runStderr(t, srv, "cluster", "status", "--copyset", "3", "--wait=400ms")
	if err == nil || !strings.Contains(err.Error(), "timed out after 400ms waiting for 1 of 3 replicas") ||
		!strings.Contains(err.Error(), fc.servers[1].id+" applied 7 of 10") || !strings.Contains(out, "COPYSET") {
		t.Errorf("cluster status --wait timeout (%v):\n%s", err, out)
	}
	if _, err := run(t, srv, nil, "cluster", "status", "--wait", "soon"); err == nil || !strings.Contains(err.Error(), `--wait: "soon" is not a duration`) {
		t.Errorf("--wait soon: %v", err)
	}
	if _, err := run(t, srv, nil, "cluster", "status", "--wait=-5s"); err == nil || !strings.Contains(err.Error(), "--wait: must be positive, got -5s") {
		t.Errorf("--wait=-5s: %v", err)
	}

	// peer add --wait: the new replica must apply the leader's commit index.
	fc.with(func() { fc.csApplied[cs3] = map[int]int64{}; fc.members[cs3] = []int{0, 1} })
	fc.with(func() { fc.csApplied[cs3] = map[int]int64{2: 0} })
	_, _, err = runStderr(t, srv, "peer", "add", "--pool", "1", "--copyset", "3", "--peer", srv[2], "--wait", "400ms")
	if err == nil || !strings.Contains(err.Error(), "wait for "+fc.servers[2].id) || !strings.Contains(err.Error(), "applied 0 of 10") {
		t.Errorf("peer add --wait, never caught up: %v", err)
	}
	fc.with(func() { fc.csApplied[cs3] = map[int]int64{}; fc.members[cs3] = []int{0, 1} })
	out = mustRun(t, srv, nil, "peer", "add", "--pool", "1", "--copyset", "3", "--peer", srv[2], "--wait")
	if !strings.Contains(out, fc.servers[2].id) {
		t.Errorf("peer add --wait:\n%s", out)
	}
}

func TestCommandPeerRemoveNonMember(t *testing.T) {
	fc := newFakeCluster(t, 4)
	srv := fc.addrs()
	fc.with(func() { fc.members[cs3] = []int{0, 1, 2} })
	_, err := run(t, srv, nil, "peer", "remove", "--pool", "1", "--copyset", "3", "--peer", srv[3])
	want := "remove peer " + fc.servers[3].id + " from pool 1 copyset 3: it is not a member; the members are " +
		fc.servers[0].id + "," + fc.servers[1].id + "," + fc.servers[2].id
	if err == nil || err.Error() != want {
		t.Errorf("peer remove of a non-member: %v\nwant %s", err, want)
	}
}

// A replica the leader is removing (the change not committed yet) is still
// a member; once the configuration without it has committed it is stale.
func TestClassifyRemovalUnderWay(t *testing.T) {
	row := func(peer string, state uint32, config, committed []string) ReplicaStatus {
		return ReplicaStatus{Server: peer, Hosted: true, Peer: peer, State: state, Term: 2, Committed: 10, Applied: 10,
			Config: config, HasConfig: config != nil, CommittedConfig: committed, HasCommitted: committed != nil}
	}
	abc, ab := []string{"a", "b", "c"}, []string{"a", "b"}
	for _, tc := range []struct {
		name      string
		committed []string
		health    string
	}{
		{"removal under way", abc, HealthOK},
		{"removal committed", ab, HealthStale},
	} {
		rows := []ReplicaStatus{row("a", StateLeader, ab, tc.committed), row("b", StateFollower, ab, ab), row("c", 3, abc, abc)}
		h := ClassifyCopyset(cs3, rows, HealthOptions{Replicas: 2, Lag: 100})
		if h.Health != tc.health || !slices.Equal(h.Peers, ab) {
			t.Errorf("%s: %+v", tc.name, h)
		}
	}
	// An empty replica made for a peer add that did not happen.
	rows := []ReplicaStatus{row("a", StateLeader, ab, ab), row("b", StateFollower, ab, ab), row("c", 3, []string{}, nil)}
	if h := ClassifyCopyset(cs3, rows, HealthOptions{Replicas: 2, Lag: 100}); h.Health != HealthStale || len(h.Stale) != 1 || !h.Stale[0].Empty ||
		!strings.Contains(h.Details[0], "c on c is an empty replica") {
		t.Errorf("empty replica: %+v", h)
	}
}

// copyset status shows the write fence each replica applied in its STATE,
// and in JSON.
func TestCopysetStatusShowsWriteFence(t *testing.T) {
	fc := newFakeCluster(t, 3)
	srv := fc.addrs()
	out := mustRun(t, srv, nil, "copyset", "status", "--pool", "1", "--copyset", "3")
	if strings.Contains(out, "write-fenced") {
		t.Errorf("copyset status without a fence:\n%s", out)
	}
	fc.with(func() { fc.fences[0], fc.fences[1] = "dm:task-1", "dm:task-1" }) // server 2 has not applied it yet
	out = mustRun(t, srv, nil, "copyset", "status", "--pool", "1", "--copyset", "3")
	if strings.Count(out, "(write-fenced by dm:task-1 since 7)") != 2 {
		t.Errorf("copyset status with a fence on two replicas:\n%s", out)
	}
	out = mustRun(t, srv, nil, "-o", "json", "copyset", "status", "--pool", "1", "--copyset", "3")
	var rows []replicaJSON
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 3 {
		t.Fatalf("copyset status json: %v\n%s", err, out)
	}
	for i, r := range rows {
		want := ""
		if i < 2 {
			want = "dm:task-1"
		}
		if r.WriteFence != want || (want != "") != (r.WriteFenceSince == 7) {
			t.Errorf("row %d: write fence %q since %d, want %q", i, r.WriteFence, r.WriteFenceSince, want)
		}
	}
}
