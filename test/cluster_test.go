package test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/chunkserver"
	"github.com/chunkraft/chunkraft/cli"
	"github.com/chunkraft/chunkraft/internal/testwait"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	commonpb "github.com/chunkraft/chunkraft/proto/curve/common"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

var binDir string

func TestMain(m *testing.M) { os.Exit(RunWithBinaries(m, &binDir)) }

const pool = 1

// cluster is n chunkserver processes and a client for them.
type cluster struct {
	procs  []*Proc
	client *cli.Client
}

func (c *cluster) addrs() []string {
	out := make([]string, len(c.procs))
	for i, p := range c.procs {
		out[i] = p.Addr
	}
	return out
}

func (c *cluster) proc(peerID string) *Proc {
	for _, p := range c.procs {
		if p.Addr+":0" == peerID || p.Addr == peerID {
			return p
		}
	}
	return nil
}

func startCluster(t *testing.T, n int) *cluster {
	t.Helper()
	return startClusterWithConfig(t, n, "")
}

// startClusterWithConfig is startCluster with config (YAML, when not empty)
// in every server's data dir as chunkserver.yaml, loaded at every start.
func startClusterWithConfig(t *testing.T, n int, config string) *cluster {
	t.Helper()
	c := &cluster{}
	for i := 0; i < n; i++ {
		c.addServerWithConfig(t, config)
	}
	t.Cleanup(func() {
		for _, p := range c.procs {
			if err := p.Kill(syscall.SIGTERM); err != nil {
				t.Errorf("stop: %v", err)
			}
			if t.Failed() {
				t.Logf("log of %s:\n%s", p.Addr, p.LogTail())
			}
		}
	})
	client, err := cli.New(cli.Options{Servers: c.addrs(), Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	c.client = client
	return c
}

// addServer starts one more chunkserver, hosting nothing yet, stopped at
// cleanup.
func (c *cluster) addServer(t *testing.T) *Proc { return c.addServerWithConfig(t, "") }

// addServerWithConfig is addServer with config (YAML, when not empty) in
// the server's data dir as chunkserver.yaml, loaded at every start.
func (c *cluster) addServerWithConfig(t *testing.T, config string) *Proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := filepath.Join(t.TempDir(), fmt.Sprintf("cs%d", len(c.procs)))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := NewProc(filepath.Join(binDir, "chunkserver"), dir)
	if err != nil {
		t.Fatal(err)
	}
	if config != "" {
		if err := os.MkdirAll(p.DataDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p.DataDir, chunkserver.ConfigFileName), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.StartFirst(ctx); err != nil {
		t.Fatal(err)
	}
	c.procs = append(c.procs, p)
	return p
}

func (c *cluster) createCopysets(t *testing.T, count int) []cli.CopysetID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var ids []cli.CopysetID
	for i := 1; i <= count; i++ {
		ids = append(ids, cli.CopysetID{Pool: pool, Copyset: uint32(i)})
	}
	results, err := c.client.CreateCopysets(ctx, ids, c.addrs())
	if err != nil {
		t.Fatalf("create copysets: %v", err)
	}
	for _, r := range results {
		if _, _, failed := r.Counts(); failed > 0 {
			t.Fatalf("create %v: %+v", r.Copyset, r)
		}
	}
	for _, id := range ids {
		if _, err := c.client.GetLeader(ctx, id); err != nil {
			t.Fatalf("no leader for %v: %v", id, err)
		}
	}
	return ids
}

// block is one acknowledged 4 KiB write.
type block struct {
	id   cli.ChunkID
	off  uint32
	data []byte
}

// writeBlocks writes n random 4 KiB blocks at distinct places spread over
// the copysets and 4 chunks each, 8 writers at a time. seen holds the
// places already used (by earlier calls too), so every block keeps the one
// value it was written with.
func writeBlocks(t *testing.T, c *cli.Client, copysets []cli.CopysetID, n int, rng *rand.Rand, seen map[string]bool) []block {
	t.Helper()
	blocks := make([]block, 0, n)
	for len(blocks) < n {
		b := block{
			id:  cli.ChunkID{CopysetID: copysets[rng.IntN(len(copysets))], Chunk: uint64(1 + rng.IntN(4))},
			off: uint32(rng.IntN(4096)) * 4096,
		}
		key := fmt.Sprint(b.id, b.off)
		if seen[key] {
			continue
		}
		seen[key] = true
		b.data = make([]byte, 4096)
		for i := range b.data {
			b.data[i] = byte(rng.Uint32())
		}
		blocks = append(blocks, b)
	}
	forEach(t, blocks, func(ctx context.Context, b block) error {
		return c.WriteChunk(ctx, b.id, b.off, b.data, 1)
	})
	return blocks
}

// readBlocks reads every block back and compares it byte for byte.
func readBlocks(t *testing.T, c *cli.Client, blocks []block) {
	t.Helper()
	forEach(t, blocks, func(ctx context.Context, b block) error {
		got, err := c.ReadChunk(ctx, b.id, b.off, 4096)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, b.data) {
			return fmt.Errorf("%v offset %d: data differs from the acknowledged write", b.id, b.off)
		}
		return nil
	})
}

