package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/chunkraft/chunkraft/cli"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/testwait"
	"github.com/chunkraft/chunkraft/proto/chunkraft/raftpb"
)

// ctl runs bin/chunkctl against servers (a 20 s client timeout) and returns
// its stdout and stderr together and its exit code.
func ctl(t *testing.T, servers []string, args ...string) (string, int) {
	t.Helper()
	out, errOut, code := chunkctl(t, servers, nil, append([]string{"--timeout", "20s"}, args...)...)
	return out + errOut, code
}

// mustChunkctl is mustCtl with a 20 s client timeout.
func mustChunkctl(t *testing.T, servers []string, args ...string) {
	t.Helper()
	mustCtl(t, servers, nil, append([]string{"--timeout", "20s"}, args...)...)
}

// serverFences returns the fences a server holds (its epochMap), asked with
// the server-to-server Fences.GetFences call.
func serverFences(t *testing.T, addr string) map[uint64]uint64 {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := raftpb.NewFencesClient(cc).GetFences(ctx, &raftpb.GetFencesRequest{})
	if err != nil {
		t.Fatalf("GetFences on %s: %v", addr, err)
	}
	out := map[uint64]uint64{}
	for _, f := range resp.GetFences() {
		out[f.GetFileId()] = f.GetEpoch()
	}
	return out
}

// waitSnapshotInstalled waits until the server's replica of cs has
// installed a snapshot received from its leader.
func waitSnapshotInstalled(t *testing.T, p *Proc, cs cli.CopysetID) {
	t.Helper()
	dir := filepath.Join(p.DataDir, "copysets", copyset.NewGroupID(cs.Pool, cs.Copyset).String(), "raft", "snapshots")
	testwait.Until(t, 20*time.Second, func() error {
		metas, _ := filepath.Glob(filepath.Join(dir, "*", "meta.json"))
		for _, m := range metas {
			b, err := os.ReadFile(m)
			if err != nil {
				continue
			}
			var rec struct{ Received, Installed bool }
			if json.Unmarshal(b, &rec) == nil && rec.Received && rec.Installed {
				return nil
			}
		}
		return fmt.Errorf("%s installed no snapshot of %v", p.Addr, cs)
	})
}

// TestEpochFenceReachesNewServers: a file fenced on the
// three servers of a cluster must stay fenced on a server added later,
// whether it joins a copyset by log replay or by a snapshot install, leads
// it, or restarts.
func TestEpochFenceReachesNewServers(t *testing.T) {
	c := startCluster(t, 3)
	c.createCopysets(t, 2)
	old := c.addrs()
	scratch := t.TempDir()
	v1 := filepath.Join(scratch, "v1")
	if err := os.WriteFile(v1, bytes.Repeat([]byte{7}, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(servers []string, cs, chunk, epoch int) (string, int) {
		return ctl(t, servers, "chunk", "write", "--pool", "1", "--copyset", fmt.Sprint(cs),
			"--chunk", fmt.Sprint(chunk), "--file-id", "5", "--epoch", fmt.Sprint(epoch), "--in", v1)
	}
	refused := func(servers []string, cs int, what string) {
		t.Helper()
		out, code := write(servers, cs, 9, 1)
		if code == 0 || !strings.Contains(out, "EPOCH_TOO_OLD") {
			t.Fatalf("%s: write of file 5 at epoch 1 to copyset %d: exit %d, want EPOCH_TOO_OLD:\n%s", what, cs, code, out)
		}
	}

	// Small trailing logs, so that a snapshot truncates the fence out of
	// copyset 1's log and a new replica must install the snapshot.
	for _, s := range old {
		mustChunkctl(t, old, "config", "set", "--server", s, "--key", "raft.trailing_logs", "--value", "1")
	}
	mustChunkctl(t, old, "epoch", "update", "--file-id", "5", "--epoch", "2")
	refused(old, 1, "before any change")
	for i := range 4 {
		if out, code := write(old, 1, 20+i, 2); code != 0 {
			t.Fatalf("write at the current epoch: exit %d:\n%s", code, out)
		}
	}
	mustChunkctl(t, old, "snapshot", "--pool", "1", "--copyset", "1")

	// A new server joins copyset 2 and leads it.
	d := c.addServer(t)
	all := c.addrs()
	mustChunkctl(t, all, "peer", "add", "--wait", "30s", "--pool", "1", "--copyset", "2", "--peer", d.Addr)
	mustChunkctl(t, all, "leader", "transfer", "--pool", "1", "--copyset", "2", "--to", d.Addr)
	refused(all, 2, "new server leading copyset 2")
	refused(all, 1, "copyset 1")
	if out, code := write(all, 2, 10, 2); code != 0 {
		t.Fatalf("write at the current epoch on the new leader: exit %d:\n%s", code, out)
	}

	// After a restart of the new server, leading again.
	if err := d.Kill(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	mustChunkctl(t, all, "leader", "transfer", "--pool", "1", "--copyset", "2", "--to", d.Addr)
	refused(all, 2, "restarted new server leading copyset 2")

	// A replica created by a snapshot install knows the fence before it
	// leads: copyset 1's log no longer holds the fence op.
	e := c.addServer(t)
	all = c.addrs()
	mustChunkctl(t, all, "peer", "add", "--wait", "30s", "--pool", "1", "--copyset", "1", "--peer", e.Addr)
	cs1 := cli.CopysetID{Pool: 1, Copyset: 1}
	waitSnapshotInstalled(t, e, cs1)
	if got := serverFences(t, e.Addr); got[5] != 2 {
		t.Fatalf("replica installed from a snapshot holds fences %v, want file 5 at epoch 2", got)
	}
	mustChunkctl(t, all, "leader", "transfer", "--pool", "1", "--copyset", "1", "--to", e.Addr)
	refused(all, 1, "snapshot-installed server leading copyset 1")
}
