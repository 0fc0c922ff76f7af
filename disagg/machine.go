package disagg

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	gosync "sync"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/copyset/statefile"
	"github.com/chunkraft/chunkraft/internal/kinds"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

const (
	// Dir is the machine's directory in a copyset data dir.
	Dir = "disagg"
	// FileName is the state file in Dir.
	FileName = "state.jsonl"
)

// Spec is the disagg machine's spec: kind kinds.Disagg, its files in Dir.
// Its ops record their log index in the state, so they may not share one
// (not Batch). Every copyset opens one; only the lock copyset's is used.
func Spec() copyset.MachineSpec {
	return copyset.MachineSpec{Kind: kinds.Disagg, Name: "disagg", Dir: Dir,
		Open: func(env copyset.MachineEnv, _ copyset.Machines) (copyset.StateMachine, error) {
			g := env.Group
			return openMachine(env.Dir, env.Logger.With("component", "disagg", "pool", g.Pool(), "copyset", g.Copyset()))
		}}
}

// Machine is the kinds.Disagg state machine of one copyset: its lock table.
type Machine struct {
	log *slog.Logger

	mu gosync.RWMutex
	st *pb.State // changed only by Apply, under mu

	file *statefile.File // appended by Apply, synced by Sync
}

var _ copyset.StateMachine = (*Machine)(nil)

// openMachine loads dir/FileName: the valid line with the highest applied
// index (the last of equals).
func openMachine(dir string, log *slog.Logger) (*Machine, error) {
	path := filepath.Join(dir, FileName)
	file, b, err := statefile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("disagg state: %w", err)
	}
	best, bad := statefile.Newest(b, func() *pb.State { return &pb.State{} })
	if bad > 0 {
		log.Warn("disagg state file: skipped unreadable lines (torn write or snapshot padding)", "file", path, "lines", bad)
	}
	return &Machine{log: log, st: best, file: file}, nil
}

// Apply implements copyset.StateMachine. The result is a Result, or a
// *copyset.FatalError when the op cannot be decoded or the state file
// cannot be written. An op at or below the state's applied index is
// already in the state (a replay after a restart or a snapshot install:
// nobody waits for its answer) and changes nothing.
func (m *Machine) Apply(index uint64, payload []byte) any {
	op := &pb.Op{}
	if err := proto.Unmarshal(payload, op); err != nil || op.GetOp() == nil {
		if err == nil {
			err = fmt.Errorf("no op this version knows")
		}
		m.log.Error("undecodable disagg op", "index", index, "err", err)
		return &copyset.FatalError{Err: fmt.Errorf("disagg op at index %d: %w", index, err)}
	}
	m.mu.Lock()
	if index <= m.st.GetApplied() {
		m.mu.Unlock()
		return Result{} // replayed: its answer was given when it first applied
	}
	res, changed := applyOp(m.st, index, op)
	var line []byte
	if changed {
		m.st.Applied = index
		var err error
		if line, err = (protojson.MarshalOptions{}).Marshal(m.st); err != nil {
			m.mu.Unlock()
			return &copyset.FatalError{Err: fmt.Errorf("disagg op at index %d: encode state: %w", index, err)}
		}
	}
	m.mu.Unlock()
	if !changed {
		return res
	}
	if err := m.file.Append(line); err != nil {
		return &copyset.FatalError{Err: fmt.Errorf("disagg op at index %d: %w", index, err)}
	}
	m.logChange(index, op, res)
	return res
}

func (m *Machine) logChange(index uint64, op *pb.Op, res Result) {
	switch o := op.GetOp().(type) {
	case *pb.Op_AddLock:
		m.log.Info("disagg lock added", "index", index, "key", o.AddLock.GetKey(), "lock_store_id", o.AddLock.GetLockStoreId(), "lock_seq", o.AddLock.GetLockSeq())
	case *pb.Op_MarkDelete:
		m.log.Info("disagg data file marked deleted", "index", index, "key", o.MarkDelete.GetKey())
	case *pb.Op_Release:
		m.log.Info("disagg locks released", "index", index, "lock_store_id", o.Release.GetLockStoreId(), "up_to_seq", o.Release.GetUpToSeq(), "released", len(res.Released))
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

// Sync implements copyset.StateMachine: fsync the state file.
func (m *Machine) Sync() error { return m.file.Sync() }

// Files implements copyset.StateMachine.
func (m *Machine) Files() ([]string, error) { return []string{filepath.Join(Dir, FileName)}, nil }

// Close implements copyset.StateMachine.
func (m *Machine) Close() error { return m.file.Close() }

// List returns a copy of the entries whose key starts with prefix,
// ascending, and the applied index; with holderPool not 0, only those
// with a clone lock of copyset holderPool/holderCopyset.
func (m *Machine) List(prefix string, holderPool, holderCopyset uint32) ([]*pb.DataFile, uint64) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []*pb.DataFile
	for _, f := range m.st.Files {
		if strings.HasPrefix(f.GetKey(), prefix) && (holderPool == 0 || heldBy(f, holderPool, holderCopyset)) {
			out = append(out, proto.CloneOf(f))
		}
	}
	return out, m.st.GetApplied()
}

// cloneCopysets returns a copy of the recorded members of the copysets
// holding clone locks (State.clone_copysets); with pool not 0, only that
// of pool/copyset.
func (m *Machine) cloneCopysets(pool, copyset uint32) []*pb.CloneCopyset {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []*pb.CloneCopyset
	for _, c := range m.st.CloneCopysets {
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

// holds says whether the table holds lock (store, seq) on key.
func (m *Machine) holds(key string, store, seq uint64) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	i, found := findFile(m.st, key)
	if !found {
		return false
	}
	_, held := findLock(m.st.Files[i].Locks, store, seq)
	return held
}

// admitLock runs the bound check of lock (store, seq) on key against the
// current table (the service's admission; Apply checks again).
func (m *Machine) admitLock(key string, store, seq uint64) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return admitLock(m.st, key, store, seq)
}

// admitMark runs the bound check of a delete mark on key (a new entry).
func (m *Machine) admitMark(key string) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	_, found := findFile(m.st, key)
	return admit(m.st, !found, false)
}

// MachineOf returns the disagg machine of n.
func MachineOf(n *copyset.Node) (*Machine, bool) { return copyset.MachineOf[*Machine](n, kinds.Disagg) }