func forEach(t *testing.T, blocks []block, fn func(context.Context, block) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	work := make(chan block)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range work {
				if err := fn(ctx, b); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%v offset %d: %w", b.id, b.off, err))
					mu.Unlock()
				}
			}
		}()
	}
	for _, b := range blocks {
		work <- b
	}
	close(work)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d of %d failed; first: %v", len(errs), len(blocks), errs[0])
	}
}

// TestClusterWriteKillRestart: 3 processes, 16 copysets, 1,000 random
// blocks written and read back; kill -9 of one copyset's leader, a new
// leader, every acknowledged block still there; restart on the same data
// dir and the replica catches up to the leader's commit index.
func TestClusterWriteKillRestart(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	c := startCluster(t, 3)
	copysets := c.createCopysets(t, 16)

	seen := map[string]bool{}
	blocks := writeBlocks(t, c.client, copysets, 1000, rng, seen)
	readBlocks(t, c.client, blocks)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	victimCS := copysets[rng.IntN(len(copysets))]
	oldLeader, err := c.client.GetLeader(ctx, victimCS)
	if err != nil {
		t.Fatal(err)
	}
	victim := c.proc(oldLeader)
	if victim == nil {
		t.Fatalf("leader %q is not one of %v", oldLeader, c.addrs())
	}
	t.Logf("kill -9 %s, leader of %v", victim.Addr, victimCS)
	if err := victim.Kill(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var newLeader string
	end, _ := ctx.Deadline()
	testwait.Until(t, time.Until(end), func() error {
		if newLeader, err = c.client.GetLeader(ctx, victimCS); err != nil {
			t.Fatalf("no new leader after kill: %v", err)
		}
		if newLeader == "" || newLeader == oldLeader {
			return fmt.Errorf("the leader of %v is still %q", victimCS, newLeader)
		}
		return nil
	})
	t.Logf("new leader of %v: %s", victimCS, newLeader)
	readBlocks(t, c.client, blocks)

	// Writes while the victim is down, so it has something to catch up on.
	more := writeBlocks(t, c.client, []cli.CopysetID{victimCS}, 50, rng, seen)

	if err := victim.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, time.Until(end), func() error {
		rows, err := c.client.CopysetStatus(ctx, victimCS)
		if err != nil {
			t.Fatal(err)
		}
		var leaderCommit, victimApplied int64 = -1, -2
		for _, r := range rows {
			if r.Err != nil || !r.Hosted {
				continue
			}
			if r.Leader != "" && r.Peer == r.Leader {
				leaderCommit = r.Committed
			}
			if r.Server == victim.Addr {
				victimApplied = r.Applied
			}
		}
		if leaderCommit <= 0 || victimApplied < leaderCommit {
			return fmt.Errorf("restarted replica did not catch up: %+v", rows)
		}
		t.Logf("restarted replica applied %d >= leader commit %d", victimApplied, leaderCommit)
		return nil
	})
	readBlocks(t, c.client, append(blocks, more...))
}

// rawChunk returns a ChunkService stub for one server.
func rawChunk(t *testing.T, addr string) pb.ChunkServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewChunkServiceClient(conn)
}

func rawCopyset(t *testing.T, addr string) pb.CopysetServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewCopysetServiceClient(conn)
}

