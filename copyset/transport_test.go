package copyset

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/proto/chunkraft/raftpb"
)

// trRPCCounter counts inbound RPCs per full method name and, for client
// streams, the messages received.
type trRPCCounter struct {
	mu    sync.Mutex
	calls map[string]int
	msgs  map[string]int
}

func (c *trRPCCounter) add(m map[string]int, method string) {
	c.mu.Lock()
	m[method]++
	c.mu.Unlock()
}

func (c *trRPCCounter) Calls(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls["/chunkraft.raft.RaftTransport/"+method]
}

func (c *trRPCCounter) Msgs(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.msgs["/chunkraft.raft.RaftTransport/"+method]
}

type trCountingStream struct {
	grpc.ServerStream
	c      *trRPCCounter
	method string
}

func (s *trCountingStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.c.add(s.c.msgs, s.method)
	}
	return err
}

// trNode is one "server process": a gRPC server on 127.0.0.1:0 with a
// TransportManager registered on it.
type trNode struct {
	addr   raft.ServerAddress
	m      *TransportManager
	srv    *grpc.Server
	served chan struct{}
	rpcs   *trRPCCounter
	once   sync.Once
}

func trLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func trStartNode(t *testing.T, opts TransportOptions) *trNode {
	t.Helper()
	return trStartNodeWith(t, opts, nil)
}

// trStartNodeWith starts a node whose RaftTransport service is
// wrap(its transport server) (a peer of an older version), or the
// manager's own when wrap is nil.
func trStartNodeWith(t *testing.T, opts TransportOptions, wrap func(*transportServer) raftpb.RaftTransportServer) *trNode {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if opts.Logger == nil {
		opts.Logger = trLogger()
	}
	n := &trNode{
		addr:   raft.ServerAddress(lis.Addr().String()),
		served: make(chan struct{}),
		rpcs:   &trRPCCounter{calls: map[string]int{}, msgs: map[string]int{}},
	}
	n.m = NewTransportManager(n.addr, opts)
	n.srv = grpc.NewServer(
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			n.rpcs.add(n.rpcs.calls, info.FullMethod)
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			n.rpcs.add(n.rpcs.calls, info.FullMethod)
			return h(srv, &trCountingStream{ServerStream: ss, c: n.rpcs, method: info.FullMethod})
		}),
	)
	if wrap != nil {
		raftpb.RegisterRaftTransportServer(n.srv, wrap(&transportServer{m: n.m}))
	} else {
		n.m.Register(n.srv)
	}
	go func() {
		defer close(n.served)
		_ = n.srv.Serve(lis)
	}()
	t.Cleanup(n.stop)
	return n
}

func (n *trNode) stop() {
	n.once.Do(func() {
		_ = n.m.Close()
		n.srv.Stop()
		<-n.served
	})
}

func trTransport(t *testing.T, n *trNode, group uint64) *GroupTransport {
	t.Helper()
	g, err := n.m.Transport(group)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// trFakeRaft answers every RPC of a group transport from a goroutine the test
// owns. answer returns the response and error for one RPC; a nil answer
// parks the RPC on held instead.
type trFakeRaft struct {
	held chan raft.RPC
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

func trStartFakeRaft(g *GroupTransport, answer func(rpc raft.RPC) (any, error, bool)) *trFakeRaft {
	f := &trFakeRaft{held: make(chan raft.RPC, 64), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(f.done)
		for {
			select {
			case rpc := <-g.Consumer():
				if answer == nil {
					f.held <- rpc
					continue
				}
				resp, err, ok := answer(rpc)
				if !ok {
					f.held <- rpc
					continue
				}
				rpc.Respond(resp, err)
			case <-f.stop:
				return
			}
		}
	}()
	return f
}

func (f *trFakeRaft) Stop() {
	f.once.Do(func() { close(f.stop) })
	<-f.done
}

func (f *trFakeRaft) next(t *testing.T) raft.RPC {
	t.Helper()
	select {
	case rpc := <-f.held:
		return rpc
	case <-time.After(5 * time.Second):
		t.Fatal("no RPC reached raft")
		return raft.RPC{}
	}
}

func trHeader(addr raft.ServerAddress) raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("leader"), Addr: []byte(addr)}
}

