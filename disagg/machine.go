package disagg

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/copyset/statefile"
	"github.com/chunkraft/chunkraft/copyset/statemachine"
	"github.com/chunkraft/chunkraft/internal/atomicfile"
	"github.com/chunkraft/chunkraft/internal/kinds"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

const (
	// Dir is the machine's directory in a copyset data dir.
	Dir = "disagg"
	// FileName is the state file in Dir: a journal of pb.Line (a base,
	// the whole state, then the ops that changed it).
	FileName = "table.jsonl"
	// Format is the state's layout this build writes and the newest it
	// loads (pb.State.format).
	Format = 2
	// legacyName is where format 0 kept its table (whole-state lines);
	// once converted it is a directory, so that a build older than
	// format 2, which reads that file, refuses to start on the copyset.
	legacyName = "state.jsonl"
	// compactFactor: the journal is compacted to a base when its entries
	// have grown to this many times the last base's size (and past
	// compactMinBytes), so that each op's cost is its own line
	// plus a share of compactions that does not grow with the state.
	compactFactor = 8
)

// compactMinBytes is the journal size below which it is never compacted
// (a variable for tests).
var compactMinBytes int64 = statefile.CompactMinBytes

// Spec is the disagg machine's spec: kind kinds.Disagg, its files in Dir.
// Its ops record their log index in the state, so they may not share one
// (not Batch). Every copyset opens one; only the lock copyset's is used.
func Spec() copyset.MachineSpec {
	return copyset.MachineSpec{Kind: kinds.Disagg, Name: "disagg", Dir: Dir,
		Open: func(env copyset.MachineEnv, _ copyset.Machines) (copyset.StateMachine, error) {
			return openMachine(env.Dir, env.Logger.With("component", "disagg")) // env.Logger carries pool and copyset
		}}
}

// Machine is the kinds.Disagg state machine of one copyset: its pending
// decisions, clone locks and gc marks, in a statemachine.Machine on
// Dir/FileName kept as a journal. Its Apply answers a Result, or a
// *copyset.FatalError when the op cannot be decoded or the state file
// cannot be written. An op at or below the state's applied index is
// already in the state (a replay after a restart or a snapshot install:
// nobody waits for its answer) and changes nothing. An op that changed
// the state is appended to the journal (index and op); the journal's
// first line, and every compaction, is the whole state instead.
type Machine struct {
	*statemachine.Machine[*pb.State, *pb.Op, Result]
	log *slog.Logger
	dir string

	settled chan struct{} // closed (and replaced) when a Settle ends pending decisions; replaced only by Apply, under the state's lock
}

var _ copyset.StateMachine = (*Machine)(nil)

// openMachine loads dir/FileName (converting format 0's dir/state.jsonl
// the first time).
func openMachine(dir string, log *slog.Logger) (*Machine, error) {
	m := &Machine{log: log, dir: dir, settled: make(chan struct{})}
	sm, err := statemachine.Open(m.config())
	if err != nil {
		return nil, err
	}
	m.Machine = sm
	if !sm.Loaded() {
		if err := m.convertLegacy(); err != nil {
			sm.Close()
			return nil, err
		}
		return m, nil
	}
	if err := m.markLegacy(); err != nil {
		sm.Close()
		return nil, err
	}
	return m, nil
}

// config is m's statemachine: the whole state as a base line, each op
// that changed it as an entry line, compacted by size.
func (m *Machine) config() statemachine.Config[*pb.State, *pb.Op, Result] {
	read := protojson.UnmarshalOptions{DiscardUnknown: true}
	return statemachine.Config[*pb.State, *pb.Op, Result]{
		Name: "disagg", Path: filepath.Join(m.dir, FileName), File: filepath.Join(Dir, FileName), Log: m.log,
		New:    func() *pb.State { return &pb.State{Format: Format} },
		Decode: statemachine.DecodeProto(func() *pb.Op { return &pb.Op{} }, func(op *pb.Op) bool { return op.GetOp() != nil }),
		Apply: func(st *pb.State, index uint64, op *pb.Op) (Result, bool) {
			res, changed := applyOp(st, index, op)
			if changed && op.GetSettle() != nil {
				close(m.settled)
				m.settled = make(chan struct{})
			}
			return res, changed
		},
		Changed:     m.logChange,
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
				return decodeLine(l)
			},
			Replay: func(st *pb.State, index uint64, op *pb.Op) error {
				res, _ := applyOp(st, index, op)
				return res.Err
			},
			CompactMin: compactMinBytes, CompactFactor: compactFactor,
			BeforeBase: m.markLegacy,
		},
	}
}

