package copyset

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chunkraft/chunkraft/internal/testwait"
	"github.com/chunkraft/chunkraft/proto/chunkraft/raftpb"
)

// trHeartbeatHandler answers every heartbeat of g with LastLog = want.
func trHeartbeatHandler(g *GroupTransport, lastLog uint64, count *atomic.Int32) {
	g.SetHeartbeatHandler(func(rpc raft.RPC) {
		req := rpc.Command.(*raft.AppendEntriesRequest)
		if count != nil {
			count.Add(1)
		}
		rpc.Respond(&raft.AppendEntriesResponse{Term: req.Term, Success: true, LastLog: lastLog}, nil)
	})
}

func TestTransportHeartbeatBatches(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	opts := TransportOptions{HeartbeatBatchWindow: 50 * time.Millisecond}
	a := trStartNode(t, opts)
	b := trStartNode(t, opts)
	const groups = 64
	var handled atomic.Int32
	senders := make([]*GroupTransport, groups)
	for i := range groups {
		senders[i] = trTransport(t, a, uint64(i+1))
		trHeartbeatHandler(trTransport(t, b, uint64(i+1)), uint64(1000+i), &handled)
	}

	// A first heartbeat goes out at once, the ones that follow within the
	// window share a batch.
	send := func(i int) error {
		var resp raft.AppendEntriesResponse
		req := &raft.AppendEntriesRequest{RPCHeader: trHeader(a.addr), Term: 4}
		if err := senders[i].AppendEntries("b", b.addr, req, &resp); err != nil {
			return err
		}
		if !resp.Success || resp.Term != 4 || resp.LastLog != uint64(1000+i) {
			return errors.New("wrong response")
		}
		return nil
	}
	trWithin(t, 40*time.Millisecond, "first heartbeat", func() {
		if err := send(0); err != nil {
			t.Fatal(err)
		}
	})
	for round := range 3 {
		var wg sync.WaitGroup
		errs := make(chan error, groups)
		for i := range groups {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := send(i); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	if got, want := handled.Load(), int32(1+3*groups); got != want {
		t.Errorf("handled %d heartbeats, want %d", got, want)
	}
	if n := b.rpcs.Calls("Heartbeats"); n != 1 {
		t.Errorf("%d Heartbeats streams, want 1", n)
	}
	if n := b.rpcs.Calls("AppendEntries"); n != 0 {
		t.Errorf("%d single AppendEntries calls, want 0", n)
	}
	// 3 rounds of 64 within a 50ms window each take a few batches at most.
	if n := b.rpcs.Msgs("Heartbeats"); n > 1+3*4 {
		t.Errorf("%d heartbeat batches for %d heartbeats", n, handled.Load())
	}
	a.stop()
	b.stop()
}

func TestTransportHeartbeatErrors(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	opts := TransportOptions{HeartbeatTimeout: 300 * time.Millisecond}
	a := trStartNode(t, opts)
	b := trStartNode(t, opts)
	ga := trTransport(t, a, 1)
	ga2 := trTransport(t, a, 2)
	gb := trTransport(t, b, 1)
	gb2 := trTransport(t, b, 2)
	trHeartbeatHandler(gb2, 1, nil)
	hb := func() *raft.AppendEntriesRequest {
		return &raft.AppendEntriesRequest{RPCHeader: trHeader(a.addr), Term: 2}
	}

	// A stuck peer: the heartbeat fails after HeartbeatTimeout, and so does
	// the heartbeat of another group queued behind it.
	release, stuck := make(chan struct{}), make(chan struct{})
	var once sync.Once
	gb.SetHeartbeatHandler(func(rpc raft.RPC) {
		once.Do(func() { close(stuck); <-release })
		rpc.Respond(&raft.AppendEntriesResponse{Term: 2, Success: true}, nil)
	})
	errc := make(chan error, 2)
	go func() { errc <- ga.AppendEntries("b", b.addr, hb(), &raft.AppendEntriesResponse{}) }()
	select { // the first heartbeat is held at the peer
	case <-stuck:
	case <-time.After(5 * time.Second):
		t.Fatal("the first heartbeat did not reach the peer")
	}
	go func() { errc <- ga2.AppendEntries("b", b.addr, hb(), &raft.AppendEntriesResponse{}) }()
	for range 2 {
		select {
		case err := <-errc:
			if err == nil {
				t.Error("heartbeat to a stuck peer succeeded")
			}
		case <-time.After(2 * time.Second):
			t.Fatal("heartbeat to a stuck peer did not time out")
		}
	}
	close(release)
	// The next heartbeat opens a new stream.
	if err := ga.AppendEntries("b", b.addr, hb(), &raft.AppendEntriesResponse{}); err != nil {
		t.Fatalf("heartbeat after the peer recovered: %v", err)
	}
	if n := b.rpcs.Calls("Heartbeats"); n != 2 {
		t.Errorf("%d Heartbeats streams, want 2", n)
	}

	// A heartbeat of a group that closes while it waits returns at once.
	block, waiting := make(chan struct{}), make(chan struct{})
	var entered sync.Once
	gb2.SetHeartbeatHandler(func(rpc raft.RPC) {
		entered.Do(func() { close(waiting) })
		<-block
		rpc.Respond(&raft.AppendEntriesResponse{Term: 2, Success: true}, nil)
	})
	go func() { errc <- ga2.AppendEntries("b", b.addr, hb(), &raft.AppendEntriesResponse{}) }()
	select { // the heartbeat reached the peer and waits for its answer
	case <-waiting:
	case <-time.After(5 * time.Second):
		t.Fatal("the heartbeat of the closing group did not reach the peer")
	}
	_ = ga2.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, raft.ErrTransportShutdown) {
			t.Errorf("heartbeat of a closed group: got %v", err)
		}
	case <-time.After(time.Second):
		t.Fatal("heartbeat of a closed group did not return")
	}
	close(block)

	// A peer that went away: heartbeats fail; once it is back on the same
	// address they succeed again.
	addr := b.addr
	b.stop()
	if err := ga.AppendEntries("b", addr, hb(), &raft.AppendEntriesResponse{}); err == nil {
		t.Error("heartbeat to a stopped peer succeeded")
	}
	lis, err := net.Listen("tcp", string(addr))
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addr, err)
	}
	m := NewTransportManager(addr, TransportOptions{Logger: trLogger()})
	srv := grpc.NewServer()
	m.Register(srv)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	defer func() {
		_ = m.Close()
		srv.Stop()
		<-served
	}()
	g, err := m.Transport(1)
	if err != nil {
		t.Fatal(err)
	}
	trHeartbeatHandler(g, 77, nil)
	testwait.Until(t, 5*time.Second, func() error {
		var resp raft.AppendEntriesResponse
		if err := ga.AppendEntries("b", addr, hb(), &resp); err != nil || resp.LastLog != 77 {
			return fmt.Errorf("heartbeats did not recover after the peer restarted: %v (last log %d)", err, resp.LastLog)
		}
		return nil
	})
	a.stop()
}

