package cli

import (
	"context"
	"hash/crc32"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/proto/chunkraft/clusterpb"
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
	sns       map[ChunkID]uint64                     // chunk sn
	snaps     map[ChunkID]fakeSnap                   // COW snapshots
	corrected map[ChunkID]uint64                     // corrected sn
	clones    map[ChunkID]fakeClone                  // clone chunks
	epochs    map[int]map[uint64]uint64              // server -> file id -> epoch
	corrupt   map[int]bool                           // GetChunkHash on these servers sees a flipped byte
	reqs      map[string]*chunkserverpb.ChunkRequest // method -> last request served
	created   map[CopysetID]map[int][]string         // copyset -> server -> peer ids
	calls     map[int]map[string]int                 // server -> method -> count

	// Per-copyset overrides and admin state (see admin_fake_test.go).
	csLeaders map[CopysetID]int            // leader of one copyset, overriding leader
	members   map[CopysetID][]int          // replicas of one copyset, overriding "all but notHosted"
	states    map[int]uint32               // forced replica state per server (5 = broken)
	csStates  map[CopysetID]map[int]uint32 // ... per copyset, first
	csApplied map[CopysetID]map[int]int64  // applied index per copyset and server, first
	commit    int64                        // every leader's commit index (default 10)
	applied   map[int]int64                // applied index per server (default commit)
	csHash    map[int]string               // copyset hash per server, overriding the computed one
	noHash    bool                         // GetCopysetStatus ignores queryHash
	loading   map[int]bool                 // ChunkServerStatus: copysets not loaded yet
	config    map[int]map[string]string    // ConfigService per server
	jobs      []*chunkserverpb.IntegrityJob
	mismatch  map[int32]int // job id -> mismatches found; nil: no mismatches trailer (an older server)
	lastPool  uint32        // the pool of the last IntegrityService request
	resets    map[int]*chunkserverpb.ResetPeerRequest2
	refuse    map[string]codes.Code // method -> error code the leader answers with
	invalid   bool                  // WriteChunk answers INVALID_REQUEST (a rule the client does not check)
	conf      map[CopysetID][]int   // the configuration every replica of a copyset reports, overriding its replicas
	behind    map[int]int           // the next hash answers of a server come from one index back, with an older hash
	noIndex   bool                  // hash answers carry no applied index trailer
	fences    map[int]string        // the write fence owner server i reports (set at index 7), "" none
	// clusterMap is what the Cluster service answers (nil: Unimplemented,
	// a server that predates it); mapSeeds the seeds of the last request.
	clusterMap *clusterpb.ClusterMapResponse
	mapSeeds   []string
}

type fakeSnap struct {
	sn   uint64
	data []byte
}

type fakeClone struct {
	location        string
	sn, correctedSn uint64
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
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = "127.0.0.1:0"
	}
	return newFakeClusterAt(t, addrs)
}

