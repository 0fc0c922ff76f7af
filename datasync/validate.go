package datasync

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	pb "github.com/chunkraft/chunkraft/proto/chunkraft/syncstatepb"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
)

// Bounds of the state: what admission (the Validate functions) and the
// machine refuse beyond.
const (
	// MaxSubTasks bounds the sub-tasks one copyset holds.
	MaxSubTasks = 64
	// MaxTasksPerPool bounds the tasks of one pool: a copyset holds the
	// sub-tasks of at most this many tasks of its (tid, pid), and
	// CreateSyncTask refuses one more, naming the pool's tasks.
	MaxTasksPerPool = 8
	// ExportIDLen is the length of an export id: 128 random bits in
	// lowercase hex.
	ExportIDLen = 32
	// MaxNameLen bounds a task's name, in bytes.
	MaxNameLen = 128
	// MaxTokenLen bounds a token, in bytes.
	MaxTokenLen = 64
	// MaxEndpointLen bounds tablet_endpoint and des_endpoint, in bytes.
	MaxEndpointLen = 256
	// MaxDestLen bounds dest, in bytes.
	MaxDestLen = 1024
	// MaxMessageLen bounds a SetStatus message, in bytes.
	MaxMessageLen = 1024
	// MaxPacketCount bounds the records of one packet.
	MaxPacketCount = 1 << 32
	// MaxUnixMs bounds every time value: 9999-12-31T23:59:59.999Z.
	MaxUnixMs = 253402300799999
)

// The Validate functions are admission: the server calls them on an op
// before it proposes it (the encoders call them too), so that bad input
// is refused with a one-line error and never reaches the log. They check
// the op alone; what depends on the replicated state (token, status,
// point) is checked when the op applies and refused in its Result.

// ValidatePutSubTask checks a PutSubTask: db is request.tid in decimal,
// the name is 1..MaxNameLen bytes of text (and request.task_name, when
// set, is the name), request.export_id is empty or an export id
// (ValidateExportID), the request names its mode,
// a valid sync_point (kBINLOG for kIncrementalByTimestamp), start_ts only
// for kIncrementalByTimestamp, both endpoints, a token and a dest, and
// update_ms is a time.
func ValidatePutSubTask(op *pb.PutSubTask) error {
	if op == nil {
		return errors.New("put sub-task: no op")
	}
	req := op.GetRequest()
	if req == nil {
		return errors.New("put sub-task: no AddSyncTaskRequest")
	}
	if req.Tid == nil || req.Pid == nil {
		return errors.New("put sub-task: the request has no tid or no pid")
	}
	if err := validateTask(op.GetDb(), op.GetName()); err != nil {
		return fmt.Errorf("put sub-task: %w", err)
	}
	if want := strconv.FormatUint(uint64(req.GetTid()), 10); op.GetDb() != want {
		return fmt.Errorf("put sub-task: db %q is not the tid %d (the pool id) in decimal", op.GetDb(), req.GetTid())
	}
	if req.TaskName != nil && req.GetTaskName() != op.GetName() {
		return fmt.Errorf("put sub-task %s: the request names task %q", subName(req.GetTid(), req.GetPid(), op.GetName()), req.GetTaskName())
	}
	if id := req.GetExportId(); id != "" {
		if err := ValidateExportID(id); err != nil {
			return fmt.Errorf("put sub-task %s: %w", subName(req.GetTid(), req.GetPid(), op.GetName()), err)
		}
	}
	if err := validateRequest(req); err != nil {
		return fmt.Errorf("put sub-task %s: %w", subName(req.GetTid(), req.GetPid(), op.GetName()), err)
	}
	if err := validateTime("update_ms", op.GetUpdateMs()); err != nil {
		return fmt.Errorf("put sub-task %s: %w", subName(req.GetTid(), req.GetPid(), op.GetName()), err)
	}
	return nil
}

func validateRequest(req *dspb.AddSyncTaskRequest) error {
	if req.Mode == nil {
		return errors.New("mode is missing")
	}
	mode := req.GetMode()
	if _, ok := dspb.SyncMode_name[int32(mode)]; !ok {
		return fmt.Errorf("unknown mode %d", mode)
	}
	if req.GetStartTs() != 0 && mode != dspb.SyncMode_kIncrementalByTimestamp {
		return fmt.Errorf("start_ts %d is only for kIncrementalByTimestamp, not %s", req.GetStartTs(), mode)
	}
	if req.GetStartTs() > MaxUnixMs {
		return fmt.Errorf("start_ts %d is not a time in milliseconds", req.GetStartTs())
	}
	if err := ValidateSyncPoint(req.GetSyncPoint()); err != nil {
		return err
	}
	if sp := req.GetSyncPoint(); mode == dspb.SyncMode_kIncrementalByTimestamp && sp.GetType() != dspb.SyncType_kBINLOG && sp.Pk != nil {
		// The very start is allowed: the collector finds the first index at
		// or after start_ts and leads there with an empty first packet.
		return errors.New("kIncrementalByTimestamp exports the binlog only: its sync point must be the very start or kBINLOG")
	}
	for _, f := range []struct {
		what, v string
		max     int
	}{
		{"tablet_endpoint", req.GetTabletEndpoint(), MaxEndpointLen},
		{"des_endpoint", req.GetDesEndpoint(), MaxEndpointLen},
		{"dest", req.GetDest(), MaxDestLen},
	} {
		if err := validateText(f.what, f.v, f.max); err != nil {
			return err
		}
	}
	return validateText("token", req.GetToken(), MaxTokenLen)
}

