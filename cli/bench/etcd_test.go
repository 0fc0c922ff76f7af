package bench

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chunkraft/chunkraft/cli"
	"github.com/chunkraft/chunkraft/proto/etcd/etcdserverpb"
	"github.com/chunkraft/chunkraft/proto/etcd/mvccpb"
)

// etcdFake is a tiny etcd: two in-process gRPC servers ("members") with
// etcd's KV service (Put and Range) in front of one map.
type etcdFake struct {
	mu   sync.Mutex
	kv   map[string][]byte
	rev  int64
	addr []string

	puts, ranges [2]atomic.Int64
	serializable atomic.Int64 // Ranges that asked for a serializable read
	corruptKey   atomic.Value // of string: Ranges of it return a flipped bit
	failPuts     atomic.Bool  // Puts fail as etcd's do when it times out
}

func newEtcdFake(t *testing.T) *etcdFake {
	t.Helper()
	f := &etcdFake{kv: map[string][]byte{}}
	f.corruptKey.Store("")
	for i := range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		f.addr = append(f.addr, l.Addr().String())
		s := grpc.NewServer()
		etcdserverpb.RegisterKVServer(s, &fakeKV{f: f, member: i})
		go func() { _ = s.Serve(l) }()
		t.Cleanup(s.Stop)
	}
	return f
}

type fakeKV struct {
	etcdserverpb.UnimplementedKVServer
	f      *etcdFake
	member int
}

func (s *fakeKV) header() *etcdserverpb.ResponseHeader {
	return &etcdserverpb.ResponseHeader{ClusterId: 1, MemberId: uint64(s.member + 1), Revision: s.f.rev, RaftTerm: 2}
}

func (s *fakeKV) Put(ctx context.Context, req *etcdserverpb.PutRequest) (*etcdserverpb.PutResponse, error) {
	s.f.puts[s.member].Add(1)
	if s.f.failPuts.Load() {
		return nil, status.Error(codes.Unavailable, "etcdserver: request timed out")
	}
	if len(req.GetKey()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "etcdserver: key is not provided")
	}
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	s.f.rev++
	s.f.kv[string(req.GetKey())] = append([]byte(nil), req.GetValue()...)
	return &etcdserverpb.PutResponse{Header: s.header()}, nil
}

func (s *fakeKV) Range(ctx context.Context, req *etcdserverpb.RangeRequest) (*etcdserverpb.RangeResponse, error) {
	s.f.ranges[s.member].Add(1)
	if req.GetSerializable() {
		s.f.serializable.Add(1)
	}
	key := string(req.GetKey())
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	resp := &etcdserverpb.RangeResponse{Header: s.header()}
	if v, ok := s.f.kv[key]; ok {
		v = append([]byte(nil), v...)
		if key == s.f.corruptKey.Load().(string) {
			v[len(v)/2] ^= 1
		}
		resp.Kvs = []*mvccpb.KeyValue{{Key: req.GetKey(), Value: v, CreateRevision: 1, ModRevision: s.f.rev, Version: 1}}
		resp.Count = 1
	}
	return resp, nil
}

func (f *etcdFake) keys() map[string][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string][]byte, len(f.kv))
	for k, v := range f.kv {
		out[k] = v
	}
	return out
}

func runEtcdCommand(t *testing.T, f *etcdFake, args ...string) (JSONReport, string, string, int) {
	t.Helper()
	out, errOut, code := runCommand(t, nil, append([]string{"--etcd-endpoints", strings.Join(f.addr, ","), "--etcd-conns", "2"}, args...)...)
	var j JSONReport
	if strings.Contains(strings.Join(args, " "), "-o json") {
		if err := json.Unmarshal([]byte(out), &j); err != nil {
			t.Fatalf("%v: %q (stderr %q)", err, out, errOut)
		}
	}
	return j, out, errOut, code
}

func TestEtcdKey(t *testing.T) {
	for g, want := range map[uint64]string{0: "chunkbench/0000000000", 42: "chunkbench/0000000042", 12345678901: "chunkbench/12345678901"} {
		if got := EtcdKey(g); got != want {
			t.Errorf("EtcdKey(%d) = %q, want %q", g, got, want)
		}
	}
}

