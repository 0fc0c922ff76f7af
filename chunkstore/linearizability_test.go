package chunkstore_test

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math/rand"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/chunkraft/chunkraft/chunkserver"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/testwait"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	"github.com/chunkraft/chunkraft/test/faultnet"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The linearizability check: 3 in-process chunkservers (real gRPC on
// loopback, raft transport behind a faultnet.Network), concurrent clients
// writing and reading 4 KiB blocks of one chunk (one register per block)
// while a nemesis partitions, drops, delays and restarts; the history is
// checked with porcupine. CHUNKRAFT_LIN_DURATION or -lin.duration sets the
// nemesis time (soak); CHUNKRAFT_LIN_SEED replays a seed's fault schedule.

var linDuration = flag.Duration("lin.duration", 0, "nemesis duration of TestLinearizability (default 15s, 4s with -short; env CHUNKRAFT_LIN_DURATION)")

const (
	linServers   = 3
	linClients   = 5
	linRegisters = 16
	linBlock     = 4096
	linChunk     = 7
)

// linCluster is 3 chunkservers whose raft transports dial through nw; node
// linServers of nw is the test's clients.
type linCluster struct {
	t       *testing.T
	nw      *faultnet.Network
	cfgs    []chunkserver.Config
	mu      sync.Mutex
	servers []*chunkserver.Server
	cancels []context.CancelFunc
	dones   []chan struct{}
	conns   []*grpc.ClientConn
	group   copyset.GroupID
}

