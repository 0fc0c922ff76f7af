package integrity

// IntegrityService, ScanService and the /integrity HTTP endpoint.
//
// IntegrityService must reach the copyset's leader: a follower, a server
// not hosting the copyset or a broken replica answers FAILURE_UNKNOWN (with
// no job). The copyset is Job.copyset of the request; its logical
// pool is 1 unless the gRPC metadata key PoolMetadataKey names
// another. Every FAILURE_UNKNOWN carries the reason in the trailer key
// ErrorTrailerKey and, from a follower that knows the leader, the
// leader's peer id in LeaderTrailerKey. The request's
// Job has required fields (proto2): callers fill all of them
// (zeros where unused).
//
//	ScheduleJob(copyset, sched_time)  a new WAITING job; sched_time is unix
//	                                  seconds, 0 = now. Answers the job with
//	                                  the id the replicated op assigned.
//	PauseJob(copyset, id)             WAITING|RUNNING -> PAUSED (PAUSED: no-op)
//	ResumeJob(copyset, id)            PAUSED -> RUNNING if it had started,
//	                                  else WAITING (WAITING|RUNNING: no-op)
//	CancelJob(copyset, id)            WAITING|RUNNING|PAUSED -> CANCELED
//	                                  (CANCELED: no-op)
//	ListJobs(copyset)                 every job of the copyset, ascending id
//	                                  (a linearizable read on the leader)
//
// A transition that is not allowed (pause or resume of a FINISHED,
// CANCELED or FAILED job, cancel of a FINISHED or FAILED one) or an unknown
// id is FAILURE_UNKNOWN, with the job in its current state when it exists.
// A copyset keeps its 16 newest terminal jobs and at most 64 others.
//
// Job has no field for what a scan found. Every SUCCESS reply
// carries each of its jobs' mismatch count in the trailer key
// MismatchesTrailerKey, one "<id>=<count>" value per job (Curve's
// message is left as it is). Mismatches are logged
// (slog Warn "integrity scan mismatch"), counted in
// chunkraft_scan_mismatches_total{reason}, kept in the replicated job
// state (integrity.jsonl in the copyset data dir) and served as JSON by
// GET /integrity[?pool=P][&copyset=C] on the metrics listener (see
// Report): every copyset this server hosts; with pool=P those of
// pool P; with copyset=C copyset P/C alone (pool 1 unless given), 404 when
// this server does not host it. Any replica answers with its applied view;
// the leader's ("is_leader": true) is authoritative.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/chunkraft/chunkraft/copyset"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// gRPC metadata keys of IntegrityService.
const (
	// PoolMetadataKey (request) is the logical pool of the copyset
	// named by Job.copyset; 1 when absent.
	PoolMetadataKey = "chunkraft-logic-pool-id"
	// ErrorTrailerKey (response trailer) says why a request got
	// FAILURE_UNKNOWN.
	ErrorTrailerKey = "chunkraft-error"
	// LeaderTrailerKey (response trailer) is the leader's peer id
	// when a follower that knows it answers FAILURE_UNKNOWN.
	LeaderTrailerKey = "chunkraft-leader"
	// MismatchesTrailerKey (response trailer of a SUCCESS) holds
	// one "<id>=<count>" value per job of the reply: the mismatches the job
	// found so far (Job.MismatchCount).
	MismatchesTrailerKey = "chunkraft-mismatches"
)

// Report is the JSON body of GET /integrity.
type Report struct {
	Peer     string          `json:"peer"` // the answering server
	Copysets []CopysetReport `json:"copysets"`
}

// CopysetReport is one copyset's jobs as this replica has applied
// them.
type CopysetReport struct {
	Pool     uint32 `json:"pool"`
	Copyset  uint32 `json:"copyset"`
	Leader   string `json:"leader"`
	IsLeader bool   `json:"is_leader"`
	// AppliedIndex is the log index of the last job op in this view.
	AppliedIndex uint64 `json:"applied_index"`
	Jobs         []*Job `json:"jobs"`
}

// integrityService implements curve.chunkserver.IntegrityService.
type integrityService struct {
	pb.UnimplementedIntegrityServiceServer
	in *Service
}