func TestEtcdBlockMapping(t *testing.T) {
	cfg := Config{Mode: RandWrite, BS: 8 << 10, IODepth: 1, Pool: 1, Copysets: []uint32{3, 5}, Span: ChunkSize + 64<<10, Sn: 1}
	e, err := NewEtcdIO(cfg, EtcdOptions{Endpoints: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	l := newLayout(cfg)
	for g := range l.total {
		a := l.addr(g)
		got, err := e.block(a.id, a.offset)
		if err != nil || got != g {
			t.Fatalf("block of %s+%d = %d, %v; want %d", a.id, a.offset, got, err, g)
		}
	}
	for _, bad := range []struct {
		id  cli.ChunkID
		off uint32
	}{
		{cli.ChunkID{CopysetID: cli.CopysetID{Pool: 1, Copyset: 4}, Chunk: 1}, 0},        // not a copyset of the run
		{cli.ChunkID{CopysetID: cli.CopysetID{Pool: 2, Copyset: 3}, Chunk: 1}, 0},        // wrong pool
		{cli.ChunkID{CopysetID: cli.CopysetID{Pool: 1, Copyset: 3}, Chunk: 0}, 0},        // no chunk 0
		{cli.ChunkID{CopysetID: cli.CopysetID{Pool: 1, Copyset: 3}, Chunk: 2}, 64 << 10}, // past the span
		{cli.ChunkID{CopysetID: cli.CopysetID{Pool: 1, Copyset: 3}, Chunk: 1}, 4 << 10},  // not block-aligned
	} {
		if _, err := e.block(bad.id, bad.off); err == nil {
			t.Errorf("block(%s, %d): no error", bad.id, bad.off)
		}
	}
	if got := e.Conns(); got != DefaultEtcdConns {
		t.Errorf("Conns = %d, want %d", got, DefaultEtcdConns)
	}
	if got, want := e.Keyspace(), "4112 keys chunkbench/0000000000..chunkbench/0000004111"; got != want {
		t.Errorf("Keyspace = %q, want %q", got, want)
	}
}

func TestEtcdCommandWriteJSON(t *testing.T) {
	f := newEtcdFake(t)
	j, out, errOut, code := runEtcdCommand(t, f, "--rw", "randwrite", "--bs", "8k", "--ops", "300", "--iodepth", "4", "--copysets", "1-2", "--span", "256k", "-o", "json")
	if code != ExitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	if j.RW != "randwrite" || j.BS != 8192 || j.IODepth != 4 || j.Ops != 300 || j.Errors != 0 || j.IOPS <= 0 || j.Lat.P99 <= 0 || j.Lat.Max < j.Lat.P50 || j.RuntimeS <= 0 {
		t.Fatalf("report %+v", j)
	}
	if want := j.IOPS * 8192 / 1e6; j.MBPerS < want*0.99 || j.MBPerS > want*1.01 {
		t.Errorf("mb_per_s %v, iops %v", j.MBPerS, j.IOPS)
	}
	// The exact schema: these keys and no others.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	var lat map[string]json.RawMessage
	if err := json.Unmarshal(raw["lat_us"], &lat); err != nil {
		t.Fatal(err)
	}
	if len(raw) != len(jsonReportKeys) || len(lat) != 5 {
		t.Errorf("json keys: %s", out)
	}
	// Every key is a block of the span (2 copysets x 32 blocks of 8 KiB),
	// with a value of --bs bytes; requests went to both members.
	keys := f.keys()
	if len(keys) == 0 || len(keys) > 64 {
		t.Fatalf("%d keys", len(keys))
	}
	for k, v := range keys {
		if !strings.HasPrefix(k, EtcdKeyPrefix) || k > EtcdKey(63) || len(v) != 8192 {
			t.Errorf("key %q, %d bytes", k, len(v))
		}
	}
	p0, p1 := f.puts[0].Load(), f.puts[1].Load()
	if p0+p1 != 300 || p0 < 100 || p1 < 100 {
		t.Errorf("puts per member %d, %d: want 300 spread round robin", p0, p1)
	}
	if f.ranges[0].Load()+f.ranges[1].Load() != 0 {
		t.Error("a write workload read")
	}
	if errOut != "" {
		t.Errorf("stderr: %q", errOut)
	}
}

func TestEtcdCommandReadPrefill(t *testing.T) {
	f := newEtcdFake(t)
	j, out, errOut, code := runEtcdCommand(t, f, "--rw", "randread", "--ops", "200", "--iodepth", "8", "--copysets", "1", "--span", "1m", "--prefill", "-o", "json")
	if code != ExitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	if j.RW != "randread" || j.Ops != 200 || j.Errors != 0 || j.BS != 4096 {
		t.Fatalf("report %+v", j)
	}
	// The prefill put every key of the span once: 256 blocks of 4 KiB.
	if n := len(f.keys()); n != 256 {
		t.Errorf("%d keys after the prefill, want 256", n)
	}
	if p := f.puts[0].Load() + f.puts[1].Load(); p != 256 {
		t.Errorf("%d puts, want 256", p)
	}
	if r := f.ranges[0].Load() + f.ranges[1].Load(); r != 200 || f.serializable.Load() != 0 {
		t.Errorf("%d ranges, %d serializable: want 200 linearizable", r, f.serializable.Load())
	}
	if !strings.Contains(errOut, "prefill: wrote 1MiB") {
		t.Errorf("stderr: %q", errOut)
	}
}

func TestEtcdCommandText(t *testing.T) {
	f := newEtcdFake(t)
	_, out, errOut, code := runEtcdCommand(t, f, "--rw", "randrw", "--ops", "100", "--iodepth", "2", "--copysets", "1", "--span", "64k", "--prefill")
	if code != ExitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"etcd " + f.addr[0] + "," + f.addr[1] + "  4 connections  16 keys chunkbench/0000000000..chunkbench/0000000015", "randrw (70% reads)", "100 ok, 0 errors", "read ", "write "} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}

func TestEtcdCommandVerify(t *testing.T) {
	f := newEtcdFake(t)
	args := []string{"--rw", "randrw", "--rwmixread", "50", "--ops", "400", "--iodepth", "8", "--copysets", "3", "--span", "128k", "--prefill", "--verify"}
	_, out, errOut, code := runEtcdCommand(t, f, args...)
	if code != ExitOK || !strings.Contains(out, ", 0 mismatches") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	// Corrupt what a Range of block 2 (copyset 3, chunk 1, offset 8 KiB)
	// returns: a sequential read of every block once must catch it.
	f.corruptKey.Store(EtcdKey(2))
	args = append(args, "--rw", "read", "--ops", "32", "--iodepth", "1")
	_, out, errOut, code = runEtcdCommand(t, f, args...)
	if code != ExitMismatch || !strings.Contains(out, "MISMATCHES (1; first 1)") || !strings.Contains(out, "copyset 3 chunk 1 offset 8192") || !strings.Contains(errOut, "verify: 1 mismatches") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	// The same through -o json: the report, then the details on stderr.
	j, out, errOut, code := runEtcdCommand(t, f, append(args, "-o", "json")...)
	if code != ExitMismatch || j.Ops != 32 || !strings.Contains(errOut, "1 mismatches") || !strings.Contains(errOut, "offset 8192") {
		t.Fatalf("exit %d %+v\n%s%s", code, j, out, errOut)
	}
}

func TestEtcdCommandErrors(t *testing.T) {
	f := newEtcdFake(t)
	// Reads of keys nobody wrote fail, with a hint.
	_, out, errOut, code := runEtcdCommand(t, f, "--rw", "randread", "--ops", "10", "--copysets", "1", "--span", "64k")
	if code != ExitFailed || !strings.Contains(out, KindEtcdKeyNotFound) || !strings.Contains(out, "run with --prefill") || !strings.Contains(errOut, "10 of 10 operations failed") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	// etcd's errors count by their message.
	f.failPuts.Store(true)
	j, out, errOut, code := runEtcdCommand(t, f, "--rw", "randwrite", "--ops", "20", "--copysets", "1", "--span", "64k", "-o", "json")
	if code != ExitFailed || j.Errors != 20 || j.Ops != 0 || !strings.Contains(errOut, "etcdserver: request timed out") {
		t.Fatalf("exit %d %+v\n%s%s", code, j, out, errOut)
	}
	// A failed prefill fails the run.
	_, out, errOut, code = runEtcdCommand(t, f, "--rw", "randread", "--ops", "20", "--copysets", "1", "--span", "64k", "--prefill")
	if code != ExitFailed || !strings.Contains(errOut, "prefill") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
}

func TestEtcdBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--etcd-endpoints", "nope"},
		{"--etcd-endpoints", ","},
		{"--etcd-endpoints", "127.0.0.1:1,http://127.0.0.1:1"},
		{"--etcd-endpoints", "127.0.0.1:1", "--etcd-conns", "0"},
	} {
		_, errOut, code := runCommand(t, nil, append(args, "--ops", "1")...)
		if code != ExitFailed || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
	eps, tlsWanted, err := ParseEtcdEndpoints(" http://127.0.0.1:2379, https://[::1]:2379/ ,localhost:1")
	if err != nil || tlsWanted != true || strings.Join(eps, " ") != "127.0.0.1:2379 [::1]:2379 localhost:1" {
		t.Errorf("ParseEtcdEndpoints: %v %v %v", eps, tlsWanted, err)
	}
}
