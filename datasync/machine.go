package datasync

import (
	"log/slog"
	"path/filepath"
	"sync"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/copyset/statemachine"
	"github.com/chunkraft/chunkraft/internal/kinds"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/syncstatepb"
)

const (
	// Dir is the machine's directory in a copyset data dir.
	Dir = "sync"
	// FileName is the state file in Dir.
	FileName = "state.jsonl"
)

// Spec is the sync machine's spec: kind kinds.Sync, its files in Dir. Its
// ops carry their log index in the state, so they may not share one
// (not Batch).
func Spec() copyset.MachineSpec {
	return copyset.MachineSpec{Kind: kinds.Sync, Name: "sync", Dir: Dir,
		Open: func(env copyset.MachineEnv, _ copyset.Machines) (copyset.StateMachine, error) {
			return openMachine(env.Dir, env.Logger.With("component", "sync"), env.Log) // env.Logger carries pool and copyset
		}}
}

// Machine is the kinds.Sync state machine of one copyset: a
// statemachine.Machine on Dir/FileName (the whole state, one line per
// change) and the sub-tasks' log hold.
type Machine struct {
	*statemachine.Machine[*pb.State, *pb.Op, Result]
	log *slog.Logger

	changedMu sync.Mutex
	changed   chan struct{} // closed (and replaced) when a sub-task is created, changes status or is deleted

	// hold keeps the replica's raft log from retainFrom(st) on, set after
	// the load and every change and released by Close: the replicated log
	// pin of the live sub-tasks, on every replica alike. held is the
	// index it was last set to.
	holdMu sync.Mutex
	hold   *copyset.LogHold
	held   uint64
}

var _ copyset.StateMachine = (*Machine)(nil)

// openMachine loads dir/FileName: the valid line with the highest applied
// index (the last of equals), and holds the log for its live sub-tasks
// with hold. Its Apply answers a Result, or a *copyset.FatalError when the
// op cannot be decoded (a newer op kind, a corrupt log: going on would
// diverge) or the state file cannot be written; an op at or below the
// state's applied index is already in the state and is answered with the
// sub-task as it is.
func openMachine(dir string, log *slog.Logger, hold *copyset.LogHold) (*Machine, error) {
	m := &Machine{log: log, hold: hold, changed: make(chan struct{})}
	lines := statemachine.ProtoJSON[*pb.State]{New: func() *pb.State { return &pb.State{} }}
	sm, err := statemachine.Open(statemachine.Config[*pb.State, *pb.Op, Result]{
		Name: "sync", Path: filepath.Join(dir, FileName), File: filepath.Join(Dir, FileName), Log: log,
		New:    lines.New,
		Decode: statemachine.DecodeProto(func() *pb.Op { return &pb.Op{} }, func(op *pb.Op) bool { return op.GetOp() != nil }),
		Apply:  applyOp,
		Replayed: func(st *pb.State, _ uint64, op *pb.Op) Result {
			return Result{Record: cloneRecord(refRecord(st, op))}
		},
		Changed:     m.applied,
		Applied:     (*pb.State).GetApplied,
		SetApplied:  func(st *pb.State, i uint64) { st.Applied = i },
		EncodeState: lines.Encode,
		DecodeState: lines.Decode,
	})
	if err != nil {
		return nil, err
	}
	m.Machine = sm
	m.retain()
	return m, nil
}

// retain moves the log hold to where the state's live sub-tasks are.
func (m *Machine) retain() {
	var i uint64
	m.View(func(st *pb.State) { i = retainFrom(st) })
	m.holdMu.Lock()
	defer m.holdMu.Unlock()
	if i != m.held {
		m.held = i
		m.hold.Hold(i)
	}
}

// applied follows a persisted change: the log hold moves, the change is
// logged and the worker told of sub-tasks that came, went or changed
// status.
func (m *Machine) applied(index uint64, op *pb.Op, res Result) {
	m.retain()
	m.logChange(index, op, res)
	switch op.GetOp().(type) {
	case *pb.Op_Put, *pb.Op_SetStatus, *pb.Op_DeleteTask, *pb.Op_DeleteAll:
		m.notifyChanged()
	}
}

