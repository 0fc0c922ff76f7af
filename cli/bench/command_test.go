package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/cli"
	chunkserverpb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	commonpb "github.com/chunkraft/chunkraft/proto/curve/common"
)

// grpcFake is two in-process gRPC servers in front of one fakeIO: server 0
// leads every copyset, but GetLeader names server 1, which redirects to
// server 0. So every copyset costs the client one followed redirect.
type grpcFake struct {
	io    *fakeIO
	ids   [2]string
	addrs []string
	fail  atomic.Value // of chunkserverpb.CHUNK_OP_STATUS: a status every write returns
	// corrupt, when >= 0, is the chunk offset whose reads come back with a
	// flipped bit.
	corrupt atomic.Int64
}

func newGRPCFake(t *testing.T) *grpcFake {
	t.Helper()
	g := &grpcFake{io: newFakeIO()}
	g.fail.Store(chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	g.corrupt.Store(-1)
	var lis [2]net.Listener
	for i := range lis {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis[i] = l
		g.ids[i] = l.Addr().String() + ":0"
		g.addrs = append(g.addrs, l.Addr().String())
	}
	for i := range lis {
		s := grpc.NewServer(grpc.MaxRecvMsgSize(64 << 20))
		chunkserverpb.RegisterChunkServiceServer(s, &fakeChunkService{g: g, leader: i == 0})
		chunkserverpb.RegisterCliService2Server(s, &fakeCliService{g: g})
		go func() { _ = s.Serve(lis[i]) }()
		t.Cleanup(s.Stop)
	}
	return g
}

type fakeCliService struct {
	chunkserverpb.UnimplementedCliService2Server
	g *grpcFake
}

func (s *fakeCliService) GetLeader(ctx context.Context, req *chunkserverpb.GetLeaderRequest2) (*chunkserverpb.GetLeaderResponse2, error) {
	return &chunkserverpb.GetLeaderResponse2{Leader: &commonpb.Peer{Address: proto.String(s.g.ids[1])}}, nil
}

type fakeChunkService struct {
	chunkserverpb.UnimplementedChunkServiceServer
	g      *grpcFake
	leader bool
}

func reply(err error) *chunkserverpb.ChunkResponse {
	st := chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS
	var se *cli.ChunkStatusError
	if errors.As(err, &se) {
		st = se.Status
	} else if err != nil {
		st = chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_FAILURE_UNKNOWN
	}
	return &chunkserverpb.ChunkResponse{Status: &st}
}

func (s *fakeChunkService) redirect() *chunkserverpb.ChunkResponse {
	st := chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_REDIRECTED
	return &chunkserverpb.ChunkResponse{Status: &st, Redirect: proto.String(s.g.ids[0])}
}

func chunkIDOf(req *chunkserverpb.ChunkRequest) cli.ChunkID {
	return cli.ChunkID{CopysetID: cli.CopysetID{Pool: req.GetLogicPoolId(), Copyset: req.GetCopysetId()}, Chunk: req.GetChunkId()}
}

func (s *fakeChunkService) WriteChunk(ctx context.Context, req *chunkserverpb.ChunkRequest) (*chunkserverpb.ChunkResponse, error) {
	if !s.leader {
		return s.redirect(), nil
	}
	if st := s.g.fail.Load().(chunkserverpb.CHUNK_OP_STATUS); st != chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
		return &chunkserverpb.ChunkResponse{Status: &st}, nil
	}
	return reply(s.g.io.WriteChunk(ctx, chunkIDOf(req), req.GetOffset(), req.GetData(), req.GetSn())), nil
}

func (s *fakeChunkService) ReadChunk(ctx context.Context, req *chunkserverpb.ChunkRequest) (*chunkserverpb.ChunkResponse, error) {
	if !s.leader {
		return s.redirect(), nil
	}
	data, err := s.g.io.ReadChunk(ctx, chunkIDOf(req), req.GetOffset(), req.GetSize())
	if err == nil && int64(req.GetOffset()) == s.g.corrupt.Load() {
		data[len(data)/2] ^= 1
	}
	r := reply(err)
	r.Data = data
	return r, nil
}

// runCommand runs chunkbench with args against g and returns stdout,
// stderr and the exit code.
func runCommand(t *testing.T, g *grpcFake, args ...string) (string, string, int) {
	t.Helper()
	cmd := NewCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	if g != nil {
		args = append([]string{"--servers", strings.Join(g.addrs, ",")}, args...)
	}
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	if err != nil && err.Error() != "" {
		errOut.WriteString("chunkbench: " + err.Error() + "\n")
	}
	return out.String(), errOut.String(), ExitCode(err)
}