// TestBadRequests: each bad request gets its documented status and
// proposes nothing (the leader's last log index does not move and the data
// is unchanged).
func TestBadRequests(t *testing.T) {
	c := startCluster(t, 3)
	copysets := c.createCopysets(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := copysets[0]
	id := cli.ChunkID{CopysetID: cs, Chunk: 7}
	orig := bytes.Repeat([]byte{0xab}, 8192)
	if err := c.client.WriteChunk(ctx, id, 0, orig, 1); err != nil {
		t.Fatal(err)
	}
	leaderID, err := c.client.GetLeader(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	leader := c.proc(leaderID)
	var follower *Proc
	for _, p := range c.procs {
		if p != leader {
			follower = p
		}
	}
	lastIndex := func() int64 {
		resp, err := rawCopyset(t, leader.Addr).GetCopysetStatus(ctx, &pb.CopysetStatusRequest{
			LogicPoolId: proto.Uint32(pool), CopysetId: proto.Uint32(cs.Copyset),
			Peer: &commonpb.Peer{Address: proto.String(leaderID)}, QueryHash: proto.Bool(false),
		})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetLastIndex()
	}
	// Let the read barrier of the write above settle before measuring.
	if _, err := c.client.ReadChunk(ctx, id, 0, 4096); err != nil {
		t.Fatal(err)
	}
	before := lastIndex()

	write := func(chunk uint64, off, size uint32, data []byte) *pb.ChunkRequest {
		return &pb.ChunkRequest{
			OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE.Enum(), LogicPoolId: proto.Uint32(pool),
			CopysetId: proto.Uint32(cs.Copyset), ChunkId: proto.Uint64(chunk),
			Offset: proto.Uint32(off), Size: proto.Uint32(size), Sn: proto.Uint64(1), Data: data,
		}
	}
	page := bytes.Repeat([]byte{0x11}, 4096)
	tests := []struct {
		name string
		addr string
		req  *pb.ChunkRequest
		read bool
		want pb.CHUNK_OP_STATUS
	}{
		{"misaligned offset", leader.Addr, write(7, 512, 4096, page), false, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST},
		{"misaligned size", leader.Addr, write(7, 0, 1000, page[:1000]), false, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST},
		{"past chunk end", leader.Addr, write(7, 16<<20-4096, 8192, append(page, page...)), false, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST},
		{"over 16 MiB", leader.Addr, write(7, 0, 16<<20+4096, make([]byte, 16<<20+4096)), false, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST},
		{"missing data", leader.Addr, write(7, 0, 4096, nil), false, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST},
		{"size/data mismatch", leader.Addr, write(7, 0, 8192, page), false, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST},
		{"sn 0", leader.Addr, func() *pb.ChunkRequest { r := write(7, 0, 4096, page); r.Sn = proto.Uint64(0); return r }(), false, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST},
		{"unknown copyset", leader.Addr, func() *pb.ChunkRequest { r := write(7, 0, 4096, page); r.CopysetId = proto.Uint32(999); return r }(), false, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_COPYSET_NOTEXIST},
		{"write to follower", follower.Addr, write(7, 0, 4096, page), false, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_REDIRECTED},
		{"read misaligned", leader.Addr, write(7, 100, 4096, nil), true, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST},
		{"read past end", leader.Addr, write(7, 16<<20, 4096, nil), true, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST},
		{"read on follower", follower.Addr, write(7, 0, 4096, nil), true, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_REDIRECTED},
		{"read missing chunk", leader.Addr, write(8, 0, 4096, nil), true, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_CHUNK_NOTEXIST},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cl := rawChunk(t, tt.addr)
			var resp *pb.ChunkResponse
			var err error
			if tt.read {
				tt.req.OpType = pb.CHUNK_OP_TYPE_CHUNK_OP_READ.Enum()
				resp, err = cl.ReadChunk(ctx, tt.req)
			} else {
				resp, err = cl.WriteChunk(ctx, tt.req)
			}
			if err != nil {
				t.Fatalf("rpc: %v", err)
			}
			if resp.GetStatus() != tt.want {
				t.Fatalf("status %v, want %v", resp.GetStatus(), tt.want)
			}
			if tt.want == pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_REDIRECTED && resp.GetRedirect() != leaderID {
				t.Fatalf("redirect %q, want leader %q", resp.GetRedirect(), leaderID)
			}
		})
	}
	if after := lastIndex(); after != before {
		t.Errorf("leader last index moved from %d to %d: a bad request was proposed", before, after)
	}
	got, err := c.client.ReadChunk(ctx, id, 0, 8192)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, orig) {
		t.Error("chunk data changed by bad requests")
	}
	sns, err := c.client.GetChunkInfo(ctx, cli.ChunkID{CopysetID: cs, Chunk: 8})
	if err != nil || len(sns) != 0 {
		t.Errorf("chunk 8 info %v %v: want no chunk", sns, err)
	}
}