// within fails the test unless fn returns within d.
func trWithin(t *testing.T, d time.Duration, what string, fn func()) {
	t.Helper()
	start := time.Now()
	fn()
	if el := time.Since(start); el > d {
		t.Fatalf("%s took %v, want < %v", what, el, d)
	}
}

func TestTransportLogConversion(t *testing.T) {
	now := time.Now()
	in := []*raft.Log{
		{Index: 7, Term: 3, Type: raft.LogCommand, Data: []byte("payload"), Extensions: []byte("ext"), AppendedAt: now},
		{Index: 8, Term: 3, Type: raft.LogConfiguration, Data: []byte{1, 2}},
		{Index: 9, Term: 4, Type: raft.LogBarrier},
	}
	wire := logsToProto(in)
	if &wire[0].Data[0] != &in[0].Data[0] {
		t.Error("logsToProto copied entry data")
	}
	b, err := proto.Marshal(&raftpb.AppendEntriesRequest{Entries: wire})
	if err != nil {
		t.Fatal(err)
	}
	var back raftpb.AppendEntriesRequest
	if err := proto.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	out := logsFromProto(back.Entries)
	if len(out) != len(in) {
		t.Fatalf("got %d entries", len(out))
	}
	for i := range in {
		a, b := in[i], out[i]
		if a.Index != b.Index || a.Term != b.Term || a.Type != b.Type ||
			!bytes.Equal(a.Data, b.Data) || !bytes.Equal(a.Extensions, b.Extensions) ||
			!a.AppendedAt.Equal(b.AppendedAt) {
			t.Errorf("entry %d: got %+v want %+v", i, b, a)
		}
	}
	if !out[1].AppendedAt.IsZero() || wire[1].AppendedAt != 0 {
		t.Error("zero AppendedAt not mapped to 0 and back")
	}
	if logsToProto(nil) != nil || logsFromProto(nil) != nil {
		t.Error("empty entries should stay nil")
	}
}