// ValidateAdvance checks an Advance: a sub-task ref, valid start and next
// points with next not before start, records only in a packet that moves
// the point, a finished packet ending in the binlog, a count up to
// MaxPacketCount, update_ms a time and start_state_ms, covered_ms and
// written_at_ms each 0 or a time.
func ValidateAdvance(op *pb.Advance) error {
	if op == nil {
		return errors.New("advance: no op")
	}
	if err := validateRef(op.GetRef()); err != nil {
		return fmt.Errorf("advance: %w", err)
	}
	wrap := func(err error) error {
		return fmt.Errorf("advance %s: %w", refName(op.GetRef()), err)
	}
	if err := ValidateSyncPoint(op.GetStart()); err != nil {
		return wrap(fmt.Errorf("start point: %w", err))
	}
	if err := ValidateSyncPoint(op.GetNext()); err != nil {
		return wrap(fmt.Errorf("next point: %w", err))
	}
	c := comparePoints(op.GetNext(), op.GetStart())
	switch {
	case c < 0:
		return wrap(fmt.Errorf("next point %s is before start point %s", PointString(op.GetNext()), PointString(op.GetStart())))
	case c == 0 && op.GetCount() > 0:
		return wrap(fmt.Errorf("%d records in a packet that does not move the point (%s)", op.GetCount(), PointString(op.GetStart())))
	case op.GetCount() > MaxPacketCount:
		return wrap(fmt.Errorf("count %d is beyond %d", op.GetCount(), uint64(MaxPacketCount)))
	case op.GetFinished() && op.GetNext().GetType() != dspb.SyncType_kBINLOG:
		return wrap(fmt.Errorf("a finished packet ends in the binlog, not at %s", PointString(op.GetNext())))
	}
	if err := validateTime("update_ms", op.GetUpdateMs()); err != nil {
		return wrap(err)
	}
	for _, f := range []struct {
		what string
		ms   int64
	}{{"start_state_ms", op.GetStartStateMs()}, {"covered_ms", op.GetCoveredMs()}, {"written_at_ms", op.GetWrittenAtMs()}} {
		if f.ms != 0 {
			if err := validateTime(f.what, f.ms); err != nil {
				return wrap(err)
			}
		}
	}
	return nil
}

// ValidateTouch checks a Touch: a sub-task ref, update_ms a time,
// written_at_ms 0 or a time and, with
// a point (at), a valid one; covered_index and covered_ms (a time) only
// with a binlog point, covered_index not below the point's index - 1.
func ValidateTouch(op *pb.Touch) error {
	if op == nil {
		return errors.New("touch: no op")
	}
	if err := validateRef(op.GetRef()); err != nil {
		return fmt.Errorf("touch: %w", err)
	}
	wrap := func(err error) error {
		return fmt.Errorf("touch %s: %w", refName(op.GetRef()), err)
	}
	if err := validateTime("update_ms", op.GetUpdateMs()); err != nil {
		return wrap(err)
	}
	if ms := op.GetWrittenAtMs(); ms != 0 {
		if err := validateTime("written_at_ms", ms); err != nil {
			return wrap(err)
		}
	}
	at := op.GetAt()
	if at != nil {
		if err := ValidateSyncPoint(at); err != nil {
			return wrap(fmt.Errorf("point: %w", err))
		}
	}
	if op.GetCoveredIndex() == 0 && op.GetCoveredMs() == 0 {
		return nil
	}
	switch {
	case at.GetType() != dspb.SyncType_kBINLOG:
		return wrap(fmt.Errorf("covered_index %d and covered_ms %d without a binlog point", op.GetCoveredIndex(), op.GetCoveredMs()))
	case op.GetCoveredIndex()+1 < at.GetOffset():
		return wrap(fmt.Errorf("covered_index %d is below binlog point %d", op.GetCoveredIndex(), at.GetOffset()))
	case op.GetCoveredMs() != 0:
		if err := validateTime("covered_ms", op.GetCoveredMs()); err != nil {
			return wrap(err)
		}
	}
	return nil
}

