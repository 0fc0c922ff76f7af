package copyset

import (
	"fmt"
	"runtime"
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

func trAppendReq(from raft.ServerAddress, i uint64) *raft.AppendEntriesRequest {
	return &raft.AppendEntriesRequest{RPCHeader: trHeader(from), Term: 1, PrevLogEntry: i, PrevLogTerm: 1, LeaderCommitIndex: i,
		Entries: []*raft.Log{{Index: i + 1, Term: 1, Data: []byte{byte(i)}}}}
}

// trAnswerAppend answers an AppendEntries with success up to its entry.
func trAnswerAppend(rpc raft.RPC) (any, error, bool) {
	cmd := rpc.Command.(*raft.AppendEntriesRequest)
	return &raft.AppendEntriesResponse{Term: 1, Success: true, LastLog: cmd.PrevLogEntry + 1}, nil, true
}

// TestTransportAppendStreamGroups: the pipelines of several groups to one
// peer share one stream; a group whose raft does not take requests holds
// up no other group, and each group's futures come back in its order.
func TestTransportAppendStreamGroups(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	a := trStartNode(t, TransportOptions{})
	b := trStartNode(t, TransportOptions{})
	const groups, perGroup = 4, 3
	var pipes []raft.AppendPipeline
	var fakes []*trFakeRaft
	for gid := uint64(1); gid <= groups; gid++ {
		ga := trTransport(t, a, gid)
		gb := trTransport(t, b, gid)
		if gid != 1 { // group 1's raft is busy: nobody reads its Consumer channel
			fakes = append(fakes, trStartFakeRaft(gb, trAnswerAppend))
		}
		p, err := ga.AppendEntriesPipeline("b", b.addr)
		if err != nil {
			t.Fatal(err)
		}
		pipes = append(pipes, p)
	}
	for i := uint64(1); i <= perGroup; i++ {
		for _, p := range pipes {
			if _, err := p.AppendEntries(trAppendReq(a.addr, i), &raft.AppendEntriesResponse{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for gi, p := range pipes[1:] {
		for i := uint64(1); i <= perGroup; i++ {
			select {
			case f := <-p.Consumer():
				if err := f.Error(); err != nil {
					t.Fatalf("group %d future %d: %v", gi+2, i, err)
				}
				if f.Request().PrevLogEntry != i || f.Response().LastLog != i+1 {
					t.Fatalf("group %d future %d: request %d answered with %+v", gi+2, i, f.Request().PrevLogEntry, f.Response())
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("group %d future %d not delivered while group 1 is busy", gi+2, i)
			}
		}
	}
	select {
	case f := <-pipes[0].Consumer():
		t.Fatalf("group 1's future delivered while its raft took nothing: %v", f.Error())
	default:
	}
	// Group 1's raft starts: its requests are answered, in order.
	gb1 := b.m.lookup(1)
	fakes = append(fakes, trStartFakeRaft(gb1, trAnswerAppend))
	for i := uint64(1); i <= perGroup; i++ {
		select {
		case f := <-pipes[0].Consumer():
			if err := f.Error(); err != nil || f.Request().PrevLogEntry != i || f.Response().LastLog != i+1 {
				t.Fatalf("group 1 future %d: request %d, %+v, %v", i, f.Request().PrevLogEntry, f.Response(), err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("group 1 future %d not delivered", i)
		}
	}
	if n := b.rpcs.Calls("AppendEntriesStream"); n != 1 {
		t.Errorf("%d AppendEntriesStream streams opened, want 1", n)
	}
	if n := b.rpcs.Calls("AppendEntriesPipeline"); n != 0 {
		t.Errorf("%d AppendEntriesPipeline streams opened, want 0", n)
	}
	var st PeerStats
	for _, ps := range a.m.Stats().Peers {
		if ps.Peer == string(b.addr) {
			st = ps
		}
	}
	if st.AppendsSent != groups*perGroup || st.EntriesSent != groups*perGroup || st.AppendMessagesSent == 0 || st.AppendMessagesSent > st.AppendsSent {
		t.Errorf("sent counters: %+v", st)
	}
	for _, p := range pipes {
		_ = p.Close()
	}
	for _, f := range fakes {
		f.Stop()
	}
	a.stop()
	b.stop()
}

// trNoAppendStreamServer is a peer of an older version: no
// AppendEntriesStream method.
type trNoAppendStreamServer struct {
	*transportServer
}

func (trNoAppendStreamServer) AppendEntriesStream(grpc.BidiStreamingServer[raftpb.AppendEntriesBatch, raftpb.AppendEntriesBatchResponse]) error {
	return status.Error(codes.Unimplemented, "method AppendEntriesStream not implemented")
}

// TestTransportAppendStreamLegacyPeer: to a peer without the shared
// stream, the first pipeline fails (as raft sees a broken stream) and the
// next ones get streams of their own.
func TestTransportAppendStreamLegacyPeer(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	a := trStartNode(t, TransportOptions{})
	b := trStartNodeWith(t, TransportOptions{}, func(s *transportServer) raftpb.RaftTransportServer { return trNoAppendStreamServer{s} })
	addr, m, rpcs := b.addr, b.m, b.rpcs
	g, err := m.Transport(1)
	if err != nil {
		t.Fatal(err)
	}
	fb := trStartFakeRaft(g, trAnswerAppend)
	ga := trTransport(t, a, 1)

	p, err := ga.AppendEntriesPipeline("b", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.AppendEntries(trAppendReq(a.addr, 1), &raft.AppendEntriesResponse{}); err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-p.Consumer():
		if f.Error() == nil {
			t.Fatal("a request on a stream the peer does not have succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first pipeline's future was not delivered")
	}
	_ = p.Close()
	p2, err := ga.AppendEntriesPipeline("b", addr)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 3; i++ {
		if _, err := p2.AppendEntries(trAppendReq(a.addr, i), &raft.AppendEntriesResponse{}); err != nil {
			t.Fatal(err)
		}
		select {
		case f := <-p2.Consumer():
			if err := f.Error(); err != nil || f.Response().LastLog != i+1 {
				t.Fatalf("future %d to a legacy peer: %+v, %v", i, f.Response(), err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("future %d to a legacy peer not delivered", i)
		}
	}
	_ = p2.Close()
	if n := rpcs.Calls("AppendEntriesStream"); n != 1 {
		t.Errorf("%d AppendEntriesStream streams tried, want 1", n)
	}
	if n := rpcs.Calls("AppendEntriesPipeline"); n != 1 {
		t.Errorf("%d AppendEntriesPipeline streams, want 1", n)
	}
	fb.Stop()
	a.stop()
	b.stop()
}

// TestTransportAppendStreamBroken: when the shared stream breaks (the peer
// stops), the outstanding futures of every pipeline on it fail, and so
// does every later request on those pipelines.
func TestTransportAppendStreamBroken(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	a := trStartNode(t, TransportOptions{})
	b := trStartNode(t, TransportOptions{})
	var pipes []raft.AppendPipeline
	var fakes []*trFakeRaft
	for gid := uint64(1); gid <= 2; gid++ {
		ga := trTransport(t, a, gid)
		fakes = append(fakes, trStartFakeRaft(trTransport(t, b, gid), nil)) // holds every request
		p, err := ga.AppendEntriesPipeline("b", b.addr)
		if err != nil {
			t.Fatal(err)
		}
		pipes = append(pipes, p)
		if _, err := p.AppendEntries(trAppendReq(a.addr, 1), &raft.AppendEntriesResponse{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range fakes {
		f.next(t) // both requests reached raft
		f.Stop()
	}
	b.stop()
	for gi, p := range pipes {
		select {
		case f := <-p.Consumer():
			if f.Error() == nil || f.Response().Success {
				t.Errorf("group %d: an outstanding future on a broken stream: %+v, %v", gi+1, f.Response(), f.Error())
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("group %d: outstanding future not failed when the stream broke", gi+1)
		}
		if _, err := p.AppendEntries(trAppendReq(a.addr, 2), &raft.AppendEntriesResponse{}); err == nil {
			t.Errorf("group %d: AppendEntries on a pipeline of a broken stream succeeded", gi+1)
		}
		_ = p.Close()
	}
	a.stop()
}

// TestTransportAppendStreamReapsLanes: the lanes of groups the receiving
// server no longer has are stopped once the stream has many lanes, so
// their goroutines do not pile up on a long-lived stream.
func TestTransportAppendStreamReapsLanes(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	a := trStartNode(t, TransportOptions{})
	b := trStartNode(t, TransportOptions{})
	replicate := func(gid uint64) (*GroupTransport, *GroupTransport, *trFakeRaft) {
		ga, gb := trTransport(t, a, gid), trTransport(t, b, gid)
		fb := trStartFakeRaft(gb, trAnswerAppend)
		p, err := ga.AppendEntriesPipeline("b", b.addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.AppendEntries(trAppendReq(a.addr, 1), &raft.AppendEntriesResponse{}); err != nil {
			t.Fatal(err)
		}
		select {
		case f := <-p.Consumer():
			if err := f.Error(); err != nil {
				t.Fatalf("group %d: %v", gid, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("group %d: future not delivered", gid)
		}
		_ = p.Close()
		return ga, gb, fb
	}
	var gone []*GroupTransport
	for gid := uint64(1); gid <= laneReapMin; gid++ {
		ga, gb, fb := replicate(gid)
		fb.Stop()
		_ = gb.Close() // b no longer has the group
		gone = append(gone, ga)
	}
	before := runtime.NumGoroutine()
	_, _, fb := replicate(1000) // a new lane: the stream looks for lanes to stop
	testwait.Until(t, 5*time.Second, func() error {
		if n := runtime.NumGoroutine(); n > before-laneReapMin {
			return fmt.Errorf("%d goroutines, had %d before the new lane: the %d lanes of gone groups were not stopped", n, before, laneReapMin)
		}
		return nil
	})
	fb.Stop()
	for _, g := range gone {
		_ = g.Close()
	}
	a.stop()
	b.stop()
}
