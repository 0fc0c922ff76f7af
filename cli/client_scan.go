package cli

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	chunkserverpb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// ScanJob is an integrity job of a copyset as IntegrityService reports it.
type ScanJob struct {
	ID        int32
	Copyset   int32 // the copyset id (IntegrityJob carries no pool)
	State     chunkserverpb.INTEGRITY_JOB_STATE
	Progress  int32     // percent, as the server reports it
	Scheduled time.Time // zero when not set
	Started   time.Time // zero when not started
	// Mismatches is how many replica mismatches the job found so far; -1
	// when the server did not say (a server without the trailer).
	Mismatches int
}

// ScanStateName is a job state without the enum prefix: WAITING, RUNNING, ...
func ScanStateName(st chunkserverpb.INTEGRITY_JOB_STATE) string {
	const prefix = "INTEGRITY_OP_STATE_"
	s := st.String()
	if len(s) > len(prefix) && s[:len(prefix)] == prefix {
		return s[len(prefix):]
	}
	return s
}

// IntegrityStatusError is a failing IntegrityService reply; Message is the
// server's reason (the chunkraft-error trailer), if any.
type IntegrityStatusError struct {
	Status  chunkserverpb.INTEGRITY_OP_STATUS
	Message string
}

func (e *IntegrityStatusError) Error() string {
	if e.Message == "" {
		return e.Status.String()
	}
	return e.Status.String() + ": " + e.Message
}

// chunkraft's IntegrityService conventions beyond the proto (see the server's
// integrity/service.go): the copyset's pool travels as request
// metadata; a FAILURE_UNKNOWN reply carries its reason, and from a follower
// the leader's peer id, in trailers; a SUCCESS reply carries each job's
// mismatch count in a trailer ("<id>=<count>" per job).
const (
	integrityPoolKey       = "chunkraft-logic-pool-id"
	integrityErrorKey      = "chunkraft-error"
	integrityLeaderKey     = "chunkraft-leader"
	integrityMismatchesKey = "chunkraft-mismatches"
)

// mismatchCounts parses the mismatches trailer into job id -> count,
// skipping values it cannot read.
func mismatchCounts(md metadata.MD) map[int32]int {
	out := map[int32]int{}
	for _, v := range md.Get(integrityMismatchesKey) {
		id, n, ok := strings.Cut(v, "=")
		i, err1 := strconv.ParseInt(id, 10, 32)
		c, err2 := strconv.Atoi(n)
		if ok && err1 == nil && err2 == nil && c >= 0 {
			out[int32(i)] = c
		}
	}
	return out
}