func startLinCluster(t *testing.T, nw *faultnet.Network) *linCluster {
	t.Helper()
	c := &linCluster{t: t, nw: nw, group: copyset.NewGroupID(1, 1)}
	var peers []copyset.PeerID
	var liss []net.Listener
	for i := 0; i < linServers; i++ {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		liss = append(liss, lis)
		cfg := chunkserver.DefaultConfig()
		cfg.Listen, cfg.MetricsListen = lis.Addr().String(), ""
		cfg.DataDir = filepath.Join(t.TempDir(), "data")
		cfg.ChunkFilePool = 0
		cfg.Raft.HeartbeatTimeout, cfg.Raft.ElectionTimeout = 300*time.Millisecond, 300*time.Millisecond
		cfg.Raft.LeaderLeaseTimeout = 150 * time.Millisecond
		nw.SetAddr(i, cfg.Listen)
		conn, err := grpc.NewClient(cfg.Listen, append([]grpc.DialOption{
			grpc.WithTransportCredentials(insecure.NewCredentials())}, nw.DialOptions(linServers)...)...)
		if err != nil {
			t.Fatal(err)
		}
		c.cfgs, c.conns = append(c.cfgs, cfg), append(c.conns, conn)
		c.servers, c.cancels, c.dones = append(c.servers, nil), append(c.cancels, nil), append(c.dones, nil)
	}
	for i := range liss {
		c.start(i, liss[i])
		peers = append(peers, c.servers[i].Local())
	}
	t.Cleanup(func() {
		for i := range c.servers {
			c.stop(i)
		}
		for _, conn := range c.conns {
			conn.Close()
		}
	})
	for _, srv := range c.servers {
		if _, err := srv.Copysets().Create(context.Background(), c.group, peers); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func (c *linCluster) start(i int, lis net.Listener) {
	if lis == nil {
		// The address is free once the stopped server's socket is closed
		// (For: the nemesis restarts servers off the test goroutine).
		err := testwait.For(3*time.Second, func() (err error) {
			lis, err = net.Listen("tcp", c.cfgs[i].Listen)
			return err
		})
		if err != nil {
			c.t.Error(err)
			return
		}
	}
	srv, err := chunkserver.NewWithSeams(c.cfgs[i], slog.New(slog.NewTextHandler(io.Discard, nil)),
		chunkserver.Seams{RaftLog: io.Discard, RaftDial: c.nw.DialOptions(i)})
	if err != nil {
		lis.Close()
		c.t.Error(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ctx, lis) }()
	deadline := time.Now().Add(30 * time.Second)
	for !srv.Ready() {
		if time.Now().After(deadline) {
			c.t.Errorf("server %d not ready within 30s; goroutines in %s", i, linDumpStacks())
			deadline = time.Now().Add(time.Hour)
		}
		select {
		case <-done:
			c.t.Errorf("server %d stopped while loading", i)
			cancel()
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	c.mu.Lock()
	c.servers[i], c.cancels[i], c.dones[i] = srv, cancel, done
	c.mu.Unlock()
}

func (c *linCluster) stop(i int) {
	c.mu.Lock()
	cancel, done := c.cancels[i], c.dones[i]
	c.cancels[i] = nil
	c.mu.Unlock()
	if cancel != nil {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			// Left running: the test fails instead of hanging.
			c.t.Errorf("server %d did not stop within 30s; goroutines in %s", i, linDumpStacks())
		}
	}
}

// leader returns a server that believes it leads, or -1.
func (c *linCluster) leader() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, srv := range c.servers {
		if c.cancels[i] == nil {
			continue
		}
		if n := srv.Copysets().Get(c.group); n != nil && n.IsLeader() {
			return i
		}
	}
	return -1
}

func (c *linCluster) index(peer string) int {
	p, _, err := copyset.ParsePeer(peer)
	if err != nil {
		return -1
	}
	for i, cfg := range c.cfgs {
		if cfg.Listen == p.Addr() {
			return i
		}
	}
	return -1
}

// Register values: a block is 256 copies of a 16-byte record (client, reg,
// seq, crc of the first 12 bytes), so a torn or mixed block decodes as
// invalid. All zeros is the initial value "".

func linEncode(client, reg int, seq uint64) []byte {
	var rec [16]byte
	binary.LittleEndian.PutUint16(rec[0:], uint16(client))
	binary.LittleEndian.PutUint16(rec[2:], uint16(reg))
	binary.LittleEndian.PutUint64(rec[4:], seq)
	binary.LittleEndian.PutUint32(rec[12:], crc32.ChecksumIEEE(rec[:12]))
	buf := make([]byte, 0, linBlock)
	for len(buf) < linBlock {
		buf = append(buf, rec[:]...)
	}
	return buf
}

func linValue(client int, seq uint64) string {
	return strconv.Itoa(client) + "." + strconv.FormatUint(seq, 10)
}

func linDecode(reg int, b []byte) (string, error) {
	if len(b) != linBlock {
		return "", fmt.Errorf("block of %d bytes", len(b))
	}
	zero := true
	for _, x := range b {
		if x != 0 {
			zero = false
			break
		}
	}
	if zero {
		return "", nil
	}
	rec := b[:16]
	for off := 16; off < linBlock; off += 16 {
		if string(b[off:off+16]) != string(rec) {
			return "", fmt.Errorf("torn block: record at %d differs from record 0", off)
		}
	}
	if crc32.ChecksumIEEE(rec[:12]) != binary.LittleEndian.Uint32(rec[12:]) {
		return "", fmt.Errorf("record crc mismatch")
	}
	if r := int(binary.LittleEndian.Uint16(rec[2:])); r != reg {
		return "", fmt.Errorf("block of register %d holds register %d's value", reg, r)
	}
	return linValue(int(binary.LittleEndian.Uint16(rec[0:])), binary.LittleEndian.Uint64(rec[4:])), nil
}

type linInput struct {
	reg   int
	write bool
	val   string
}

type linOutput struct {
	val     string
	unknown bool // write whose outcome is unknown
}

var linModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		by := map[int][]porcupine.Operation{}
		for _, op := range history {
			r := op.Input.(linInput).reg
			by[r] = append(by[r], op)
		}
		keys := make([]int, 0, len(by))
		for k := range by {
			keys = append(keys, k)
		}
		sort.Ints(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		in, out := input.(linInput), output.(linOutput)
		if in.write {
			return true, in.val
		}
		return out.val == state.(string), state
	},
	Equal: func(a, b any) bool { return a.(string) == b.(string) },
	DescribeOperation: func(input, output any) string {
		in, out := input.(linInput), output.(linOutput)
		switch {
		case in.write && out.unknown:
			return fmt.Sprintf("write(r%d, %s) ?", in.reg, in.val)
		case in.write:
			return fmt.Sprintf("write(r%d, %s)", in.reg, in.val)
		}
		return fmt.Sprintf("read(r%d) -> %q", in.reg, out.val)
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%q", state) },
}

// linHistory collects operations with monotonic timestamps.
type linHistory struct {
	start   time.Time
	mu      sync.Mutex
	ops     []porcupine.Operation
	invalid []string
}

func (h *linHistory) now() int64 { return int64(time.Since(h.start)) }

func (h *linHistory) add(op porcupine.Operation) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, op)
}