// Changed returns a channel closed at the next creation, reassignment,
// status change or deletion of a sub-task (not at packets): the leader
// worker reconciles its collectors then rather than at its next tick.
func (m *Machine) Changed() <-chan struct{} {
	m.changedMu.Lock()
	defer m.changedMu.Unlock()
	return m.changed
}

func (m *Machine) notifyChanged() {
	m.changedMu.Lock()
	close(m.changed)
	m.changed = make(chan struct{})
	m.changedMu.Unlock()
}

// refRecord is the sub-task op names, or nil.
func refRecord(st *pb.State, op *pb.Op) *pb.SubTask {
	var ref *pb.Ref
	switch o := op.GetOp().(type) {
	case *pb.Op_Put:
		return get(st, o.Put.GetRequest().GetTid(), o.Put.GetRequest().GetPid(), o.Put.GetName())
	case *pb.Op_Advance:
		ref = o.Advance.GetRef()
	case *pb.Op_Touch:
		ref = o.Touch.GetRef()
	case *pb.Op_SetStatus:
		ref = o.SetStatus.GetRef()
	case *pb.Op_SetBinlogEnd:
		ref = o.SetBinlogEnd.GetRef()
	default:
		return nil
	}
	r, _ := resolve(st, ref.GetTid(), ref.GetPid(), ref.GetName())
	return r
}

// logChange logs the changes an operator cares about: not packets and
// heartbeats, but creation, reassignment, status changes, the finish and
// deletes.
func (m *Machine) logChange(index uint64, op *pb.Op, res Result) {
	r := res.Record
	switch o := op.GetOp().(type) {
	case *pb.Op_Put, *pb.Op_SetStatus, *pb.Op_SetBinlogEnd:
		m.log.Info("sync sub-task changed", "index", index, "task", r.GetDb()+"/"+r.GetName(),
			"tid", r.GetProgress().GetTid(), "pid", r.GetProgress().GetPid(), "export", r.GetProgress().GetExportId(), "status", r.GetStatus().String(),
			"point", PointString(r.GetProgress().GetSyncPoint()), "binlog_end", r.GetBinlogEnd(), "message", r.GetMessage())
	case *pb.Op_Advance:
		if o.Advance.GetFinished() {
			m.log.Info("sync sub-task finished", "index", index, "task", r.GetDb()+"/"+r.GetName(),
				"tid", r.GetProgress().GetTid(), "pid", r.GetProgress().GetPid(), "count", r.GetCount())
		}
	case *pb.Op_DeleteTask, *pb.Op_DeleteAll:
		m.log.Info("sync sub-tasks deleted", "index", index, "removed", res.Removed)
	}
}

// Close implements copyset.StateMachine; it releases the log hold.
func (m *Machine) Close() error {
	m.hold.Release()
	return m.Machine.Close()
}

// Get returns a copy of the sub-task (tid, pid, name) names, or nil (see
// Lookup).
func (m *Machine) Get(tid, pid uint32, name string) *pb.SubTask {
	r, _ := m.Lookup(tid, pid, name)
	return r
}

// Lookup returns a copy of the sub-task (tid, pid, name) names: with a
// name, sub-task (tid, pid, name); without, the (tid, pid)'s only one. Its
// error wraps ErrNotFound when there is none, ErrTaskNotNamed (naming the
// tasks) when name is "" and there are several.
func (m *Machine) Lookup(tid, pid uint32, name string) (*pb.SubTask, error) {
	var r *pb.SubTask
	var err error
	m.View(func(st *pb.State) {
		r, err = resolve(st, tid, pid, name)
		r = cloneRecord(r)
	})
	return r, err
}

// List returns a copy of every sub-task, ascending (tid, pid, name).
func (m *Machine) List() []*pb.SubTask {
	var out []*pb.SubTask
	m.View(func(st *pb.State) {
		out = make([]*pb.SubTask, len(st.SubTasks))
		for i, r := range st.SubTasks {
			out[i] = cloneRecord(r)
		}
	})
	return out
}
