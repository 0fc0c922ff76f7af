package cli

import (
	"context"
	"fmt"
	"hash/crc32"
	"slices"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	chunkserverpb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	commonpb "github.com/chunkraft/chunkraft/proto/curve/common"
)

// The admin services of the fake cluster: membership, snapshots, broken
// copysets, server status, configuration and integrity jobs.

// replicas returns the servers hosting cs, ascending. Called with c.mu held.
func (c *fakeCluster) replicas(cs CopysetID) []int {
	var out []int
	for i := range c.servers {
		if c.hosts(i, cs) {
			out = append(out, i)
		}
	}
	return out
}

func (c *fakeCluster) peerList(idx []int) []*commonpb.Peer {
	out := make([]*commonpb.Peer, len(idx))
	for k, i := range idx {
		out[k] = &commonpb.Peer{Address: proto.String(c.servers[i].id)}
	}
	return out
}

// serverByID is the index of the server with peer id id, -1 if none.
func (c *fakeCluster) serverByID(id string) int {
	for i, s := range c.servers {
		if s.id == id {
			return i
		}
	}
	return -1
}

// copysetHash is crc32c over the copyset's chunks in id order, as server i
// sees them (a corrupt server sees a flipped byte). Called with c.mu held.
func (c *fakeCluster) copysetHash(i int, cs CopysetID) string {
	if h, ok := c.csHash[i]; ok {
		return h
	}
	var ids []uint64
	for k := range c.chunks {
		if k.CopysetID == cs {
			ids = append(ids, k.Chunk)
		}
	}
	slices.Sort(ids)
	var crc uint32
	for _, id := range ids {
		data := append([]byte(nil), c.chunks[ChunkID{CopysetID: cs, Chunk: id}]...)
		if c.corrupt[i] && len(data) > 0 {
			data[0] ^= 0xff
		}
		crc = crc32.Update(crc, castagnoli, data)
	}
	return strconv.FormatUint(uint64(crc), 10)
}

// leaderCheck is what a CliService2 change does first on the fake: the
// copyset must be hosted here and led by this server.
func (f *fakeCliService) leaderCheck(pool, copyset uint32, leader string) (CopysetID, error) {
	c := f.s.c
	cs := CopysetID{Pool: pool, Copyset: copyset}
	if !c.hosts(f.s.i, cs) {
		return cs, status.Errorf(codes.NotFound, "copyset %d/%d is not hosted on this server", pool, copyset)
	}
	if c.leaderOf(cs) != f.s.i || leader != f.s.id {
		return cs, status.Error(codes.FailedPrecondition, "not leader")
	}
	return cs, nil
}

// setMembers replaces the replicas of cs; the leader moves to the first one
// if it left. Called with c.mu held.
func (c *fakeCluster) setMembers(cs CopysetID, idx []int) {
	slices.Sort(idx)
	c.members[cs] = idx
	if !slices.Contains(idx, c.leaderOf(cs)) && len(idx) > 0 {
		c.csLeaders[cs] = idx[0]
	}
}

func (f *fakeCliService) AddPeer(ctx context.Context, req *chunkserverpb.AddPeerRequest2) (*chunkserverpb.AddPeerResponse2, error) {
	if f.s.enter(ctx, "AddPeer") {
		return nil, errStalled
	}
	c := f.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	cs, err := f.leaderCheck(req.GetLogicPoolId(), req.GetCopysetId(), req.GetLeader().GetAddress())
	if err != nil {
		return nil, err
	}
	add := c.serverByID(req.GetAddPeer().GetAddress())
	if add < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "unknown peer %s", req.GetAddPeer().GetAddress())
	}
	if _, created := c.created[cs][add]; !created && !c.hosts(add, cs) {
		return nil, status.Errorf(codes.FailedPrecondition, "add peer: %s does not host a replica of copyset %d/%d: "+
			"create an empty one there first (CreateCopysetNode with the current peers)", c.servers[add].id, cs.Pool, cs.Copyset)
	}
	old := c.replicas(cs)
	if !slices.Contains(old, add) {
		c.setMembers(cs, append(slices.Clone(old), add))
	}
	return &chunkserverpb.AddPeerResponse2{OldPeers: c.peerList(old), NewPeers: c.peerList(c.replicas(cs))}, nil
}