// succeed answers SUCCESS with jobs, their mismatch counts in the trailer.
func succeed(ctx context.Context, jobs ...*Job) *pb.IntegrityResponse {
	var counts []string
	for _, j := range jobs {
		if j != nil {
			counts = append(counts, fmt.Sprintf("%d=%d", j.ID, j.MismatchCount))
		}
	}
	if len(counts) > 0 {
		_ = grpc.SetTrailer(ctx, metadata.MD{MismatchesTrailerKey: counts})
	}
	return integrityResponse(pb.INTEGRITY_OP_STATUS_INTEGRITY_OP_STATUS_SUCCESS, jobs...)
}

func integrityResponse(st pb.INTEGRITY_OP_STATUS, jobs ...*Job) *pb.IntegrityResponse {
	resp := &pb.IntegrityResponse{Status: st.Enum()}
	for _, j := range jobs {
		if j != nil {
			resp.Job = append(resp.Job, j.toPB())
		}
	}
	return resp
}

// fail answers FAILURE_UNKNOWN with the reason (and leader hint) in the
// trailer, and job if there is one.
func (s *integrityService) fail(ctx context.Context, what string, err error, job *Job) *pb.IntegrityResponse {
	md := metadata.Pairs(ErrorTrailerKey, what+": "+err.Error())
	var (
		nl *copyset.NotLeaderError
		ou *copyset.OutcomeUnknownError
	)
	switch {
	case errors.As(err, &nl) && nl.Leader != "":
		md.Append(LeaderTrailerKey, string(nl.Leader))
	case errors.As(err, &ou) && ou.Leader != "":
		md.Append(LeaderTrailerKey, string(ou.Leader))
	}
	_ = grpc.SetTrailer(ctx, md)
	s.in.log.Debug("integrity request failed", "what", what, "err", err)
	return integrityResponse(pb.INTEGRITY_OP_STATUS_INTEGRITY_OP_STATUS_FAILURE_UNKNOWN, job)
}

// leader returns the leader replica of the request's copyset and its
// integrity machine.
func (s *integrityService) leader(ctx context.Context, req *pb.IntegrityRequest) (*copyset.Node, *Machine, error) {
	pool := uint64(1)
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(PoolMetadataKey); len(v) > 0 {
			p, err := strconv.ParseUint(v[0], 10, 32)
			if err != nil {
				return nil, nil, fmt.Errorf("metadata %s=%q: not a pool id", PoolMetadataKey, v[0])
			}
			pool = p
		}
	}
	cs := req.GetJob().GetCopyset()
	if cs < 0 {
		return nil, nil, fmt.Errorf("copyset %d: negative", cs)
	}
	n := s.in.copysets.Get(copyset.NewGroupID(uint32(pool), uint32(cs)))
	switch {
	case n == nil:
		return nil, nil, fmt.Errorf("copyset %d/%d is not hosted on this server", pool, cs)
	case n.Broken() != nil:
		return nil, nil, fmt.Errorf("copyset %d/%d: %w", pool, cs, n.Broken())
	case !n.IsLeader():
		return nil, nil, &copyset.NotLeaderError{Leader: n.Leader()}
	}
	m := MachineOf(n)
	if m == nil {
		return nil, nil, fmt.Errorf("copyset %d/%d has no integrity state machine", pool, cs)
	}
	return n, m, nil
}

// propose replicates a job op and answers with the job it concerns.
func (s *integrityService) propose(ctx context.Context, what string, req *pb.IntegrityRequest, op *jobOp) (*pb.IntegrityResponse, error) {
	n, _, err := s.leader(ctx, req)
	if err != nil {
		return s.fail(ctx, what, err, nil), nil
	}
	if op.Type == opSchedule {
		op.Pool, op.Copyset = n.Group().Pool(), n.Group().Copyset()
	}
	res, err := proposeJobOp(ctx, n, op)
	if err != nil {
		return s.fail(ctx, what, err, nil), nil
	}
	if res.err != nil {
		return s.fail(ctx, what, res.err, res.job), nil
	}
	return succeed(ctx, res.job), nil
}