// trLegacyServer is a peer of an older version: no Heartbeats method.
type trLegacyServer struct {
	*transportServer
}

func (trLegacyServer) Heartbeats(grpc.BidiStreamingServer[raftpb.HeartbeatBatch, raftpb.HeartbeatBatchResponse]) error {
	return status.Error(codes.Unimplemented, "method Heartbeats not implemented")
}

func TestTransportHeartbeatLegacyPeer(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	a := trStartNode(t, TransportOptions{})
	b := trStartNodeWith(t, TransportOptions{}, func(s *transportServer) raftpb.RaftTransportServer { return trLegacyServer{s} })
	addr, m, rpcs := b.addr, b.m, b.rpcs
	g, err := m.Transport(1)
	if err != nil {
		t.Fatal(err)
	}
	trHeartbeatHandler(g, 5, nil)
	ga := trTransport(t, a, 1)
	for i := range 3 {
		var resp raft.AppendEntriesResponse
		err := ga.AppendEntries("b", addr, &raft.AppendEntriesRequest{RPCHeader: trHeader(a.addr), Term: 1}, &resp)
		if err != nil || resp.LastLog != 5 {
			t.Fatalf("heartbeat %d to a legacy peer: %v %+v", i, err, resp)
		}
	}
	if n := rpcs.Calls("Heartbeats"); n != 1 {
		t.Errorf("%d Heartbeats streams tried, want 1", n)
	}
	if n := rpcs.Calls("AppendEntries"); n != 3 {
		t.Errorf("%d single AppendEntries calls, want 3", n)
	}
	a.stop()
	b.stop()
}

