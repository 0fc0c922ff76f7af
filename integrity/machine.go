package integrity

// Integrity jobs are replicated state: every copyset hosts a state machine
// of kind kinds.Integrity that holds the copyset's scan jobs and
// applies two kinds of ops, both proposed by the leader only:
//
//   - job ops (JSON jobOp): schedule, start, progress, pause, resume,
//     cancel, fail. Every value that is not derived from the replicated
//     state (the leader's clock, the chunk count at start, the next cursor,
//     the mismatches found) travels in the op, so applying is
//     deterministic: job ids are NextID+1 at the schedule op's apply.
//     progress carries the cursor it starts from and applies only while the
//     job is RUNNING at exactly that cursor, so a progress op computed by a
//     deposed leader, or one that raced with a pause or a cancel, is
//     refused on every replica alike.
//   - scan ops (a ChunkRequest with op type CHUNK_OP_SCAN, see scan.go):
//     every replica computes the crc32c of one chunk range at the op's log
//     index and reports it (followers through ScanService.FollowScanMap
//     from a goroutine; the leader through the apply result).
//
// Scan ops travel under kinds.Integrity rather than kinds.Chunk so that the
// machine that reports them (it knows the copyset and the server's
// reporter) is the one that applies them; both kinds are applied in log
// order by the copyset's single apply goroutine, so a scan op observes
// exactly the chunk writes before it in the log, as in Curve.
//
// Persistence: integrity.jsonl in the copyset data dir, the state file of
// a copyset/statemachine.Machine: each change appends one line holding the whole state,
// including Applied, the log index of the last job op applied; loading
// takes the valid line with the highest Applied. An op whose index is <=
// Applied is already in the state and is skipped, so a replay after a
// crash, or after a snapshot install whose file is newer than the snapshot
// index, is idempotent.

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/copyset/statemachine"
	"github.com/chunkraft/chunkraft/internal/chunkread"
	"github.com/chunkraft/chunkraft/internal/kinds"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	"google.golang.org/protobuf/proto"
)

// FileName is the integrity state file in a copyset's data dir.
const FileName = "integrity.jsonl"

const (
	// keepTerminalJobs is how many finished, canceled or failed jobs a
	// copyset keeps; older ones are dropped when a job is scheduled.
	keepTerminalJobs = 16
	// maxActiveJobs bounds the waiting, running and paused jobs of a copyset.
	maxActiveJobs = 64
	// MaxJobResults bounds the mismatches a job keeps; MismatchCount counts
	// all of them.
	MaxJobResults = 1000
)

// Op payload tags after the copyset op header.
const (
	integrityOpJob  byte = 1 // JSON jobOp
	integrityOpScan byte = 2 // marshalled ChunkRequest, op type CHUNK_OP_SCAN
)

// JobState is an integrity job's state (the values of
// pb.INTEGRITY_JOB_STATE); it marshals as WAITING, RUNNING, ... in JSON.
type JobState int32

// Job states.
const (
	JobWaiting  = JobState(pb.INTEGRITY_JOB_STATE_INTEGRITY_OP_STATE_WAITING)
	JobRunning  = JobState(pb.INTEGRITY_JOB_STATE_INTEGRITY_OP_STATE_RUNNING)
	JobCanceled = JobState(pb.INTEGRITY_JOB_STATE_INTEGRITY_OP_STATE_CANCELED)
	JobFinished = JobState(pb.INTEGRITY_JOB_STATE_INTEGRITY_OP_STATE_FINISHED)
	JobPaused   = JobState(pb.INTEGRITY_JOB_STATE_INTEGRITY_OP_STATE_PAUSED)
	JobFailed   = JobState(pb.INTEGRITY_JOB_STATE_INTEGRITY_OP_STATE_FAILED)
)

const jobStatePrefix = "INTEGRITY_OP_STATE_"

func (s JobState) String() string {
	return strings.TrimPrefix(pb.INTEGRITY_JOB_STATE(s).String(), jobStatePrefix)
}