func firstValue(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// notLeaderReason recognises a FAILURE_UNKNOWN reason that asking the
// leader (again) may cure: a follower, or a server without the copyset.
func notLeaderReason(reason string) bool {
	r := strings.ToLower(reason)
	return strings.Contains(r, "not leader") || strings.Contains(r, "not hosted") || strings.Contains(r, "leadership lost")
}

// ScanOp names an IntegrityService method.
type ScanOp string

// IntegrityService methods.
const (
	ScanSchedule ScanOp = "schedule"
	ScanCancel   ScanOp = "cancel"
	ScanPause    ScanOp = "pause"
	ScanResume   ScanOp = "resume"
	ScanList     ScanOp = "list"
)

func unixTime(sec int32) time.Time {
	if sec <= 0 {
		return time.Time{}
	}
	return time.Unix(int64(sec), 0).UTC()
}

// Scan calls an IntegrityService method for copyset cs on its leader and
// returns the jobs of the reply that belong to cs. job is the job id (cancel,
// pause, resume; 0 otherwise); at is when a scheduled job is to start (zero:
// as soon as possible). The pool goes as request metadata. A follower's or a
// non-hosting server's FAILURE_UNKNOWN (or FailedPrecondition/NotFound) makes
// it follow the leader named in the trailer, or find the leader again; any
// other FAILURE_UNKNOWN is final, with the server's reason.
func (c *Client) Scan(ctx context.Context, op ScanOp, cs CopysetID, job int32, at time.Time) ([]ScanJob, error) {
	name := fmt.Sprintf("%s scan of %s", op, cs)
	if job != 0 {
		name = fmt.Sprintf("%s scan job %d of %s", op, job, cs)
	}
	if cs.Copyset > math.MaxInt32 {
		return nil, fmt.Errorf("%s: copyset id does not fit IntegrityJob.copyset (int32)", name)
	}
	var sched int32
	if !at.IsZero() {
		if at.Unix() < 0 || at.Unix() > math.MaxInt32 {
			return nil, fmt.Errorf("%s: time %s does not fit IntegrityJob.sched_time", name, at)
		}
		sched = int32(at.Unix())
	}
	req := &chunkserverpb.IntegrityRequest{Job: &chunkserverpb.IntegrityJob{
		Id:        proto.Int32(job),
		Copyset:   proto.Int32(int32(cs.Copyset)),
		State:     chunkserverpb.INTEGRITY_JOB_STATE_INTEGRITY_OP_STATE_WAITING.Enum(),
		Progress:  proto.Int32(0),
		SchedTime: proto.Int32(sched),
		StartTime: proto.Int32(0),
	}}
	var resp *chunkserverpb.IntegrityResponse
	var reason string
	var counts map[int32]int
	err := c.onLeaderRPC(ctx, name, cs, c.attemptTimeout, func(ctx context.Context, cc grpc.ClientConnInterface, _ string) error {
		svc := chunkserverpb.NewIntegrityServiceClient(cc)
		ctx = metadata.AppendToOutgoingContext(ctx, integrityPoolKey, strconv.FormatUint(uint64(cs.Pool), 10))
		var trailer metadata.MD
		var err error
		switch op {
		case ScanSchedule:
			resp, err = svc.ScheduleJob(ctx, req, grpc.Trailer(&trailer))
		case ScanCancel:
			resp, err = svc.CancelJob(ctx, req, grpc.Trailer(&trailer))
		case ScanPause:
			resp, err = svc.PauseJob(ctx, req, grpc.Trailer(&trailer))
		case ScanResume:
			resp, err = svc.ResumeJob(ctx, req, grpc.Trailer(&trailer))
		case ScanList:
			resp, err = svc.ListJobs(ctx, req, grpc.Trailer(&trailer))
		default:
			return &finalError{fmt.Errorf("unknown scan operation %q", op)}
		}
		if err != nil {
			return err
		}
		if resp.GetStatus() == chunkserverpb.INTEGRITY_OP_STATUS_INTEGRITY_OP_STATUS_SUCCESS {
			counts = mismatchCounts(trailer)
			return nil
		}
		reason = firstValue(trailer, integrityErrorKey)
		leader := firstValue(trailer, integrityLeaderKey)
		if leader != "" || notLeaderReason(reason) {
			return &notLeaderReply{Leader: leader, err: &IntegrityStatusError{Status: resp.GetStatus(), Message: reason}}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if st := resp.GetStatus(); st != chunkserverpb.INTEGRITY_OP_STATUS_INTEGRITY_OP_STATUS_SUCCESS {
		return nil, fmt.Errorf("%s: %w", name, &IntegrityStatusError{Status: st, Message: reason})
	}
	var jobs []ScanJob
	for _, j := range resp.GetJob() {
		if j.GetCopyset() != int32(cs.Copyset) {
			continue
		}
		n, ok := counts[j.GetId()]
		if !ok {
			n = -1
		}
		jobs = append(jobs, ScanJob{
			ID:         j.GetId(),
			Copyset:    j.GetCopyset(),
			State:      j.GetState(),
			Progress:   j.GetProgress(),
			Scheduled:  unixTime(j.GetSchedTime()),
			Started:    unixTime(j.GetStartTime()),
			Mismatches: n,
		})
	}
	return jobs, nil
}

// RepairResult describes a range rewritten by RepairRange.
type RepairResult struct {
	Chunk  ChunkID
	Offset uint32
	Length uint32
	Sn     uint64 // the chunk's sequence number the range was written back at
}

// RepairRange rewrites [offset, offset+length) of a chunk on every replica
// with the data the copyset agrees on: it reads the range from the leader
// (a linearizable read of the committed data) and writes it back through raft
// at the chunk's current sequence number (GetChunkInfo), so the write makes
// no COW snapshot and every replica, a diverged minority included, ends with
// the majority's bytes. If the leader's own copy is the damaged one its read
// fails with CHUNK_OP_STATUS_CRC_FAIL: move the leader to a good replica
// first. Client writes to the range while it runs may be overwritten with
// the older data, so run it on a quiet chunk. On a clone chunk the range
// counts as written afterwards.
func (c *Client) RepairRange(ctx context.Context, id ChunkID, offset, length uint32) (RepairResult, error) {
	r := RepairResult{Chunk: id, Offset: offset, Length: length}
	op := "repair " + id.String()
	if err := checkIO(uint64(offset), uint64(length), "length"); err != nil {
		return r, fmt.Errorf("%s: %w", op, err)
	}
	sns, err := c.GetChunkInfo(ctx, id)
	if err != nil {
		return r, err
	}
	if len(sns) == 0 {
		return r, fmt.Errorf("%s: the chunk does not exist on the leader", op)
	}
	r.Sn = sns[0]
	data, err := c.ReadChunk(ctx, id, offset, length)
	if err != nil {
		if IsChunkStatus(err, chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_CRC_FAIL) {
			leader, _ := c.CachedLeader(id.CopysetID)
			return r, fmt.Errorf("%w (the leader %s holds a damaged copy: transfer the leader to a good replica, then repair again)", err, leader)
		}
		return r, err
	}
	if err := c.WriteChunk(ctx, id, offset, data, r.Sn); err != nil {
		if IsChunkStatus(err, chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_BACKWARD) {
			return r, fmt.Errorf("%w (the chunk's sn moved past %d meanwhile; repair again)", err, r.Sn)
		}
		return r, err
	}
	return r, nil
}
