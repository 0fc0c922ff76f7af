package test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/cli"
	"github.com/chunkraft/chunkraft/internal/testwait"
)

// logSize is the length of p's log now.
func logSize(p *Proc) int {
	b, _ := os.ReadFile(p.LogPath)
	return len(b)
}

// logHas reports whether p's log (every start) from offset on contains s.
func logHas(p *Proc, offset int, s string) bool {
	b, _ := os.ReadFile(p.LogPath)
	return len(b) > offset && strings.Contains(string(b[offset:]), s)
}

// copysetMembers asks every server for its replica of cs and returns the
// leader's configuration (sorted peer ids) and, per hosting server's peer
// id, how far it is behind the leader's commit index (-1: not hosting).
func copysetMembers(t *testing.T, servers []string, cs cli.CopysetID) (conf []string, behind map[string]int64) {
	t.Helper()
	c, err := cli.New(cli.Options{Servers: servers, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	rows, err := c.CopysetStatus(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	m := cli.LeaderConfig(rows)
	behind = map[string]int64{}
	var commit int64
	for _, r := range rows {
		if r.Err == nil && r.Hosted && r.State == cli.StateLeader {
			commit = max(commit, r.Committed)
		}
	}
	for _, r := range rows {
		switch {
		case r.Err != nil:
			t.Fatalf("status of %v on %s: %v", cs, r.Server, r.Err)
		case r.Hosted:
			behind[r.Server+":0"] = commit - r.Applied
		default:
			behind[r.Server+":0"] = -1
		}
	}
	return m.Peers, behind
}

// waitMembers waits up to d until cs's leader lists exactly want (server
// addresses) and every one of them hosts a replica caught up with the
// leader; it also checks that no other server hosts one.
func waitMembers(t *testing.T, servers, want []string, cs cli.CopysetID, d time.Duration) {
	t.Helper()
	ids := make([]string, len(want))
	for i, a := range want {
		ids[i] = a + ":0"
	}
	sort.Strings(ids)
	testwait.Until(t, d, func() error {
		conf, behind := copysetMembers(t, servers, cs)
		ok := slices.Equal(conf, ids)
		for id, b := range behind {
			if slices.Contains(ids, id) != (b >= 0) || b > 0 {
				ok = false
			}
		}
		if !ok {
			return fmt.Errorf("copyset %v: leader's configuration %v, replicas behind the leader's commit (-1: none) %v; want members %v each with a caught-up replica",
				cs, conf, behind, ids)
		}
		return nil
	})
}

// TestReAddRemovedServer: a server removed
// from a copyset and added again gets an empty replica that catches up
// through entries older than its re-add, among them its own earlier
// removal; it must keep its replica.
func TestReAddRemovedServer(t *testing.T) {
	c := startCluster(t, 3)
	c.createCopysets(t, 1)
	d := c.addServer(t)
	all := c.addrs()
	cs := cli.CopysetID{Pool: pool, Copyset: 1}
	args := []string{"--pool", "1", "--copyset", "1"}
	mustChunkctl(t, all, append([]string{"peer", "add", "--wait", "20s", "--peer", d.Addr}, args...)...)
	gone := c.procs[0]
	mustChunkctl(t, all, append([]string{"peer", "remove", "--peer", gone.Addr}, args...)...)
	rest := []string{c.procs[1].Addr, c.procs[2].Addr, d.Addr}
	waitMembers(t, all, rest, cs, 20*time.Second)

	client, err := cli.New(cli.Options{Servers: all, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	seen := map[string]bool{}
	blocks := writeBlocks(t, client, []cli.CopysetID{cs}, 600, rand.New(rand.NewPCG(17, 1)), seen)

	from := logSize(gone)
	// peer add --wait returns once the new replica has applied the
	// leader's commit index, past its own earlier removal: had it judged
	// itself removed there, its log says so by then (its drop follows).
	mustChunkctl(t, all, append([]string{"peer", "add", "--wait", "20s", "--peer", gone.Addr}, args...)...)
	waitMembers(t, all, all, cs, 10*time.Second)
	if logHas(gone, from, "committed configuration no longer contains this replica") {
		t.Fatalf("the re-added replica judged itself removed:\n%s", gone.LogTail())
	}
	out, code := ctl(t, all, "cluster", "status", "--copyset", "1", "--replicas", "4")
	if code != 0 {
		t.Fatalf("cluster status: exit %d\n%s", code, out)
	}
	// Every member holds the data: with one of the others down the
	// copyset still takes writes and reads back what was acknowledged.
	lost := c.procs[1]
	if err := lost.Kill(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	readBlocks(t, client, blocks[:50])
	blocks = append(blocks, writeBlocks(t, client, []cli.CopysetID{cs}, 20, rand.New(rand.NewPCG(17, 2)), seen)...)

	// Its disk lost while it was down, the server returns empty, a member
	// without a replica: cluster status names it, a leadership transfer to
	// it is refused, and peer add re-creates the replica, which catches up.
	if err := os.RemoveAll(lost.DataDir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(lost.DataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := lost.Start(ctx); err != nil {
		t.Fatal(err)
	}
	out, code = ctl(t, all, "cluster", "status", "--copyset", "1", "--replicas", "4")
	if code == 0 || !strings.Contains(out, "under-replicated") || !strings.Contains(out, "members that have no replica") ||
		!strings.Contains(out, lost.Addr+":0") {
		t.Fatalf("cluster status with a member without a replica: exit %d\n%s", code, out)
	}
	out, code = ctl(t, all, "leader", "transfer", "--pool", "1", "--copyset", "1", "--to", lost.Addr)
	if code == 0 || !strings.Contains(out, "without a replica") {
		t.Fatalf("leader transfer to a member without a replica: exit %d\n%s", code, out)
	}
	mustChunkctl(t, all, append([]string{"peer", "add", "--wait", "20s", "--peer", lost.Addr}, args...)...)
	waitMembers(t, all, all, cs, 10*time.Second)
	mustChunkctl(t, all, "cluster", "status", "--copyset", "1", "--replicas", "4")
	mustChunkctl(t, all, "leader", "transfer", "--pool", "1", "--copyset", "1", "--to", lost.Addr)
	readBlocks(t, client, blocks)
}

// TestKillNewReplicaRightAfterAdd: a new
// replica whose add committed while it was still receiving a snapshot is
// killed with SIGKILL as soon as peer add returns; restarted, it must keep
// its replica (not delete it as an unfinished create) and catch up.
func TestKillNewReplicaRightAfterAdd(t *testing.T) {
	c := startCluster(t, 3)
	c.createCopysets(t, 1)
	old := c.addrs()
	cs := cli.CopysetID{Pool: pool, Copyset: 1}
	for _, s := range old {
		mustChunkctl(t, old, "config", "set", "--server", s, "--key", "raft.trailing_logs", "--value", "16")
	}
	// 24 MiB in 1 MiB writes, then more small writes than the trailing
	// logs: the snapshot leaves nothing a new replica could start from.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	big := bytes.Repeat([]byte("issue-17"), (1<<20)/8)
	for i := range 24 {
		big[0] = byte(i)
		id := cli.ChunkID{CopysetID: cs, Chunk: uint64(1 + i/8)}
		if err := c.client.WriteChunk(ctx, id, uint32(i%8)<<20, big, 1); err != nil {
			t.Fatal(err)
		}
	}
	writeBlocks(t, c.client, []cli.CopysetID{cs}, 40, rand.New(rand.NewPCG(17, 3)), map[string]bool{})
	mustChunkctl(t, old, "snapshot", "--pool", "1", "--copyset", "1")

	d := c.addServer(t)
	all := c.addrs()
	mustChunkctl(t, all, "peer", "add", "--pool", "1", "--copyset", "1", "--peer", d.Addr)
	if err := d.Kill(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitMembers(t, all, all, cs, 20*time.Second)
	if logHas(d, 0, "creation never finished") {
		t.Fatalf("the new replica was deleted at restart:\n%s", d.LogTail())
	}
	out, code := ctl(t, all, "cluster", "status", "--copyset", "1", "--replicas", "4")
	if code != 0 {
		t.Fatalf("cluster status: exit %d\n%s", code, out)
	}
}
