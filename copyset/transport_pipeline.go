// The client side of a raft AppendEntries pipeline (raft.AppendPipeline):
// up to MaxPipelineInFlight requests of one (group, peer) outstanding, on
// the peer's shared AppendEntriesStream (transport_append.go) or, to a peer
// without it, on a bidi stream of the pipeline's own; and the holding back
// of idle repeats (appendPipeline).

package copyset

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chunkraft/chunkraft/proto/chunkraft/raftpb"
)

// appendPipeline is a client-side AppendEntries pipeline.
//
// AppendEntries (called by raft's replicate goroutine only) takes an
// in-flight slot from sem, queues the future, then sends the request. The
// answers to a pipeline's requests come in request order: whoever receives
// them (the shared stream's receive goroutine, or the pipeline's own)
// pops futures in send order, matches each with the next answer, frees the
// slot and delivers the future on doneCh. A stream error, an answer that
// says the request did not reach raft, or no answer within RPCTimeout fails
// every queued future (delivered, with a zero response so raft aborts the
// pipeline; abort), and every later AppendEntries returns the error.
//
// Idle repeats: with nothing to replicate, raft's replicate goroutine sends
// an AppendEntries without entries every CommitTimeout to CommitTimeout*2
// (1-2 s by default), to let the follower learn the commit index. Once
// one went out, its repeats (same term, previous entry and commit index)
// tell the follower nothing new, yet at hundreds of groups per server they
// were a large part of its idle CPU. So a request identical to the last one
// sent, without entries, is held back instead of sent while the group's
// last heartbeat to the peer succeeded in its term (the peer is up and
// follows this leader): its future rides on the next request sent, is
// answered with that request's response and is delivered just before it,
// as if the held request had been delayed on the network and processed by
// the follower right before the next one (it has no entries, so it changes
// nothing there). A repeat that finds the oldest held one older than
// IdleAppendHold is sent, carrying those held, so raft still gets an answer
// to each request within about IdleAppendHold plus CommitTimeout*2. Once a
// heartbeat fails or meets a newer term, repeats go out again at raft's
// pace, so raft learns of a newer term or a broken stream as soon as
// without holding. Heartbeats, which keep followers from campaigning and
// the leader informed of its quorum (and of its contact with each peer,
// which raft otherwise also takes from pipeline answers), are never held.
type appendPipeline struct {
	g       *GroupTransport
	target  raft.ServerAddress
	timeout time.Duration
	// Exactly one of shared (the peer's AppendEntriesStream) and stream
	// (the pipeline's own, with streamCancel) is set.
	shared       *appendStream
	stream       grpc.BidiStreamingClient[raftpb.AppendEntriesRequest, raftpb.AppendEntriesResponse]
	streamCancel context.CancelFunc // cancelled also by the watchdog

	ctx    context.Context // cancelled by Close (and group Close)
	cancel context.CancelFunc
	// watchdog: on the pipeline's own stream armed while its Recv awaits
	// an answer; on the shared stream armed while outstanding > 0 (it is
	// reset when an answer comes), and guarded by wdMu.
	watchdog    *time.Timer
	timedOut    atomic.Bool
	wdMu        sync.Mutex
	outstanding int

	sem    chan struct{}          // in-flight slots
	queue  chan *appendFuture     // sent, awaiting a response, in order
	doneCh chan raft.AppendFuture // completed futures for raft

	// Idle repeats (see the type's comment). last is used by AppendEntries
	// only; held is shared with the receive goroutine's failure path.
	hold      time.Duration
	peer      *groupPeer
	last      appendKey // of the last request sent
	heldMu    sync.Mutex
	held      []*appendFuture // repeats of last, not sent, oldest first
	heldSince time.Time

	failOnce sync.Once
	failCh   chan struct{} // closed on stream failure; err is set before
	err      error

	closeOnce sync.Once
	recvDone  chan struct{} // closed when the own stream's receive goroutine returned

	// On the shared stream: futures raft has no room for yet (post).
	postMu   sync.Mutex
	overflow []*appendFuture
	draining bool
	closed   bool // set by Close before it waits for drains
	drains   sync.WaitGroup
}

