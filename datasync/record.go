package datasync

import (
	"cmp"
	"slices"

	pb "github.com/chunkraft/chunkraft/proto/chunkraft/syncstatepb"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
	"google.golang.org/protobuf/proto"
)

// A sub-task record is a *pb.SubTask: the whole AddSyncTaskRequest
// (progress: its sync_point is the next point to export, its token the
// current one) with the task's (db, name), status, count, last update
// time, binlog end, failure message and the log indices that created and
// last changed it. A copyset's State holds them in ascending (tid, pid):
// at most one per (tid, pid), the key every per-sub-task op names.

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

func compareKey(r *pb.SubTask, tid, pid uint32) int {
	if c := cmp.Compare(r.GetProgress().GetTid(), tid); c != 0 {
		return c
	}
	return cmp.Compare(r.GetProgress().GetPid(), pid)
}

// find returns the position of (tid, pid) in st's sub-tasks and whether it
// is there.
func find(st *pb.State, tid, pid uint32) (int, bool) {
	return slices.BinarySearchFunc(st.SubTasks, [2]uint32{tid, pid}, func(r *pb.SubTask, k [2]uint32) int {
		return compareKey(r, k[0], k[1])
	})
}

// get returns the sub-task (tid, pid) of st, or nil.
func get(st *pb.State, tid, pid uint32) *pb.SubTask {
	if i, ok := find(st, tid, pid); ok {
		return st.SubTasks[i]
	}
	return nil
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
