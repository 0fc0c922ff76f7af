package cli

import (
	"context"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	chunkserverpb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	commonpb "github.com/chunkraft/chunkraft/proto/curve/common"
)

const fakeChunkSize = 16 << 20

// fakeCluster is an in-process stand-in for a few chunkservers: every server
// hosts every copyset (unless told otherwise) and one of them is the leader
// of all of them. Data is shared, as if replication were instant.
type fakeCluster struct {
	mu        sync.Mutex
	servers   []*fakeServer
	leader    int          // index of the leader, -1 for none
	hints     bool         // REDIRECTED replies name the leader
	notHosted map[int]bool // servers that host no copyset
	stall     map[int]bool // servers whose handlers block until the caller gives up
	stale     int          // GetLeader answers staleLeader while stale > 0 ...
	staleTo   int          // ... with this server as leader
	chunks    map[ChunkID][]byte
	created   map[CopysetID]map[int][]string // copyset -> server -> peer ids
	calls     map[int]map[string]int         // server -> method -> count
}

type fakeServer struct {
	c  *fakeCluster
	i  int
	id string // "127.0.0.1:port:0"
	gs *grpc.Server
}

func (s *fakeServer) addr() string { a, _ := PeerAddr(s.id); return a }

// newFakeCluster starts n fake servers. Like the real server must, they accept
// messages larger than gRPC's 4 MiB default so a whole chunk fits.
func newFakeCluster(t *testing.T, n int) *fakeCluster {
	t.Helper()
	c := &fakeCluster{
		leader:    0,
		hints:     true,
		notHosted: map[int]bool{},
		stall:     map[int]bool{},
		chunks:    map[ChunkID][]byte{},
		created:   map[CopysetID]map[int][]string{},
		calls:     map[int]map[string]int{},
	}
	for i := range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := &fakeServer{c: c, i: i, id: lis.Addr().String() + ":0", gs: grpc.NewServer(grpc.MaxRecvMsgSize(maxMessageSize))}
		chunkserverpb.RegisterChunkServiceServer(s.gs, &fakeChunkService{s: s})
		chunkserverpb.RegisterCliService2Server(s.gs, &fakeCliService{s: s})
		chunkserverpb.RegisterCopysetServiceServer(s.gs, &fakeCopysetService{s: s})
		go func() { _ = s.gs.Serve(lis) }()
		t.Cleanup(s.gs.Stop)
		c.servers = append(c.servers, s)
		c.calls[i] = map[string]int{}
	}
	return c
}

func (c *fakeCluster) addrs() []string {
	out := make([]string, len(c.servers))
	for i, s := range c.servers {
		out[i] = s.addr()
	}
	return out
}

func (c *fakeCluster) setLeader(i int) {
	c.mu.Lock()
	c.leader = i
	c.mu.Unlock()
}

func (c *fakeCluster) getLeader() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leader
}

func (c *fakeCluster) count(i int, method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[i][method]
}

func (c *fakeCluster) with(fn func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fn()
}

// enter counts a call and blocks it if the server is stalled. It reports
// whether the server is stalled (the caller has then given up).
func (s *fakeServer) enter(ctx context.Context, method string) bool {
	s.c.mu.Lock()
	s.c.calls[s.i][method]++
	stalled := s.c.stall[s.i]
	s.c.mu.Unlock()
	if stalled {
		<-ctx.Done()
	}
	return stalled
}

// route decides where a chunk request goes: SUCCESS means "serve it here".
// Called with c.mu held.
func (s *fakeServer) route() (chunkserverpb.CHUNK_OP_STATUS, string) {
	c := s.c
	if c.notHosted[s.i] {
		return chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_COPYSET_NOTEXIST, ""
	}
	if c.leader != s.i {
		hint := ""
		if c.hints && c.leader >= 0 {
			hint = c.servers[c.leader].id
		}
		return chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_REDIRECTED, hint
	}
	return chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, ""
}