func TestTransportPipelineIdleRepeats(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const hold = 300 * time.Millisecond
	a := trStartNode(t, TransportOptions{IdleAppendHold: hold})
	b := trStartNode(t, TransportOptions{})
	ga := trTransport(t, a, 3)
	gb := trTransport(t, b, 3)
	var reached atomic.Int32
	fb := trStartFakeRaft(gb, func(rpc raft.RPC) (any, error, bool) {
		n := reached.Add(1)
		req := rpc.Command.(*raft.AppendEntriesRequest)
		last := req.PrevLogEntry + uint64(len(req.Entries))
		return &raft.AppendEntriesResponse{Term: 1, Success: true, LastLog: last*100 + uint64(n)}, nil, true
	})
	defer fb.Stop()
	var hbTerm atomic.Uint64
	hbTerm.Store(1)
	gb.SetHeartbeatHandler(func(rpc raft.RPC) {
		req := rpc.Command.(*raft.AppendEntriesRequest)
		term := hbTerm.Load()
		rpc.Respond(&raft.AppendEntriesResponse{Term: term, Success: req.Term >= term}, nil)
	})
	heartbeat := func() {
		t.Helper()
		_ = ga.AppendEntries("b", b.addr, &raft.AppendEntriesRequest{RPCHeader: trHeader(a.addr), Term: 1}, &raft.AppendEntriesResponse{})
	}
	p, err := ga.AppendEntriesPipeline("b", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	idle := func(commit uint64) *raft.AppendEntriesRequest {
		return &raft.AppendEntriesRequest{RPCHeader: trHeader(a.addr), Term: 1, PrevLogEntry: 5, PrevLogTerm: 1, LeaderCommitIndex: commit}
	}
	send := func(req *raft.AppendEntriesRequest) raft.AppendFuture {
		t.Helper()
		f, err := p.AppendEntries(req, &raft.AppendEntriesResponse{})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	next := func() raft.AppendFuture {
		t.Helper()
		select {
		case f := <-p.Consumer():
			if err := f.Error(); err != nil {
				t.Fatal(err)
			}
			return f
		case <-time.After(5 * time.Second):
			t.Fatal("future not delivered")
			return nil
		}
	}

	// Before a heartbeat succeeded, repeats are sent.
	send(idle(3))
	next()
	send(idle(3))
	next()
	if n := reached.Load(); n != 2 {
		t.Fatalf("%d requests reached raft, want 2 (no heartbeat yet)", n)
	}
	reached.Store(0)
	heartbeat()

	// The first idle request is sent; its repeats are held and ride on the
	// next request that differs, answered with its response, in order.
	f1 := send(idle(4))
	if got := next(); got != f1 || got.Response().LastLog != 501 {
		t.Fatalf("first idle request: %+v", got.Response())
	}
	// f2 and f3 are held: they are answered below with the response of
	// the request after them, the second to reach raft, so neither reached
	// it on its own.
	f2, f3 := send(idle(4)), send(idle(4))
	withEntry := idle(5)
	withEntry.Entries = []*raft.Log{{Index: 6, Term: 1, Data: []byte("x")}}
	f4 := send(withEntry)
	for _, want := range []raft.AppendFuture{f2, f3, f4} {
		got := next()
		if got != want || got.Response().LastLog != 602 || !got.Response().Success {
			t.Fatalf("delivered %p (want %p): %+v", got, want, got.Response())
		}
	}
	if n := reached.Load(); n != 2 {
		t.Fatalf("%d requests reached raft, want 2", n)
	}

	// A commit index change is sent at once; repeats are held for at most
	// hold, then one is sent and answers them.
	send(idle(6))
	next()
	start := time.Now()
	held := send(idle(6))
	for time.Since(start) < hold+50*time.Millisecond {
		time.Sleep(20 * time.Millisecond)
		send(idle(6))
	}
	got := next()
	if got != held || reached.Load() != 4 {
		t.Fatalf("after the hold: delivered %p (want %p), %d reached raft", got, held, reached.Load())
	}
	// Drain the other repeats answered with it.
	for drained := false; !drained; {
		select {
		case <-p.Consumer():
		case <-time.After(100 * time.Millisecond):
			drained = true
		}
	}

	// The peer moved to a newer term: its heartbeat fails, and repeats go
	// out again (raft learns of the term from their answers).
	hbTerm.Store(2)
	heartbeat()
	before := reached.Load()
	send(idle(6))
	next()
	if reached.Load() != before+1 {
		t.Fatalf("a repeat after a failed heartbeat was held")
	}
	p.Close()
	a.stop()
	b.stop()
}
