package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chunkraft/chunkraft/proto/chunkraft/clusterpb"
)

// minMapAttempt is the least time one ClusterMap call gets: the server
// asks every server it finds (chunkserver/cluster_map.go) before it answers.
const minMapAttempt = 10 * time.Second

// ClusterMap is the cluster as one server found it by following copyset
// memberships from server to server (the Cluster service).
type ClusterMap struct {
	From      string // the server that answered
	Servers   []MapServer
	Copysets  []MapCopyset
	Truncated bool // the server stopped at its cap of servers
}

// MapServer is one server of a ClusterMap.
type MapServer struct {
	Address   string `json:"address"`
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`
	Replicas  int    `json:"replicas"`
	Leads     int    `json:"leads"`
}

// MapCopyset is one copyset of a ClusterMap.
type MapCopyset struct {
	CopysetID
	Members  []string // its leader's configuration, else the newest a replica has
	Leader   string   // "" if no replica answered as leader
	Term     uint64
	Epoch    uint64
	Replicas []string // peer ids of the servers that reported a replica
	// Remembered: no server reported it now; the answering server found it
	// earlier (every replica down).
	Remembered bool
}

// errNoClusterMap: no server answered ClusterMap (all of them predate it,
// or none could be asked).
var errNoClusterMap = errors.New("no server answered ClusterMap")

// ClusterMap asks the servers in turn for the cluster map, passing them
// all as seeds, and returns the first answer. It fails with the last
// server's error (errNoClusterMap when every server lacks the service).
func (c *Client) ClusterMap(ctx context.Context) (*ClusterMap, error) {
	attempt := max(c.attemptTimeout, minMapAttempt)
	req := &clusterpb.ClusterMapRequest{Seeds: c.Servers()}
	last := errNoClusterMap
	for _, addr := range c.Servers() {
		cc, err := c.conn(addr)
		if err != nil {
			return nil, err
		}
		actx, cancel := context.WithTimeout(ctx, attempt)
		resp, err := clusterpb.NewClusterClient(cc).ClusterMap(actx, req)
		cancel()
		if err == nil {
			return mapFromPB(addr, resp), nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if status.Code(err) != codes.Unimplemented {
			last = &serverError{Addr: addr, Err: err}
		}
	}
	return nil, last
}

func mapFromPB(from string, resp *clusterpb.ClusterMapResponse) *ClusterMap {
	m := &ClusterMap{From: from, Truncated: resp.GetTruncated()}
	for _, s := range resp.GetServers() {
		m.Servers = append(m.Servers, MapServer{Address: s.GetAddress(), Reachable: s.GetReachable(), Error: s.GetError(),
			Replicas: int(s.GetReplicas()), Leads: int(s.GetLeads())})
	}
	for _, cs := range resp.GetCopysets() {
		m.Copysets = append(m.Copysets, MapCopyset{CopysetID: CopysetID{Pool: cs.GetPool(), Copyset: cs.GetCopyset()},
			Members: cs.GetMembers(), Leader: cs.GetLeader(), Term: cs.GetTerm(), Epoch: cs.GetEpoch(),
			Replicas: cs.GetReplicas(), Remembered: cs.GetRemembered()})
	}
	return m
}

// discoverCluster makes --servers a seed list: it fetches the cluster map
// and adds every server it names to the client's servers (after the
// seeds, in the map's order). Without a map (servers that predate the
// Cluster service, or none answered) the servers stay as given and it
// returns nil, with the reason in err.
func (c *Client) discoverCluster(ctx context.Context) (*ClusterMap, error) {
	m, err := c.ClusterMap(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range m.Servers {
		addr, err := PeerAddr(s.Address)
		if err == nil && !slices.Contains(c.servers, addr) {
			c.servers = append(c.servers, addr)
		}
	}
	return m, nil
}

// withCluster is withClient for cluster-wide commands: --servers are seeds,
// and fn gets the client with every server the cluster map names, and the
// map. Without a map (servers that predate the Cluster service, or none
// answered: a note on stderr says why) m is nil and the seeds are all the
// servers, as before.
func (a *app) withCluster(cmd *cobra.Command, fn func(ctx context.Context, c *Client, m *ClusterMap) error) error {
	return a.withClient(cmd, func(ctx context.Context, c *Client) error {
		m, err := c.discoverCluster(ctx)
		if err != nil && !errors.Is(err, errNoClusterMap) && ctx.Err() == nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "chunkctl: no cluster map (%v); asking only --servers\n", err)
		}
		return fn(ctx, c, m)
	})
}

// clusterList is the copysets a cluster-wide command looks at: those
// --copyset names, else, with a cluster map, every copyset the map found
// (of --pool only unless allPools and --pool is not given either), else
// --copyset's default.
func (f *copysetFlags) clusterList(cmd *cobra.Command, m *ClusterMap, allPools bool) ([]CopysetID, error) {
	if m == nil || cmd.Flags().Changed("copyset") {
		return f.list()
	}
	return m.copysetsOf(f.pool, !allPools || cmd.Flags().Changed("pool")), nil
}

// copysetsOf returns the copysets of m, of pool only when onePool.
func (m *ClusterMap) copysetsOf(pool uint32, onePool bool) []CopysetID {
	var out []CopysetID
	for _, cs := range m.Copysets {
		if !onePool || cs.Pool == pool {
			out = append(out, cs.CopysetID)
		}
	}
	return out
}

// poolsOf returns the pools of copysets, sorted.
func poolsOf(copysets []CopysetID) []uint32 {
	var out []uint32
	for _, cs := range copysets {
		if !slices.Contains(out, cs.Pool) {
			out = append(out, cs.Pool)
		}
	}
	slices.Sort(out)
	return out
}

// printMapServers writes the count of m's servers ("4 servers: 3
// reachable, 1 unreachable"), after a table of them when table is set.
func printMapServers(w io.Writer, m *ClusterMap) error {
	down := 0
	for _, s := range m.Servers {
		if !s.Reachable {
			down++
		}
	}
	summary := fmt.Sprintf("%d servers: %d reachable", len(m.Servers), len(m.Servers)-down)
	if down > 0 {
		summary += fmt.Sprintf(", %d unreachable", down)
	}
	if m.Truncated {
		summary += fmt.Sprintf("; the map stopped at %d servers (more are named)", len(m.Servers))
	}
	rows := make([][]string, len(m.Servers))
	for i, s := range m.Servers {
		state := "ok"
		if !s.Reachable {
			state = "unreachable"
		}
		rows[i] = []string{s.Address, strconv.Itoa(s.Replicas), strconv.Itoa(s.Leads), state, s.Error}
	}
	if err := writeTable(w, []string{"SERVER", "REPLICAS", "LEADS", "STATE", "DETAIL"}, rows); err != nil {
		return err
	}
	summary += " (cluster map from " + m.From + ")"
	_, err := fmt.Fprintln(w, summary)
	return err
}
