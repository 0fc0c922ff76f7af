package cli

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/chunkraft/chunkraft/proto/chunkraft/clusterpb"
)

// Cluster-wide commands take --servers as seeds: the first seed that
// answers (a dead one is skipped) gives the map, with every seed passed on;
// its servers are all asked and, without --copyset, its copysets are the
// rows (of every pool for cluster status, with a POOL column; of --pool for
// the others).
func TestCommandsUseClusterMap(t *testing.T) {
	fc := newFakeCluster(t, 3)
	srv := fc.addrs()
	dead := deadAddr(t)
	fc.with(func() {
		fc.clusterMap = &clusterpb.ClusterMapResponse{
			Servers: []*clusterpb.Server{
				{Address: srv[0], Reachable: true, Replicas: 3}, {Address: srv[1], Reachable: true, Replicas: 3},
				{Address: srv[2], Reachable: true, Replicas: 3}, {Address: dead, Error: "connection refused"},
			},
			Copysets: []*clusterpb.Copyset{{Pool: 1, Copyset: 1}, {Pool: 1, Copyset: 2}, {Pool: 2, Copyset: 5}},
		}
	})
	seeds := []string{dead, srv[1]}
	out := mustRun(t, seeds, nil, "cluster", "status")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 11 || !strings.HasPrefix(lines[0], "POOL  COPYSET") || !strings.HasPrefix(lines[3], "2     5 ") ||
		lines[4] != "3 copysets: 3 ok; could not ask "+dead || !strings.HasPrefix(lines[5], "SERVER") ||
		!strings.Contains(lines[9], "unreachable  connection refused") ||
		lines[10] != "4 servers: 3 reachable, 1 unreachable (cluster map from "+srv[1]+")" {
		t.Errorf("cluster status from the map:\n%s", out)
	}
	if fc.with(func() {}); !slices.Equal(fc.mapSeeds, seeds) {
		t.Errorf("seeds passed on: %v, want %v", fc.mapSeeds, seeds)
	}
	out = mustRun(t, seeds, nil, "cluster", "status", "--pool", "2")
	if lines = strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 9 || !strings.HasPrefix(lines[1], "5 ") ||
		lines[2] != "1 copysets: 1 ok; could not ask "+dead || !strings.HasPrefix(lines[3], "SERVER") ||
		lines[8] != "4 servers: 3 reachable, 1 unreachable (cluster map from "+srv[1]+")" {
		t.Errorf("cluster status --pool 2:\n%s", out)
	}
	out = mustRun(t, seeds, nil, "-o", "json", "cluster", "status", "--copyset", "7")
	var j clusterStatusJSON
	if err := json.Unmarshal([]byte(out), &j); err != nil || len(j.Copysets) != 1 || j.Copysets[0].Copyset != 7 || len(j.Servers) != 4 {
		t.Errorf("cluster status --copyset 7 json: %v\n%s", err, out)
	}

	// copyset list: every server of the map (failing on the dead one), the
	// copysets of --pool 1.
	out, err := run(t, []string{srv[2]}, nil, "-o", "json", "copyset", "list")
	if err == nil || !strings.Contains(err.Error(), dead) {
		t.Errorf("copyset list with %s in the map: %v", dead, err)
	}
	var hosted []serverCopysetsJSON
	if err := json.Unmarshal([]byte(out), &hosted); err != nil {
		t.Fatalf("copyset list json: %v\n%s", err, out)
	}
	if i := slices.IndexFunc(hosted, func(h serverCopysetsJSON) bool { return h.Server == srv[0] }); len(hosted) != 4 || i < 0 ||
		!slices.Equal(hosted[i].Copysets, []uint32{1, 2}) {
		t.Errorf("copyset list from the map: %s", out)
	}
}
