package copyset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chunkraft/chunkraft/proto/chunkraft/raftpb"
)

// transportServer is the inbound side of the TransportManager: it routes
// each request by its group id to that group's raft instance. An unknown or
// closed group is answered at once with codes.NotFound; a group closed while
// a request waits on raft gets codes.Unavailable.
type transportServer struct {
	raftpb.UnimplementedRaftTransportServer
	m *TransportManager
}

func (s *transportServer) group(id uint64) (*GroupTransport, error) {
	if g := s.m.lookup(id); g != nil && !g.isClosed() {
		return g, nil
	}
	s.m.log.Debug("raft RPC for unknown group", "group", id)
	return nil, status.Errorf(codes.NotFound, "raft group %d not found on %s", id, s.m.local)
}

// streamEnded logs how an inbound stream ended unless it ended normally or
// because the client went away.
func (s *transportServer) streamEnded(kind string, group uint64, err error) error {
	if c := status.Code(err); err != nil && c != codes.Canceled && c != codes.Unavailable && c != codes.DeadlineExceeded {
		s.m.log.Debug("raft stream ended", "stream", kind, "group", group, "error", err)
	}
	return err
}

// votesHeld returns an Unavailable status while holdVotes is in effect.
func (g *GroupTransport) votesHeld() error {
	if time.Now().UnixNano() < g.votesAfter.Load() {
		return status.Errorf(codes.Unavailable, "raft group %d on %s does not vote yet (restarted)", g.group, g.m.local)
	}
	return nil
}

func (g *GroupTransport) closedStatus() error {
	return status.Errorf(codes.Unavailable, "raft group %d closed on %s", g.group, g.m.local)
}

// dispatch hands one RPC to raft (the heartbeat handler when heartbeat is
// set and a handler is installed, the Consumer channel otherwise) and waits
// for raft's answer. The returned error is a gRPC status for transport-level
// failures only; raft's own error is in RPCResponse.Error. The response
// channel is buffered, so raft never blocks answering an abandoned RPC.
func (g *GroupTransport) dispatch(ctx context.Context, cmd any, rd io.Reader, heartbeat bool) (raft.RPCResponse, error) {
	respCh := make(chan raft.RPCResponse, 1)
	rpc := raft.RPC{Command: cmd, Reader: rd, RespChan: respCh}
	handled := false
	if heartbeat {
		if fn := g.heartbeatFn.Load(); fn != nil {
			(*fn)(rpc)
			handled = true
		}
	}
	if !handled {
		select {
		case g.consumeCh <- rpc:
		case <-ctx.Done():
			return raft.RPCResponse{}, status.FromContextError(ctx.Err()).Err()
		case <-g.ctx.Done():
			return raft.RPCResponse{}, g.closedStatus()
		}
	}
	select {
	case resp := <-respCh:
		return resp, nil
	case <-ctx.Done():
		return raft.RPCResponse{}, status.FromContextError(ctx.Err()).Err()
	case <-g.ctx.Done():
		return raft.RPCResponse{}, g.closedStatus()
	}
}

// raftErrStatus turns an error raft answered with into a status.
func raftErrStatus(err error) error {
	return status.Error(codes.Unknown, err.Error())
}

func (s *transportServer) AppendEntries(ctx context.Context, req *raftpb.AppendEntriesRequest) (*raftpb.AppendEntriesResponse, error) {
	g, err := s.group(req.Group)
	if err != nil {
		return nil, err
	}
	cmd := appendEntriesRequestFromProto(req)
	s.m.stats.peer(raft.ServerAddress(cmd.Addr)).recv.message(isRaftHeartbeat(cmd), len(cmd.Entries))
	resp, err := g.dispatch(ctx, cmd, nil, isRaftHeartbeat(cmd))
	if err != nil {
		return nil, err
	}
	return appendEntriesResponseToProto(resp), nil
}