// ScheduleJob schedules a scan of the copyset at sched_time (0 = now).
func (s *integrityService) ScheduleJob(ctx context.Context, req *pb.IntegrityRequest) (*pb.IntegrityResponse, error) {
	at := int64(req.GetJob().GetSchedTime())
	if at < 0 {
		return s.fail(ctx, "schedule", fmt.Errorf("sched_time %d is negative", at), nil), nil
	}
	if at == 0 {
		at = time.Now().Unix()
	}
	return s.propose(ctx, "schedule", req, &jobOp{Type: opSchedule, SchedTime: at})
}

// CancelJob cancels job id.
func (s *integrityService) CancelJob(ctx context.Context, req *pb.IntegrityRequest) (*pb.IntegrityResponse, error) {
	return s.propose(ctx, "cancel", req, &jobOp{Type: opCancel, ID: req.GetJob().GetId(), Now: time.Now().Unix()})
}

// PauseJob pauses job id.
func (s *integrityService) PauseJob(ctx context.Context, req *pb.IntegrityRequest) (*pb.IntegrityResponse, error) {
	return s.propose(ctx, "pause", req, &jobOp{Type: opPause, ID: req.GetJob().GetId()})
}

// ResumeJob resumes job id.
func (s *integrityService) ResumeJob(ctx context.Context, req *pb.IntegrityRequest) (*pb.IntegrityResponse, error) {
	return s.propose(ctx, "resume", req, &jobOp{Type: opResume, ID: req.GetJob().GetId()})
}

// ListJobs lists every job of the copyset, linearizably.
func (s *integrityService) ListJobs(ctx context.Context, req *pb.IntegrityRequest) (*pb.IntegrityResponse, error) {
	n, m, err := s.leader(ctx, req)
	if err != nil {
		return s.fail(ctx, "list", err, nil), nil
	}
	if _, err := n.ReadBarrier(ctx); err != nil {
		return s.fail(ctx, "list", err, nil), nil
	}
	return succeed(ctx, m.Jobs()...), nil
}

// scanService implements curve.chunkserver.ScanService (see scan.go).
type scanService struct {
	pb.UnimplementedScanServiceServer
	in *Service
}

// FollowScanMap takes a follower's scan map of the range being scanned.
func (s *scanService) FollowScanMap(ctx context.Context, req *pb.FollowScanMapRequest) (*pb.FollowScanMapResponse, error) {
	return &pb.FollowScanMapResponse{RetCode: proto.Int32(s.in.followScanMap(ctx, req))}, nil
}

// report returns this server's view of the integrity jobs of the copysets
// matching pool and cs (nil = any).
func (in *Service) report(pool, cs *uint32) Report {
	rep := Report{Peer: string(in.deps.Local), Copysets: []CopysetReport{}}
	for _, n := range in.copysets.List() {
		g := n.Group()
		if (pool != nil && g.Pool() != *pool) || (cs != nil && g.Copyset() != *cs) {
			continue
		}
		m := MachineOf(n)
		if m == nil {
			continue
		}
		rep.Copysets = append(rep.Copysets, CopysetReport{
			Pool: g.Pool(), Copyset: g.Copyset(), Leader: string(n.Leader()), IsLeader: n.IsLeader(),
			AppliedIndex: m.Applied(), Jobs: m.Jobs(),
		})
	}
	return rep
}

// ServeHTTP serves GET /integrity[?pool=P][&copyset=C].
func (in *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	parse := func(name string) (*uint32, bool) {
		s := q.Get(name)
		if s == "" {
			return nil, true
		}
		v, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			http.Error(w, fmt.Sprintf("bad %s %q", name, s), http.StatusBadRequest)
			return nil, false
		}
		u := uint32(v)
		return &u, true
	}
	pool, ok := parse("pool")
	if !ok {
		return
	}
	cs, ok := parse("copyset")
	if !ok {
		return
	}
	if cs != nil && pool == nil {
		one := uint32(1)
		pool = &one
	}
	rep := in.report(pool, cs)
	if cs != nil && len(rep.Copysets) == 0 {
		http.Error(w, fmt.Sprintf("copyset %d/%d is not hosted on this server", *pool, *cs), http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		in.log.Debug("integrity endpoint: write", "err", err)
	}
}
