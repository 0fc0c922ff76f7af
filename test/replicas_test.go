package test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/cli"
	"github.com/chunkraft/chunkraft/internal/testwait"
)

// chunkctl runs the built chunkctl against servers and returns its stdout,
// stderr and exit code.
func chunkctl(t *testing.T, servers []string, stdin []byte, args ...string) (string, string, int) {
	t.Helper()
	return runBinIn(t, stdin, "chunkctl", append([]string{"--servers", strings.Join(servers, ",")}, args...)...)
}

// mustCtl is chunkctl that fails the test on a non-zero exit.
func mustCtl(t *testing.T, servers []string, stdin []byte, args ...string) string {
	t.Helper()
	out, stderr, code := chunkctl(t, servers, stdin, args...)
	if code != 0 {
		t.Fatalf("chunkctl %s: exit %d\n%s%s", strings.Join(args, " "), code, out, stderr)
	}
	return out
}

// TestHashRightAfterWrite: right after an acknowledged write only the leader
// has applied it (followers learn the commit index up to commit_timeout
// later); chunk hash, copyset status --hash and check-consistency compare
// the replicas at one applied index and call the healthy copyset ok. A
// replica whose chunk file was changed on disk is still a mismatch.
func TestHashRightAfterWrite(t *testing.T) {
	c := startCluster(t, 3)
	c.createCopysets(t, 1)
	srv := c.addrs()
	data := bytes.Repeat([]byte("after-write!"), 4096/12+1)[:4096]
	for i := range 3 {
		chunk := []string{"--pool", "1", "--copyset", "1", "--chunk", "7"}
		data[0] = byte(i)
		mustCtl(t, srv, data, append([]string{"chunk", "write", "--sn", "1", "--offset", "0"}, chunk...)...)
		var what []string
		switch i {
		case 0:
			what = append([]string{"chunk", "hash"}, chunk...)
		case 1:
			what = []string{"copyset", "status", "--pool", "1", "--copyset", "1", "--hash"}
		case 2:
			what = []string{"cluster", "check-consistency", "--copyset", "1", "--chunks", "7"}
		}
		out, stderr, code := chunkctl(t, srv, nil, what...)
		if code != 0 || strings.Contains(out, "MISMATCH") || strings.Contains(out, "INCONSISTENT") {
			t.Errorf("%s right after a write: exit %d\n%s%s", strings.Join(what, " "), code, out, stderr)
		}
	}

	// Change a follower's chunk data on disk: the copyset hashes differ at
	// the same applied index.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	leader, err := c.client.GetLeader(ctx, cli.CopysetID{Pool: pool, Copyset: 1})
	if err != nil {
		t.Fatal(err)
	}
	var follower *Proc
	for _, p := range c.procs {
		if p.Addr+":0" != leader {
			follower = p
			break
		}
	}
	files, _ := filepath.Glob(filepath.Join(follower.DataDir, "copysets", "*", "data", "chunk_7"))
	if len(files) != 1 {
		t.Fatalf("chunk file of the follower %s: %v", follower.Addr, files)
	}
	f, err := os.OpenFile(files[0], os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("garbage"), 4096+100); err != nil {
		t.Fatal(err)
	}
	f.Close()
	out, _, code := chunkctl(t, srv, nil, "copyset", "status", "--pool", "1", "--copyset", "1", "--hash")
	if code == 0 || !strings.Contains(out, "MISMATCH") {
		t.Errorf("copyset status --hash with a changed replica: exit %d\n%s", code, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "MISMATCH") && !strings.Contains(line, follower.Addr) {
			t.Errorf("a replica other than %s marked: %s", follower.Addr, line)
		}
	}
	out, _, code = chunkctl(t, srv, nil, "cluster", "check-consistency", "--copyset", "1", "--chunks", "7")
	if code == 0 || !strings.Contains(out, "INCONSISTENT") {
		t.Errorf("check-consistency with a changed replica: exit %d\n%s", code, out)
	}
}