func (f *fakeCliService) RemovePeer(ctx context.Context, req *chunkserverpb.RemovePeerRequest2) (*chunkserverpb.RemovePeerResponse2, error) {
	if f.s.enter(ctx, "RemovePeer") {
		return nil, errStalled
	}
	c := f.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	cs, err := f.leaderCheck(req.GetLogicPoolId(), req.GetCopysetId(), req.GetLeader().GetAddress())
	if err != nil {
		return nil, err
	}
	rm := c.serverByID(req.GetRemovePeer().GetAddress())
	old := c.replicas(cs)
	var keep []int
	for _, i := range old {
		if i != rm {
			keep = append(keep, i)
		}
	}
	c.setMembers(cs, keep)
	return &chunkserverpb.RemovePeerResponse2{OldPeers: c.peerList(old), NewPeers: c.peerList(keep)}, nil
}

func (f *fakeCliService) ChangePeers(ctx context.Context, req *chunkserverpb.ChangePeersRequest2) (*chunkserverpb.ChangePeersResponse2, error) {
	if f.s.enter(ctx, "ChangePeers") {
		return nil, errStalled
	}
	c := f.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	cs, err := f.leaderCheck(req.GetLogicPoolId(), req.GetCopysetId(), req.GetLeader().GetAddress())
	if err != nil {
		return nil, err
	}
	var idx []int
	for _, p := range req.GetNewPeers() {
		i := c.serverByID(p.GetAddress())
		if i < 0 {
			return nil, status.Errorf(codes.InvalidArgument, "unknown peer %s", p.GetAddress())
		}
		idx = append(idx, i)
	}
	old := c.replicas(cs)
	c.setMembers(cs, idx)
	return &chunkserverpb.ChangePeersResponse2{OldPeers: c.peerList(old), NewPeers: c.peerList(c.replicas(cs))}, nil
}

func (f *fakeCliService) ResetPeer(ctx context.Context, req *chunkserverpb.ResetPeerRequest2) (*chunkserverpb.ResetPeerResponse2, error) {
	if f.s.enter(ctx, "ResetPeer") {
		return nil, errStalled
	}
	c := f.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	cs := CopysetID{Pool: req.GetLogicPoolId(), Copyset: req.GetCopysetId()}
	if !c.hosts(f.s.i, cs) {
		return nil, status.Errorf(codes.NotFound, "copyset %d/%d is not hosted on this server", cs.Pool, cs.Copyset)
	}
	if req.GetRequestPeer().GetAddress() != f.s.id {
		return nil, status.Errorf(codes.InvalidArgument, "requestPeer %s is not this server (%s)", req.GetRequestPeer().GetAddress(), f.s.id)
	}
	c.resets[f.s.i] = req
	return &chunkserverpb.ResetPeerResponse2{}, nil
}

func (f *fakeCliService) Snapshot(ctx context.Context, req *chunkserverpb.SnapshotRequest2) (*chunkserverpb.SnapshotResponse2, error) {
	if f.s.enter(ctx, "Snapshot") {
		return nil, errStalled
	}
	c := f.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	cs := CopysetID{Pool: req.GetLogicPoolId(), Copyset: req.GetCopysetId()}
	if !c.hosts(f.s.i, cs) {
		return nil, status.Errorf(codes.NotFound, "copyset %d/%d is not hosted on this server", cs.Pool, cs.Copyset)
	}
	if p := req.GetPeer().GetAddress(); p != "" && p != f.s.id {
		return nil, status.Errorf(codes.InvalidArgument, "peer %s is not this server", p)
	}
	if c.states[f.s.i] == StateError {
		return nil, status.Error(codes.Internal, "replica is broken")
	}
	return &chunkserverpb.SnapshotResponse2{}, nil
}