// newPipeline returns a pipeline's common parts, its context a child of
// the group's.
func newPipeline(g *GroupTransport, target raft.ServerAddress, inflight int) *appendPipeline {
	ctx, cancel := context.WithCancel(g.ctx)
	return &appendPipeline{
		g:        g,
		target:   target,
		timeout:  g.m.opts.RPCTimeout,
		ctx:      ctx,
		cancel:   cancel,
		sem:      make(chan struct{}, inflight),
		queue:    make(chan *appendFuture, inflight),
		doneCh:   make(chan raft.AppendFuture, inflight),
		hold:     g.m.opts.IdleAppendHold,
		peer:     g.peer(target),
		failCh:   make(chan struct{}),
		recvDone: make(chan struct{}),
	}
}

// newSharedPipeline returns a pipeline on st, the peer's shared stream.
func newSharedPipeline(g *GroupTransport, st *appendStream, target raft.ServerAddress, inflight int) (*appendPipeline, error) {
	p := newPipeline(g, target, inflight)
	p.shared = st
	close(p.recvDone) // no receive goroutine of its own
	p.watchdog = time.AfterFunc(p.timeout, p.sharedTimeout)
	p.watchdog.Stop()
	if g.isClosed() {
		p.cancel()
		return nil, raft.ErrTransportShutdown
	}
	return p, nil
}

// newAppendPipeline returns a pipeline on a stream of its own.
func newAppendPipeline(g *GroupTransport, c raftpb.RaftTransportClient, target raft.ServerAddress, inflight int) (*appendPipeline, error) {
	p := newPipeline(g, target, inflight)
	ctx, cancel := p.ctx, p.cancel
	sctx, scancel := context.WithCancel(ctx)
	p.streamCancel = scancel
	p.watchdog = time.AfterFunc(p.timeout, func() {
		p.timedOut.Store(true)
		scancel()
	})
	// Opening the stream may wait for the connection; bound it.
	stream, err := c.AppendEntriesPipeline(sctx)
	if stopped := p.watchdog.Stop(); err == nil && !stopped {
		err = errors.New("timed out opening stream")
	}
	if err != nil {
		cancel()
		return nil, g.outErr("AppendEntriesPipeline", target, err)
	}
	p.stream = stream

	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		cancel()
		return nil, raft.ErrTransportShutdown
	}
	g.pipelines.Add(1)
	g.mu.Unlock()
	go p.receive()
	return p, nil
}

// closedErr is the error for calls after Close or group Close.
func (p *appendPipeline) closedErr() error {
	if p.g.isClosed() {
		return raft.ErrTransportShutdown
	}
	return raft.ErrPipelineShutdown
}

func (p *appendPipeline) fail(err error) {
	p.failOnce.Do(func() {
		p.err = err
		close(p.failCh)
	})
}

