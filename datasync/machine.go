package datasync

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/copyset/statefile"
	"github.com/chunkraft/chunkraft/internal/kinds"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/syncstatepb"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
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

// Machine is the kinds.Sync state machine of one copyset.
type Machine struct {
	log *slog.Logger

	mu sync.RWMutex
	st *pb.State // replaced or changed only by Apply, under mu

	file *statefile.File // appended by Apply, synced by Sync (it starts a new line after a torn tail)

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
// with hold.
func openMachine(dir string, log *slog.Logger, hold *copyset.LogHold) (*Machine, error) {
	path := filepath.Join(dir, FileName)
	file, b, err := statefile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("sync state: %w", err)
	}
	best, bad := statefile.Newest(b, func() *pb.State { return &pb.State{} })
	if bad > 0 {
		log.Warn("sync state file: skipped unreadable lines (torn write or snapshot padding)", "file", path, "lines", bad)
	}
	m := &Machine{log: log, st: best, file: file, hold: hold, changed: make(chan struct{})}
	m.retain()
	return m, nil
}

// retain moves the log hold to where the state's live sub-tasks are.
func (m *Machine) retain() {
	m.mu.RLock()
	i := retainFrom(m.st)
	m.mu.RUnlock()
	m.holdMu.Lock()
	defer m.holdMu.Unlock()
	if i != m.held {
		m.held = i
		m.hold.Hold(i)
	}
}

// Apply implements copyset.StateMachine. The result is a Result, or a
// *copyset.FatalError when the op cannot be decoded (a newer op kind, a
// corrupt log: going on would diverge) or the state file cannot be
// written. An op at or below the state's applied index is already in the
// state and is answered with the sub-task as it is.
func (m *Machine) Apply(index uint64, payload []byte) any {
	op := &pb.Op{}
	if err := proto.Unmarshal(payload, op); err != nil || op.GetOp() == nil {
		if err == nil {
			err = fmt.Errorf("no op this version knows")
		}
		m.log.Error("undecodable sync op", "index", index, "err", err)
		return &copyset.FatalError{Err: fmt.Errorf("sync op at index %d: %w", index, err)}
	}
	m.mu.Lock()
	if index <= m.st.GetApplied() {
		res := Result{Record: cloneRecord(refRecord(m.st, op))}
		m.mu.Unlock()
		return res
	}
	res, changed := applyOp(m.st, index, op)
	var line []byte
	if changed {
		m.st.Applied = index
		var err error
		if line, err = (protojson.MarshalOptions{}).Marshal(m.st); err != nil {
			m.mu.Unlock()
			return &copyset.FatalError{Err: fmt.Errorf("sync op at index %d: encode state: %w", index, err)}
		}
	}
	m.mu.Unlock()
	if !changed {
		return res
	}
	if err := m.file.Append(line); err != nil {
		return &copyset.FatalError{Err: fmt.Errorf("sync op at index %d: %w", index, err)}
	}
	m.retain()
	m.logChange(index, op, res)
	switch op.GetOp().(type) {
	case *pb.Op_Put, *pb.Op_SetStatus, *pb.Op_DeleteTask, *pb.Op_DeleteAll:
		m.notifyChanged()
	}
	return res
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
	var tid, pid uint32
	switch o := op.GetOp().(type) {
	case *pb.Op_Put:
		tid, pid = o.Put.GetRequest().GetTid(), o.Put.GetRequest().GetPid()
	case *pb.Op_Advance:
		tid, pid = o.Advance.GetRef().GetTid(), o.Advance.GetRef().GetPid()
	case *pb.Op_Touch:
		tid, pid = o.Touch.GetRef().GetTid(), o.Touch.GetRef().GetPid()
	case *pb.Op_SetStatus:
		tid, pid = o.SetStatus.GetRef().GetTid(), o.SetStatus.GetRef().GetPid()
	case *pb.Op_SetBinlogEnd:
		tid, pid = o.SetBinlogEnd.GetRef().GetTid(), o.SetBinlogEnd.GetRef().GetPid()
	default:
		return nil
	}
	return get(st, tid, pid)
}

// logChange logs the changes an operator cares about: not packets and
// heartbeats, but creation, reassignment, status changes, the finish and
// deletes.
func (m *Machine) logChange(index uint64, op *pb.Op, res Result) {
	r := res.Record
	switch o := op.GetOp().(type) {
	case *pb.Op_Put, *pb.Op_SetStatus, *pb.Op_SetBinlogEnd:
		m.log.Info("sync sub-task changed", "index", index, "task", r.GetDb()+"/"+r.GetName(),
			"tid", r.GetProgress().GetTid(), "pid", r.GetProgress().GetPid(), "status", r.GetStatus().String(),
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

// Sync implements copyset.StateMachine: fsync the state file.
func (m *Machine) Sync() error { return m.file.Sync() }

// Files implements copyset.StateMachine.
func (m *Machine) Files() ([]string, error) { return []string{filepath.Join(Dir, FileName)}, nil }

// Close implements copyset.StateMachine; it releases the log hold.
func (m *Machine) Close() error {
	m.hold.Release()
	return m.file.Close()
}

// Get returns a copy of sub-task (tid, pid), or nil.
func (m *Machine) Get(tid, pid uint32) *pb.SubTask {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return cloneRecord(get(m.st, tid, pid))
}

// List returns a copy of every sub-task, ascending (tid, pid).
func (m *Machine) List() []*pb.SubTask {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]*pb.SubTask, len(m.st.SubTasks))
	for i, r := range m.st.SubTasks {
		out[i] = cloneRecord(r)
	}
	return out
}

// Applied returns the log index of the last op that changed the state.
func (m *Machine) Applied() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.st.GetApplied()
}