// Heartbeats serves one peer server's heartbeat stream (see
// heartbeatBatcher): each batch is answered by one message, in order, and
// each heartbeat in it is handed to its group's heartbeat handler, which
// raft runs synchronously and which does not wait for the raft goroutine.
// A heartbeat that cannot be handed to raft (unknown or closed group, raft
// not running yet or shutting down) is answered with a status code.
func (s *transportServer) Heartbeats(stream grpc.BidiStreamingServer[raftpb.HeartbeatBatch, raftpb.HeartbeatBatchResponse]) error {
	// respCh is reused while raft answers synchronously, as it does.
	var respCh chan raft.RPCResponse
	var stats *peerCounters // the peer's, from its first heartbeat
	for {
		in, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return s.streamEnded("Heartbeats", 0, err)
		}
		if stats == nil && len(in.Requests) > 0 {
			stats = s.m.stats.peer(raft.ServerAddress(in.Requests[0].GetHeader().GetAddr()))
		}
		if stats != nil {
			stats.recv.heartbeatBatch(len(in.Requests))
		}
		out := &raftpb.HeartbeatBatchResponse{Responses: make([]*raftpb.AppendEntriesResponse, len(in.Requests))}
		for i, req := range in.Requests {
			if respCh == nil {
				respCh = make(chan raft.RPCResponse, 1)
			}
			var answered bool
			out.Responses[i], answered = s.heartbeat(req, respCh)
			if !answered {
				respCh = nil // raft may still answer on it
			}
		}
		if err := stream.Send(out); err != nil {
			return s.streamEnded("Heartbeats", 0, err)
		}
	}
}

// heartbeat hands one batched heartbeat to its group's heartbeat handler.
// answered is false when raft took the RPC but left respCh empty.
func (s *transportServer) heartbeat(req *raftpb.AppendEntriesRequest, respCh chan raft.RPCResponse) (resp *raftpb.AppendEntriesResponse, answered bool) {
	refuse := func(code codes.Code, format string, args ...any) *raftpb.AppendEntriesResponse {
		return &raftpb.AppendEntriesResponse{StatusCode: uint32(code), Error: fmt.Sprintf(format, args...)}
	}
	g := s.m.lookup(req.Group)
	if g == nil || g.isClosed() {
		return refuse(codes.NotFound, "raft group %d not found on %s", req.Group, s.m.local), true
	}
	cmd := appendEntriesRequestFromProto(req)
	if !isRaftHeartbeat(cmd) {
		return refuse(codes.InvalidArgument, "raft group %d: a batched AppendEntries that is not a heartbeat", req.Group), true
	}
	fn := g.heartbeatFn.Load()
	if fn == nil {
		return refuse(codes.Unavailable, "raft group %d on %s is not running yet", req.Group, s.m.local), true
	}
	(*fn)(raft.RPC{Command: cmd, RespChan: respCh})
	select {
	case r := <-respCh:
		return appendEntriesResponseToProto(r), true
	default:
		return refuse(codes.Unavailable, "raft group %d on %s did not answer a heartbeat (shutting down)", req.Group, s.m.local), false
	}
}

func (s *transportServer) RequestVote(ctx context.Context, req *raftpb.RequestVoteRequest) (*raftpb.RequestVoteResponse, error) {
	g, err := s.group(req.Group)
	if err != nil {
		return nil, err
	}
	if err := g.votesHeld(); err != nil {
		return nil, err
	}
	resp, err := g.dispatch(ctx, requestVoteRequestFromProto(req), nil, false)
	if err != nil {
		return nil, err
	}
	if resp.Error != nil {
		return nil, raftErrStatus(resp.Error)
	}
	r, _ := resp.Response.(*raft.RequestVoteResponse)
	return requestVoteResponseToProto(r), nil
}

func (s *transportServer) RequestPreVote(ctx context.Context, req *raftpb.RequestPreVoteRequest) (*raftpb.RequestPreVoteResponse, error) {
	g, err := s.group(req.Group)
	if err != nil {
		return nil, err
	}
	if err := g.votesHeld(); err != nil {
		return nil, err
	}
	resp, err := g.dispatch(ctx, requestPreVoteRequestFromProto(req), nil, false)
	if err != nil {
		return nil, err
	}
	if resp.Error != nil {
		return nil, raftErrStatus(resp.Error)
	}
	r, _ := resp.Response.(*raft.RequestPreVoteResponse)
	return requestPreVoteResponseToProto(r), nil
}