func TestCommandJSON(t *testing.T) {
	g := newGRPCFake(t)
	out, errOut, code := runCommand(t, g, "--rw", "randwrite", "--ops", "300", "--iodepth", "4", "--copysets", "1-2", "--span", "1m", "-o", "json")
	if code != ExitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	var j JSONReport
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	if j.RW != "randwrite" || j.BS != 4096 || j.IODepth != 4 || j.Ops != 300 || j.Errors != 0 || j.IOPS <= 0 || j.Lat.P99 <= 0 {
		t.Fatalf("report %+v", j)
	}
	// The redirects the client followed are counted, on stderr; no
	// progress lines there, as stderr is not a terminal.
	if !strings.Contains(errOut, "CHUNK_OP_STATUS_REDIRECTED") || strings.Contains(errOut, "ops/s") {
		t.Fatalf("stderr: %q", errOut)
	}
}

func TestCommandVerify(t *testing.T) {
	g := newGRPCFake(t)
	args := []string{"--rw", "randrw", "--rwmixread", "50", "--ops", "400", "--iodepth", "8", "--copysets", "3", "--span", "256k", "--prefill", "--verify"}
	out, errOut, code := runCommand(t, g, args...)
	if code != ExitOK || !strings.Contains(out, ", 0 mismatches") || !strings.Contains(out, "prefill") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	verifyLine := regexp.MustCompile(`(?m)^  verify     (\d+) reads checked against the writes of this run, (\d+) reads of blocks the run did not write, 0 mismatches$`)
	if m := verifyLine.FindStringSubmatch(out); m == nil || m[1] == "0" {
		t.Errorf("verify line:\n%s", out)
	}
	// With -o json the same line goes to stderr.
	if _, errOut, code := runCommand(t, g, append(args, "-o", "json")...); code != ExitOK || !verifyLine.MatchString(errOut) {
		t.Errorf("exit %d, stderr:\n%s", code, errOut)
	}
	// Corrupt whatever is read from one block: exit status 2, details shown.
	g.corrupt.Store(8 << 10)
	args = append(args, "--rw", "read", "--ops", "64", "--iodepth", "1")
	out, errOut, code = runCommand(t, g, args...)
	if code != ExitMismatch || !strings.Contains(out, "MISMATCHES (1; first 1)") || !strings.Contains(out, "offset 8192") || !strings.Contains(errOut, "verify: 1 mismatches") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
}

func TestCommandErrorsExitOne(t *testing.T) {
	g := newGRPCFake(t)
	g.fail.Store(chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_DISK_FAIL)
	out, errOut, code := runCommand(t, g, "--ops", "20", "--copysets", "1", "--span", "1m")
	if code != ExitFailed || !strings.Contains(out, "CHUNK_OP_STATUS_DISK_FAIL") || !strings.Contains(errOut, "20 of 20 operations failed") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	// The JSON report counts them by kind, with the seed and copysets of the run.
	out, errOut, code = runCommand(t, g, "--ops", "20", "--copysets", "2,4-5", "--span", "1m", "--seed", "9", "-o", "json")
	var j JSONReport
	if err := json.Unmarshal([]byte(out), &j); err != nil || code != ExitFailed {
		t.Fatalf("exit %d %v\n%s%s", code, err, out, errOut)
	}
	if j.Errors != 20 || len(j.ErrorsByKind) != 1 || j.ErrorsByKind["CHUNK_OP_STATUS_DISK_FAIL"] != 20 ||
		j.Seed != 9 || j.Pool != 1 || !slices.Equal(j.Copysets, []uint32{2, 4, 5}) {
		t.Errorf("json report %+v", j)
	}
}

func TestCommandBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--rw", "randtrim"},
		{"--bs", "3k"},
		{"--bs", "8m"},
		{"--copysets", "x"},
		{"-o", "yaml"},
		{"--iodepth", "0"},
		{"--span", "0"},
		{"--servers", "nope"},
		{"extra-arg"},
	} {
		_, errOut, code := runCommand(t, nil, append(args, "--ops", "1")...)
		if code != ExitFailed || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
	if ExitCode(nil) != 0 || ExitCode(errors.New("x")) != 1 || ExitCode(&ExitError{Code: 2}) != 2 {
		t.Error("ExitCode")
	}
}

// TestCommandUnknownSubcommand: chunkbench's one group command, completion,
// refuses an unknown shell with one line (cobra prints help and exits 0),
// and stays out of chunkbench's help.
func TestCommandUnknownSubcommand(t *testing.T) {
	out, errOut, code := runCommand(t, nil, "completion", "frob")
	want := `chunkbench: unknown command "frob" for "chunkbench completion"; want one of bash, fish, powershell, zsh` + "\n"
	if code != ExitFailed || errOut != want || out != "" {
		t.Errorf("completion frob: exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	if out, _, code := runCommand(t, nil, "--help"); code != ExitOK || strings.Contains(out, "completion") {
		t.Errorf("--help: exit %d, mentions completion:\n%s", code, out)
	}
}