// decodeLine reads one journal line: a base of this build's format or an
// op it knows; anything else was written by a newer build.
func decodeLine(l *pb.Line) (statemachine.Line[*pb.State, *pb.Op], bool, error) {
	switch {
	case l.GetBase() != nil:
		if f := l.GetBase().GetFormat(); f != Format {
			return statemachine.Line[*pb.State, *pb.Op]{}, true, fmt.Errorf("state of format %d: this build reads format %d (written by a newer build?)", f, Format)
		}
		return statemachine.Line[*pb.State, *pb.Op]{Base: l.GetBase(), IsBase: true}, true, nil
	case l.GetOp().GetOp() != nil:
		return statemachine.Line[*pb.State, *pb.Op]{Index: l.GetIndex(), Op: l.GetOp()}, true, nil
	}
	return statemachine.Line[*pb.State, *pb.Op]{}, true, fmt.Errorf("line at index %d holds no op this build knows (written by a newer build?)", l.GetIndex())
}

// convertLegacy loads format 0's table (dir/state.jsonl) if there is one
// and converts it: upstream's locks and data file marks are dropped (their
// objects in S3 say the same), clone locks and gc marks of other objects
// kept. The converted state is written as the journal's base, then the old
// file becomes the marker directory. A crash in between converts again.
func (m *Machine) convertLegacy() error {
	legacy := filepath.Join(m.dir, legacyName)
	b, err := os.ReadFile(legacy)
	switch {
	case errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.EISDIR):
		return nil
	case err != nil:
		return fmt.Errorf("disagg state: %w", err)
	}
	old, bad := statefile.Newest(b, func() *pb.State { return &pb.State{} })
	st := &pb.State{Applied: old.GetApplied(), Format: Format, CloneCopysets: old.GetCloneCopysets()}
	dropped := 0
	for _, f := range old.GetFiles() {
		f.Locks = nil
		if isDataFileKey(f.GetKey()) {
			f.Deleted, f.MarkedIndex, f.MarkedMs = false, 0, 0
		}
		if len(f.GetCloneLocks()) == 0 && !f.GetDeleted() {
			dropped++
			continue
		}
		st.Files = append(st.Files, f)
	}
	if err := m.Reset(st); err != nil {
		return err
	}
	if err := m.markLegacy(); err != nil {
		return err
	}
	m.log.Info("disagg state converted to format 2: upstream's locks and marks are their objects in S3",
		"applied", st.GetApplied(), "entries", len(old.GetFiles()), "kept", len(st.Files), "dropped", dropped, "unreadable_lines", bad)
	return nil
}

// legacyNote is the marker directory's README.
const legacyNote = `This copyset's disagg state is in ../table.jsonl (format 2), written by
a newer chunkserver. This directory stands where older builds keep their
lock table, so that a build older than format 2 refuses to open the copyset
rather than start from an empty table.
`

// markLegacy makes dir/state.jsonl the marker directory (idempotent).
func (m *Machine) markLegacy() error {
	legacy := filepath.Join(m.dir, legacyName)
	if fi, err := os.Stat(legacy); err == nil && fi.IsDir() {
		return nil
	}
	if err := os.Remove(legacy); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("disagg state: %w", err)
	}
	if err := os.Mkdir(legacy, 0o755); err != nil {
		return fmt.Errorf("disagg state: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(legacy, "README"), []byte(legacyNote), 0o644); err != nil {
		return fmt.Errorf("disagg state: %w", err)
	}
	return nil
}