// MarshalText implements encoding.TextMarshaler.
func (s JobState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *JobState) UnmarshalText(b []byte) error {
	v, ok := pb.INTEGRITY_JOB_STATE_value[jobStatePrefix+string(b)]
	if !ok {
		return fmt.Errorf("unknown integrity job state %q", b)
	}
	*s = JobState(v)
	return nil
}

func (s JobState) terminal() bool { return s == JobFinished || s == JobCanceled || s == JobFailed }

// ScanCursor is the next range a job scans: the first chunk with id >=
// Chunk, from data offset Offset if that chunk is Chunk itself, else from 0.
type ScanCursor struct {
	Chunk  uint64 `json:"chunk"`
	Offset uint32 `json:"offset"`
}

// Mismatch reasons.
const (
	ReasonDiffers     = "differs"     // readable, but not the majority's crc
	ReasonUnreadable  = "unreadable"  // the replica could not read the range (a block failed its checksum, an I/O error)
	ReasonMissing     = "missing"     // the replica did not report within the FollowScanMap timeout
	ReasonNoMajority  = "no-majority" // replicas disagree and no crc is held by a majority of the members
	replicaUnreadable = "unreadable"
	replicaMissing    = "missing"
)

// mismatchReasons are every Reason above (the reason label values of
// chunkraft_scan_mismatches_total).
var mismatchReasons = []string{ReasonDiffers, ReasonUnreadable, ReasonMissing, ReasonNoMajority}

// ScanMismatch is one replica found inconsistent on one range.
type ScanMismatch struct {
	Chunk  uint64 `json:"chunk"`
	Offset uint32 `json:"offset"` // data offset of the range
	Len    uint32 `json:"len"`
	Index  uint64 `json:"index"` // log index of the scan op
	Peer   string `json:"peer"`  // the replica that differs
	Reason string `json:"reason"`
	// Value is the replica's crc ("0x1234abcd"), or unreadable / missing.
	Value string `json:"value"`
	// Majority is the crc a majority of the members agree on, "" if none.
	Majority string `json:"majority,omitempty"`
	// Replicas is every member's value for the range.
	Replicas map[string]string `json:"replicas"`
}

// Job is one replicated integrity job, as persisted and as the
// /integrity endpoint reports it.
type Job struct {
	ID           int32    `json:"id"`
	Pool         uint32   `json:"pool"`
	Copyset      uint32   `json:"copyset"`
	State        JobState `json:"state"`
	Progress     int32    `json:"progress"`             // percent of chunks done; 100 once FINISHED
	SchedTime    int64    `json:"sched_time"`           // unix seconds
	StartTime    int64    `json:"start_time,omitempty"` // unix seconds, 0 until it runs
	FinishTime   int64    `json:"finish_time,omitempty"`
	CreatedIndex uint64   `json:"created_index"` // log index of the schedule op
	// ChunksTotal is the chunk count when the job started; ChunksDone the
	// chunks whose every range was scanned (chunks created during the job
	// after the cursor are scanned too, so it may exceed ChunksTotal).
	ChunksTotal   int        `json:"chunks_total"`
	ChunksDone    int        `json:"chunks_done"`
	RangesScanned uint64     `json:"ranges_scanned"`
	Cursor        ScanCursor `json:"cursor"`
	// MismatchCount counts every mismatch found; Results holds the first
	// MaxJobResults of them.
	MismatchCount int            `json:"mismatch_count"`
	Results       []ScanMismatch `json:"results,omitempty"`
	Error         string         `json:"error,omitempty"`
}

func (j *Job) clone() *Job {
	c := *j
	c.Results = slices.Clone(j.Results)
	return &c
}

// toPB converts to the IntegrityService message (which has no pool,
// cursor or results: those are in the /integrity endpoint).
func (j *Job) toPB() *pb.IntegrityJob {
	return &pb.IntegrityJob{
		Id: proto.Int32(j.ID), Copyset: proto.Int32(int32(j.Copyset)),
		State: pb.INTEGRITY_JOB_STATE(j.State).Enum(), Progress: proto.Int32(j.Progress),
		SchedTime: proto.Int32(int32(j.SchedTime)), StartTime: proto.Int32(int32(j.StartTime)),
	}
}

