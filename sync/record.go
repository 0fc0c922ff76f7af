package sync

import (
	"cmp"
	"slices"

	pb "github.com/chunkraft/chunkraft/proto/chunkraft/syncstatepb"
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