// linClient finds the leader and follows REDIRECTED; every attempt is its
// own operation (a write retried after an unknown outcome gets a new value).
type linClient struct {
	c    *linCluster
	id   int
	rng  *rand.Rand
	h    *linHistory
	cur  int
	seq  uint64
	opTO time.Duration
}

func (cl *linClient) next(resp *pb.ChunkResponse) {
	if resp != nil && resp.GetStatus() == pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_REDIRECTED {
		if i := cl.c.index(resp.GetRedirect()); i >= 0 && i != cl.cur {
			cl.cur = i
			return
		}
	}
	cl.cur = (cl.cur + 1) % linServers
	time.Sleep(20 * time.Millisecond)
}

func (cl *linClient) step(ctx context.Context) {
	reg := cl.rng.Intn(linRegisters)
	chunk := pb.NewChunkServiceClient(cl.c.conns[cl.cur])
	octx, cancel := context.WithTimeout(ctx, cl.opTO)
	defer cancel()
	if cl.rng.Intn(2) == 0 {
		cl.seq++
		val := linValue(cl.id, cl.seq)
		call := cl.h.now()
		resp, err := chunk.WriteChunk(octx, writeReq(linChunk, uint32(reg*linBlock), linEncode(cl.id, reg, cl.seq)))
		ret := cl.h.now()
		ok := err == nil && resp.GetStatus() == pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS
		cl.h.add(porcupine.Operation{ClientId: cl.id, Input: linInput{reg: reg, write: true, val: val},
			Call: call, Output: linOutput{unknown: !ok}, Return: ret})
		if !ok {
			cl.next(resp)
		}
		return
	}
	call := cl.h.now()
	resp, err := chunk.ReadChunk(octx, readReq(linChunk, uint32(reg*linBlock), linBlock))
	ret := cl.h.now()
	var val string
	switch {
	case err != nil:
		cl.next(nil)
		return
	case resp.GetStatus() == pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_CHUNK_NOTEXIST:
	case resp.GetStatus() == pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS:
		v, derr := linDecode(reg, resp.GetData())
		if derr != nil {
			cl.h.mu.Lock()
			cl.h.invalid = append(cl.h.invalid, fmt.Sprintf("client %d read r%d from server %d: %v", cl.id, reg, cl.cur, derr))
			cl.h.mu.Unlock()
			return
		}
		val = v
	default:
		cl.next(resp)
		return
	}
	cl.h.add(porcupine.Operation{ClientId: cl.id, Input: linInput{reg: reg}, Call: call,
		Output: linOutput{val: val}, Return: ret})
}

func linNemesisDuration(t *testing.T) time.Duration {
	if *linDuration > 0 {
		return *linDuration
	}
	if s := os.Getenv("CHUNKRAFT_LIN_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("CHUNKRAFT_LIN_DURATION: %v", err)
		}
		return d
	}
	if testing.Short() {
		return 4 * time.Second
	}
	return 15 * time.Second
}