func chunkKey(req *chunkserverpb.ChunkRequest) ChunkID {
	return ChunkID{CopysetID: CopysetID{Pool: req.GetLogicPoolId(), Copyset: req.GetCopysetId()}, Chunk: req.GetChunkId()}
}

func chunkReply(st chunkserverpb.CHUNK_OP_STATUS, redirect string) *chunkserverpb.ChunkResponse {
	r := &chunkserverpb.ChunkResponse{Status: st.Enum()}
	if redirect != "" {
		r.Redirect = proto.String(redirect)
	}
	return r
}

var errStalled = status.Error(codes.DeadlineExceeded, "stalled")

type fakeChunkService struct {
	chunkserverpb.UnimplementedChunkServiceServer
	s *fakeServer
}

func (f *fakeChunkService) WriteChunk(ctx context.Context, req *chunkserverpb.ChunkRequest) (*chunkserverpb.ChunkResponse, error) {
	if f.s.enter(ctx, "WriteChunk") {
		return nil, errStalled
	}
	c := f.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, hint := f.s.route(); st != chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
		return chunkReply(st, hint), nil
	}
	off, size := uint64(req.GetOffset()), uint64(req.GetSize())
	if req.GetOpType() != chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_WRITE || size == 0 ||
		size != uint64(len(req.GetData())) || off+size > fakeChunkSize {
		return chunkReply(chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST, ""), nil
	}
	k := chunkKey(req)
	buf := c.chunks[k]
	if uint64(len(buf)) < off+size {
		buf = append(buf, make([]byte, off+size-uint64(len(buf)))...)
	}
	copy(buf[off:], req.GetData())
	c.chunks[k] = buf
	return chunkReply(chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, ""), nil
}

func (f *fakeChunkService) ReadChunk(ctx context.Context, req *chunkserverpb.ChunkRequest) (*chunkserverpb.ChunkResponse, error) {
	if f.s.enter(ctx, "ReadChunk") {
		return nil, errStalled
	}
	c := f.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, hint := f.s.route(); st != chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
		return chunkReply(st, hint), nil
	}
	off, size := uint64(req.GetOffset()), uint64(req.GetSize())
	if size == 0 || off+size > fakeChunkSize {
		return chunkReply(chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST, ""), nil
	}
	buf, ok := c.chunks[chunkKey(req)]
	if !ok {
		return chunkReply(chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_CHUNK_NOTEXIST, ""), nil
	}
	out := make([]byte, size)
	if off < uint64(len(buf)) {
		copy(out, buf[off:])
	}
	r := chunkReply(chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, "")
	r.Data = out
	return r, nil
}

func (f *fakeChunkService) DeleteChunk(ctx context.Context, req *chunkserverpb.ChunkRequest) (*chunkserverpb.ChunkResponse, error) {
	if f.s.enter(ctx, "DeleteChunk") {
		return nil, errStalled
	}
	c := f.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, hint := f.s.route(); st != chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
		return chunkReply(st, hint), nil
	}
	delete(c.chunks, chunkKey(req))
	return chunkReply(chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, ""), nil
}

func (f *fakeChunkService) GetChunkInfo(ctx context.Context, req *chunkserverpb.GetChunkInfoRequest) (*chunkserverpb.GetChunkInfoResponse, error) {
	if f.s.enter(ctx, "GetChunkInfo") {
		return nil, errStalled
	}
	c := f.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	st, hint := f.s.route()
	r := &chunkserverpb.GetChunkInfoResponse{Status: st.Enum()}
	if hint != "" {
		r.Redirect = proto.String(hint)
	}
	k := ChunkID{CopysetID: CopysetID{Pool: req.GetLogicPoolId(), Copyset: req.GetCopysetId()}, Chunk: req.GetChunkId()}
	if _, ok := c.chunks[k]; ok && st == chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
		r.ChunkSn = []uint64{1}
	}
	return r, nil
}

type fakeCliService struct {
	chunkserverpb.UnimplementedCliService2Server
	s *fakeServer
}

