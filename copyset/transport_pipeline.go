// The client side of a raft AppendEntries pipeline (raft.AppendPipeline): one
// bidi stream per (group, peer) with up to MaxPipelineInFlight requests
// outstanding, and the holding back of idle repeats (appendPipeline).

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

	"github.com/chunkraft/chunkraft/proto/chunkraft/raftpb"
)

// appendPipeline is a client-side AppendEntries pipeline over one bidi stream.
//
// AppendEntries (called by raft's replicate goroutine only) takes an
// in-flight slot from sem, queues the future, then sends the request; the
// receive goroutine pops futures in send order, matches each with the next
// response (responses come in request order), frees the slot and delivers
// the future on doneCh. A stream error fails the future being awaited and all
// queued ones (delivered, with a zero response so raft aborts the pipeline),
// and every later AppendEntries returns the error.
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
	stream  grpc.BidiStreamingClient[raftpb.AppendEntriesRequest, raftpb.AppendEntriesResponse]
	timeout time.Duration

	ctx          context.Context // cancelled by Close (and group Close)
	cancel       context.CancelFunc
	streamCancel context.CancelFunc // cancelled also by the watchdog
	watchdog     *time.Timer
	timedOut     atomic.Bool

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
	recvDone  chan struct{}
}

func newAppendPipeline(g *GroupTransport, c raftpb.RaftTransportClient, target raft.ServerAddress, inflight int) (*appendPipeline, error) {
	ctx, cancel := context.WithCancel(g.ctx)
	sctx, scancel := context.WithCancel(ctx)
	p := &appendPipeline{
		g:            g,
		target:       target,
		timeout:      g.m.opts.RPCTimeout,
		ctx:          ctx,
		cancel:       cancel,
		streamCancel: scancel,
		sem:          make(chan struct{}, inflight),
		queue:        make(chan *appendFuture, inflight),
		doneCh:       make(chan raft.AppendFuture, inflight),
		hold:         g.m.opts.IdleAppendHold,
		peer:         g.peer(target),
		failCh:       make(chan struct{}),
		recvDone:     make(chan struct{}),
	}
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
		p.watchdog.Stop()
		p.cancel()
	})
	<-p.recvDone
	return nil
}

// deliver hands a completed future to raft unless the pipeline is closed.
func (p *appendPipeline) deliver(f *appendFuture) bool {
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
			for f != nil {
				if !p.deliverWithRiders(f, err) {
					return
				}
				select {
				case f = <-p.queue:
				default:
					f = nil
				}
			}
			// Held repeats come after everything sent; failCh is closed,
			// so no more are held.
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
			return
		}
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