func (s *transportServer) TimeoutNow(ctx context.Context, req *raftpb.TimeoutNowRequest) (*raftpb.TimeoutNowResponse, error) {
	g, err := s.group(req.Group)
	if err != nil {
		return nil, err
	}
	resp, err := g.dispatch(ctx, timeoutNowRequestFromProto(req), nil, false)
	if err != nil {
		return nil, err
	}
	if resp.Error != nil {
		return nil, raftErrStatus(resp.Error)
	}
	r, _ := resp.Response.(*raft.TimeoutNowResponse)
	return timeoutNowResponseToProto(r), nil
}

// AppendEntriesPipeline serves one (group, peer) pipeline. Requests are
// handed to raft strictly in stream order and answered in the same order:
//
//   - a receive goroutine reads request N+1 (and decodes it) while raft works
//     on request N, hands it to the group's Consumer channel and queues its
//     response channel on pending;
//   - the handler goroutine takes response channels from pending in order,
//     waits for raft's answer and sends it.
//
// The handler returns on a stream error, on the client's cancellation or when
// the group closes; the receive goroutine ends with it (its Recv fails once
// the handler has returned and the stream is finished, and every other wait
// of it selects on done).
func (s *transportServer) AppendEntriesPipeline(stream grpc.BidiStreamingServer[raftpb.AppendEntriesRequest, raftpb.AppendEntriesResponse]) error {
	first, err := stream.Recv()
	if err == nil {
		err = s.appendEntriesPipeline(stream, first)
		return s.streamEnded("AppendEntriesPipeline", first.Group, err)
	}
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

func (s *transportServer) appendEntriesPipeline(stream grpc.BidiStreamingServer[raftpb.AppendEntriesRequest, raftpb.AppendEntriesResponse], first *raftpb.AppendEntriesRequest) error {
	g, err := s.group(first.Group)
	if err != nil {
		return err
	}
	ctx := stream.Context()
	pending := make(chan chan raft.RPCResponse, s.m.opts.MaxPipelineInFlight)
	recvErr := make(chan error, 1) // the receive goroutine's only exit report
	done := make(chan struct{})
	defer close(done)

	stats := s.m.stats.peer(raft.ServerAddress(first.GetHeader().GetAddr()))
	go func() {
		req := first
		for {
			stats.recv.message(false, len(req.Entries))
			if req.Group != g.group {
				recvErr <- status.Errorf(codes.InvalidArgument,
					"pipeline of raft group %d got a request for group %d", g.group, req.Group)
				return
			}
			respCh := make(chan raft.RPCResponse, 1)
			rpc := raft.RPC{Command: appendEntriesRequestFromProto(req), RespChan: respCh}
			select {
			case <-done:
				return
			default:
			}
			select {
			case g.consumeCh <- rpc:
			case <-done:
				return
			case <-g.ctx.Done():
				return // the handler sees it too
			}
			select {
			case pending <- respCh:
			case <-done:
				return
			}
			var err error
			if req, err = stream.Recv(); err != nil {
				recvErr <- err
				return
			}
		}
	}()

	send := func(respCh chan raft.RPCResponse) error {
		select {
		case resp := <-respCh:
			stats.sent.answerBatch()
			return stream.Send(appendEntriesResponseToProto(resp))
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-g.ctx.Done():
			return g.closedStatus()
		}
	}
	for {
		select {
		case respCh := <-pending:
			if err := send(respCh); err != nil {
				return err
			}
		case err := <-recvErr:
			if !errors.Is(err, io.EOF) {
				return err
			}
			// The client half-closed: answer what was handed to raft. The
			// receive goroutine has exited, so pending no longer grows.
			for len(pending) > 0 {
				if err := send(<-pending); err != nil {
					return err
				}
			}
			return nil
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-g.ctx.Done():
			return g.closedStatus()
		}
	}
}

// InstallSnapshot serves one snapshot transfer. The first message carries
// the request; the data of all messages is presented to raft as
// raft.RPC.Reader (exactly Size bytes). A receive goroutine feeds the reader
// so that raft's reads can be abandoned (group closed, handler gone, or no
// chunk within RPCTimeout) without waiting on the network.
func (s *transportServer) InstallSnapshot(stream grpc.ClientStreamingServer[raftpb.InstallSnapshotChunk, raftpb.InstallSnapshotResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return status.Error(codes.InvalidArgument, "empty snapshot stream")
		}
		return err
	}
	if first.Request == nil {
		return status.Error(codes.InvalidArgument, "first snapshot message carries no request")
	}
	err = s.installSnapshot(stream, first)
	return s.streamEnded("InstallSnapshot", first.Request.Group, err)
}