// jobsState is the replicated state of one copyset's jobs; one line
// of the state file.
type jobsState struct {
	Applied uint64 `json:"applied"` // index of the last job op that changed the state
	NextID  int32  `json:"next_id"` // the last job id assigned
	Jobs    []*Job `json:"jobs"`    // ascending id
}

// jobOp is a replicated job op.
type jobOp struct {
	Type    string `json:"type"` // schedule|start|progress|pause|resume|cancel|fail
	ID      int32  `json:"id,omitempty"`
	Pool    uint32 `json:"pool,omitempty"`
	Copyset uint32 `json:"copyset,omitempty"`
	// SchedTime (schedule) and Now (start, progress, cancel, fail) are the
	// leader's clock in unix seconds.
	SchedTime int64 `json:"sched_time,omitempty"`
	Now       int64 `json:"now,omitempty"`
	Total     int   `json:"total,omitempty"` // start: chunks in the store
	// progress: the job must be RUNNING at From; it moves to To with the
	// given absolute counters and appends Results.
	From          *ScanCursor    `json:"from,omitempty"`
	To            *ScanCursor    `json:"to,omitempty"`
	ChunksDone    int            `json:"chunks_done,omitempty"`
	RangesScanned uint64         `json:"ranges_scanned,omitempty"`
	Progress      int32          `json:"progress,omitempty"`
	Results       []ScanMismatch `json:"results,omitempty"`
	Finished      bool           `json:"finished,omitempty"`
	Error         string         `json:"error,omitempty"` // fail
}

// Job op types.
const (
	opSchedule = "schedule"
	opStart    = "start"
	opProgress = "progress"
	opPause    = "pause"
	opResume   = "resume"
	opCancel   = "cancel"
	opFail     = "fail"
)

// Errors of job ops, the same on every replica.
var (
	errJobNotFound = errors.New("no such integrity job")
	errJobState    = errors.New("integrity job is not in a state that allows this")
	errStaleCursor = errors.New("integrity job moved on: stale progress")
	errTooManyJobs = errors.New("too many active integrity jobs on this copyset")
)

// jobResult is the apply result of a job op: the job after the op (nil if
// it does not exist) and why the op was refused, if it was.
type jobResult struct {
	job *Job
	err error
}

// encodeJobOp builds the replicated op for a job op.
func encodeJobOp(op *jobOp) ([]byte, error) {
	b, err := json.Marshal(op)
	if err != nil {
		return nil, fmt.Errorf("encode integrity op: %w", err)
	}
	return encodeOp(integrityOpJob, b), nil
}

// encodeOp builds a replicated integrity op: the op header, tag, payload.
func encodeOp(tag byte, payload []byte) []byte {
	out := make([]byte, copyset.OpHeaderLen+1+len(payload))
	copyset.PutOpHeader(out, kinds.Integrity)
	out[copyset.OpHeaderLen] = tag
	copy(out[copyset.OpHeaderLen+1:], payload)
	return out
}

// scanReporter receives what the integrity machines of a server produce.
// Both calls happen inside apply and must not block.
type scanReporter interface {
	// reportScan hands over this replica's scan map of a scan op.
	reportScan(g copyset.GroupID, m *pb.ScanMap)
	// jobsChanged says a copyset's jobs changed (the worker may have work).
	jobsChanged(g copyset.GroupID)
}

// Machine is the kinds.Integrity state machine of one copyset: its job
// ops go to a statemachine.Machine on FileName (the whole state, one line
// per change), its scan ops to the chunk store.
type Machine struct {
	*statemachine.Machine[*jobsState, *jobOp, jobResult]
	group    copyset.GroupID
	store    chunkread.Chunks // the copyset's chunk store, read by scan ops
	reporter scanReporter     // nil: nothing is reported
	log      *slog.Logger
}