// AppendEntries implements raft.AppendPipeline. It blocks while
// MaxPipelineInFlight requests are outstanding (back-pressure).
func (p *appendPipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	select {
	case p.sem <- struct{}{}:
	case <-p.failCh:
		return nil, p.err
	case <-p.ctx.Done():
		return nil, p.closedErr()
	}
	select {
	case <-p.failCh:
		return nil, p.err
	case <-p.ctx.Done():
		return nil, p.closedErr()
	default:
	}
	if f, held, err := p.holdRepeat(args, resp); held || err != nil {
		<-p.sem // not sent: no slot
		if held {
			p.peer.stats.appendsHeld.Add(1)
		}
		return f, err
	}
	f := &appendFuture{start: time.Now(), args: args, resp: resp, done: make(chan struct{})}
	req := appendEntriesRequestToProto(p.g.group, args)
	p.heldMu.Lock()
	f.riders, p.held = p.held, nil
	p.heldMu.Unlock()
	p.last = appendKeyOf(args)
	p.queue <- f // never blocks: the queue has a place for every slot
	if p.shared != nil {
		p.sent()
		if err := p.shared.send(p, req); err != nil {
			p.abort(p.g.outErr("AppendEntriesStream", p.target, err))
			select {
			case <-p.ctx.Done():
				return nil, p.closedErr()
			default:
				return nil, p.err
			}
		}
		return f, nil
	}
	p.peer.stats.sent.message(false, len(args.Entries))
	if err := p.stream.Send(req); err != nil {
		// The stream is broken; the receiver learns why from Recv and
		// fails the queued futures, including f.
		select {
		case <-p.failCh:
			return nil, p.err
		case <-p.ctx.Done():
			return nil, p.closedErr()
		}
	}
	return f, nil
}

