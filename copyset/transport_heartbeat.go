package copyset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chunkraft/chunkraft/proto/chunkraft/raftpb"
)

// Heartbeat batching.
//
// hashicorp/raft runs one heartbeat goroutine per (group, follower): at idle
// a leader sends each follower an empty AppendEntries every
// HeartbeatTimeout/10 to /5. With hundreds of groups per server, a gRPC call
// per heartbeat is most of an idle server's CPU. So the groups of a server
// share one heartbeatBatcher per peer server: a heartbeat is queued, and the
// batcher's goroutine sends what is queued as one HeartbeatBatch on a
// long-lived Heartbeats stream over the peer's connection for small calls,
// at most one batch per HeartbeatBatchWindow (a heartbeat that finds the
// last batch older than that goes out at once, and so do the heartbeats of
// a VerifyLeader round, GroupTransport.verifying). The peer hands the
// heartbeats to their groups' heartbeat handlers in order and answers the
// batch with one message. Heartbeats never share a stream or a connection
// with entries or snapshots.
//
// Every queued call completes: with the peer's answer, or with an error when
// the stream fails, when no answer came within HeartbeatTimeout of the send
// (the stream is then abandoned and the next batch opens a new one), or when
// the manager closes. A caller also stops waiting when its group closes.
//
// A peer without the Heartbeats method (an older version) answers the
// stream with Unimplemented; its heartbeats then go as single AppendEntries
// calls for heartbeatLegacyRetry before the stream is tried again.

// isRaftHeartbeat applies net_transport.go's rule: an AppendEntries that carries
// a term and a leader address and nothing else.
func isRaftHeartbeat(r *raft.AppendEntriesRequest) bool {
	leader := r.Addr
	if len(leader) == 0 {
		//lint:ignore SA1019 raft still sends the deprecated Leader field; net_transport.go falls back to it too.
		leader = r.Leader
	}
	return r.Term != 0 && len(leader) != 0 &&
		r.PrevLogEntry == 0 && r.PrevLogTerm == 0 &&
		len(r.Entries) == 0 && r.LeaderCommitIndex == 0
}

// errHeartbeatsUnsupported fails the calls of a batch the peer did not
// know how to take; their callers resend them as single calls.
var errHeartbeatsUnsupported = errors.New("peer has no Heartbeats stream")

const heartbeatLegacyRetry = time.Minute

// heartbeatCall is one queued heartbeat.
type heartbeatCall struct {
	req  *raftpb.AppendEntriesRequest
	resp *raftpb.AppendEntriesResponse
	err  error
	done chan struct{}
	// beat, when set, is the leader beat the call repeats (transport_beat.go):
	// nobody waits for it.
	beat *leaderBeat
	at   time.Time // when its batch was sent
	// urgent: part of a VerifyLeader round, sent without waiting for the
	// batch window.
	urgent bool
}

func (c *heartbeatCall) complete(resp *raftpb.AppendEntriesResponse, err error) {
	if c.beat != nil {
		c.beat.answered(c, resp, err)
		return
	}
	c.resp, c.err = resp, err
	close(c.done)
}