var _ copyset.StateMachine = (*Machine)(nil)

// openMachine loads the state file in dir, if any.
func openMachine(g copyset.GroupID, dir string, store chunkread.Chunks, reporter scanReporter, log *slog.Logger) (*Machine, error) {
	m := &Machine{group: g, store: store, reporter: reporter, log: log}
	sm, err := statemachine.Open(statemachine.JSONState(statemachine.Config[*jobsState, *jobOp, jobResult]{
		Name: "integrity", Path: filepath.Join(dir, FileName), File: FileName, Log: log,
		New:    func() *jobsState { return &jobsState{} },
		Decode: statemachine.DecodeJSON[jobOp],
		Apply: func(st *jobsState, index uint64, op *jobOp) (jobResult, bool) {
			job, changed, err := st.apply(index, op)
			if job != nil {
				job = job.clone()
			}
			return jobResult{job: job, err: err}, changed
		},
		Replayed: func(st *jobsState, index uint64, op *jobOp) jobResult {
			return jobResult{job: st.replayedJob(index, op)}
		},
		Changed: m.jobChanged,
	}, func(st *jobsState) *uint64 { return &st.Applied }))
	if err != nil {
		return nil, err
	}
	m.Machine = sm
	return m, nil
}

// Apply implements copyset.StateMachine: a job op is applied to the jobs
// (the result is a jobResult), a scan op to the chunk store; an empty or
// unknown op, a job op that does not decode or a state file that cannot
// be written is a *copyset.FatalError.
func (m *Machine) Apply(index uint64, payload []byte) any {
	if len(payload) == 0 {
		return &copyset.FatalError{Err: fmt.Errorf("integrity op at index %d: empty payload", index)}
	}
	switch payload[0] {
	case integrityOpJob:
		return m.Machine.Apply(index, payload[1:])
	case integrityOpScan:
		return m.applyScan(index, payload[1:])
	}
	return &copyset.FatalError{Err: fmt.Errorf("integrity op at index %d: unknown tag %d", index, payload[0])}
}

// jobChanged follows a persisted job change: it is logged and the
// reporter told.
func (m *Machine) jobChanged(index uint64, op *jobOp, res jobResult) {
	m.logChange(index, op, res.job)
	if m.reporter != nil {
		m.reporter.jobsChanged(m.group)
	}
}

func (m *Machine) logChange(index uint64, op *jobOp, job *Job) {
	if job == nil || (op.Type == opProgress && !op.Finished) {
		return
	}
	m.log.Info("integrity job "+op.Type, "index", index, "job", job.ID, "state", job.State.String(),
		"progress", job.Progress, "mismatches", job.MismatchCount)
}

// replayedJob finds the job an already applied op refers to.
func (st *jobsState) replayedJob(index uint64, op *jobOp) *Job {
	for _, j := range st.Jobs {
		if (op.Type == opSchedule && j.CreatedIndex == index) || (op.Type != opSchedule && j.ID == op.ID) {
			return j.clone()
		}
	}
	return nil
}