func (f *fakeCliService) GetLeader(ctx context.Context, req *chunkserverpb.GetLeaderRequest2) (*chunkserverpb.GetLeaderResponse2, error) {
	if f.s.enter(ctx, "GetLeader") {
		return nil, errStalled
	}
	c := f.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.notHosted[f.s.i] {
		return nil, status.Error(codes.NotFound, "copyset not hosted here")
	}
	leader := c.leader
	if c.stale > 0 {
		c.stale--
		leader = c.staleTo
	}
	if leader < 0 {
		return nil, status.Error(codes.Unavailable, "no leader")
	}
	return &chunkserverpb.GetLeaderResponse2{Leader: &commonpb.Peer{Address: proto.String(c.servers[leader].id)}}, nil
}

func (f *fakeCliService) TransferLeader(ctx context.Context, req *chunkserverpb.TransferLeaderRequest2) (*chunkserverpb.TransferLeaderResponse2, error) {
	if f.s.enter(ctx, "TransferLeader") {
		return nil, errStalled
	}
	c := f.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leader != f.s.i || req.GetLeader().GetAddress() != f.s.id {
		return nil, status.Error(codes.FailedPrecondition, "not leader")
	}
	for i, s := range c.servers {
		if s.id == req.GetTransferee().GetAddress() {
			c.leader = i
			return &chunkserverpb.TransferLeaderResponse2{}, nil
		}
	}
	return nil, status.Errorf(codes.InvalidArgument, "%s is not a peer", req.GetTransferee().GetAddress())
}

type fakeCopysetService struct {
	chunkserverpb.UnimplementedCopysetServiceServer
	s *fakeServer
}

func (f *fakeCopysetService) CreateCopysetNode(ctx context.Context, req *chunkserverpb.CopysetRequest) (*chunkserverpb.CopysetResponse, error) {
	if f.s.enter(ctx, "CreateCopysetNode") {
		return nil, errStalled
	}
	c := f.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	cs := CopysetID{Pool: req.GetLogicPoolId(), Copyset: req.GetCopysetId()}
	if c.created[cs] == nil {
		c.created[cs] = map[int][]string{}
	}
	if _, ok := c.created[cs][f.s.i]; ok {
		return &chunkserverpb.CopysetResponse{Status: chunkserverpb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_EXIST.Enum()}, nil
	}
	c.created[cs][f.s.i] = req.GetPeerid()
	return &chunkserverpb.CopysetResponse{Status: chunkserverpb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_SUCCESS.Enum()}, nil
}

func (f *fakeCopysetService) GetCopysetStatus(ctx context.Context, req *chunkserverpb.CopysetStatusRequest) (*chunkserverpb.CopysetStatusResponse, error) {
	if f.s.enter(ctx, "GetCopysetStatus") {
		return nil, errStalled
	}
	c := f.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.notHosted[f.s.i] {
		return &chunkserverpb.CopysetStatusResponse{Status: chunkserverpb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_COPYSET_NOTEXIST.Enum()}, nil
	}
	if req.GetPeer().GetAddress() != f.s.id {
		return &chunkserverpb.CopysetStatusResponse{Status: chunkserverpb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_FAILURE_UNKNOWN.Enum()}, nil
	}
	r := &chunkserverpb.CopysetStatusResponse{
		Status:            chunkserverpb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_SUCCESS.Enum(),
		State:             proto.Uint32(4), // braft follower
		Peer:              &commonpb.Peer{Address: proto.String(f.s.id)},
		Term:              proto.Int64(3),
		CommittedIndex:    proto.Int64(10),
		KnownAppliedIndex: proto.Int64(10),
		FirstIndex:        proto.Int64(1),
		LastIndex:         proto.Int64(10),
		Epoch:             proto.Uint64(1),
	}
	if c.leader >= 0 {
		r.Leader = &commonpb.Peer{Address: proto.String(c.servers[c.leader].id)}
	}
	if c.leader == f.s.i {
		r.State = proto.Uint32(1) // braft leader
	}
	return r, nil
}

// deadAddr returns an address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := lis.Addr().String()
	lis.Close()
	return a
}