func (f *fakeCliService) SnapshotAll(ctx context.Context, req *chunkserverpb.SnapshotAllRequest) (*chunkserverpb.SnapshotAllResponse, error) {
	if f.s.enter(ctx, "SnapshotAll") {
		return nil, errStalled
	}
	return &chunkserverpb.SnapshotAllResponse{}, nil
}

// DeleteBrokenCopyset deletes a replica in state ERROR (states[i] == 5).
func (f *fakeCopysetService) DeleteBrokenCopyset(ctx context.Context, req *chunkserverpb.CopysetRequest) (*chunkserverpb.CopysetResponse, error) {
	if f.s.enter(ctx, "DeleteBrokenCopyset") {
		return nil, errStalled
	}
	c := f.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	cs := CopysetID{Pool: req.GetLogicPoolId(), Copyset: req.GetCopysetId()}
	reply := func(st chunkserverpb.COPYSET_OP_STATUS) (*chunkserverpb.CopysetResponse, error) {
		return &chunkserverpb.CopysetResponse{Status: st.Enum()}, nil
	}
	switch {
	case !c.hosts(f.s.i, cs):
		return reply(chunkserverpb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_FAILURE_UNKNOWN)
	case c.states[f.s.i] != StateError:
		return reply(chunkserverpb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_COPYSET_IS_HEALTHY)
	}
	var keep []int
	for _, i := range c.replicas(cs) {
		if i != f.s.i {
			keep = append(keep, i)
		}
	}
	c.setMembers(cs, keep)
	return reply(chunkserverpb.COPYSET_OP_STATUS_COPYSET_OP_STATUS_SUCCESS)
}

type fakeChunkServerService struct {
	chunkserverpb.UnimplementedChunkServerServiceServer
	s *fakeServer
}

func (f *fakeChunkServerService) ChunkServerStatus(ctx context.Context, _ *chunkserverpb.ChunkServerStatusRequest) (*chunkserverpb.ChunkServerStatusResponse, error) {
	if f.s.enter(ctx, "ChunkServerStatus") {
		return nil, errStalled
	}
	c := f.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return &chunkserverpb.ChunkServerStatusResponse{CopysetLoadFin: proto.Bool(!c.loading[f.s.i])}, nil
}

type fakeConfigService struct {
	chunkserverpb.UnimplementedConfigServiceServer
	s *fakeServer
}

func configReply(ok bool, value string) *chunkserverpb.ConfigResponse {
	st := chunkserverpb.CONFIG_OP_STATUS_CONFIG_OP_STATUS_SUCCESS
	if !ok {
		st = chunkserverpb.CONFIG_OP_STATUS_CONFIG_OP_STATUS_FAILURE_UNKNOWN
	}
	return &chunkserverpb.ConfigResponse{Status: st.Enum(), Value: proto.String(value)}
}

func (f *fakeConfigService) Get(ctx context.Context, req *chunkserverpb.ConfigRequest) (*chunkserverpb.ConfigResponse, error) {
	if f.s.enter(ctx, "ConfigGet") {
		return nil, errStalled
	}
	c := f.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.config[f.s.i][req.GetKey()]
	if !ok {
		return configReply(false, fmt.Sprintf("unknown key %q", req.GetKey())), nil
	}
	return configReply(true, v), nil
}

// Set changes any known key but "listen", which needs a restart.
func (f *fakeConfigService) Set(ctx context.Context, req *chunkserverpb.ConfigRequest) (*chunkserverpb.ConfigResponse, error) {
	if f.s.enter(ctx, "ConfigSet") {
		return nil, errStalled
	}
	c := f.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	k := req.GetKey()
	if _, ok := c.config[f.s.i][k]; !ok {
		return configReply(false, fmt.Sprintf("unknown key %q", k)), nil
	}
	if k == "listen" {
		return configReply(false, "listen cannot change at runtime: restart the server"), nil
	}
	c.config[f.s.i][k] = req.GetValue()
	return configReply(true, req.GetValue()), nil
}