// ValidateSetStatus checks a SetStatus: a sub-task ref, a status of
// FAILED or REASSIGNING (RUNNING and SUCCESS come with packets, INIT with
// creation) and a message of at most MaxMessageLen bytes of text.
func ValidateSetStatus(op *pb.SetStatus) error {
	if op == nil {
		return errors.New("set status: no op")
	}
	if err := validateRef(op.GetRef()); err != nil {
		return fmt.Errorf("set status: %w", err)
	}
	wrap := func(err error) error {
		return fmt.Errorf("set status %s: %w", refName(op.GetRef()), err)
	}
	switch op.GetStatus() {
	case pb.Status_FAILED, pb.Status_REASSIGNING:
	default:
		return wrap(fmt.Errorf("status %s: only FAILED and REASSIGNING are set (INIT comes with creation, RUNNING and SUCCESS with packets)", op.GetStatus()))
	}
	if op.GetMessage() != "" {
		if err := validateText("message", op.GetMessage(), MaxMessageLen); err != nil {
			return wrap(err)
		}
	}
	return nil
}

// ValidateSetBinlogEnd checks a SetBinlogEnd: a sub-task ref and an index
// in [1, MaxLogIndex).
func ValidateSetBinlogEnd(op *pb.SetBinlogEnd) error {
	if op == nil {
		return errors.New("set binlog end: no op")
	}
	if err := validateRef(op.GetRef()); err != nil {
		return fmt.Errorf("set binlog end: %w", err)
	}
	if op.GetIndex() < 1 || op.GetIndex() >= MaxLogIndex {
		return fmt.Errorf("set binlog end %s: index %d is not a log index in [1, %d)", refName(op.GetRef()), op.GetIndex(), uint64(MaxLogIndex))
	}
	return nil
}

// ValidateDeleteTask checks a DeleteTask: db a pool id in decimal, a name
// as ValidatePutSubTask wants it, export_id empty or an export id.
func ValidateDeleteTask(op *pb.DeleteTask) error {
	if op == nil {
		return errors.New("delete task: no op")
	}
	if err := validateTask(op.GetDb(), op.GetName()); err != nil {
		return fmt.Errorf("delete task: %w", err)
	}
	if id := op.GetExportId(); id != "" {
		if err := ValidateExportID(id); err != nil {
			return fmt.Errorf("delete task %s/%s: %w", op.GetDb(), op.GetName(), err)
		}
	}
	return nil
}

// ValidateExportID checks an export id: ExportIDLen lowercase hex digits
// (NewExportID's).
func ValidateExportID(id string) error {
	if len(id) != ExportIDLen || strings.Trim(id, "0123456789abcdef") != "" {
		return fmt.Errorf("export id %q is not %d lowercase hex digits", id, ExportIDLen)
	}
	return nil
}

// validateTask checks a task's (db, name): db a pool id in canonical
// decimal, name 1..MaxNameLen bytes of text.
func validateTask(db, name string) error {
	if id, err := strconv.ParseUint(db, 10, 32); err != nil || strconv.FormatUint(id, 10) != db {
		return fmt.Errorf("db %q is not a pool id in decimal", db)
	}
	return validateText("name", name, MaxNameLen)
}

// validateRef checks a sub-task ref: present, with a token and a name of
// 1..MaxNameLen bytes of text, or none (a ref from before a copyset held
// several tasks).
func validateRef(r *pb.Ref) error {
	if r == nil {
		return errors.New("no sub-task ref (tid, pid, token)")
	}
	if err := validateText("token", r.GetToken(), MaxTokenLen); err != nil {
		return fmt.Errorf("sub-task %s: %w", refName(r), err)
	}
	if r.GetName() != "" {
		if err := validateText("name", r.GetName(), MaxNameLen); err != nil {
			return fmt.Errorf("sub-task %s: %w", refName(r), err)
		}
	}
	return nil
}

// refName names the sub-task ref r names in messages.
func refName(r *pb.Ref) string { return subName(r.GetTid(), r.GetPid(), r.GetName()) }

// validateText checks a required string: 1..max bytes of UTF-8 without
// control characters (the state file's lines are protobuf JSON: a string
// that is not UTF-8 could not be written).
func validateText(what, s string, max int) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is empty", what)
	case len(s) > max:
		return fmt.Errorf("%s is %d bytes, at most %d", what, len(s), max)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s is not UTF-8", what)
	case strings.ContainsFunc(s, unicode.IsControl):
		return fmt.Errorf("%s %q has a control character", what, s)
	}
	return nil
}

// validateTime checks a time in unix milliseconds: after 1970, before
// year 10000.
func validateTime(what string, ms int64) error {
	if ms <= 0 || ms > MaxUnixMs {
		return fmt.Errorf("%s %d is not a time in unix milliseconds", what, ms)
	}
	return nil
}
