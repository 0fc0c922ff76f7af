package datasync

import (
	"fmt"
	"slices"

	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/syncstatepb"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
	"google.golang.org/protobuf/proto"
)

// applyOp applies op at index to st and returns its result and whether st
// changed. Every check comes before the first change, so a refused op
// changes nothing. Nothing here reads a clock or anything outside st and
// op: every replica computes the same. The caller stamps st.Applied.
func applyOp(st *pb.State, index uint64, op *pb.Op) (Result, bool) {
	if err := validateOp(op); err != nil {
		return Result{Err: fmt.Errorf("%w: %v", ErrInvalidOp, err)}, false
	}
	switch o := op.GetOp().(type) {
	case *pb.Op_Put:
		return applyPut(st, index, o.Put)
	case *pb.Op_Advance:
		return applyAdvance(st, index, o.Advance)
	case *pb.Op_Touch:
		return applyTouch(st, index, o.Touch)
	case *pb.Op_SetStatus:
		return applySetStatus(st, index, o.SetStatus)
	case *pb.Op_SetBinlogEnd:
		return applySetBinlogEnd(st, index, o.SetBinlogEnd)
	case *pb.Op_DeleteTask:
		d := o.DeleteTask
		return applyDelete(st, func(r *pb.SubTask) bool {
			return r.GetDb() == d.GetDb() && r.GetName() == d.GetName() &&
				(d.GetExportId() == "" || r.GetProgress().GetExportId() == d.GetExportId())
		})
	default: // *pb.Op_DeleteAll: validateOp knows no other
		return applyDelete(st, func(*pb.SubTask) bool { return true })
	}
}

// refuse is the result of a refused op on sub-task r (nil if none).
func refuse(r *pb.SubTask, err error) (Result, bool) {
	return Result{Record: cloneRecord(r), Err: err}, false
}

// changed is the result of an op that changed sub-task r at index.
func changed(r *pb.SubTask, index uint64) (Result, bool) {
	r.UpdatedIndex = index
	return Result{Record: cloneRecord(r)}, true
}

// applyPut is upstream AddSyncTask: a new (tid, pid, name) is created
// INIT, within MaxSubTasks and MaxTasksPerPool; the same token again is
// refused; a put of another export (a create whose name is taken) is
// refused; a new token reassigns the sub-task (not final): only the token
// and the endpoints are taken from the request, the stored progress
// (point, mode, start_ts, dest, export id, count, binlog end) stays, and a
// sub-task past INIT is RUNNING again.
func applyPut(st *pb.State, index uint64, op *pb.PutSubTask) (Result, bool) {
	req := op.GetRequest()
	tid, pid, name := req.GetTid(), req.GetPid(), op.GetName()
	i, ok := find(st, tid, pid, name)
	if !ok {
		if len(st.SubTasks) >= MaxSubTasks {
			return refuse(nil, fmt.Errorf("%w: %d", ErrTooManySubTasks, len(st.SubTasks)))
		}
		if subs := subTasksOf(st, tid, pid); len(subs) >= MaxTasksPerPool {
			return refuse(nil, fmt.Errorf("%w: %d/%d has sub-tasks of %d tasks (%s), the most a pool may have (MaxTasksPerPool %d)",
				ErrTooManyTasks, tid, pid, len(subs), taskNames(subs), MaxTasksPerPool))
		}
		p := proto.CloneOf(req)
		p.TaskName = proto.String(name)
		r := &pb.SubTask{Db: op.GetDb(), Name: name, Progress: p,
			Status: pb.Status_INIT, LastUpdateMs: op.GetUpdateMs(), CreatedIndex: index}
		st.SubTasks = slices.Insert(st.SubTasks, i, r)
		return changed(r, index)
	}
	r := st.SubTasks[i]
	switch id := req.GetExportId(); {
	case r.GetProgress().GetToken() == req.GetToken():
		return refuse(r, ErrSameTask)
	case id != "" && id != r.GetProgress().GetExportId():
		return refuse(r, fmt.Errorf("%w: %s is of export %s, not %s", ErrTaskExists, subName(tid, pid, name),
			exportfmt.ExportIDString(r.GetProgress().GetExportId()), id))
	case final(r.GetStatus()):
		return refuse(r, fmt.Errorf("%w: %s is %s; delete the task and create it again", ErrStatus, subName(tid, pid, name), r.GetStatus()))
	}
	p := r.Progress
	p.Token, p.TabletEndpoint, p.DesEndpoint = proto.String(req.GetToken()), proto.String(req.GetTabletEndpoint()), proto.String(req.GetDesEndpoint())
	if r.Status != pb.Status_INIT {
		r.Status = pb.Status_RUNNING
	}
	r.LastUpdateMs = max(r.LastUpdateMs, op.GetUpdateMs())
	return changed(r, index)
}