// batchedHeartbeat sends a heartbeat through target's batcher. sent is false
// when it was not sent and must go as a single call instead.
func (g *GroupTransport) batchedHeartbeat(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (sent bool, err error) {
	if g.isClosed() {
		return true, raft.ErrTransportShutdown
	}
	p := g.peer(target)
	b := p.hb.Load()
	if b == nil {
		var err error
		if b, err = g.m.heartbeats(target); err != nil {
			return true, err
		}
		p.hb.Store(b)
	}
	c := &heartbeatCall{req: appendEntriesRequestToProto(g.group, args), done: make(chan struct{}), urgent: g.verifying.Load() > 0}
	if !b.enqueue(c, g, id) {
		if g.m.ctx.Err() != nil {
			return true, raft.ErrTransportShutdown
		}
		return false, nil
	}
	select {
	case <-c.done:
	case <-g.ctx.Done():
		return true, raft.ErrTransportShutdown
	}
	if c.err != nil {
		if errors.Is(c.err, errHeartbeatsUnsupported) {
			return false, nil
		}
		return true, g.outErr("AppendEntries", target, c.err)
	}
	out := c.resp
	if out.StatusCode != 0 {
		return true, g.outErr("AppendEntries", target, status.Error(codes.Code(out.StatusCode), out.Error))
	}
	appendEntriesResponseFromProto(out, resp)
	if out.Error != "" {
		return true, errors.New(out.Error)
	}
	return true, nil
}

// heartbeatBatcher sends the heartbeats of every group to one peer server.
type heartbeatBatcher struct {
	m      *TransportManager
	target raft.ServerAddress
	client raftpb.RaftTransportClient

	mu      sync.Mutex
	queue   []*heartbeatCall
	urgent  bool      // an urgent call is queued
	legacy  time.Time // single calls until then
	stopped bool

	wake chan struct{} // the queue became non-empty
	done chan struct{} // closed when run returned

	beats map[uint64]*leaderBeat // by group (transport_beat.go)
}

func newHeartbeatBatcher(m *TransportManager, target raft.ServerAddress, client raftpb.RaftTransportClient) *heartbeatBatcher {
	b := &heartbeatBatcher{
		m: m, target: target, client: client,
		wake: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
	go b.run()
	return b
}

// enqueue queues raft's heartbeat c of group g to the peer id for the
// next batch, and keeps it as the group's beat (transport_beat.go). It
// returns false, leaving c alone, when the peer gets single calls or the
// batcher has stopped.
func (b *heartbeatBatcher) enqueue(c *heartbeatCall, g *GroupTransport, id raft.ServerID) bool {
	b.mu.Lock()
	if b.stopped || (!b.legacy.IsZero() && time.Now().Before(b.legacy)) {
		b.mu.Unlock()
		return false
	}
	b.heardLocked(g, id, c)
	b.queue = append(b.queue, c)
	first := len(b.queue) == 1
	b.urgent = b.urgent || c.urgent
	b.mu.Unlock()
	if first || c.urgent {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// take removes up to n calls from the head of the queue.
func (b *heartbeatBatcher) take(n int) []*heartbeatCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	n = min(n, len(b.queue))
	b.urgent = false
	if n == 0 {
		return nil
	}
	calls := make([]*heartbeatCall, n)
	copy(calls, b.queue)
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	return calls
}

func (b *heartbeatBatcher) hasUrgent() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.urgent
}

func (b *heartbeatBatcher) setLegacy() {
	b.mu.Lock()
	b.legacy = time.Now().Add(heartbeatLegacyRetry)
	b.mu.Unlock()
	b.m.log.Info("peer has no Heartbeats stream: sending heartbeats as single calls", "peer", string(b.target))
}

// run is the batcher's goroutine: it sends the queue in batches until the
// manager closes, then fails what is left.
func (b *heartbeatBatcher) run() {
	defer close(b.done)
	var st *heartbeatStream
	defer func() {
		if st != nil {
			st.close()
		}
		b.mu.Lock()
		b.stopped = true
		left := b.queue
		b.queue = nil
		b.mu.Unlock()
		for _, c := range left {
			c.complete(nil, raft.ErrTransportShutdown)
		}
	}()
	window := b.m.opts.HeartbeatBatchWindow
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var last time.Time // when the last batch went out
	var tick <-chan time.Time
	if iv := b.m.opts.LeaderBeatInterval; iv > 0 {
		t := time.NewTicker(iv)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-b.wake:
		case now := <-tick:
			b.queueBeats(now)
		case <-b.m.ctx.Done():
			return
		}
		// Wait out the window unless an urgent call is (or becomes) queued.
		for window > 0 && !last.IsZero() && !b.hasUrgent() {
			wait := window - time.Since(last)
			if wait <= 0 {
				break
			}
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-b.wake:
				timer.Stop()
			case <-b.m.ctx.Done():
				return
			}
		}
		for {
			calls := b.take(b.m.opts.HeartbeatBatchMax)
			if len(calls) == 0 {
				break
			}
			last = time.Now()
			if st != nil && st.failed() {
				st.close()
				st = nil
			}
			if st == nil {
				var err error
				if st, err = b.open(); err != nil {
					for _, c := range calls {
						c.complete(nil, err)
					}
					continue
				}
			}
			st.send(calls)
		}
	}
}

// heartbeatStream is one Heartbeats stream: batches are sent by the
// batcher's goroutine and answered in order to its receive goroutine.
type heartbeatStream struct {
	b        *heartbeatBatcher
	stream   grpc.BidiStreamingClient[raftpb.HeartbeatBatch, raftpb.HeartbeatBatchResponse]
	cancel   context.CancelFunc
	watchdog *time.Timer // armed while a batch awaits its answer
	timedOut atomic.Bool
	recvDone chan struct{}

	mu      sync.Mutex
	pending []heartbeatSent // sent, unanswered, oldest first
	err     error           // set once the stream failed
}