// staleReplica makes a stale replica: a 3-server cluster (each server
// started with config) with one copyset; one follower (victim) is stopped,
// removed, and started again after the remover restarted (so that its
// removal notice is gone). other is the remaining follower.
func staleReplica(t *testing.T, config string) (c *cluster, srv []string, victim, other *Proc) {
	c = startClusterWithConfig(t, 3, config)
	cs := c.createCopysets(t, 1)[0]
	srv = c.addrs()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	mustCtl(t, srv, make([]byte, 4096), "chunk", "write", "--pool", "1", "--copyset", "1", "--chunk", "3", "--sn", "1")

	leader, err := c.client.GetLeader(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range c.procs {
		switch {
		case p.Addr+":0" == leader:
		case victim == nil:
			victim = p
		default:
			other = p
		}
	}
	if err := victim.Kill(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	out := mustCtl(t, srv, nil, "peer", "remove", "--pool", "1", "--copyset", "1", "--peer", victim.Addr)
	if !strings.Contains(out, victim.Addr) {
		t.Fatalf("peer remove:\n%s", out)
	}
	// Removing it again: not a member, an error naming the members.
	if out, stderr, code := chunkctl(t, srv, nil, "peer", "remove", "--pool", "1", "--copyset", "1", "--peer", victim.Addr); code == 0 ||
		!strings.Contains(stderr, "is not a member; the members are") {
		t.Errorf("peer remove of a non-member: exit %d\n%s%s", code, out, stderr)
	}
	if err := c.proc(leader).Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := victim.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return c, srv, victim, other
}

// TestStaleReplicaCleanup: a replica removed while its server is down, and
// not told of it (the remover restarted, so its removal notice is gone),
// stays a candidate outside the configuration. With the stale sweep off,
// cluster status calls it stale and names its server; delete-broken on
// that server moves it to the trash after the server has asked the leader;
// a member is still refused.
func TestStaleReplicaCleanup(t *testing.T) {
	_, srv, victim, other := staleReplica(t, "stale_replica_check: 0s\n")
	testwait.Until(t, 20*time.Second, func() error {
		out, _, code := chunkctl(t, srv, nil, "cluster", "status", "--copyset", "1")
		if code == 0 || !strings.Contains(out, " stale ") || !strings.Contains(out, "delete-broken --server "+victim.Addr) {
			return fmt.Errorf("cluster status never showed %s stale:\n%s", victim.Addr, out)
		}
		return nil
	})

	if out, stderr, code := chunkctl(t, srv, nil, "copyset", "delete-broken", "--server", other.Addr, "--pool", "1", "--copyset", "1"); code == 0 ||
		!strings.Contains(out+stderr, "COPYSET_IS_HEALTHY") || !strings.Contains(stderr, "member") {
		t.Errorf("delete-broken of a member: exit %d\n%s%s", code, out, stderr)
	}
	out := mustCtl(t, srv, nil, "copyset", "delete-broken", "--server", victim.Addr, "--pool", "1", "--copyset", "1")
	if !strings.Contains(out, "deleted") {
		t.Errorf("delete-broken of the stale replica:\n%s", out)
	}
	trash, _ := filepath.Glob(filepath.Join(victim.DataDir, "trash", "*"))
	if len(trash) != 1 {
		t.Errorf("trash of %s: %v", victim.Addr, trash)
	}
	out = mustCtl(t, srv, nil, "cluster", "status", "--copyset", "1", "--replicas", "2", "--wait", "20s")
	if !strings.Contains(out, "1 copysets: 1 ok") {
		t.Errorf("cluster status after the cleanup:\n%s", out)
	}

	// The server can join again: peer add --wait returns once its new
	// replica has applied the leader's commit index.
	mustCtl(t, srv, nil, "peer", "add", "--pool", "1", "--copyset", "1", "--peer", victim.Addr, "--wait", "20s")
	out = mustCtl(t, srv, nil, "cluster", "status", "--copyset", "1")
	if !strings.Contains(out, "1 copysets: 1 ok") || !strings.Contains(out, victim.Addr+":0") {
		t.Errorf("cluster status after adding %s back:\n%s", victim.Addr, out)
	}
}

// TestStaleReplicaSwept: the same stale replica, with the stale sweep on
// (the default): its server asks the copyset's leader on its own and moves
// the replica to the trash; the copyset ends with exactly its two members,
// each holding a replica, and the server can be added back.
func TestStaleReplicaSwept(t *testing.T) {
	_, srv, victim, _ := staleReplica(t, "stale_replica_check: 2s\n")
	testwait.Until(t, 30*time.Second, func() error {
		if strings.Contains(readLog(victim), "stale replica moved to trash") {
			return nil
		}
		out, _, _ := chunkctl(t, srv, nil, "cluster", "status", "--copyset", "1")
		return fmt.Errorf("%s never swept its stale replica:\n%s", victim.Addr, out)
	})
	trash, _ := filepath.Glob(filepath.Join(victim.DataDir, "trash", "*"))
	if len(trash) != 1 {
		t.Errorf("trash of %s: %v", victim.Addr, trash)
	}
	if v := metricValue(t, victim.MetricsAddr, "chunkraft_stale_replicas_deleted_total"); v != 1 {
		t.Errorf("chunkraft_stale_replicas_deleted_total on %s = %v, want 1", victim.Addr, v)
	}
	out := mustCtl(t, srv, nil, "cluster", "status", "--copyset", "1", "--replicas", "2", "--wait", "20s")
	if !strings.Contains(out, "1 copysets: 1 ok") || strings.Contains(out, victim.Addr+":0") {
		t.Errorf("cluster status after the sweep:\n%s", out)
	}
	mustCtl(t, srv, nil, "peer", "add", "--pool", "1", "--copyset", "1", "--peer", victim.Addr, "--wait", "20s")
	out = mustCtl(t, srv, nil, "cluster", "status", "--copyset", "1")
	if !strings.Contains(out, "1 copysets: 1 ok") || !strings.Contains(out, victim.Addr+":0") {
		t.Errorf("cluster status after adding %s back:\n%s", victim.Addr, out)
	}
}
