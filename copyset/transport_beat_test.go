package copyset

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/goleak"

	"github.com/chunkraft/chunkraft/internal/testwait"
)

// beatProbe stands in for a node: the term it leads in, and the
// acknowledgements its beats got.
type beatProbe struct {
	term atomic.Uint64 // leads in this term; 0: not leader

	mu   sync.Mutex
	acks []time.Time
	ids  []raft.ServerID
}

func (p *beatProbe) hooks() *beatHooks {
	return &beatHooks{
		leading: func(term uint64) bool { return term != 0 && p.term.Load() == term },
		acked: func(term uint64, id raft.ServerID, sent time.Time) {
			p.mu.Lock()
			defer p.mu.Unlock()
			if term != p.term.Load() {
				panic(fmt.Sprintf("ack of term %d while leading in %d", term, p.term.Load()))
			}
			p.acks = append(p.acks, sent)
			p.ids = append(p.ids, id)
		},
	}
}

func (p *beatProbe) acked() ([]time.Time, []raft.ServerID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.acks...), append([]raft.ServerID(nil), p.ids...)
}

// beatsOf returns how many groups the batcher of a's peer beats for.
func beatsOf(t *testing.T, g *GroupTransport, target raft.ServerAddress) int {
	t.Helper()
	b := g.peer(target).hb.Load()
	if b == nil {
		t.Fatal("no heartbeat batcher for the peer")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.beats)
}

func TestTransportLeaderBeats(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const iv = 20 * time.Millisecond
	opts := TransportOptions{HeartbeatBatchWindow: 5 * time.Millisecond, LeaderBeatInterval: iv}
	a := trStartNode(t, opts)
	b := trStartNode(t, opts)
	defer a.stop()
	defer b.stop()
	g := trTransport(t, a, 1)
	var probe beatProbe
	probe.term.Store(4)
	g.setBeatHooks(probe.hooks())

	// The follower answers in its own term: 4 until it moves on.
	var handled, followerTerm atomic.Uint64
	followerTerm.Store(4)
	trTransport(t, b, 1).SetHeartbeatHandler(func(rpc raft.RPC) {
		req := rpc.Command.(*raft.AppendEntriesRequest)
		handled.Add(1)
		ft := followerTerm.Load()
		rpc.Respond(&raft.AppendEntriesResponse{Term: ft, Success: req.Term == ft}, nil)
	})
	raftHeartbeat := func() {
		t.Helper()
		var resp raft.AppendEntriesResponse
		req := &raft.AppendEntriesRequest{RPCHeader: trHeader(a.addr), Term: 4}
		if err := g.AppendEntries("b", b.addr, req, &resp); err != nil {
			t.Fatal(err)
		}
	}

	// One heartbeat of raft's, then the batcher repeats it: the follower
	// keeps hearing from its leader and every answer is an ack with the
	// batch's send instant.
	start := time.Now()
	raftHeartbeat()
	testwait.Until(t, 10*time.Second, func() error {
		if acks, _ := probe.acked(); len(acks) < 3 {
			return fmt.Errorf("%d beats acknowledged, %d heartbeats handled", len(acks), handled.Load())
		}
		return nil
	})
	acks, ids := probe.acked()
	for i, at := range acks {
		if ids[i] != "b" || at.Before(start) || (i > 0 && !at.After(acks[i-1])) {
			t.Fatalf("ack %d: from %q at %v (previous %v, start %v)", i, ids[i], at, acks[max(i-1, 0)], start)
		}
	}
	if n := b.rpcs.Calls("AppendEntries"); n != 0 {
		t.Errorf("%d single AppendEntries calls, want 0 (beats go in the batches)", n)
	}

	// Raft stepped down: no beat is sent for it any more.
	probe.term.Store(0)
	testwait.Until(t, 10*time.Second, func() error {
		if n := beatsOf(t, g, b.addr); n != 0 {
			return fmt.Errorf("beats for %d groups after the step-down", n)
		}
		return nil
	})
	// Leading again, but raft has not heartbeaten the follower in this
	// term: nothing to repeat.
	probe.term.Store(4)
	if n := beatsOf(t, g, b.addr); n != 0 {
		t.Fatalf("beats for %d groups before raft's heartbeat", n)
	}

	// A beat lapses when raft stops heartbeating the follower.
	raftHeartbeat()
	lastRaft := time.Now()
	testwait.Until(t, 10*time.Second, func() error {
		if n := beatsOf(t, g, b.addr); n != 0 {
			return fmt.Errorf("beats for %d groups after raft's last heartbeat", n)
		}
		return nil
	})
	if since := time.Since(lastRaft); since < leaderBeatLapse*iv {
		t.Errorf("the beat lapsed %v after raft's last heartbeat, want at least %v", since, leaderBeatLapse*iv)
	}

	// A follower in a newer term ends the beat without an ack.
	raftHeartbeat()
	before, _ := probe.acked()
	followerTerm.Store(5)
	testwait.Until(t, 10*time.Second, func() error {
		if n := beatsOf(t, g, b.addr); n != 0 {
			return fmt.Errorf("beats for %d groups after a newer term", n)
		}
		return nil
	})
	probe.term.Store(0) // acks of term 4 after this would panic
	if after, _ := probe.acked(); len(after) != len(before) {
		t.Errorf("%d acks while the follower was in a newer term", len(after)-len(before))
	}
}

// trBeatPair starts two transport nodes with opts, and group 1's
// transport on a; b answers group 1's heartbeats. stop stops both.
func trBeatPair(t *testing.T, opts TransportOptions) (a, b *trNode, g *GroupTransport, stop func()) {
	a = trStartNode(t, opts)
	b = trStartNode(t, opts)
	trHeartbeatHandler(trTransport(t, b, 1), 1, nil)
	return a, b, trTransport(t, a, 1), func() {
		a.stop()
		b.stop()
	}
}

// A transport without beat hooks (no node attached) never beats.
func TestTransportLeaderBeatsNeedHooks(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	a, b, g, stop := trBeatPair(t, TransportOptions{HeartbeatBatchWindow: 5 * time.Millisecond, LeaderBeatInterval: 10 * time.Millisecond})
	defer stop()
	var resp raft.AppendEntriesResponse
	if err := g.AppendEntries("b", b.addr, &raft.AppendEntriesRequest{RPCHeader: trHeader(a.addr), Term: 2}, &resp); err != nil {
		t.Fatal(err)
	}
	if n := beatsOf(t, g, b.addr); n != 0 {
		t.Fatalf("beats for %d groups without hooks", n)
	}
}

// The heartbeats of a VerifyLeader round do not wait for the batch window.
func TestTransportHeartbeatUrgent(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	a, b, g, stop := trBeatPair(t, TransportOptions{HeartbeatBatchWindow: time.Minute})
	defer stop()
	send := func() {
		t.Helper()
		var resp raft.AppendEntriesResponse
		if err := g.AppendEntries("b", b.addr, &raft.AppendEntriesRequest{RPCHeader: trHeader(a.addr), Term: 2}, &resp); err != nil {
			t.Fatal(err)
		}
	}
	send() // the first batch goes at once; the window starts
	// A heartbeat now would wait a minute; one of a VerifyLeader round
	// goes at once.
	g.verifying.Add(1)
	trWithin(t, 10*time.Second, "a VerifyLeader round's heartbeat", send)
	g.verifying.Add(-1)
}