// newFakeClusterAt starts a fake server listening on each of addrs.
func newFakeClusterAt(t *testing.T, addrs []string) *fakeCluster {
	t.Helper()
	c := &fakeCluster{
		leader:    0,
		hints:     true,
		notHosted: map[int]bool{},
		stall:     map[int]bool{},
		chunks:    map[ChunkID][]byte{},
		sns:       map[ChunkID]uint64{},
		snaps:     map[ChunkID]fakeSnap{},
		corrected: map[ChunkID]uint64{},
		clones:    map[ChunkID]fakeClone{},
		epochs:    map[int]map[uint64]uint64{},
		corrupt:   map[int]bool{},
		reqs:      map[string]*chunkserverpb.ChunkRequest{},
		created:   map[CopysetID]map[int][]string{},
		calls:     map[int]map[string]int{},
		csLeaders: map[CopysetID]int{},
		members:   map[CopysetID][]int{},
		states:    map[int]uint32{},
		csStates:  map[CopysetID]map[int]uint32{},
		csApplied: map[CopysetID]map[int]int64{},
		commit:    10,
		applied:   map[int]int64{},
		csHash:    map[int]string{},
		loading:   map[int]bool{},
		config:    map[int]map[string]string{},
		resets:    map[int]*chunkserverpb.ResetPeerRequest2{},
		refuse:    map[string]codes.Code{},
		conf:      map[CopysetID][]int{},
		behind:    map[int]int{},
		fences:    map[int]string{},
	}
	for i, addr := range addrs {
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		s := &fakeServer{c: c, i: i, id: lis.Addr().String() + ":0", gs: grpc.NewServer(grpc.MaxRecvMsgSize(maxMessageSize))}
		chunkserverpb.RegisterChunkServiceServer(s.gs, &fakeChunkService{s: s})
		chunkserverpb.RegisterCliService2Server(s.gs, &fakeCliService{s: s})
		chunkserverpb.RegisterCopysetServiceServer(s.gs, &fakeCopysetService{s: s})
		chunkserverpb.RegisterChunkServerServiceServer(s.gs, &fakeChunkServerService{s: s})
		chunkserverpb.RegisterConfigServiceServer(s.gs, &fakeConfigService{s: s})
		chunkserverpb.RegisterIntegrityServiceServer(s.gs, &fakeIntegrityService{s: s})
		clusterpb.RegisterClusterServer(s.gs, &fakeClusterService{s: s})
		go func() { _ = s.gs.Serve(lis) }()
		t.Cleanup(s.gs.Stop)
		c.servers = append(c.servers, s)
		c.calls[i] = map[string]int{}
		c.epochs[i] = map[uint64]uint64{}
		c.config[i] = map[string]string{"log_level": "info", "max_inflight": "5000", "listen": s.addr(), "raft.trailing_logs": "10240"}
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

// hosts reports whether server i has a replica of cs. Called with c.mu held.
func (c *fakeCluster) hosts(i int, cs CopysetID) bool {
	if m, ok := c.members[cs]; ok {
		return slices.Contains(m, i)
	}
	return !c.notHosted[i]
}

// leaderOf is the index of the leader of cs, -1 for none. Called with c.mu
// held.
func (c *fakeCluster) leaderOf(cs CopysetID) int {
	if l, ok := c.csLeaders[cs]; ok {
		return l
	}
	return c.leader
}

// route decides where a chunk request goes: SUCCESS means "serve it here".
// Called with c.mu held.
func (s *fakeServer) route(cs CopysetID) (chunkserverpb.CHUNK_OP_STATUS, string) {
	c := s.c
	if !c.hosts(s.i, cs) {
		return chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_COPYSET_NOTEXIST, ""
	}
	if leader := c.leaderOf(cs); leader != s.i {
		hint := ""
		if c.hints && leader >= 0 {
			hint = c.servers[leader].id
		}
		return chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_REDIRECTED, hint
	}
	return chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, ""
}

// fenced reports whether req carries a file epoch older than the one this
// server holds (the real server checks this before anything else but
// validation). Called with c.mu held.
func (s *fakeServer) fenced(req *chunkserverpb.ChunkRequest) bool {
	return req.FileId != nil && req.Epoch != nil && req.GetEpoch() < s.c.epochs[s.i][req.GetFileId()]
}

// lastRequest returns the last request of method the leader served.
func (c *fakeCluster) lastRequest(method string) *chunkserverpb.ChunkRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reqs[method]
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
	if f.s.fenced(req) {
		return chunkReply(chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_EPOCH_TOO_OLD, ""), nil
	}
	if st, hint := f.s.route(chunkKey(req).CopysetID); st != chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
		return chunkReply(st, hint), nil
	}
	c.reqs["WriteChunk"] = req
	off, size := uint64(req.GetOffset()), uint64(req.GetSize())
	if c.invalid || req.GetOpType() != chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_WRITE || size == 0 ||
		size != uint64(len(req.GetData())) || off+size > fakeChunkSize {
		return chunkReply(chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST, ""), nil
	}
	k := chunkKey(req)
	buf, exists := c.chunks[k]
	switch sn := req.GetSn(); {
	case !exists:
		c.sns[k] = sn
	case sn < c.sns[k]:
		return chunkReply(chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_BACKWARD, ""), nil
	case sn > c.sns[k]: // copy on write: keep the old version
		if _, ok := c.snaps[k]; !ok && sn > c.corrected[k] {
			c.snaps[k] = fakeSnap{sn: c.sns[k], data: append([]byte(nil), buf...)}
		}
		c.sns[k] = sn
	}
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
	if st, hint := f.s.route(chunkKey(req).CopysetID); st != chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
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
	if f.s.fenced(req) {
		return chunkReply(chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_EPOCH_TOO_OLD, ""), nil
	}
	if st, hint := f.s.route(chunkKey(req).CopysetID); st != chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
		return chunkReply(st, hint), nil
	}
	c.reqs["DeleteChunk"] = req
	k := chunkKey(req)
	delete(c.chunks, k)
	delete(c.sns, k)
	delete(c.snaps, k)
	delete(c.corrected, k)
	delete(c.clones, k)
	return chunkReply(chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, ""), nil
}

