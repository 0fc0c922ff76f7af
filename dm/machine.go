package dm

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/copyset/statemachine"
	"github.com/chunkraft/chunkraft/internal/kinds"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
)

const (
	// Dir is the machine's directory in a copyset data dir.
	Dir = "dm"
	// FileName is the state file in Dir.
	FileName = "state.jsonl"
)

// Spec is the dm machine's spec: kind kinds.DM, its files in Dir. Its ops
// carry their log index in the state, so they may not share an entry with
// each other (not Batch), but one may ride in a grouped proposal with the
// chunk ops it covers (Group): an Advance and the source ops it applies.
func Spec() copyset.MachineSpec {
	return copyset.MachineSpec{Kind: kinds.DM, Name: "dm", Dir: Dir, Group: true,
		Open: func(env copyset.MachineEnv, _ copyset.Machines) (copyset.StateMachine, error) {
			return OpenMachine(env.Dir, env.Logger.With("component", "dm"))
		}}
}

// Machine is the kinds.DM state machine of one copyset: a
// statemachine.Machine on Dir/FileName (a journal: an op line per change,
// the whole state as a base line from time to time).
type Machine struct {
	*statemachine.Machine[*pb.State, *pb.Op, Result]
	log *slog.Logger

	changedMu sync.Mutex
	changed   chan struct{} // closed (and replaced) when a share comes, goes or changes stage
}

var _ copyset.StateMachine = (*Machine)(nil)

// Journal compaction: the state file is rewritten as one base line when
// it is larger than compactMinBytes and compactFactor times the last base
// (a variable: tests lower it).
var compactMinBytes int64 = 1 << 20

const compactFactor = 4

// OpenMachine loads dir/FileName, a journal: the last base line (the whole
// state) and the op lines after it above its stamp. Its Apply answers a
// Result, or a *copyset.FatalError when the op cannot be decoded or the
// state file cannot be written; an op at or below the state's applied
// index is already in the state and is answered with the share as it is.
func OpenMachine(dir string, log *slog.Logger) (*Machine, error) {
	m := &Machine{log: log, changed: make(chan struct{})}
	read := protojson.UnmarshalOptions{DiscardUnknown: true}
	sm, err := statemachine.Open(statemachine.Config[*pb.State, *pb.Op, Result]{
		Name: "dm", Path: filepath.Join(dir, FileName), File: filepath.Join(Dir, FileName), Log: log,
		New:    func() *pb.State { return &pb.State{} },
		Decode: statemachine.DecodeProto(func() *pb.Op { return &pb.Op{} }, func(op *pb.Op) bool { return op.GetOp() != nil }),
		Apply:  applyOp,
		Replayed: func(st *pb.State, _ uint64, op *pb.Op) Result {
			if s := get(st, opName(op)); s != nil {
				return Result{SubTask: proto.CloneOf(s)}
			}
			return Result{}
		},
		Changed:     m.applied,
		Applied:     (*pb.State).GetApplied,
		SetApplied:  func(st *pb.State, i uint64) { st.Applied = i },
		EncodeState: func(st *pb.State) ([]byte, error) { return protojson.Marshal(&pb.Line{Base: st}) },
		Journal: &statemachine.Journal[*pb.State, *pb.Op]{
			EncodeEntry: func(index uint64, op *pb.Op) ([]byte, error) {
				return protojson.Marshal(&pb.Line{Index: index, Op: op})
			},
			DecodeLine: func(line []byte) (statemachine.Line[*pb.State, *pb.Op], bool, error) {
				l := &pb.Line{}
				if read.Unmarshal(line, l) != nil {
					return statemachine.Line[*pb.State, *pb.Op]{}, false, nil
				}
				switch {
				case l.GetBase() != nil:
					return statemachine.Line[*pb.State, *pb.Op]{Base: l.GetBase(), IsBase: true}, true, nil
				case l.GetOp().GetOp() != nil:
					return statemachine.Line[*pb.State, *pb.Op]{Index: l.GetIndex(), Op: l.GetOp()}, true, nil
				}
				return statemachine.Line[*pb.State, *pb.Op]{}, true, fmt.Errorf("dm state line at index %d holds no op this build knows (written by a newer build?)", l.GetIndex())
			},
			Replay: func(st *pb.State, index uint64, op *pb.Op) error {
				res, _ := applyOp(st, index, op)
				return res.Err
			},
			CompactMin: compactMinBytes, CompactFactor: compactFactor,
		},
	})
	if err != nil {
		return nil, err
	}
	m.Machine = sm
	return m, nil
}

// MachineOf returns n's dm machine.
func MachineOf(n *copyset.Node) (*Machine, bool) { return copyset.MachineOf[*Machine](n, kinds.DM) }

// opName is the task op names.
func opName(op *pb.Op) string {
	switch o := op.GetOp().(type) {
	case *pb.Op_Start:
		return o.Start.GetConfig().GetName()
	case *pb.Op_SetStage:
		return o.SetStage.GetName()
	case *pb.Op_Advance:
		return o.Advance.GetName()
	case *pb.Op_Fail:
		return o.Fail.GetName()
	case *pb.Op_Delete:
		return o.Delete.GetName()
	case *pb.Op_Update:
		return o.Update.GetName()
	}
	return ""
}

// applied follows a persisted change: it is logged, and the leader worker
// told of shares that came, went or changed stage.
func (m *Machine) applied(index uint64, op *pb.Op, res Result) {
	m.logChange(index, op, res)
	if op.GetAdvance() == nil || op.GetAdvance().GetFinished() {
		m.changedMu.Lock()
		close(m.changed)
		m.changed = make(chan struct{})
		m.changedMu.Unlock()
	}
}

// Changed returns a channel closed at the next start, stage change, error,
// update or delete of a share (not at checkpoints).
func (m *Machine) Changed() <-chan struct{} {
	m.changedMu.Lock()
	defer m.changedMu.Unlock()
	return m.changed
}

// logChange logs what an operator cares about: not checkpoints, but
// creation, stage changes, errors, updates and deletes.
func (m *Machine) logChange(index uint64, op *pb.Op, res Result) {
	s := res.SubTask
	switch o := op.GetOp().(type) {
	case *pb.Op_Advance:
		if o.Advance.GetFinished() {
			m.log.Info("dm sub task finished", "index", index, "task", opName(op), "checkpoint", CheckpointString(s.GetCheckpoint()))
		}
	case *pb.Op_Delete:
		m.log.Info("dm sub task deleted", "index", index, "task", opName(op))
	case *pb.Op_Fail:
		m.log.Warn("dm sub task paused by an error", "index", index, "task", opName(op), "resumable", s.GetResumable(),
			"error", o.Fail.GetError().GetMessage())
	default:
		m.log.Info("dm sub task changed", "index", index, "task", opName(op), "stage", s.GetStage().String(),
			"unit", s.GetUnit().String())
	}
}

// Get returns a copy of task name's share, or nil.
func (m *Machine) Get(name string) *pb.SubTask {
	var s *pb.SubTask
	m.View(func(st *pb.State) {
		if r := get(st, name); r != nil {
			s = proto.CloneOf(r)
		}
	})
	return s
}

// List returns a copy of every share, ascending by task name.
func (m *Machine) List() []*pb.SubTask {
	var out []*pb.SubTask
	m.View(func(st *pb.State) {
		out = make([]*pb.SubTask, len(st.Subtasks))
		for i, s := range st.Subtasks {
			out[i] = proto.CloneOf(s)
		}
	})
	return out
}