func TestTransportUnknownGroup(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	a := trStartNode(t, TransportOptions{})
	b := trStartNode(t, TransportOptions{})
	ga := trTransport(t, a, 1)
	trTransport(t, b, 2) // b serves another group only

	trWithin(t, 2*time.Second, "AppendEntries to unknown group", func() {
		err := ga.AppendEntries("b", b.addr, &raft.AppendEntriesRequest{RPCHeader: trHeader(a.addr), Term: 1, PrevLogEntry: 1}, &raft.AppendEntriesResponse{})
		if status.Code(err) != codes.NotFound {
			t.Errorf("AppendEntries: got %v, want NotFound", err)
		}
	})
	trWithin(t, 2*time.Second, "heartbeat to unknown group", func() {
		err := ga.AppendEntries("b", b.addr, &raft.AppendEntriesRequest{RPCHeader: trHeader(a.addr), Term: 1}, &raft.AppendEntriesResponse{})
		if status.Code(err) != codes.NotFound {
			t.Errorf("heartbeat: got %v, want NotFound", err)
		}
	})
	trWithin(t, 2*time.Second, "RequestVote to unknown group", func() {
		err := ga.RequestVote("b", b.addr, &raft.RequestVoteRequest{RPCHeader: trHeader(a.addr), Term: 1}, &raft.RequestVoteResponse{})
		if status.Code(err) != codes.NotFound {
			t.Errorf("RequestVote: got %v, want NotFound", err)
		}
	})
	trWithin(t, 2*time.Second, "RequestPreVote to unknown group", func() {
		err := ga.RequestPreVote("b", b.addr, &raft.RequestPreVoteRequest{RPCHeader: trHeader(a.addr), Term: 1}, &raft.RequestPreVoteResponse{})
		if status.Code(err) != codes.NotFound {
			t.Errorf("RequestPreVote: got %v, want NotFound", err)
		}
	})
	trWithin(t, 2*time.Second, "TimeoutNow to unknown group", func() {
		err := ga.TimeoutNow("b", b.addr, &raft.TimeoutNowRequest{RPCHeader: trHeader(a.addr)}, &raft.TimeoutNowResponse{})
		if status.Code(err) != codes.NotFound {
			t.Errorf("TimeoutNow: got %v, want NotFound", err)
		}
	})
	trWithin(t, 2*time.Second, "InstallSnapshot to unknown group", func() {
		data := bytes.Repeat([]byte{1}, 100)
		err := ga.InstallSnapshot("b", b.addr, &raft.InstallSnapshotRequest{RPCHeader: trHeader(a.addr), Term: 1, Size: int64(len(data))}, &raft.InstallSnapshotResponse{}, bytes.NewReader(data))
		if status.Code(err) != codes.NotFound {
			t.Errorf("InstallSnapshot: got %v, want NotFound", err)
		}
	})
	trWithin(t, 2*time.Second, "pipeline to unknown group", func() {
		p, err := ga.AppendEntriesPipeline("b", b.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		req := &raft.AppendEntriesRequest{RPCHeader: trHeader(a.addr), Term: 1, PrevLogEntry: 1, PrevLogTerm: 1}
		if _, err := p.AppendEntries(req, &raft.AppendEntriesResponse{}); err != nil {
			t.Fatal(err) // the send itself succeeds; the failure comes with the reply
		}
		select {
		case f := <-p.Consumer():
			if err := f.Error(); status.Code(err) != codes.NotFound {
				t.Errorf("pipelined future: got %v, want NotFound", err)
			}
			if f.Response().Success {
				t.Error("failed future reports success")
			}
		case <-time.After(2 * time.Second):
			t.Fatal("pipelined future not delivered")
		}
		if _, err := p.AppendEntries(req, &raft.AppendEntriesResponse{}); err == nil {
			t.Error("AppendEntries on a failed pipeline succeeded")
		}
	})
	a.stop()
	b.stop()
}

func TestTransportClosedGroup(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	a := trStartNode(t, TransportOptions{})
	b := trStartNode(t, TransportOptions{})
	ga := trTransport(t, a, 1)
	gb := trTransport(t, b, 1)
	fb := trStartFakeRaft(gb, nil) // holds every RPC unanswered

	// An inbound RPC waiting on raft fails as soon as the group closes.
	errc := make(chan error, 1)
	go func() {
		errc <- ga.RequestVote("b", b.addr, &raft.RequestVoteRequest{RPCHeader: trHeader(a.addr), Term: 2}, &raft.RequestVoteResponse{})
	}()
	fb.next(t)
	fb.Stop()
	if err := gb.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if status.Code(err) != codes.Unavailable {
			t.Errorf("in-flight RPC on closed group: got %v, want Unavailable", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("in-flight RPC did not fail when its group closed")
	}

	// Later inbound RPCs fail at once.
	trWithin(t, 2*time.Second, "RPC to closed group", func() {
		err := ga.AppendEntries("b", b.addr, &raft.AppendEntriesRequest{RPCHeader: trHeader(a.addr), Term: 2, PrevLogEntry: 3}, &raft.AppendEntriesResponse{})
		if status.Code(err) != codes.NotFound {
			t.Errorf("got %v, want NotFound", err)
		}
	})
	if err := gb.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	// The group id can be registered again.
	gb2 := trTransport(t, b, 1)
	if _, err := b.m.Transport(1); !errors.Is(err, ErrGroupExists) {
		t.Errorf("second Transport(1): got %v, want ErrGroupExists", err)
	}
	_ = gb2.Close()

	// An outbound call in flight when the local group closes, and every
	// outbound call after, returns ErrTransportShutdown.
	gb3 := trTransport(t, b, 1)
	fb3 := trStartFakeRaft(gb3, nil)
	go func() {
		errc <- ga.RequestVote("b", b.addr, &raft.RequestVoteRequest{RPCHeader: trHeader(a.addr), Term: 3}, &raft.RequestVoteResponse{})
	}()
	fb3.next(t)
	p, err := ga.AppendEntriesPipeline("b", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := ga.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, raft.ErrTransportShutdown) {
			t.Errorf("in-flight outbound RPC: got %v, want ErrTransportShutdown", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("in-flight outbound RPC did not return when the group closed")
	}
	if _, err := p.AppendEntries(&raft.AppendEntriesRequest{Term: 3}, &raft.AppendEntriesResponse{}); !errors.Is(err, raft.ErrTransportShutdown) {
		t.Errorf("pipeline after close: got %v", err)
	}
	_ = p.Close()
	checks := map[string]error{
		"AppendEntries":  ga.AppendEntries("b", b.addr, &raft.AppendEntriesRequest{Term: 1}, &raft.AppendEntriesResponse{}),
		"RequestVote":    ga.RequestVote("b", b.addr, &raft.RequestVoteRequest{Term: 1}, &raft.RequestVoteResponse{}),
		"RequestPreVote": ga.RequestPreVote("b", b.addr, &raft.RequestPreVoteRequest{Term: 1}, &raft.RequestPreVoteResponse{}),
		"TimeoutNow":     ga.TimeoutNow("b", b.addr, &raft.TimeoutNowRequest{}, &raft.TimeoutNowResponse{}),
		"InstallSnapshot": ga.InstallSnapshot("b", b.addr, &raft.InstallSnapshotRequest{Size: 1}, &raft.InstallSnapshotResponse{},
			bytes.NewReader([]byte{1})),
	}
	for name, err := range checks {
		if !errors.Is(err, raft.ErrTransportShutdown) {
			t.Errorf("%s after Close: got %v, want ErrTransportShutdown", name, err)
		}
	}
	if _, err := ga.AppendEntriesPipeline("b", b.addr); !errors.Is(err, raft.ErrTransportShutdown) {
		t.Errorf("AppendEntriesPipeline after Close: got %v", err)
	}
	fb3.Stop()
	a.stop()
	b.stop()
	if _, err := a.m.Transport(5); !errors.Is(err, raft.ErrTransportShutdown) {
		t.Errorf("Transport after manager Close: got %v", err)
	}
}

func TestTransportHeartbeatFastPath(t *testing.T) {
	t.Run("batched", func(t *testing.T) { testTransportHeartbeatFastPath(t, TransportOptions{}) })
	t.Run("single", func(t *testing.T) { testTransportHeartbeatFastPath(t, TransportOptions{NoHeartbeatBatching: true}) })
}

func testTransportHeartbeatFastPath(t *testing.T, opts TransportOptions) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	a := trStartNode(t, opts)
	b := trStartNode(t, opts)
	ga := trTransport(t, a, 9)
	gb := trTransport(t, b, 9)

	var heartbeats atomic.Int32
	gb.SetHeartbeatHandler(func(rpc raft.RPC) {
		req := rpc.Command.(*raft.AppendEntriesRequest)
		heartbeats.Add(1)
		rpc.Respond(&raft.AppendEntriesResponse{Term: req.Term, Success: true, LastLog: 42}, nil)
	})
	var consumed atomic.Int32
	var got atomic.Pointer[raft.AppendEntriesRequest]
	fb := trStartFakeRaft(gb, func(rpc raft.RPC) (any, error, bool) {
		consumed.Add(1)
		req := rpc.Command.(*raft.AppendEntriesRequest)
		got.Store(req)
		return &raft.AppendEntriesResponse{Term: req.Term, Success: true, LastLog: 7}, nil, true
	})
	defer fb.Stop()

	hb := &raft.AppendEntriesRequest{RPCHeader: trHeader(a.addr), Term: 5}
	var resp raft.AppendEntriesResponse
	if err := ga.AppendEntries("b", b.addr, hb, &resp); err != nil {
		t.Fatal(err)
	}
	if heartbeats.Load() != 1 || consumed.Load() != 0 || resp.LastLog != 42 || !resp.Success || resp.Term != 5 {
		t.Fatalf("heartbeat: handler=%d consumer=%d resp=%+v", heartbeats.Load(), consumed.Load(), resp)
	}

	// Not heartbeats: entries, or a commit index, or no leader address.
	appended := time.Unix(1700000000, 123)
	notHB := []*raft.AppendEntriesRequest{
		{RPCHeader: trHeader(a.addr), Term: 5, PrevLogEntry: 1, PrevLogTerm: 1, LeaderCommitIndex: 1,
			Entries: []*raft.Log{{Index: 2, Term: 5, Type: raft.LogCommand, Data: []byte("x"), Extensions: []byte("e"), AppendedAt: appended}}},
		{RPCHeader: trHeader(a.addr), Term: 5, LeaderCommitIndex: 3},
		{Term: 5},
	}
	for i, req := range notHB {
		if err := ga.AppendEntries("b", b.addr, req, &resp); err != nil {
			t.Fatal(err)
		}
		if resp.LastLog != 7 {
			t.Errorf("request %d: not answered by the consumer: %+v", i, resp)
		}
	}
	if heartbeats.Load() != 1 || consumed.Load() != int32(len(notHB)) {
		t.Fatalf("handler=%d consumer=%d", heartbeats.Load(), consumed.Load())
	}
	// The entry crossed the wire intact (the last request had none; check the
	// first by resending it).
	if err := ga.AppendEntries("b", b.addr, notHB[0], &resp); err != nil {
		t.Fatal(err)
	}
	e := got.Load().Entries
	if len(e) != 1 || e[0].Index != 2 || e[0].Type != raft.LogCommand || string(e[0].Data) != "x" ||
		string(e[0].Extensions) != "e" || !e[0].AppendedAt.Equal(appended) {
		t.Errorf("entry after the wire: %+v", e)
	}

	// Without a handler (raft not running yet), a single heartbeat goes to
	// the consumer; a batched one is refused at once.
	gb.SetHeartbeatHandler(nil)
	err := ga.AppendEntries("b", b.addr, hb, &resp)
	if opts.NoHeartbeatBatching {
		if err != nil {
			t.Fatal(err)
		}
		if heartbeats.Load() != 1 || resp.LastLog != 7 {
			t.Errorf("heartbeat without handler: handler=%d resp=%+v", heartbeats.Load(), resp)
		}
	} else if status.Code(err) != codes.Unavailable || consumed.Load() != int32(len(notHB))+1 {
		t.Errorf("batched heartbeat without handler: got %v, consumer=%d", err, consumed.Load())
	}

	// A raft-level error travels with the response.
	gb.SetHeartbeatHandler(func(rpc raft.RPC) {
		rpc.Respond(&raft.AppendEntriesResponse{Term: 9}, errors.New("boom"))
	})
	err = ga.AppendEntries("b", b.addr, hb, &resp)
	if err == nil || err.Error() != "boom" || resp.Term != 9 {
		t.Errorf("raft error: got %v, resp %+v", err, resp)
	}
	fb.Stop()
	a.stop()
	b.stop()
}

// TestTransportPipeline: a pipeline on the peer's shared stream and one on
// a stream of its own keep MaxPipelineInFlight requests outstanding,
// deliver futures in request order, and fail them all when the remote
// group closes.
func TestTransportPipeline(t *testing.T) {
	t.Run("shared stream", func(t *testing.T) { testTransportPipeline(t, false) })
	t.Run("own stream", func(t *testing.T) { testTransportPipeline(t, true) })
}

func testTransportPipeline(t *testing.T, own bool) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const inflight = 3
	a := trStartNode(t, TransportOptions{MaxPipelineInFlight: inflight, NoAppendBatching: own})
	b := trStartNode(t, TransportOptions{MaxPipelineInFlight: inflight})
	ga := trTransport(t, a, 3)
	gb := trTransport(t, b, 3)
	fb := trStartFakeRaft(gb, nil)

	p, err := ga.AppendEntriesPipeline("b", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	req := func(i uint64) *raft.AppendEntriesRequest {
		return &raft.AppendEntriesRequest{RPCHeader: trHeader(a.addr), Term: 1, PrevLogEntry: i, PrevLogTerm: 1, LeaderCommitIndex: i,
			Entries: []*raft.Log{{Index: i + 1, Term: 1, Data: []byte{byte(i)}}}}
	}
	for i := uint64(1); i <= inflight; i++ {
		if _, err := p.AppendEntries(req(i), &raft.AppendEntriesResponse{}); err != nil {
			t.Fatal(err)
		}
	}
	// The next send blocks: inflight requests are outstanding.
	sent := make(chan error, 1)
	go func() {
		_, err := p.AppendEntries(req(inflight+1), &raft.AppendEntriesResponse{})
		sent <- err
	}()
	var rpcs []raft.RPC
	for i := uint64(1); i <= inflight; i++ {
		rpc := fb.next(t)
		if got := rpc.Command.(*raft.AppendEntriesRequest).PrevLogEntry; got != i {
			t.Fatalf("raft got request %d, want %d (order)", got, i)
		}
		rpcs = append(rpcs, rpc)
	}
	select {
	case err := <-sent:
		t.Fatalf("request %d sent with %d in flight (err %v)", inflight+1, inflight, err)
	case <-time.After(200 * time.Millisecond):
	}
	// Answer out of order: the futures still come back in request order.
	for i := len(rpcs) - 1; i >= 0; i-- {
		cmd := rpcs[i].Command.(*raft.AppendEntriesRequest)
		rpcs[i].Respond(&raft.AppendEntriesResponse{Term: 1, Success: true, LastLog: cmd.PrevLogEntry + 1}, nil)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	rpc := fb.next(t)
	rpc.Respond(&raft.AppendEntriesResponse{Term: 1, Success: true, LastLog: inflight + 2}, nil)
	for i := uint64(1); i <= inflight+1; i++ {
		select {
		case f := <-p.Consumer():
			if err := f.Error(); err != nil {
				t.Fatal(err)
			}
			if f.Request().PrevLogEntry != i || f.Response().LastLog != i+1 || !f.Response().Success || f.Start().IsZero() {
				t.Fatalf("future %d: req %d resp %+v", i, f.Request().PrevLogEntry, f.Response())
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("future %d not delivered", i)
		}
	}

	// A stream failure (the remote group closes) fails the outstanding
	// futures and the pipeline.
	for i := uint64(10); i < 12; i++ {
		if _, err := p.AppendEntries(req(i), &raft.AppendEntriesResponse{}); err != nil {
			t.Fatal(err)
		}
	}
	fb.next(t) // the first reached raft and is held
	fb.Stop()
	_ = gb.Close()
	for i := 0; i < 2; i++ {
		select {
		case f := <-p.Consumer():
			if err := f.Error(); status.Code(err) != codes.Unavailable {
				t.Errorf("outstanding future %d: got %v, want Unavailable", i, err)
			}
			if f.Response().Success {
				t.Error("failed future reports success")
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("outstanding future %d not failed", i)
		}
	}
	if _, err := p.AppendEntries(req(20), &raft.AppendEntriesResponse{}); err == nil {
		t.Error("AppendEntries on a failed pipeline succeeded")
	}
	trWithin(t, 2*time.Second, "pipeline Close", func() { _ = p.Close() })
	if _, err := p.AppendEntries(req(21), &raft.AppendEntriesResponse{}); err == nil {
		t.Error("AppendEntries on a closed pipeline succeeded")
	}

	// Close with requests outstanding returns promptly.
	gb2 := trTransport(t, b, 3)
	fb2 := trStartFakeRaft(gb2, nil)
	p2, err := ga.AppendEntriesPipeline("b", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p2.AppendEntries(req(1), &raft.AppendEntriesResponse{}); err != nil {
		t.Fatal(err)
	}
	fb2.next(t)
	trWithin(t, 2*time.Second, "pipeline Close with outstanding requests", func() { _ = p2.Close() })
	if _, err := p2.AppendEntries(req(2), &raft.AppendEntriesResponse{}); !errors.Is(err, raft.ErrPipelineShutdown) {
		t.Errorf("after Close: got %v, want ErrPipelineShutdown", err)
	}
	fb2.Stop()
	a.stop()
	b.stop()
}

func TestTransportInstallSnapshotStream(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const chunk = 4 << 10
	a := trStartNode(t, TransportOptions{SnapshotChunkSize: chunk})
	b := trStartNode(t, TransportOptions{SnapshotChunkSize: chunk})
	ga := trTransport(t, a, 4)
	gb := trTransport(t, b, 4)

	var received atomic.Pointer[[]byte]
	fb := trStartFakeRaft(gb, func(rpc raft.RPC) (any, error, bool) {
		req, ok := rpc.Command.(*raft.InstallSnapshotRequest)
		if !ok {
			return nil, errors.New("unexpected command"), true
		}
		data, err := io.ReadAll(rpc.Reader)
		received.Store(&data)
		if err != nil {
			return nil, err, true
		}
		if int64(len(data)) != req.Size {
			return nil, errors.New("short read"), true
		}
		return &raft.InstallSnapshotResponse{Term: req.Term, Success: true}, nil, true
	})
	defer fb.Stop()

	data := make([]byte, 5*chunk+123)
	for i := range data {
		data[i] = byte(i * 31)
	}
	args := &raft.InstallSnapshotRequest{RPCHeader: trHeader(a.addr), Term: 4, LastLogIndex: 100, LastLogTerm: 3,
		Configuration: []byte("cfg"), ConfigurationIndex: 1, Size: int64(len(data))}
	var resp raft.InstallSnapshotResponse
	// The reader holds more than Size: exactly Size bytes must be sent.
	src := io.MultiReader(bytes.NewReader(data), strings.NewReader("trailing garbage"))
	if err := ga.InstallSnapshot("b", b.addr, args, &resp, src); err != nil {
		t.Fatal(err)
	}
	if !resp.Success || resp.Term != 4 {
		t.Fatalf("response %+v", resp)
	}
	if got := received.Load(); got == nil || !bytes.Equal(*got, data) {
		t.Fatal("snapshot data corrupted")
	}
	if msgs := b.rpcs.Msgs("InstallSnapshot"); msgs != 6 {
		t.Errorf("snapshot sent in %d messages, want 6", msgs)
	}

	// A source shorter than Size aborts the stream; raft never sees a
	// complete snapshot.
	received.Store(nil)
	short := &raft.InstallSnapshotRequest{RPCHeader: trHeader(a.addr), Term: 4, Size: int64(len(data) + 1)}
	if err := ga.InstallSnapshot("b", b.addr, short, &resp, bytes.NewReader(data)); err == nil {
		t.Fatal("short snapshot source: no error")
	}

	// An empty snapshot is one message.
	empty := &raft.InstallSnapshotRequest{RPCHeader: trHeader(a.addr), Term: 4}
	if err := ga.InstallSnapshot("b", b.addr, empty, &resp, bytes.NewReader(nil)); err != nil || !resp.Success {
		t.Fatalf("empty snapshot: %v %+v", err, resp)
	}
	fb.Stop()
	a.stop()
	b.stop()
}