func (m *Machine) logChange(index uint64, op *pb.Op, res Result) {
	switch o := op.GetOp().(type) {
	case *pb.Op_Pend:
		p := o.Pend
		m.log.Debug("disagg decision pending", "index", index, "key", p.GetKey(), "mark", p.GetMark(), "lock_store_id", p.GetLockStoreId(), "lock_seq", p.GetLockSeq())
	case *pb.Op_Settle:
		m.log.Debug("disagg decisions settled", "index", index, "decisions", len(o.Settle.GetDone()))
	case *pb.Op_LockClone:
		l := o.LockClone
		m.log.Info("disagg clone lock taken", "index", index, "name", l.GetName(), "holder", CloneHolder(l.GetPool(), l.GetCopyset(), l.GetChunk()))
	case *pb.Op_ReleaseClone:
		l := o.ReleaseClone
		m.log.Info("disagg clone lock released", "index", index, "name", l.GetName(), "holder", CloneHolder(l.GetPool(), l.GetCopyset(), l.GetChunk()))
	case *pb.Op_MarkObject:
		m.log.Info("disagg object marked deleted", "index", index, "name", o.MarkObject.GetName())
	case *pb.Op_MarkObjects:
		m.log.Info("disagg objects marked deleted", "index", index, "names", len(o.MarkObjects.GetNames())-len(res.Locked), "locked", len(res.Locked))
	case *pb.Op_Forget:
		m.log.Info("disagg collected objects forgotten", "index", index, "names", len(res.Released))
	}
}

// List returns a copy of the entries whose key starts with prefix,
// ascending, and the applied index; with holderPool not 0, only those
// with a clone lock of copyset holderPool/holderCopyset.
func (m *Machine) List(prefix string, holderPool, holderCopyset uint32) ([]*pb.DataFile, uint64) {
	state := m.RLock()
	defer m.RUnlock()
	var out []*pb.DataFile
	for _, f := range state.Files {
		if strings.HasPrefix(f.GetKey(), prefix) && (holderPool == 0 || heldBy(f, holderPool, holderCopyset)) {
			out = append(out, proto.CloneOf(f))
		}
	}
	return out, state.GetApplied()
}

// cloneCopysets returns a copy of the recorded members of the copysets
// holding clone locks (State.clone_copysets); with pool not 0, only that
// of pool/copyset.
func (m *Machine) cloneCopysets(pool, copyset uint32) []*pb.CloneCopyset {
	state := m.RLock()
	defer m.RUnlock()
	var out []*pb.CloneCopyset
	for _, c := range state.CloneCopysets {
		if pool == 0 || (c.GetPool() == pool && c.GetCopyset() == copyset) {
			out = append(out, proto.CloneOf(c))
		}
	}
	return out
}

// heldBy reports whether a clone chunk of copyset pool/copyset locks f.
func heldBy(f *pb.DataFile, pool, copyset uint32) bool {
	for _, l := range f.CloneLocks {
		if l.GetPool() == pool && l.GetCopyset() == copyset {
			return true
		}
	}
	return false
}

// pendings returns a copy of the pending decisions whose key starts with
// prefix.
func (m *Machine) pendings(prefix string) []*pb.Pending {
	state := m.RLock()
	defer m.RUnlock()
	var out []*pb.Pending
	for _, p := range state.Pending {
		if strings.HasPrefix(p.GetKey(), prefix) {
			out = append(out, proto.CloneOf(p))
		}
	}
	return out
}

// admitPend runs the bound check of a new pending decision against the
// current state (the service's admission; Apply checks again).
func (m *Machine) admitPend() error {
	state := m.RLock()
	defer m.RUnlock()
	return admitPend(state)
}

// waitSettled returns once no decision of kind mark is pending on key,
// or ctx is done.
func (m *Machine) waitSettled(ctx context.Context, key string, mark bool) error {
	for {
		state := m.RLock()
		pending, settled := pendingKind(state, key, mark) != nil, m.settled
		m.RUnlock()
		if !pending {
			return nil
		}
		select {
		case <-settled:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// MachineOf returns the disagg machine of n.
func MachineOf(n *copyset.Node) (*Machine, bool) { return copyset.MachineOf[*Machine](n, kinds.Disagg) }