func (f *fakeConfigService) Dump(ctx context.Context, req *chunkserverpb.ConfigRequest) (*chunkserverpb.ConfigResponse, error) {
	if f.s.enter(ctx, "ConfigDump") {
		return nil, errStalled
	}
	c := f.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	var keys []string
	for k := range c.config[f.s.i] {
		if p := req.GetKey(); p == "" || k == p || strings.HasPrefix(k, p+".") {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return configReply(false, fmt.Sprintf("no key under %q", req.GetKey())), nil
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, c.config[f.s.i][k])
	}
	return configReply(true, b.String()), nil
}

// fakeIntegrityService keeps the jobs of every copyset in the cluster (as if
// replicated). Like the server, only the leader of the job's copyset (pool
// from the request metadata, else 1) serves; anything else answers
// FAILURE_UNKNOWN with the reason, and the leader's peer id when known, in
// trailers.
type fakeIntegrityService struct {
	chunkserverpb.UnimplementedIntegrityServiceServer
	s *fakeServer
}

func integrityReply(ok bool, jobs ...*chunkserverpb.IntegrityJob) *chunkserverpb.IntegrityResponse {
	st := chunkserverpb.INTEGRITY_OP_STATUS_INTEGRITY_OP_STATUS_SUCCESS
	if !ok {
		st = chunkserverpb.INTEGRITY_OP_STATUS_INTEGRITY_OP_STATUS_FAILURE_UNKNOWN
	}
	r := &chunkserverpb.IntegrityResponse{Status: st.Enum()}
	for _, j := range jobs {
		r.Job = append(r.Job, proto.Clone(j).(*chunkserverpb.IntegrityJob))
	}
	return r
}

// integrityFail is the server's FAILURE_UNKNOWN: reason (and leader) in
// trailers.
func integrityFail(ctx context.Context, reason, leader string) *chunkserverpb.IntegrityResponse {
	md := metadata.Pairs(integrityErrorKey, reason)
	if leader != "" {
		md.Append(integrityLeaderKey, leader)
	}
	_ = grpc.SetTrailer(ctx, md)
	return integrityReply(false)
}

// do checks leadership of the job's copyset and runs fn with c.mu held; a
// non-empty reason from fn is a FAILURE_UNKNOWN.
func (f *fakeIntegrityService) do(ctx context.Context, method string, req *chunkserverpb.IntegrityRequest,
	fn func(c *fakeCluster, job *chunkserverpb.IntegrityJob) (*chunkserverpb.IntegrityResponse, string)) (*chunkserverpb.IntegrityResponse, error) {
	if f.s.enter(ctx, method) {
		return nil, errStalled
	}
	c := f.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	pool := uint64(1)
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get(integrityPoolKey)) > 0 {
		pool, _ = strconv.ParseUint(md.Get(integrityPoolKey)[0], 10, 32)
	}
	c.lastPool = uint32(pool)
	cs := CopysetID{Pool: uint32(pool), Copyset: uint32(req.GetJob().GetCopyset())}
	if !c.hosts(f.s.i, cs) {
		return integrityFail(ctx, fmt.Sprintf("copyset %d/%d is not hosted on this server", cs.Pool, cs.Copyset), ""), nil
	}
	if l := c.leaderOf(cs); l != f.s.i {
		if l < 0 || !c.hints {
			return integrityFail(ctx, "not leader, leader unknown", ""), nil
		}
		return integrityFail(ctx, "not leader, leader is "+c.servers[l].id, c.servers[l].id), nil
	}
	resp, reason := fn(c, req.GetJob())
	if reason != "" {
		return integrityFail(ctx, reason, ""), nil
	}
	if c.mismatch != nil {
		md := metadata.MD{}
		for _, j := range resp.GetJob() {
			md.Append(integrityMismatchesKey, fmt.Sprintf("%d=%d", j.GetId(), c.mismatch[j.GetId()]))
		}
		_ = grpc.SetTrailer(ctx, md)
	}
	return resp, nil
}

// findJob returns the stored job with the request's id and copyset.
func (c *fakeCluster) findJob(req *chunkserverpb.IntegrityJob) *chunkserverpb.IntegrityJob {
	for _, j := range c.jobs {
		if j.GetId() == req.GetId() && j.GetCopyset() == req.GetCopyset() {
			return j
		}
	}
	return nil
}