// TestLinearizability runs clients against a faulted cluster and checks the
// history with porcupine.
func TestLinearizability(t *testing.T) {
	seed := time.Now().UnixNano()
	if s := os.Getenv("CHUNKRAFT_LIN_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("CHUNKRAFT_LIN_SEED: %v", err)
		}
	}
	dur := linNemesisDuration(t)
	t.Logf("seed %d (CHUNKRAFT_LIN_SEED=%d to replay), nemesis %v", seed, seed, dur)
	nw := faultnet.New(linServers+1, seed)
	c := startLinCluster(t, nw)
	rng := rand.New(rand.NewSource(seed))
	h := &linHistory{start: time.Now()}

	ctx, stopClients := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for id := 0; id < linClients; id++ {
		cl := &linClient{c: c, id: id, rng: rand.New(rand.NewSource(seed + int64(id) + 1)), h: h, cur: id % linServers, opTO: time.Second}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				cl.step(ctx)
				time.Sleep(time.Duration(cl.rng.Intn(4)) * time.Millisecond)
			}
		}()
	}

	servers := []int{0, 1, 2}
	leaderOr := func() int {
		if l := c.leader(); l >= 0 {
			return l
		}
		return rng.Intn(linServers)
	}
	faults := []struct {
		name string
		run  func() string
	}{
		{"partition leader away", func() string {
			l := leaderOr()
			nw.Isolate(l, servers)
			return fmt.Sprintf("isolate leader %d", l)
		}},
		{"isolate follower", func() string {
			l := leaderOr()
			f := (l + 1 + rng.Intn(linServers-1)) % linServers
			nw.Isolate(f, servers)
			return fmt.Sprintf("isolate follower %d", f)
		}},
		{"asymmetric", func() string {
			l := leaderOr()
			m := make([][]bool, linServers+1)
			for i := range m {
				m[i] = make([]bool, linServers+1)
			}
			for _, o := range servers {
				m[l][o] = o != l // the leader can hear but not speak
			}
			nw.SetPartition(m)
			return fmt.Sprintf("leader %d can't send", l)
		}},
		{"drop", func() string { nw.SetDrop(-1, -1, 0.10); return "drop 10%" }},
		{"delay", func() string { nw.SetDelay(-1, -1, 20*time.Millisecond); return "delay 20ms+" }},
		{"restart", func() string {
			i := rng.Intn(linServers)
			c.stop(i)
			time.Sleep(time.Duration(100+rng.Intn(400)) * time.Millisecond)
			c.start(i, nil)
			return fmt.Sprintf("restarted server %d", i)
		}},
	}
	var log []string
	nemesisEnd := time.Now().Add(dur)
	time.Sleep(500 * time.Millisecond)
	for k := 0; time.Now().Before(nemesisEnd); k++ {
		f := faults[k%len(faults)]
		if k >= len(faults) {
			f = faults[rng.Intn(len(faults))]
		}
		what := f.run()
		log = append(log, fmt.Sprintf("%.1fs %s", time.Since(h.start).Seconds(), what))
		time.Sleep(time.Duration(1000+rng.Intn(1500)) * time.Millisecond)
		nw.Heal()
		time.Sleep(time.Duration(300+rng.Intn(700)) * time.Millisecond)
	}
	nw.Heal()
	time.Sleep(time.Second)
	stopClients()
	wg.Wait()
	blocked, dropped, delayed := nw.Stats()
	t.Logf("nemesis: %v", log)
	t.Logf("faults: %d calls partitioned, %d dropped, %d delayed", blocked, dropped, delayed)

	ops, writes, unknown, unseen, reads := linPatch(h)
	t.Logf("history: %d operations (%d writes, %d of them unknown, %d unknown and never read dropped; %d reads)",
		len(ops), writes, unknown, unseen, reads)
	for _, s := range h.invalid {
		t.Errorf("invalid read: %s", s)
	}
	if reads == 0 || writes == unknown+unseen {
		t.Errorf("no successful operations recorded")
	}
	res, info := porcupine.CheckOperationsVerbose(linModel, ops, 60*time.Second)
	t.Logf("porcupine: %s", res)
	if res == porcupine.Illegal || len(h.invalid) > 0 {
		dir := os.Getenv("CHUNKRAFT_LIN_OUT")
		if dir == "" {
			dir = os.TempDir()
		}
		path := filepath.Join(dir, fmt.Sprintf("porcupine-%d.html", seed))
		if err := porcupine.VisualizePath(linModel, info, path); err != nil {
			t.Logf("visualize: %v", err)
		} else {
			t.Logf("history visualisation: %s", path)
		}
	}
	if res == porcupine.Illegal {
		t.Fatalf("history is not linearizable (seed %d)", seed)
	}
}