// holdRepeat holds args back when it repeats the last request sent (see
// the type's comment); held reports whether it did, with f its future.
func (p *appendPipeline) holdRepeat(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (f *appendFuture, held bool, err error) {
	if p.hold < 0 || !p.last.idleRepeat(args) || p.peer.following.Load() != args.Term {
		return nil, false, nil
	}
	now := time.Now()
	p.heldMu.Lock()
	defer p.heldMu.Unlock()
	select {
	case <-p.failCh: // the receive goroutine may have delivered held ones already
		return nil, false, p.err
	default:
	}
	if len(p.held) > 0 && now.Sub(p.heldSince) >= p.hold {
		return nil, false, nil // send it, with the held ones riding
	}
	if len(p.held) == 0 {
		p.heldSince = now
	}
	f = &appendFuture{start: now, args: args, resp: resp, done: make(chan struct{})}
	p.held = append(p.held, f)
	return f, true, nil
}

// appendKey is what idleRepeat compares of a sent request (it does not keep
// the request's entries alive).
type appendKey struct {
	valid                        bool
	entries                      bool
	term, prev, prevTerm, commit uint64
	version                      raft.ProtocolVersion
	id, addr, leader             []byte
}

func appendKeyOf(r *raft.AppendEntriesRequest) appendKey {
	return appendKey{
		valid: true, entries: len(r.Entries) > 0,
		term: r.Term, prev: r.PrevLogEntry, prevTerm: r.PrevLogTerm, commit: r.LeaderCommitIndex,
		//lint:ignore SA1019 raft still sends the deprecated Leader field; a repeat must carry the same.
		version: r.ProtocolVersion, id: r.ID, addr: r.Addr, leader: r.Leader,
	}
}

// idleRepeat reports whether r carries nothing a follower that processed
// the request of k did not learn from it: neither has entries, and term,
// leader, previous entry and commit index are the same.
func (k *appendKey) idleRepeat(r *raft.AppendEntriesRequest) bool {
	return k.valid && !k.entries && len(r.Entries) == 0 &&
		k.term == r.Term && k.prev == r.PrevLogEntry && k.prevTerm == r.PrevLogTerm &&
		k.commit == r.LeaderCommitIndex && k.version == r.ProtocolVersion &&
		//lint:ignore SA1019 raft still sends the deprecated Leader field; a repeat must carry the same.
		bytes.Equal(k.id, r.ID) && bytes.Equal(k.addr, r.Addr) && bytes.Equal(k.leader, r.Leader)
}

// Consumer implements raft.AppendPipeline.
func (p *appendPipeline) Consumer() <-chan raft.AppendFuture { return p.doneCh }

// Close implements raft.AppendPipeline: it aborts the stream (outstanding
// requests are abandoned) and waits for the receive goroutine.
func (p *appendPipeline) Close() error {
	p.closeOnce.Do(func() {
		p.wdMu.Lock()
		p.watchdog.Stop()
		p.wdMu.Unlock()
		p.cancel()
	})
	<-p.recvDone
	p.postMu.Lock()
	p.closed = true // no post starts a drain after this
	p.postMu.Unlock()
	p.drains.Wait()
	return nil
}

// deliver hands a completed future to raft unless the pipeline is closed.
// On the shared stream it never blocks (post).
func (p *appendPipeline) deliver(f *appendFuture) bool {
	if p.shared != nil {
		return p.post(f)
	}
	select {
	case p.doneCh <- f:
		return true
	case <-p.ctx.Done():
		return false
	}
}

func (p *appendPipeline) receive() {
	defer p.g.pipelines.Done()
	defer close(p.recvDone)
	defer p.streamCancel()
	for {
		var f *appendFuture
		select {
		case f = <-p.queue:
		case <-p.ctx.Done():
			p.fail(p.closedErr())
			return
		}
		p.watchdog.Reset(p.timeout)
		msg, err := p.stream.Recv()
		p.watchdog.Stop()
		if err != nil {
			switch {
			case p.ctx.Err() != nil:
				err = p.closedErr()
			case p.timedOut.Load():
				err = p.g.outErr("AppendEntriesPipeline", p.target,
					fmt.Errorf("no response within %v: %w", p.timeout, err))
			default:
				err = p.g.outErr("AppendEntriesPipeline", p.target, err)
			}
			p.fail(err)
			if p.deliverWithRiders(f, p.err) {
				p.abort(err)
			}
			return
		}
		p.peer.stats.recv.answerBatch()
		appendEntriesResponseFromProto(msg, f.resp)
		var ferr error
		if msg.Error != "" {
			ferr = errors.New(msg.Error)
		}
		<-p.sem
		if !p.deliverWithRiders(f, ferr) {
			return
		}
	}
}

// post hands f to raft without waiting: the shared stream's receive
// goroutine must not wait on one pipeline's consumer (raft stops reading
// a pipeline's futures before it closes it), nor may raft's own goroutine
// in AppendEntries. doneCh has room for every request in flight, so
// futures rarely queue behind it; when they do (held repeats riding on an
// answer, or raft no longer reading), they wait in overflow, in order, for
// a goroutine of the pipeline that hands them over or drops them when the
// pipeline closes.
func (p *appendPipeline) post(f *appendFuture) bool {
	p.postMu.Lock()
	defer p.postMu.Unlock()
	if p.closed || p.ctx.Err() != nil {
		return false
	}
	if len(p.overflow) == 0 {
		select {
		case p.doneCh <- f:
			return true
		default:
		}
	}
	p.overflow = append(p.overflow, f)
	if !p.draining {
		p.draining = true
		p.drains.Add(1)
		go p.drain()
	}
	return true
}

// drain hands the overflow to raft, oldest first, until it is empty or the
// pipeline closes.
func (p *appendPipeline) drain() {
	defer p.drains.Done()
	for {
		p.postMu.Lock()
		if len(p.overflow) == 0 {
			p.draining = false
			p.postMu.Unlock()
			return
		}
		f := p.overflow[0] // popped once handed over: post keeps queueing behind it
		p.postMu.Unlock()
		select {
		case p.doneCh <- f:
		case <-p.ctx.Done():
			p.postMu.Lock()
			p.overflow, p.draining = nil, false
			p.postMu.Unlock()
			return
		}
		p.postMu.Lock()
		p.overflow[0] = nil
		p.overflow = p.overflow[1:]
		p.postMu.Unlock()
	}
}

// abort fails the pipeline with err (unless it failed before: its first
// error stands) and delivers every queued future and held repeat with
// that error. Several goroutines may abort at once: each future is taken
// from the queue, or the held list, by one.
func (p *appendPipeline) abort(err error) {
	p.fail(err)
	err = p.err
	for f := p.dequeue(); f != nil; f = p.dequeue() {
		if !p.deliverWithRiders(f, err) {
			return
		}
	}
	// Held repeats come after everything sent; failCh is closed, so no
	// more are held.
	p.heldMu.Lock()
	held := p.held
	p.held = nil
	p.heldMu.Unlock()
	for _, h := range held {
		h.complete(err)
		if !p.deliver(h) {
			return
		}
	}
}

// dequeue takes the oldest sent future, or nil when none is queued.
func (p *appendPipeline) dequeue() *appendFuture {
	select {
	case f := <-p.queue:
		return f
	default:
		return nil
	}
}

// sent arms the shared-stream watchdog for a request about to be sent.
func (p *appendPipeline) sent() {
	p.wdMu.Lock()
	p.outstanding++
	if p.outstanding == 1 && p.ctx.Err() == nil {
		p.watchdog.Reset(p.timeout)
	}
	p.wdMu.Unlock()
}

// answer takes the shared stream's answer to the pipeline's oldest
// outstanding request. The stream's receive goroutine calls it, in order.
func (p *appendPipeline) answer(msg *raftpb.AppendEntriesResponse) {
	p.wdMu.Lock()
	p.outstanding--
	if p.outstanding > 0 {
		p.watchdog.Reset(p.timeout)
	} else {
		p.watchdog.Stop()
	}
	p.wdMu.Unlock()
	f := p.dequeue()
	if f == nil {
		return // aborted: the future was delivered with the error
	}
	if msg.StatusCode != 0 {
		err := p.g.outErr("AppendEntriesStream", p.target, status.Error(codes.Code(msg.StatusCode), msg.Error))
		p.fail(err)
		if p.deliverWithRiders(f, p.err) {
			p.abort(err)
		}
		return
	}
	appendEntriesResponseFromProto(msg, f.resp)
	var ferr error
	if msg.Error != "" {
		ferr = errors.New(msg.Error)
	}
	<-p.sem
	p.deliverWithRiders(f, ferr)
}

// sharedTimeout is the shared-stream watchdog: a request outstanding for
// RPCTimeout fails the pipeline, and the stream too when nothing at all
// came back on it meanwhile (the peer or the connection is stuck, not
// only this group's raft).
func (p *appendPipeline) sharedTimeout() {
	p.wdMu.Lock()
	n := p.outstanding
	p.wdMu.Unlock()
	if n == 0 || p.ctx.Err() != nil {
		return
	}
	p.timedOut.Store(true)
	err := fmt.Errorf("no response within %v", p.timeout)
	p.shared.stalled(p.timeout, err)
	p.abort(p.g.outErr("AppendEntriesStream", p.target, err))
}

// deliverWithRiders completes and delivers the held repeats riding on f,
// answered with f's response, then f itself.
func (p *appendPipeline) deliverWithRiders(f *appendFuture, err error) bool {
	for _, r := range f.riders {
		*r.resp = *f.resp
		r.start = f.start // it went out with f
		r.complete(err)
		if !p.deliver(r) {
			return false
		}
	}
	f.complete(err)
	return p.deliver(f)
}

// appendFuture implements raft.AppendFuture.
type appendFuture struct {
	start  time.Time
	args   *raft.AppendEntriesRequest
	resp   *raft.AppendEntriesResponse
	err    error
	done   chan struct{}
	riders []*appendFuture // held repeats answered with this response
}

func (f *appendFuture) complete(err error) {
	f.err = err
	close(f.done)
}

// Error implements raft.Future.
func (f *appendFuture) Error() error {
	<-f.done
	return f.err
}

// Start implements raft.AppendFuture.
func (f *appendFuture) Start() time.Time { return f.start }

// Request implements raft.AppendFuture.
func (f *appendFuture) Request() *raft.AppendEntriesRequest { return f.args }

// Response implements raft.AppendFuture.
func (f *appendFuture) Response() *raft.AppendEntriesResponse { return f.resp }
