package copyset

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/chunkraft/chunkraft/proto/chunkraft/raftpb"
)

// AppendEntriesStream serves one peer server's shared AppendEntries stream
// (see appendStream). Each group's requests are handed to its raft in
// stream order and answered in the same order; groups do not wait for each
// other. Per group on the stream, a lane:
//
//   - hands a request to raft's Consumer channel from the stream's
//     goroutine when raft takes it at once and nothing of the group is
//     queued before it; otherwise the lane's dispatcher goroutine does,
//     so that a group whose raft is busy (a follower writing its log)
//     never holds up the requests of the others;
//   - its responder goroutine waits for raft's answers in order and queues
//     them for the stream, which sends them in batches (sendBatcher).
//
// A request raft cannot take (an unknown or closed group) is answered, in
// its place in the group's order, with a status code. The handler returns
// when the stream ends; on the client's half-close it answers what it
// handed to raft first.
func (s *transportServer) AppendEntriesStream(stream grpc.BidiStreamingServer[raftpb.AppendEntriesBatch, raftpb.AppendEntriesBatchResponse]) error {
	h := &appendStreamHandler{s: s, stream: stream, lanes: make(map[uint64]*appendLane), reapAt: laneReapMin, done: make(chan struct{})}
	h.out.send = h.sendAnswers
	err := h.serve()
	if err != nil {
		close(h.done)
	} else {
		for _, l := range h.lanes {
			close(l.in)
		}
	}
	h.wg.Wait()
	if err == nil {
		h.out.mu.Lock()
		err = h.out.err
		h.out.mu.Unlock()
	}
	return s.streamEnded("AppendEntriesStream", 0, err)
}

type appendStreamHandler struct {
	s      *transportServer
	stream grpc.BidiStreamingServer[raftpb.AppendEntriesBatch, raftpb.AppendEntriesBatchResponse]
	stats  *peerCounters // the peer's, from its first request
	lanes  map[uint64]*appendLane
	reapAt int           // lanes at which lane looks for lanes to stop (reap)
	done   chan struct{} // closed when the stream failed: lanes stop
	wg     sync.WaitGroup
	// out sends the lanes' answers; after a failed send the stream is
	// broken and Recv fails too, which ends the handler.
	out sendBatcher[*raftpb.AppendEntriesResponse]
	msg raftpb.AppendEntriesBatchResponse // sendAnswers', reused for every batch
}

// serve receives batches until the stream ends: nil on the client's
// half-close.
func (h *appendStreamHandler) serve() error {
	for {
		in, err := h.stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if h.stats == nil && len(in.Requests) > 0 {
			h.stats = h.s.m.stats.peer(raft.ServerAddress(in.Requests[0].GetHeader().GetAddr()))
		}
		if h.stats != nil {
			entries := 0
			for _, r := range in.Requests {
				entries += len(r.Entries)
			}
			h.stats.recv.appendBatch(len(in.Requests), entries)
		}
		for _, req := range in.Requests {
			h.lane(req.Group).take(req)
		}
	}
}

// lane returns the lane of group, starting it on the group's first
// request.
func (h *appendStreamHandler) lane(group uint64) *appendLane {
	l := h.lanes[group]
	if l == nil {
		if len(h.lanes) >= h.reapAt {
			h.reap()
			h.reapAt = 2*len(h.lanes) + laneReapMin
		}
		depth := 4 * h.s.m.opts.MaxPipelineInFlight
		l = &appendLane{h: h, group: group,
			in:      make(chan laneRequest, depth),
			pending: make(chan laneAnswer, depth),
		}
		h.lanes[group] = l
		h.wg.Add(2)
		go l.dispatch()
		go l.respond()
	}
	return l
}

// laneReapMin is the fewest lanes a stream keeps before it looks for
// lanes to stop.
const laneReapMin = 64

// reap stops the lanes of groups this server no longer has that have no
// request outstanding (their goroutines exit), so that a long-lived stream
// does not keep two goroutines for every copyset its peer ever led here.
// A later request of such a group starts a new lane. Only the stream's
// goroutine calls it, so no request is added to a lane meanwhile.
func (h *appendStreamHandler) reap() {
	for group, l := range h.lanes {
		if l.outstanding.Load() == 0 && h.s.m.lookup(group) == nil {
			close(l.in)
			delete(h.lanes, group)
		}
	}
}

// sendAnswers sends one batch of answers (sendBatcher.send).
func (h *appendStreamHandler) sendAnswers(batch []*raftpb.AppendEntriesResponse) error {
	if h.stats != nil {
		h.stats.sent.answerBatch()
	}
	// Send encodes the message before it returns; nothing keeps it.
	h.msg.Responses = batch
	err := h.stream.Send(&h.msg)
	h.msg.Responses = nil
	return err
}