// linPatch prepares the history for the checker. A write with unknown
// outcome may take effect any time after its call, so it returns at the end
// of the history; one whose value no read observed is dropped (placed last,
// after every other operation, it changes nothing any read saw, so the
// history is linearizable with it iff it is without it), which keeps the
// search small.
func linPatch(h *linHistory) (ops []porcupine.Operation, writes, unknown, unseen, reads int) {
	seen := map[string]bool{}
	for _, op := range h.ops {
		if in := op.Input.(linInput); !in.write {
			seen[op.Output.(linOutput).val] = true
		}
	}
	end := h.now() + 1
	for _, op := range h.ops {
		in := op.Input.(linInput)
		switch {
		case !in.write:
			reads++
		case op.Output.(linOutput).unknown && !seen[in.val]:
			unseen++
			continue
		case op.Output.(linOutput).unknown:
			op.Return = end
			writes++
			unknown++
		default:
			writes++
		}
		ops = append(ops, op)
	}
	return ops, writes, unknown, unseen, reads
}

// TestLinearizabilityChecker: the model and the history patching catch a
// stale read and a torn block, and accept an unknown write seen late.
func TestLinearizabilityChecker(t *testing.T) {
	w := func(c int, v string, call, ret int64, unknown bool) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: linInput{reg: 1, write: true, val: v}, Call: call,
			Output: linOutput{unknown: unknown}, Return: ret}
	}
	r := func(c int, v string, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: linInput{reg: 1}, Call: call, Output: linOutput{val: v}, Return: ret}
	}
	stale := &linHistory{start: time.Now(), ops: []porcupine.Operation{
		w(0, "0.1", 0, 10, false), w(1, "1.1", 20, 30, false), r(2, "0.1", 40, 50)}}
	ops, _, _, _, _ := linPatch(stale)
	if porcupine.CheckOperations(linModel, ops) {
		t.Fatal("a stale read passed")
	}
	late := &linHistory{start: time.Now(), ops: []porcupine.Operation{
		w(0, "0.1", 0, 10, true), w(1, "1.1", 20, 30, false), r(2, "1.1", 40, 50), r(2, "0.1", 60, 70),
		w(1, "1.2", 80, 90, true)}}
	ops, _, unknown, unseen, _ := linPatch(late)
	if !porcupine.CheckOperations(linModel, ops) || unknown != 1 || unseen != 1 {
		t.Fatalf("an unknown write applied late failed the check (unknown %d, unseen %d)", unknown, unseen)
	}
	b := linEncode(3, 5, 42)
	if v, err := linDecode(5, b); err != nil || v != "3.42" {
		t.Fatalf("decode: %q %v", v, err)
	}
	torn := append(append([]byte{}, b[:2048]...), linEncode(3, 5, 43)[2048:]...)
	if _, err := linDecode(5, torn); err == nil {
		t.Fatal("a torn block decoded")
	}
	if _, err := linDecode(4, b); err == nil {
		t.Fatal("another register's block decoded")
	}
}

// linDumpStacks writes every goroutine's stack to a file in $TMPDIR and
// returns its path.
func linDumpStacks() string {
	buf := make([]byte, 1<<24)
	buf = buf[:runtime.Stack(buf, true)]
	f, err := os.CreateTemp("", "chunkraft-lin-stacks-*.txt")
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if _, err := f.Write(buf); err != nil {
		return err.Error()
	}
	return f.Name()
}