func (f *fakeIntegrityService) ScheduleJob(ctx context.Context, req *chunkserverpb.IntegrityRequest) (*chunkserverpb.IntegrityResponse, error) {
	return f.do(ctx, "ScheduleJob", req, func(c *fakeCluster, job *chunkserverpb.IntegrityJob) (*chunkserverpb.IntegrityResponse, string) {
		j := &chunkserverpb.IntegrityJob{
			Id: proto.Int32(int32(len(c.jobs) + 1)), Copyset: proto.Int32(job.GetCopyset()),
			State:    chunkserverpb.INTEGRITY_JOB_STATE_INTEGRITY_OP_STATE_WAITING.Enum(),
			Progress: proto.Int32(0), SchedTime: proto.Int32(job.GetSchedTime()), StartTime: proto.Int32(0),
		}
		c.jobs = append(c.jobs, j)
		return integrityReply(true, j), ""
	})
}

// transition returns a handler moving a job from one of the states in from
// to state to.
func transition(what string, to chunkserverpb.INTEGRITY_JOB_STATE, from ...chunkserverpb.INTEGRITY_JOB_STATE) func(c *fakeCluster, job *chunkserverpb.IntegrityJob) (*chunkserverpb.IntegrityResponse, string) {
	return func(c *fakeCluster, job *chunkserverpb.IntegrityJob) (*chunkserverpb.IntegrityResponse, string) {
		j := c.findJob(job)
		switch {
		case j == nil:
			return nil, what + ": no such integrity job"
		case !slices.Contains(from, j.GetState()):
			return nil, fmt.Sprintf("%s: job %d is %s", what, j.GetId(), ScanStateName(j.GetState()))
		}
		j.State = to.Enum()
		return integrityReply(true, j), ""
	}
}

func (f *fakeIntegrityService) CancelJob(ctx context.Context, req *chunkserverpb.IntegrityRequest) (*chunkserverpb.IntegrityResponse, error) {
	return f.do(ctx, "CancelJob", req, transition("cancel", chunkserverpb.INTEGRITY_JOB_STATE_INTEGRITY_OP_STATE_CANCELED,
		chunkserverpb.INTEGRITY_JOB_STATE_INTEGRITY_OP_STATE_WAITING, chunkserverpb.INTEGRITY_JOB_STATE_INTEGRITY_OP_STATE_RUNNING,
		chunkserverpb.INTEGRITY_JOB_STATE_INTEGRITY_OP_STATE_PAUSED))
}

func (f *fakeIntegrityService) PauseJob(ctx context.Context, req *chunkserverpb.IntegrityRequest) (*chunkserverpb.IntegrityResponse, error) {
	return f.do(ctx, "PauseJob", req, transition("pause", chunkserverpb.INTEGRITY_JOB_STATE_INTEGRITY_OP_STATE_PAUSED,
		chunkserverpb.INTEGRITY_JOB_STATE_INTEGRITY_OP_STATE_WAITING, chunkserverpb.INTEGRITY_JOB_STATE_INTEGRITY_OP_STATE_RUNNING))
}

func (f *fakeIntegrityService) ResumeJob(ctx context.Context, req *chunkserverpb.IntegrityRequest) (*chunkserverpb.IntegrityResponse, error) {
	return f.do(ctx, "ResumeJob", req, transition("resume", chunkserverpb.INTEGRITY_JOB_STATE_INTEGRITY_OP_STATE_RUNNING,
		chunkserverpb.INTEGRITY_JOB_STATE_INTEGRITY_OP_STATE_PAUSED))
}

// ListJobs returns the jobs of every copyset (the client keeps its own).
func (f *fakeIntegrityService) ListJobs(ctx context.Context, req *chunkserverpb.IntegrityRequest) (*chunkserverpb.IntegrityResponse, error) {
	return f.do(ctx, "ListJobs", req, func(c *fakeCluster, _ *chunkserverpb.IntegrityJob) (*chunkserverpb.IntegrityResponse, string) {
		return integrityReply(true, c.jobs...), ""
	})
}