func (f *fakeChunkService) GetChunkInfo(ctx context.Context, req *chunkserverpb.GetChunkInfoRequest) (*chunkserverpb.GetChunkInfoResponse, error) {
	if f.s.enter(ctx, "GetChunkInfo") {
		return nil, errStalled
	}
	c := f.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	k := ChunkID{CopysetID: CopysetID{Pool: req.GetLogicPoolId(), Copyset: req.GetCopysetId()}, Chunk: req.GetChunkId()}
	st, hint := f.s.route(k.CopysetID)
	r := &chunkserverpb.GetChunkInfoResponse{Status: st.Enum()}
	if hint != "" {
		r.Redirect = proto.String(hint)
	}
	if _, ok := c.chunks[k]; ok && st == chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
		r.ChunkSn = []uint64{c.sns[k]}
		if snap, ok := c.snaps[k]; ok {
			r.ChunkSn = append(r.ChunkSn, snap.sn)
		}
	}
	return r, nil
}

// serve does what every leader-routed chunk op of the fake does first:
// count, route, check op type, record. A non-nil reply is the answer.
// Called with c.mu held.
func (f *fakeChunkService) serve(method string, req *chunkserverpb.ChunkRequest, op chunkserverpb.CHUNK_OP_TYPE) *chunkserverpb.ChunkResponse {
	if st, hint := f.s.route(chunkKey(req).CopysetID); st != chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
		return chunkReply(st, hint)
	}
	f.s.c.reqs[method] = req
	if req.GetOpType() != op {
		return chunkReply(chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST, "")
	}
	return nil
}

