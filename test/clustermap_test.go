package test

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/internal/testwait"
)

// statusRows parses cluster status's tables: health per copyset row, and
// (replicas, state) per server row.
func statusRows(out string) (copysets map[string]string, servers map[string][2]string) {
	copysets, servers = map[string]string{}, map[string][2]string{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 9 && isNumber(f[0]) && !strings.HasSuffix(f[1], ":"): // not a summary line
			copysets[f[0]] = f[7]
		case len(f) >= 4 && strings.HasPrefix(f[0], "127.0.0.1:"):
			servers[f[0]] = [2]string{f[1], f[3]}
		}
	}
	return copysets, servers
}

// TestClusterStatusFromOneServer: cluster status given one server finds
// every copyset and server of the cluster through copyset memberships (a
// copyset moved to a fourth server, which the given server does not host),
// lists a server that hosts nothing when --servers names it, and, once
// every replica of a copyset is down, still shows it (missing) next to the
// copysets that lost their leader (no-leader), naming the servers it could
// not ask.
func TestClusterStatusFromOneServer(t *testing.T) {
	c := startCluster(t, 3)
	c.createCopysets(t, 4)
	d := c.addServer(t)
	empty := c.addServer(t)
	all := c.addrs()
	first := c.procs[0]
	mustCtl(t, all, nil, "peer", "add", "--pool", "1", "--copyset", "2", "--peer", d.Addr, "--wait", "20s")
	mustCtl(t, all, nil, "peer", "remove", "--pool", "1", "--copyset", "2", "--peer", first.Addr)

	// Until copyset 2 has elected a leader without the removed one.
	var out string
	var copysets map[string]string
	var servers map[string][2]string
	want := map[string]string{"1": "ok", "2": "ok", "3": "ok", "4": "ok"}
	// The removed replica leaves its server a moment after the removal.
	wantServers := map[string][2]string{
		first.Addr: {"3", "ok"}, c.procs[1].Addr: {"4", "ok"}, c.procs[2].Addr: {"4", "ok"}, d.Addr: {"1", "ok"},
	}
	testwait.Until(t, 20*time.Second, func() error {
		var code int
		out, _, code = chunkctl(t, []string{first.Addr}, nil, "cluster", "status", "--wait", "10s")
		if copysets, servers = statusRows(out); code != 0 || !maps.Equal(copysets, want) || !maps.Equal(servers, wantServers) {
			return fmt.Errorf("cluster status from %s: exit %d, copysets %v, want %v, servers %v, want %v\n%s", first.Addr, code, copysets, want, servers, wantServers, out)
		}
		return nil
	})
	if !maps.Equal(servers, wantServers) || !strings.Contains(out, "4 copysets: 4 ok") || !strings.Contains(out, "4 servers: 4 reachable") {
		t.Errorf("cluster status from %s: servers %v, want %v\n%s", first.Addr, servers, wantServers, out)
	}

	// Every server in PEERS too.
	for _, a := range all[:4] {
		if !strings.Contains(out, a+":0") {
			t.Errorf("cluster status from %s does not name %s:\n%s", first.Addr, a, out)
		}
	}

	// A server hosting nothing is listed when named; JSON has the servers.
	type mapServer struct {
		Address   string
		Reachable bool
		Replicas  int
	}
	var j struct {
		Copysets []struct{ Copyset uint32 }
		Servers  []mapServer
	}
	js := mustCtl(t, []string{first.Addr, empty.Addr}, nil, "-o", "json", "cluster", "status")
	if err := json.Unmarshal([]byte(js), &j); err != nil {
		t.Fatalf("cluster status json: %v\n%s", err, js)
	}
	i := slices.IndexFunc(j.Servers, func(s mapServer) bool { return s.Address == empty.Addr })
	if len(j.Copysets) != 4 || len(j.Servers) != 5 || i < 0 || !j.Servers[i].Reachable || j.Servers[i].Replicas != 0 {
		t.Errorf("cluster status json with %s named: %s", empty.Addr, js)
	}

	// Every replica of copyset 2 down, copysets 1, 3, 4 down to one.
	down := []string{c.procs[1].Addr, c.procs[2].Addr, d.Addr}
	for _, p := range []*Proc{c.procs[1], c.procs[2], d} {
		if err := p.Kill(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	want = map[string]string{"1": "no-leader", "2": "missing", "3": "no-leader", "4": "no-leader"}
	testwait.Until(t, 15*time.Second, func() error {
		var code int
		out, _, code = chunkctl(t, []string{first.Addr}, nil, "cluster", "status")
		if copysets, servers = statusRows(out); code == 0 || !maps.Equal(copysets, want) {
			return fmt.Errorf("cluster status with copyset 2 all down: exit %d, copysets %v, want %v\n%s", code, copysets, want, out)
		}
		return nil
	})
	for _, a := range down {
		if servers[a][1] != "unreachable" {
			t.Errorf("server %s: %v, want unreachable\n%s", a, servers[a], out)
		}
	}
	if !strings.Contains(out, "3 servers could not be asked") || !strings.Contains(out, "4 servers: 1 reachable, 3 unreachable") {
		t.Errorf("cluster status with copyset 2 all down:\n%s", out)
	}
}

func isNumber(s string) bool {
	_, err := strconv.ParseUint(s, 10, 32)
	return err == nil
}