// liveRef returns the sub-task ref names if the ref's token is its token
// and its status lets packets advance it; else the refusal.
func liveRef(st *pb.State, ref *pb.Ref) (*pb.SubTask, error) {
	r, err := tokenRef(st, ref)
	if err == nil && !live(r.GetStatus()) {
		err = fmt.Errorf("%w: %s is %s, not INIT or RUNNING", ErrStatus, subName(ref.GetTid(), ref.GetPid(), r.GetName()), r.GetStatus())
	}
	return r, err
}

// tokenRef returns the sub-task ref names (resolve) if the ref's token is
// its token.
func tokenRef(st *pb.State, ref *pb.Ref) (*pb.SubTask, error) {
	r, err := resolve(st, ref.GetTid(), ref.GetPid(), ref.GetName())
	switch {
	case err != nil:
		return nil, err
	case r.GetProgress().GetToken() != ref.GetToken():
		return r, fmt.Errorf("%w: %s", ErrTokenMismatch, subName(ref.GetTid(), ref.GetPid(), r.GetName()))
	}
	return r, nil
}

// applyAdvance is an accepted SendData packet [start, next): it applies
// only at exactly the stored point, under the current token, while the
// sub-task is INIT or RUNNING; a finished packet (kFull) must reach past
// the binlog end.
func applyAdvance(st *pb.State, index uint64, op *pb.Advance) (Result, bool) {
	r, err := liveRef(st, op.GetRef())
	if err != nil {
		return refuse(r, err)
	}
	if !proto.Equal(op.GetStart(), r.GetProgress().GetSyncPoint()) {
		return refuse(r, fmt.Errorf("%w: the packet starts at %s, the sub-task is at %s", ErrPointMismatch,
			PointString(op.GetStart()), PointString(r.GetProgress().GetSyncPoint())))
	}
	if op.GetFinished() {
		switch {
		case r.GetProgress().GetMode() != dspb.SyncMode_kFull:
			return refuse(r, fmt.Errorf("%w: this sub-task is %s", ErrNotFull, r.GetProgress().GetMode()))
		case r.GetBinlogEnd() == 0:
			return refuse(r, fmt.Errorf("%w: finished before the binlog end is known", ErrBinlogEnd))
		case op.GetNext().GetOffset() <= r.GetBinlogEnd():
			return refuse(r, fmt.Errorf("%w: finished at %s, before the end index %d was exported", ErrBinlogEnd, PointString(op.GetNext()), r.GetBinlogEnd()))
		}
	}
	r.Progress.SyncPoint = proto.CloneOf(op.GetNext())
	if r.BinlogStart == 0 {
		r.BinlogStart, r.StartStateMs = op.GetBinlogStart(), op.GetStartStateMs()
	}
	if next := op.GetNext(); next.GetType() == dspb.SyncType_kBINLOG {
		cover(r, next.GetOffset()-1, op.GetCoveredMs())
	}
	r.LastPacketMs = max(r.LastPacketMs, op.GetWrittenAtMs())
	r.Count += op.GetCount()
	r.Status = pb.Status_RUNNING
	if op.GetFinished() {
		r.Status = pb.Status_SUCCESS
	}
	r.LastUpdateMs = max(r.LastUpdateMs, op.GetUpdateMs())
	return changed(r, index)
}