// appendLane carries one group's requests of a stream to its raft and the
// answers back, in order.
type appendLane struct {
	h     *appendStreamHandler
	group uint64
	g     *GroupTransport // the group's transport last looked up

	// in feeds the dispatcher; queued counts what was put in it and not
	// yet handed to raft (only the stream's goroutine adds to it).
	in     chan laneRequest
	queued atomic.Int32
	// outstanding counts the requests taken and not yet answered (added
	// to by the stream's goroutine, taken from by the responder).
	outstanding atomic.Int32
	pending     chan laneAnswer // handed to raft (or refused), in order
}

// laneAnswer is raft's answer to come on respCh, or resp when the request
// was refused.
type laneAnswer struct {
	g      *GroupTransport
	respCh chan raft.RPCResponse
	resp   *raftpb.AppendEntriesResponse
}

// transport returns the live transport of the lane's group, or nil.
func (l *appendLane) transport() *GroupTransport {
	if l.g == nil || l.g.isClosed() {
		l.g = l.h.s.m.lookup(l.group)
	}
	if l.g == nil || l.g.isClosed() {
		return nil
	}
	return l.g
}

func (l *appendLane) refused() laneAnswer {
	return laneAnswer{resp: &raftpb.AppendEntriesResponse{
		StatusCode: uint32(codes.NotFound),
		Error:      fmt.Sprintf("raft group %d not found on %s", l.group, l.h.s.m.local),
	}}
}

// laneRespChans recycles the channels raft answers lanes' requests on.
// Raft answers an RPC once, with one send on its RespChan: a channel goes
// back to the pool once its answer was received, never while raft may
// still hold it (a request whose answer did not come is left to the GC).
var laneRespChans = sync.Pool{New: func() any { return make(chan raft.RPCResponse, 1) }}

// laneRequest is a request converted for raft, with the channel raft
// answers it on.
type laneRequest struct {
	rpc    raft.RPC
	respCh chan raft.RPCResponse
}

// take is called by the stream's goroutine for each request of the group,
// in order.
func (l *appendLane) take(req *raftpb.AppendEntriesRequest) {
	l.outstanding.Add(1)
	respCh := laneRespChans.Get().(chan raft.RPCResponse)
	r := laneRequest{rpc: raft.RPC{Command: appendEntriesRequestFromProto(req), RespChan: respCh}, respCh: respCh}
	if l.queued.Load() == 0 {
		g := l.transport()
		if g == nil {
			l.put(l.refused())
			return
		}
		select {
		case g.consumeCh <- r.rpc:
			l.put(laneAnswer{g: g, respCh: respCh})
			return
		default: // raft is busy: the dispatcher waits for it
		}
	}
	l.queued.Add(1)
	select {
	case l.in <- r:
	case <-l.h.done:
	}
}

// put queues an answer for the responder.
func (l *appendLane) put(a laneAnswer) {
	select {
	case l.pending <- a:
	case <-l.h.done:
	}
}

// dispatch hands the requests queued in in to raft, waiting for it.
func (l *appendLane) dispatch() {
	defer l.h.wg.Done()
	defer close(l.pending)
	for {
		var r laneRequest
		select {
		case x, ok := <-l.in:
			if !ok {
				return
			}
			r = x
		case <-l.h.done:
			return
		}
		var a laneAnswer
		if g := l.transport(); g == nil {
			a = l.refused()
		} else {
			select {
			case g.consumeCh <- r.rpc:
				a = laneAnswer{g: g, respCh: r.respCh}
			case <-g.ctx.Done():
				a = laneAnswer{resp: closedAnswer(g)}
			case <-l.h.done:
				return
			}
		}
		l.put(a)
		l.queued.Add(-1)
	}
}

func closedAnswer(g *GroupTransport) *raftpb.AppendEntriesResponse {
	return &raftpb.AppendEntriesResponse{
		StatusCode: uint32(codes.Unavailable),
		Error:      fmt.Sprintf("raft group %d closed on %s", g.group, g.m.local),
	}
}

// respond waits for raft's answers in order and queues them for the
// stream.
func (l *appendLane) respond() {
	defer l.h.wg.Done()
	for {
		var a laneAnswer
		select {
		case x, ok := <-l.pending:
			if !ok {
				return
			}
			a = x
		case <-l.h.done:
			return
		}
		out := a.resp
		if out == nil {
			select {
			case r := <-a.respCh:
				laneRespChans.Put(a.respCh)
				out = appendEntriesResponseToProto(r)
			case <-a.g.ctx.Done():
				out = closedAnswer(a.g)
			case <-l.h.done:
				return
			}
		}
		out.Group = l.group
		l.h.out.add(out)
		l.outstanding.Add(-1)
	}
}
