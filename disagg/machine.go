package disagg

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/copyset/statefile"
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
// decisions, clone locks and gc marks.
type Machine struct {
	log *slog.Logger
	dir string

	mu      sync.RWMutex
	st      *pb.State     // changed only by Apply, under mu
	settled chan struct{} // closed (and replaced) when a Settle ends pending decisions
	baseLen int64         // the size of the last base line (compaction)

	file *statefile.File // appended by Apply, synced by Sync
}

var _ copyset.StateMachine = (*Machine)(nil)

// openMachine loads dir/FileName (converting format 0's dir/state.jsonl
// the first time).
func openMachine(dir string, log *slog.Logger) (*Machine, error) {
	path := filepath.Join(dir, FileName)
	file, b, err := statefile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("disagg state: %w", err)
	}
	m := &Machine{log: log, dir: dir, file: file, settled: make(chan struct{}), baseLen: int64(len(b))}
	if len(b) == 0 {
		st, err := m.convertLegacy()
		if err != nil {
			return nil, err
		}
		m.st = st
		return m, nil
	}
	st, bad, err := loadJournal(b)
	if err != nil {
		return nil, fmt.Errorf("disagg state %s: %w", path, err)
	}
	if bad > 0 {
		log.Warn("disagg state file: skipped unreadable lines (torn write or snapshot padding)", "file", path, "lines", bad)
	}
	if err := m.markLegacy(); err != nil {
		return nil, err
	}
	m.st = st
	return m, nil
}

// loadJournal loads a journal of pb.Line: each base replaces the state,
// each op after it above the state's applied index is applied again (ops
// are deterministic, so the state is the one that was written). Lines
// that do not decode (a torn last write, snapshot padding) are counted in
// bad; a base of a newer format, or an op this build does not know, is an
// error: the file was written by a newer build.
func loadJournal(b []byte) (st *pb.State, bad int, err error) {
	st = &pb.State{Format: Format}
	read := protojson.UnmarshalOptions{DiscardUnknown: true}
	bad = statefile.EachLine(b, func(line []byte) bool {
		l := &pb.Line{}
		if err != nil {
			return true
		}
		if read.Unmarshal(line, l) != nil {
			return false
		}
		switch {
		case l.GetBase() != nil:
			if f := l.GetBase().GetFormat(); f != Format {
				err = fmt.Errorf("state of format %d: this build reads format %d (written by a newer build?)", f, Format)
				return true
			}
			st = l.GetBase()
		case l.GetOp().GetOp() != nil:
			if l.GetIndex() > st.GetApplied() {
				if res, _ := applyOp(st, l.GetIndex(), l.GetOp()); res.Err != nil {
					err = fmt.Errorf("op at index %d: %w", l.GetIndex(), res.Err)
					return true
				}
				st.Applied = l.GetIndex()
			}
		default:
			err = fmt.Errorf("line at index %d holds no op this build knows (written by a newer build?)", l.GetIndex())
		}
		return true
	})
	return st, bad, err
}

// convertLegacy loads format 0's table (dir/state.jsonl) if there is one
// and converts it: upstream's locks and data file marks are dropped (their
// objects in S3 say the same), clone locks and gc marks of other objects
// kept. The converted state is written as the journal's base, then the old
// file becomes the marker directory. A crash in between converts again.
func (m *Machine) convertLegacy() (*pb.State, error) {
	legacy := filepath.Join(m.dir, legacyName)
	b, err := os.ReadFile(legacy)
	switch {
	case errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.EISDIR):
		return &pb.State{Format: Format}, nil
	case err != nil:
		return nil, fmt.Errorf("disagg state: %w", err)
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
	if err := m.writeBase(st); err != nil {
		return nil, err
	}
	if err := m.markLegacy(); err != nil {
		return nil, err
	}
	m.log.Info("disagg state converted to format 2: upstream's locks and marks are their objects in S3",
		"applied", st.GetApplied(), "entries", len(old.GetFiles()), "kept", len(st.Files), "dropped", dropped, "unreadable_lines", bad)
	return st, nil
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

// writeBase replaces the journal with st as its base.
func (m *Machine) writeBase(st *pb.State) error {
	line, err := (protojson.MarshalOptions{}).Marshal(&pb.Line{Base: st})
	if err != nil {
		return fmt.Errorf("disagg state: encode: %w", err)
	}
	if err := m.file.Replace(line); err != nil {
		return fmt.Errorf("disagg state: %w", err)
	}
	m.baseLen = int64(len(line))
	return nil
}

// Apply implements copyset.StateMachine. The result is a Result, or a
// *copyset.FatalError when the op cannot be decoded or the state file
// cannot be written. An op at or below the state's applied index is
// already in the state (a replay after a restart or a snapshot install:
// nobody waits for its answer) and changes nothing. An op that changed
// the state is appended to the journal (index and op); the journal's
// first line, and every compaction, is the whole state instead.
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
	base := false
	if changed {
		m.st.Applied = index
		if op.GetSettle() != nil {
			close(m.settled)
			m.settled = make(chan struct{})
		}
		size := m.file.Size()
		base = size == 0 || (size > compactMinBytes && size > compactFactor*m.baseLen)
		var err error
		if base {
			line, err = (protojson.MarshalOptions{}).Marshal(&pb.Line{Base: m.st})
		} else {
			line, err = (protojson.MarshalOptions{}).Marshal(&pb.Line{Index: index, Op: op})
		}
		if err != nil {
			m.mu.Unlock()
			return &copyset.FatalError{Err: fmt.Errorf("disagg op at index %d: encode state: %w", index, err)}
		}
	}
	m.mu.Unlock()
	if !changed {
		return res
	}
	if err := m.persist(line, base); err != nil {
		return &copyset.FatalError{Err: fmt.Errorf("disagg op at index %d: %w", index, err)}
	}
	m.logChange(index, op, res)
	return res
}

// persist writes line: a base (the marker directory first, then the
// journal replaced) or a journal entry.
func (m *Machine) persist(line []byte, base bool) error {
	if !base {
		return m.file.AppendEntry(line)
	}
	if err := m.markLegacy(); err != nil {
		return err
	}
	m.baseLen = int64(len(line))
	return m.file.Replace(line)
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

// pendings returns a copy of the pending decisions whose key starts with
// prefix.
func (m *Machine) pendings(prefix string) []*pb.Pending {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []*pb.Pending
	for _, p := range m.st.Pending {
		if strings.HasPrefix(p.GetKey(), prefix) {
			out = append(out, proto.CloneOf(p))
		}
	}
	return out
}

// admitPend runs the bound check of a new pending decision against the
// current state (the service's admission; Apply checks again).
func (m *Machine) admitPend() error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return admitPend(m.st)
}

// waitSettled returns once no decision of kind mark is pending on key,
// or ctx is done.
func (m *Machine) waitSettled(ctx context.Context, key string, mark bool) error {
	for {
		m.mu.RLock()
		pending, settled := pendingKind(m.st, key, mark) != nil, m.settled
		m.mu.RUnlock()
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
