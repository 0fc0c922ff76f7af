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

// AppendEntries batching.
//
// A leader replicates each of its groups to each follower through a
// pipeline of its own (raft's replicate goroutine per group and follower).
// On a stream per pipeline, nearly every raft entry of small writes
// travels alone, in a gRPC message of its own answered by one more, each
// with its framing, a wake-up of the stream's goroutines on both sides and
// a share of a syscall. So the pipelines of every group bound for one peer
// server share one AppendEntriesStream (appendStream), on the peer's bulk
// connection:
//
//   - sending: a pipeline queues its request on the stream's sendBatcher,
//     which sends what is queued as one AppendEntriesBatch. A request
//     never waits for a timer: a lone request (iodepth 1) goes out at
//     once, and the requests of groups woken together (by one group commit
//     of the shared log) go out together;
//   - answering: the peer hands each request to its group's raft in order
//     and sends the answers back in batches the same way, each naming its
//     group; the stream's receive goroutine hands each answer to the
//     pipeline that sent the group's oldest unanswered request (routes: the
//     answers of one group come in the order of its requests).
//
// A stream error fails every pipeline with a request on the stream, and
// every later send on it; the next pipeline raft opens gets a new stream.
// A peer without the method (an older version) answers the stream with
// Unimplemented: its pipelines then get streams of their own
// (appendStreamLegacyRetry) before the shared stream is tried again.

// errAppendStreamUnsupported fails the pipelines of a stream the peer did
// not know how to take; raft opens new ones, which get streams of their own.
var errAppendStreamUnsupported = errors.New("peer has no AppendEntriesStream")

const appendStreamLegacyRetry = time.Minute

// appendMux opens and keeps the shared AppendEntriesStream to one peer.
type appendMux struct {
	m      *TransportManager
	target raft.ServerAddress
	client raftpb.RaftTransportClient

	mu     sync.Mutex
	cur    *appendStream // nil until opened, and after it failed
	legacy time.Time     // pipelines of their own until then

	streams sync.WaitGroup // receive goroutines
}

// stream returns the peer's shared stream, opening one if there is none,
// or nil when the peer gets pipelines with streams of their own.
func (x *appendMux) stream() (*appendStream, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.legacy.IsZero() && time.Now().Before(x.legacy) {
		return nil, nil
	}
	if st := x.cur; st != nil && !st.failed() {
		return st, nil
	}
	st, err := x.open()
	if err != nil {
		return nil, err
	}
	x.cur = st
	return st, nil
}

func (x *appendMux) setLegacy() {
	x.mu.Lock()
	x.legacy = time.Now().Add(appendStreamLegacyRetry)
	x.mu.Unlock()
	x.m.log.Info("peer has no AppendEntriesStream: each pipeline gets a stream of its own", "peer", string(x.target))
}

// open opens a stream, waiting at most RPCTimeout for the connection.
func (x *appendMux) open() (*appendStream, error) {
	if x.m.ctx.Err() != nil {
		return nil, raft.ErrTransportShutdown
	}
	ctx, cancel := context.WithCancel(x.m.ctx)
	timer := time.AfterFunc(x.m.opts.RPCTimeout, cancel)
	stream, err := x.client.AppendEntriesStream(ctx)
	if stopped := timer.Stop(); err == nil && !stopped {
		err = errors.New("timed out opening the AppendEntriesStream")
	}
	if err != nil {
		cancel()
		if x.m.ctx.Err() != nil {
			return nil, raft.ErrTransportShutdown
		}
		return nil, err
	}
	st := &appendStream{
		x: x, stream: stream, cancel: cancel,
		stats:  x.m.stats.peer(x.target),
		routes: make(map[uint64]*pipelineQueue),
	}
	st.out.send = st.sendBatch
	st.lastRecv.Store(time.Now().UnixNano())
	x.streams.Add(1)
	go st.receive()
	return st, nil
}