// apply applies op at index to the state and returns the job it concerns,
// whether the state changed, and why the op was refused.
func (st *jobsState) apply(index uint64, op *jobOp) (*Job, bool, error) {
	if op.Type == opSchedule {
		active := 0
		for _, j := range st.Jobs {
			if !j.State.terminal() {
				active++
			}
		}
		if active >= maxActiveJobs {
			return nil, false, errTooManyJobs
		}
		st.pruneTerminal(keepTerminalJobs - 1)
		st.NextID++
		j := &Job{ID: st.NextID, Pool: op.Pool, Copyset: op.Copyset, State: JobWaiting,
			SchedTime: op.SchedTime, CreatedIndex: index}
		st.Jobs = append(st.Jobs, j)
		return j, true, nil
	}
	var j *Job
	for _, x := range st.Jobs {
		if x.ID == op.ID {
			j = x
		}
	}
	if j == nil {
		return nil, false, errJobNotFound
	}
	switch op.Type {
	case opStart:
		if j.State != JobWaiting {
			return j, false, errJobState
		}
		j.State, j.StartTime, j.ChunksTotal, j.Cursor, j.Progress = JobRunning, op.Now, op.Total, ScanCursor{}, 0
	case opProgress:
		if j.State != JobRunning {
			return j, false, errJobState
		}
		if op.From == nil || op.To == nil || *op.From != j.Cursor {
			return j, false, errStaleCursor
		}
		j.Cursor, j.ChunksDone, j.RangesScanned = *op.To, op.ChunksDone, op.RangesScanned
		j.MismatchCount += len(op.Results)
		if room := MaxJobResults - len(j.Results); room > 0 {
			j.Results = append(j.Results, op.Results[:min(room, len(op.Results))]...)
		}
		j.Progress = min(max(op.Progress, 0), 99)
		if op.Finished {
			j.State, j.Progress, j.FinishTime = JobFinished, 100, op.Now
		}
	case opPause:
		switch j.State {
		case JobPaused:
			return j, false, nil
		case JobWaiting, JobRunning:
			j.State = JobPaused
		default:
			return j, false, errJobState
		}
	case opResume:
		switch j.State {
		case JobWaiting, JobRunning:
			return j, false, nil
		case JobPaused:
			j.State = JobWaiting
			if j.StartTime != 0 {
				j.State = JobRunning
			}
		default:
			return j, false, errJobState
		}
	case opCancel:
		switch j.State {
		case JobCanceled:
			return j, false, nil
		case JobWaiting, JobRunning, JobPaused:
			j.State, j.FinishTime = JobCanceled, op.Now
		default:
			return j, false, errJobState
		}
	case opFail:
		if j.State != JobRunning {
			return j, false, errJobState
		}
		j.State, j.FinishTime, j.Error = JobFailed, op.Now, op.Error
	default:
		return j, false, fmt.Errorf("unknown integrity op %q", op.Type)
	}
	return j, true, nil
}

// pruneTerminal drops the oldest terminal jobs until at most keep remain.
func (st *jobsState) pruneTerminal(keep int) {
	n := 0
	for _, j := range st.Jobs {
		if j.State.terminal() {
			n++
		}
	}
	drop := n - keep
	if drop <= 0 {
		return
	}
	st.Jobs = slices.DeleteFunc(st.Jobs, func(j *Job) bool {
		if drop > 0 && j.State.terminal() {
			drop--
			return true
		}
		return false
	})
}

// Jobs returns a copy of every job, ascending id.
func (m *Machine) Jobs() []*Job {
	var out []*Job
	m.View(func(st *jobsState) {
		out = make([]*Job, len(st.Jobs))
		for i, j := range st.Jobs {
			out[i] = j.clone()
		}
	})
	return out
}

// Job returns a copy of job id, or nil.
func (m *Machine) Job(id int32) *Job {
	var out *Job
	m.View(func(st *jobsState) {
		for _, j := range st.Jobs {
			if j.ID == id {
				out = j.clone()
			}
		}
	})
	return out
}

// hasOpenJob reports whether a job is running or waiting, due or not.
func (m *Machine) hasOpenJob() bool {
	open := false
	m.View(func(st *jobsState) {
		for _, j := range st.Jobs {
			if j.State == JobRunning || j.State == JobWaiting {
				open = true
				return
			}
		}
	})
	return open
}

// nextJob returns the job the leader should work on: the running job with
// the lowest id, else (none running) the due waiting job with the lowest
// id.
func (m *Machine) nextJob(now int64) *Job {
	var out *Job
	m.View(func(st *jobsState) {
		var waiting *Job
		for _, j := range st.Jobs {
			switch {
			case j.State == JobRunning:
				out = j.clone()
				return
			case j.State == JobWaiting && j.SchedTime <= now && waiting == nil:
				waiting = j
			}
		}
		if waiting != nil {
			out = waiting.clone()
		}
	})
	return out
}