func (s *transportServer) installSnapshot(stream grpc.ClientStreamingServer[raftpb.InstallSnapshotChunk, raftpb.InstallSnapshotResponse], first *raftpb.InstallSnapshotChunk) error {
	g, err := s.group(first.Request.Group)
	if err != nil {
		return err
	}
	done := make(chan struct{})
	defer close(done)
	chunks := make(chan inboundSnapshotChunk)
	go func() {
		for {
			m, err := stream.Recv()
			select {
			case chunks <- inboundSnapshotChunk{data: m.GetData(), pad: m.GetPad(), err: err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()

	req := installSnapshotRequestFromProto(first.Request)
	rd := &inboundSnapshotReader{
		buf:       first.Data,
		pad:       first.GetPad(),
		remaining: max(req.Size, 0),
		chunks:    chunks,
		done:      done,
		closed:    g.ctx.Done(),
		idle:      s.m.opts.RPCTimeout,
	}
	resp, err := g.dispatch(stream.Context(), req, rd, false)
	if err != nil {
		return err
	}
	if resp.Error != nil {
		return raftErrStatus(resp.Error)
	}
	r, _ := resp.Response.(*raft.InstallSnapshotResponse)
	return stream.SendAndClose(installSnapshotResponseToProto(r))
}

type inboundSnapshotChunk struct {
	data []byte
	pad  int64 // zeros after data (InstallSnapshotChunk.pad)
	err  error
}

var (
	errTransportSnapshotAbandoned = errors.New("snapshot stream abandoned")
	errTransportSnapshotIdle      = errors.New("snapshot stream idle for too long")
)

// inboundSnapshotReader is the io.Reader raft reads an inbound snapshot from. It is
// used by raft's goroutine only.
type inboundSnapshotReader struct {
	buf       []byte
	pad       int64 // zeros to yield after buf
	remaining int64
	chunks    <-chan inboundSnapshotChunk
	done      <-chan struct{} // the handler returned
	closed    <-chan struct{} // the group closed
	idle      time.Duration
	timer     *time.Timer
	err       error
}

func (r *inboundSnapshotReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.remaining == 0 {
		return 0, io.EOF
	}
	for len(r.buf) == 0 && r.pad == 0 {
		if r.timer == nil {
			r.timer = time.NewTimer(r.idle)
		} else {
			r.timer.Reset(r.idle)
		}
		var c inboundSnapshotChunk
		select {
		case c = <-r.chunks:
		case <-r.done:
			r.err = errTransportSnapshotAbandoned
		case <-r.closed:
			r.err = raft.ErrTransportShutdown
		case <-r.timer.C:
			r.err = errTransportSnapshotIdle
		}
		r.timer.Stop()
		if r.err == nil && c.err != nil {
			r.err = c.err
			if errors.Is(c.err, io.EOF) {
				r.err = io.ErrUnexpectedEOF // fewer than Size bytes
			}
		}
		if r.err != nil {
			return 0, r.err
		}
		if c.pad < 0 {
			r.err = fmt.Errorf("snapshot stream: padding of %d bytes", c.pad)
			return 0, r.err
		}
		r.buf, r.pad = c.data, c.pad
	}
	if int64(len(p)) > r.remaining {
		p = p[:r.remaining]
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	if n == 0 {
		n = int(min(int64(len(p)), r.pad))
		clear(p[:n])
		r.pad -= int64(n)
	}
	r.remaining -= int64(n)
	return n, nil
}