// appendStream is one AppendEntriesStream to a peer.
type appendStream struct {
	x        *appendMux
	stream   grpc.BidiStreamingClient[raftpb.AppendEntriesBatch, raftpb.AppendEntriesBatchResponse]
	cancel   context.CancelFunc
	stats    *peerCounters
	lastRecv atomic.Int64 // unix nanoseconds of the last answer (or the open)
	out      sendBatcher[*raftpb.AppendEntriesRequest]
	msg      raftpb.AppendEntriesBatch // sendBatch's, reused for every batch

	mu     sync.Mutex
	routes map[uint64]*pipelineQueue // group -> pipelines awaiting answers
	err    error                     // set once the stream failed
}

// sendBatch sends one batch (sendBatcher.send).
func (st *appendStream) sendBatch(batch []*raftpb.AppendEntriesRequest) error {
	entries := 0
	for _, r := range batch {
		entries += len(r.Entries)
	}
	st.stats.sent.appendBatch(len(batch), entries)
	// Send encodes the message before it returns; nothing keeps it.
	st.msg.Requests = batch
	err := st.stream.Send(&st.msg)
	st.msg.Requests = nil
	return err
}

// pipelineQueue lists, oldest first, the pipeline of each request of one
// group that awaits an answer.
type pipelineQueue struct {
	q    []*appendPipeline
	head int
}

func (q *pipelineQueue) push(p *appendPipeline) {
	if q.head > 0 && q.head == len(q.q) {
		clear(q.q)
		q.q, q.head = q.q[:0], 0
	}
	q.q = append(q.q, p)
}

func (q *pipelineQueue) pop() *appendPipeline {
	if q.head == len(q.q) {
		return nil
	}
	p := q.q[q.head]
	q.q[q.head] = nil
	q.head++
	return p
}

func (st *appendStream) failed() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.err != nil
}

// send queues req of pipeline p for the stream (see sendBatcher). It
// returns an error only when the stream had failed before; a send that
// fails is left to the receive goroutine, which gets the stream's status
// from Recv and fails every pipeline with a request on it, p included.
func (st *appendStream) send(p *appendPipeline, req *raftpb.AppendEntriesRequest) error {
	st.mu.Lock()
	if err := st.err; err != nil {
		st.mu.Unlock()
		return err
	}
	q := st.routes[req.Group]
	if q == nil {
		q = &pipelineQueue{}
		st.routes[req.Group] = q
	}
	q.push(p) // before the request can be answered
	st.mu.Unlock()
	st.out.add(req)
	return nil
}

// receive hands every answer to its pipeline until the stream fails.
func (st *appendStream) receive() {
	defer st.x.streams.Done()
	for {
		msg, err := st.stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("AppendEntriesStream ended by the peer")
			}
			st.fail(err)
			return
		}
		st.lastRecv.Store(time.Now().UnixNano())
		st.stats.recv.answerBatch()
		for _, r := range msg.Responses {
			st.mu.Lock()
			var p *appendPipeline
			if q := st.routes[r.Group]; q != nil {
				p = q.pop()
			}
			st.mu.Unlock()
			if p == nil {
				st.fail(fmt.Errorf("an answer for group %d, which has no request outstanding", r.Group))
				return
			}
			p.answer(r)
		}
	}
}

// stalled fails the stream with err when nothing came back on it for d.
func (st *appendStream) stalled(d time.Duration, err error) {
	if time.Since(time.Unix(0, st.lastRecv.Load())) >= d {
		st.fail(err)
	}
}

// fail records that the stream failed, abandons it and aborts every
// pipeline with a request on it.
func (st *appendStream) fail(err error) {
	switch {
	case st.x.m.ctx.Err() != nil:
		err = raft.ErrTransportShutdown
	case status.Code(err) == codes.Unimplemented:
		st.x.setLegacy()
		err = errAppendStreamUnsupported
	}
	st.mu.Lock()
	if st.err != nil {
		st.mu.Unlock()
		return
	}
	st.err = err
	routes := st.routes
	st.routes = nil
	st.mu.Unlock()
	st.cancel()
	seen := make(map[*appendPipeline]bool)
	for _, q := range routes {
		for p := q.pop(); p != nil; p = q.pop() {
			if !seen[p] {
				seen[p] = true
				p.abort(p.g.outErr("AppendEntriesStream", st.x.target, err))
			}
		}
	}
}