type heartbeatSent struct {
	calls []*heartbeatCall
	at    time.Time
}

// open opens a Heartbeats stream, waiting at most HeartbeatTimeout for the
// connection.
func (b *heartbeatBatcher) open() (*heartbeatStream, error) {
	ctx, cancel := context.WithCancel(b.m.ctx)
	st := &heartbeatStream{b: b, cancel: cancel, recvDone: make(chan struct{})}
	st.watchdog = time.AfterFunc(b.m.opts.HeartbeatTimeout, func() {
		st.timedOut.Store(true)
		cancel()
	})
	stream, err := b.client.Heartbeats(ctx)
	if stopped := st.watchdog.Stop(); err == nil && !stopped {
		err = errors.New("timed out opening the Heartbeats stream")
	}
	if err != nil {
		cancel()
		if b.m.ctx.Err() != nil {
			return nil, raft.ErrTransportShutdown
		}
		return nil, err
	}
	st.stream = stream
	go st.receive()
	return st, nil
}

func (st *heartbeatStream) failed() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.err != nil
}

// send sends one batch. A send error is left to the receive goroutine,
// which gets the stream's status from Recv and fails every pending batch.
func (st *heartbeatStream) send(calls []*heartbeatCall) {
	msg := &raftpb.HeartbeatBatch{Requests: make([]*raftpb.AppendEntriesRequest, len(calls))}
	now := time.Now()
	for i, c := range calls {
		msg.Requests[i] = c.req
		c.at = now
	}
	st.mu.Lock()
	if err := st.err; err != nil {
		st.mu.Unlock()
		for _, c := range calls {
			c.complete(nil, err)
		}
		return
	}
	st.pending = append(st.pending, heartbeatSent{calls: calls, at: now})
	if len(st.pending) == 1 {
		st.watchdog.Reset(st.b.m.opts.HeartbeatTimeout)
	}
	st.mu.Unlock()
	st.b.m.stats.peer(st.b.target).sent.heartbeatBatch(len(calls))
	_ = st.stream.Send(msg)
}

func (st *heartbeatStream) receive() {
	defer close(st.recvDone)
	timeout := st.b.m.opts.HeartbeatTimeout
	for {
		msg, err := st.stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("Heartbeats stream ended by the peer")
			}
			st.fail(err)
			return
		}
		st.mu.Lock()
		if len(st.pending) == 0 {
			st.mu.Unlock()
			st.fail(errors.New("unexpected answer on the Heartbeats stream"))
			st.cancel()
			return
		}
		sent := st.pending[0]
		st.pending[0] = heartbeatSent{}
		st.pending = st.pending[1:]
		if len(st.pending) > 0 {
			st.watchdog.Reset(time.Until(st.pending[0].at.Add(timeout)))
		} else {
			st.watchdog.Stop()
		}
		st.mu.Unlock()
		if len(msg.Responses) != len(sent.calls) {
			err := fmt.Errorf("a batch of %d heartbeats was answered with %d responses", len(sent.calls), len(msg.Responses))
			for _, c := range sent.calls {
				c.complete(nil, err)
			}
			st.fail(err)
			st.cancel()
			return
		}
		for i, c := range sent.calls {
			c.complete(msg.Responses[i], nil)
		}
	}
}

// fail records that the stream failed with err and fails every pending
// batch.
func (st *heartbeatStream) fail(err error) {
	st.watchdog.Stop()
	switch {
	case st.b.m.ctx.Err() != nil:
		err = raft.ErrTransportShutdown
	case st.timedOut.Load():
		err = fmt.Errorf("no answer on the Heartbeats stream within %v: %w", st.b.m.opts.HeartbeatTimeout, err)
	case status.Code(err) == codes.Unimplemented:
		st.b.setLegacy()
		err = errHeartbeatsUnsupported
	}
	st.mu.Lock()
	if st.err == nil {
		st.err = err
	}
	pending := st.pending
	st.pending = nil
	st.mu.Unlock()
	for _, p := range pending {
		for _, c := range p.calls {
			c.complete(nil, err)
		}
	}
}

// close abandons the stream and waits for its receive goroutine.
func (st *heartbeatStream) close() {
	st.cancel()
	<-st.recvDone
}