func (f *fakeChunkService) ReadChunkSnapshot(ctx context.Context, req *chunkserverpb.ChunkRequest) (*chunkserverpb.ChunkResponse, error) {
	if f.s.enter(ctx, "ReadChunkSnapshot") {
		return nil, errStalled
	}
	c := f.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := f.serve("ReadChunkSnapshot", req, chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_READ_SNAP); r != nil {
		return r, nil
	}
	off, size := uint64(req.GetOffset()), uint64(req.GetSize())
	if size == 0 || off+size > fakeChunkSize || req.GetSn() == 0 {
		return chunkReply(chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST, ""), nil
	}
	k := chunkKey(req)
	var buf []byte
	if snap, ok := c.snaps[k]; ok && snap.sn == req.GetSn() {
		buf = snap.data
	} else if data, ok := c.chunks[k]; ok && c.sns[k] == req.GetSn() {
		buf = data
	} else {
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

func (f *fakeChunkService) DeleteChunkSnapshotOrCorrectSn(ctx context.Context, req *chunkserverpb.ChunkRequest) (*chunkserverpb.ChunkResponse, error) {
	if f.s.enter(ctx, "DeleteChunkSnapshotOrCorrectSn") {
		return nil, errStalled
	}
	c := f.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := f.serve("DeleteChunkSnapshotOrCorrectSn", req, chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_DELETE_SNAP); r != nil {
		return r, nil
	}
	k := chunkKey(req)
	if _, ok := c.snaps[k]; ok {
		delete(c.snaps, k)
	} else if _, ok := c.chunks[k]; ok {
		c.corrected[k] = req.GetCorrectedSn()
	}
	return chunkReply(chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, ""), nil
}

// CreateCloneChunk makes a clone whose data is the source's at once (the
// fake has no lazy reads): a @cs source chunk's bytes from the offset, an
// @s3 object's are zeros.
func (f *fakeChunkService) CreateCloneChunk(ctx context.Context, req *chunkserverpb.ChunkRequest) (*chunkserverpb.ChunkResponse, error) {
	if f.s.enter(ctx, "CreateCloneChunk") {
		return nil, errStalled
	}
	c := f.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := f.serve("CreateCloneChunk", req, chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_CREATE_CLONE); r != nil {
		return r, nil
	}
	loc, err := ParseCloneLocation(req.GetLocation())
	if err != nil || req.GetSize() != fakeChunkSize || req.GetSn() == 0 {
		return chunkReply(chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST, ""), nil
	}
	k := chunkKey(req)
	want := fakeClone{location: req.GetLocation(), sn: req.GetSn(), correctedSn: req.GetCorrectedSn()}
	if _, ok := c.chunks[k]; ok {
		if c.clones[k] == want {
			return chunkReply(chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, ""), nil
		}
		return chunkReply(chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_CHUNK_EXIST, ""), nil
	}
	data := make([]byte, fakeChunkSize)
	if src, ok := c.chunks[loc.Source]; ok && loc.Kind == LocationCS && loc.Offset < uint64(len(src)) {
		copy(data, src[loc.Offset:])
	}
	c.chunks[k], c.sns[k], c.clones[k] = data, want.sn, want
	return chunkReply(chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, ""), nil
}

func (f *fakeChunkService) RecoverChunk(ctx context.Context, req *chunkserverpb.ChunkRequest) (*chunkserverpb.ChunkResponse, error) {
	if f.s.enter(ctx, "RecoverChunk") {
		return nil, errStalled
	}
	c := f.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := f.serve("RecoverChunk", req, chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_RECOVER); r != nil {
		return r, nil
	}
	off, size := uint64(req.GetOffset()), uint64(req.GetSize())
	if size == 0 || off+size > fakeChunkSize {
		return chunkReply(chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST, ""), nil
	}
	if _, ok := c.chunks[chunkKey(req)]; !ok {
		return chunkReply(chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_CHUNK_NOTEXIST, ""), nil
	}
	return chunkReply(chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, ""), nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// GetChunkHash answers on any replica that hosts the copyset: crc32c of the
// range of the (shared) data, with a byte flipped on corrupt servers.
func (f *fakeChunkService) GetChunkHash(ctx context.Context, req *chunkserverpb.GetChunkHashRequest) (*chunkserverpb.GetChunkHashResponse, error) {
	if f.s.enter(ctx, "GetChunkHash") {
		return nil, errStalled
	}
	c := f.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	reply := func(st chunkserverpb.CHUNK_OP_STATUS, hash string) (*chunkserverpb.GetChunkHashResponse, error) {
		r := &chunkserverpb.GetChunkHashResponse{Status: st.Enum()}
		if hash != "" {
			r.Hash = proto.String(hash)
		}
		return r, nil
	}
	if !c.hosts(f.s.i, CopysetID{Pool: req.GetLogicPoolId(), Copyset: req.GetCopysetId()}) {
		return reply(chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_COPYSET_NOTEXIST, "")
	}
	off, n := uint64(req.GetOffset()), uint64(req.GetLength())
	if n == 0 || off+n > fakeChunkSize {
		return reply(chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST, "")
	}
	buf, ok := c.chunks[ChunkID{CopysetID: CopysetID{Pool: req.GetLogicPoolId(), Copyset: req.GetCopysetId()}, Chunk: req.GetChunkId()}]
	if !ok {
		return reply(chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, "0")
	}
	data := make([]byte, n)
	if off < uint64(len(buf)) {
		copy(data, buf[off:])
	}
	if c.corrupt[f.s.i] {
		data[0] ^= 0xff
	}
	hash := strconv.FormatUint(uint64(crc32.Checksum(data, castagnoli)), 10)
	if c.hashAt(ctx, f.s.i, c.appliedOf(f.s.i, CopysetID{Pool: req.GetLogicPoolId(), Copyset: req.GetCopysetId()})) {
		hash = "older"
	}
	return reply(chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, hash)
}

// appliedOf is server i's applied index of cs. Called with c.mu held.
func (c *fakeCluster) appliedOf(i int, cs CopysetID) int64 {
	if a, ok := c.csApplied[cs][i]; ok {
		return a
	}
	if a, ok := c.applied[i]; ok {
		return a
	}
	return c.commit
}

// hashAt sends the applied index of a hash answer of server i as a trailer
// (unless noIndex): applied, or one less while the server is behind, which
// it reports (the caller then answers an older hash). Called with c.mu held.
func (c *fakeCluster) hashAt(ctx context.Context, i int, applied int64) bool {
	behind := c.behind[i] > 0
	if behind {
		c.behind[i]--
		applied--
	}
	if !c.noIndex {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(appliedTrailerKey, strconv.FormatInt(applied, 10)))
	}
	return behind
}

// UpdateEpoch is a per-server fence: lower than the stored epoch is refused.
func (f *fakeChunkService) UpdateEpoch(ctx context.Context, req *chunkserverpb.UpdateEpochRequest) (*chunkserverpb.UpdateEpochResponse, error) {
	if f.s.enter(ctx, "UpdateEpoch") {
		return nil, errStalled
	}
	c := f.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	st := chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS
	if req.GetEpoch() < c.epochs[f.s.i][req.GetFileId()] {
		st = chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_EPOCH_TOO_OLD
	} else {
		c.epochs[f.s.i][req.GetFileId()] = req.GetEpoch()
	}
	return &chunkserverpb.UpdateEpochResponse{Status: st.Enum()}, nil
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
	cs := CopysetID{Pool: req.GetLogicPoolId(), Copyset: req.GetCopysetId()}
	if !c.hosts(f.s.i, cs) {
		return nil, status.Error(codes.NotFound, "copyset not hosted here")
	}
	leader := c.leaderOf(cs)
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
	cs := CopysetID{Pool: req.GetLogicPoolId(), Copyset: req.GetCopysetId()}
	if c.leaderOf(cs) != f.s.i || req.GetLeader().GetAddress() != f.s.id {
		return nil, status.Error(codes.FailedPrecondition, "not leader")
	}
	if code, ok := c.refuse["TransferLeader"]; ok {
		return nil, status.Error(code, "transfer refused")
	}
	for i, s := range c.servers {
		if s.id == req.GetTransferee().GetAddress() && c.hosts(i, cs) {
			if _, ok := c.csLeaders[cs]; ok {
				c.csLeaders[cs] = i
			} else {
				c.leader = i
			}
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
	if _, ok := c.created[cs][f.s.i]; ok || slices.Contains(c.members[cs], f.s.i) {
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
	cs := CopysetID{Pool: req.GetLogicPoolId(), Copyset: req.GetCopysetId()}
	if !c.hosts(f.s.i, cs) {
		return &chunkserverpb.CopysetStatusResponse{Status: chunkserverpb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_COPYSET_NOTEXIST.Enum()}, nil
	}
	if req.GetPeer().GetAddress() != f.s.id {
		return &chunkserverpb.CopysetStatusResponse{Status: chunkserverpb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_FAILURE_UNKNOWN.Enum()}, nil
	}
	applied := c.appliedOf(f.s.i, cs)
	r := &chunkserverpb.CopysetStatusResponse{
		Status:            chunkserverpb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_SUCCESS.Enum(),
		State:             proto.Uint32(4), // braft follower
		Peer:              &commonpb.Peer{Address: proto.String(f.s.id)},
		Term:              proto.Int64(3),
		CommittedIndex:    proto.Int64(c.commit),
		KnownAppliedIndex: proto.Int64(applied),
		FirstIndex:        proto.Int64(1),
		LastIndex:         proto.Int64(c.commit),
		Epoch:             proto.Uint64(1),
	}
	leader := c.leaderOf(cs)
	if leader >= 0 {
		r.Leader = &commonpb.Peer{Address: proto.String(c.servers[leader].id)}
	}
	if leader == f.s.i {
		r.State = proto.Uint32(1) // braft leader
	}
	if st, ok := c.csStates[cs][f.s.i]; ok {
		r.State = proto.Uint32(st)
	} else if st, ok := c.states[f.s.i]; ok {
		r.State = proto.Uint32(st)
	}
	if req.GetQueryHash() && !c.noHash {
		r.Hash = proto.String(c.copysetHash(f.s.i, cs))
		if c.hashAt(ctx, f.s.i, applied) {
			r.Hash = proto.String("older")
		}
	}
	conf, ok := c.conf[cs]
	if !ok {
		conf = c.replicas(cs)
	}
	ids := make([]string, len(conf))
	for k, m := range conf {
		ids[k] = c.servers[m].id
	}
	_ = grpc.SetTrailer(ctx, metadata.Pairs(peersTrailerKey, strings.Join(ids, ","), committedPeersTrailerKey, strings.Join(ids, ",")))
	if owner := c.fences[f.s.i]; owner != "" {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(writeFenceTrailerKey, owner, writeFenceSinceKey, "7"))
	}
	return r, nil
}

// block is s padded with zero bytes to whole BlockSize blocks: chunk I/O
// the client accepts.
func block(s string) []byte {
	n := (len(s) + BlockSize - 1) / BlockSize * BlockSize
	return append([]byte(s), make([]byte, max(n, BlockSize)-len(s))...)
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

// fakeClusterService answers ClusterMap with fakeCluster.clusterMap.
type fakeClusterService struct {
	clusterpb.UnimplementedClusterServer
	s *fakeServer
}

func (f *fakeClusterService) ClusterMap(_ context.Context, req *clusterpb.ClusterMapRequest) (*clusterpb.ClusterMapResponse, error) {
	c := f.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.clusterMap == nil {
		return nil, status.Error(codes.Unimplemented, "no Cluster service")
	}
	c.mapSeeds = req.GetSeeds()
	return c.clusterMap, nil
}
