package datasync

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	pb "github.com/chunkraft/chunkraft/proto/chunkraft/syncstatepb"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
	"google.golang.org/protobuf/proto"
)

// A sub-task record is a *pb.SubTask: the whole AddSyncTaskRequest
// (progress: its sync_point is the next point to export, its token the
// current one, its export_id the export's) with the task's (db, name),
// status, count, last update time, binlog end, failure message and the
// log indices that created and last changed it. A copyset's State holds
// them in ascending (tid, pid, name), at most one per key: the key every
// per-sub-task op names. (db is tid in decimal, so the name tells a
// (tid, pid)'s tasks apart.) A state written when a copyset held one task
// per (tid, pid) is in that order.

// live reports whether packets may advance a sub-task in status s.
func live(s pb.Status) bool { return s == pb.Status_INIT || s == pb.Status_RUNNING }

// final reports whether s is a status nothing moves a sub-task out of.
func final(s pb.Status) bool { return s == pb.Status_SUCCESS || s == pb.Status_FAILED }

func cloneRecord(r *pb.SubTask) *pb.SubTask {
	if r == nil {
		return nil
	}
	return proto.CloneOf(r)
}

// compareKey orders sub-task r against the key (tid, pid, name); name ""
// sorts before every name, so it finds the first sub-task of (tid, pid).
func compareKey(r *pb.SubTask, tid, pid uint32, name string) int {
	return cmp.Or(cmp.Compare(r.GetProgress().GetTid(), tid), cmp.Compare(r.GetProgress().GetPid(), pid), cmp.Compare(r.GetName(), name))
}

// subKey is a sub-task's key.
type subKey struct {
	tid, pid uint32
	name     string
}

// keyOf is sub-task r's key.
func keyOf(r *pb.SubTask) subKey {
	return subKey{r.GetProgress().GetTid(), r.GetProgress().GetPid(), r.GetName()}
}

// find returns the position of (tid, pid, name) in st's sub-tasks and
// whether it is there.
func find(st *pb.State, tid, pid uint32, name string) (int, bool) {
	return slices.BinarySearchFunc(st.SubTasks, subKey{tid, pid, name}, func(r *pb.SubTask, k subKey) int {
		return compareKey(r, k.tid, k.pid, k.name)
	})
}

// get returns the sub-task (tid, pid, name) of st, or nil.
func get(st *pb.State, tid, pid uint32, name string) *pb.SubTask {
	if i, ok := find(st, tid, pid, name); ok {
		return st.SubTasks[i]
	}
	return nil
}

// subTasksOf returns the sub-tasks of (tid, pid) in st, by name (st's
// own slice).
func subTasksOf(st *pb.State, tid, pid uint32) []*pb.SubTask {
	i, _ := find(st, tid, pid, "")
	j := i
	for j < len(st.SubTasks) && st.SubTasks[j].GetProgress().GetTid() == tid && st.SubTasks[j].GetProgress().GetPid() == pid {
		j++
	}
	return st.SubTasks[i:j]
}

// resolve returns the sub-task of st that (tid, pid, name) names: with a
// name, that one; without (an op or request from before a copyset held
// several tasks, an upstream client), the (tid, pid)'s only sub-task.
func resolve(st *pb.State, tid, pid uint32, name string) (*pb.SubTask, error) {
	if name != "" {
		if r := get(st, tid, pid, name); r != nil {
			return r, nil
		}
		return nil, fmt.Errorf("%w: tid %d pid %d task %q", ErrNotFound, tid, pid, name)
	}
	return pick(subTasksOf(st, tid, pid), tid, pid)
}

// pick returns the one sub-task of subs, the sub-tasks of (tid, pid): an
// error wrapping ErrNotFound when there is none, ErrTaskNotNamed, naming
// their tasks, when there are several.
func pick(subs []*pb.SubTask, tid, pid uint32) (*pb.SubTask, error) {
	switch len(subs) {
	case 0:
		return nil, fmt.Errorf("%w: tid %d pid %d", ErrNotFound, tid, pid)
	case 1:
		return subs[0], nil
	}
	return nil, fmt.Errorf("%w: %d/%d has sub-tasks of tasks %s", ErrTaskNotNamed, tid, pid, taskNames(subs))
}

// taskNames lists the task names of subs for messages.
func taskNames(subs []*pb.SubTask) string {
	names := make([]string, len(subs))
	for i, r := range subs {
		names[i] = strconv.Quote(r.GetName())
	}
	return strings.Join(names, ", ")
}

// subName names sub-task (tid, pid) of task name in messages ("1/3 of
// task \"backup\""; "1/3" without a name).
func subName(tid, pid uint32, name string) string {
	if name == "" {
		return fmt.Sprintf("%d/%d", tid, pid)
	}
	return fmt.Sprintf("%d/%d of task %q", tid, pid, name)
}

// retainFrom returns the lowest raft log index the live (not SUCCESS or
// FAILED) sub-tasks of st still have to export, 0 when none needs the
// log: what the machine holds the log from on every replica (LogHold).
func retainFrom(st *pb.State) uint64 {
	var lo uint64
	for _, r := range st.GetSubTasks() {
		if final(r.GetStatus()) {
			continue
		}
		if i := logCursor(r); i != 0 && (lo == 0 || i < lo) {
			lo = i
		}
	}
	return lo
}

// logCursor returns the first log index sub-task r still has to export:
// its binlog point; in the snapshot phase its binlog start, or, before its
// first packet records one, the index after its creation (an export pins
// its binlog start at the applied index of its leader, which applied the
// creation already); 0 for a kIncrementalByTimestamp sub-task before its
// first packet (where it starts in the log is found by its collector).
func logCursor(r *pb.SubTask) uint64 {
	p := r.GetProgress()
	switch {
	case p.GetSyncPoint().GetType() == dspb.SyncType_kBINLOG:
		return p.GetSyncPoint().GetOffset()
	case r.GetBinlogStart() != 0:
		return r.GetBinlogStart()
	case p.GetMode() == dspb.SyncMode_kIncrementalByTimestamp:
		return 0
	}
	return r.GetCreatedIndex() + 1
}

// Covered returns the last log index sub-task r covers (every entry up to
// it is in a packet its dest holds, or was read by its collector and holds
// no chunk op) and a time, Unix ms, before which every write the copyset
// acknowledged is at or below it (0: not known yet); 0 and 0 before the
// binlog phase. For a kIncrementalByTimestamp sub-task the entries before
// its start count as covered.
func Covered(r *pb.SubTask) (uint64, int64) {
	p := r.GetProgress().GetSyncPoint()
	if p.GetType() != dspb.SyncType_kBINLOG {
		return 0, 0
	}
	return max(r.GetCoveredIndex(), p.GetOffset()-1), r.GetCoveredMs()
}