// applyTouch is an empty packet: it moves the last update and packet
// times forward and, when it is at the sub-task's point (a binlog point), the covered
// index and time.
func applyTouch(st *pb.State, index uint64, op *pb.Touch) (Result, bool) {
	r, err := liveRef(st, op.GetRef())
	if err != nil {
		return refuse(r, err)
	}
	moved := false
	if op.GetAt().GetType() == dspb.SyncType_kBINLOG && proto.Equal(op.GetAt(), r.GetProgress().GetSyncPoint()) {
		moved = cover(r, op.GetCoveredIndex(), op.GetCoveredMs())
	}
	if op.GetUpdateMs() > r.LastUpdateMs {
		r.LastUpdateMs, moved = op.GetUpdateMs(), true
	}
	if op.GetWrittenAtMs() > r.LastPacketMs {
		r.LastPacketMs, moved = op.GetWrittenAtMs(), true
	}
	if !moved {
		return Result{Record: cloneRecord(r)}, false
	}
	return changed(r, index)
}

// cover moves r's covered index and time forward to index and ms (each
// only forward: every write acknowledged before the larger time is at or
// below the index that came with it, so at or below the larger index);
// it reports whether either moved.
func cover(r *pb.SubTask, index uint64, ms int64) bool {
	moved := false
	if index > r.CoveredIndex {
		r.CoveredIndex, moved = index, true
	}
	if ms > r.CoveredMs {
		r.CoveredMs, moved = ms, true
	}
	return moved
}

// applySetStatus moves a sub-task that is not final to FAILED or
// REASSIGNING with the op's message; one already in that status is left
// as it is.
func applySetStatus(st *pb.State, index uint64, op *pb.SetStatus) (Result, bool) {
	r, err := tokenRef(st, op.GetRef())
	if err != nil {
		return refuse(r, err)
	}
	switch {
	case r.GetStatus() == op.GetStatus():
		return Result{Record: cloneRecord(r)}, false
	case final(r.GetStatus()):
		return refuse(r, fmt.Errorf("%w: %s is %s", ErrStatus, subName(op.GetRef().GetTid(), op.GetRef().GetPid(), r.GetName()), r.GetStatus()))
	}
	r.Status, r.Message = op.GetStatus(), op.GetMessage()
	return changed(r, index)
}

// applySetBinlogEnd records a kFull sub-task's binlog end once.
func applySetBinlogEnd(st *pb.State, index uint64, op *pb.SetBinlogEnd) (Result, bool) {
	r, err := liveRef(st, op.GetRef())
	switch {
	case err != nil:
		return refuse(r, err)
	case r.GetProgress().GetMode() != dspb.SyncMode_kFull:
		return refuse(r, fmt.Errorf("%w: this sub-task is %s", ErrNotFull, r.GetProgress().GetMode()))
	case r.GetBinlogEnd() == op.GetIndex():
		return Result{Record: cloneRecord(r)}, false
	case r.GetBinlogEnd() != 0:
		return refuse(r, fmt.Errorf("%w: already %d, not %d", ErrBinlogEnd, r.GetBinlogEnd(), op.GetIndex()))
	}
	r.BinlogEnd = op.GetIndex()
	return changed(r, index)
}

// applyDelete removes the sub-tasks drop selects.
func applyDelete(st *pb.State, drop func(*pb.SubTask) bool) (Result, bool) {
	n := len(st.SubTasks)
	st.SubTasks = slices.DeleteFunc(st.SubTasks, drop)
	removed := n - len(st.SubTasks)
	return Result{Removed: removed}, removed > 0
}
