package statemachine

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/copyset/statefile"
)

// Config is what a tenant supplies: S is its state (a pointer, changed in
// place), O its decoded op, R its apply result.
type Config[S, O, R any] struct {
	// Name names the machine in errors and logs ("sync").
	Name string
	// Path is the state file; File is the same file relative to the
	// copyset data dir (Files).
	Path, File string
	// Log receives the undecodable ops and the unreadable lines skipped.
	Log *slog.Logger
	// New returns the empty state, loaded from an empty file.
	New func() S
	// Decode decodes an op payload; an error stops the replica.
	Decode func(payload []byte) (O, error)
	// Apply applies op at index to st in place (it runs under the
	// machine's lock) and says whether st changed.
	Apply func(st S, index uint64, op O) (R, bool)
	// Replayed answers an op at or below the applied index from st; nil:
	// the zero R.
	Replayed func(st S, index uint64, op O) R
	// Changed, if set, is called after a change is persisted, outside the
	// lock.
	Changed func(index uint64, op O, res R)
	// Applied and SetApplied read and write the stamp in st.
	Applied    func(st S) uint64
	SetApplied func(st S, index uint64)
	// EncodeState and DecodeState are the whole-state line. DecodeState
	// is used to load when there is no Journal.
	EncodeState func(st S) ([]byte, error)
	DecodeState func(line []byte) (S, error)
	// Journal, if set, persists one entry per change instead of the whole
	// state.
	Journal *Journal[S, O]
}

// Journal is how a machine keeps a journal: a base line holding the whole
// state (Config.EncodeState), then one entry line per op that changed it.
type Journal[S, O any] struct {
	// EncodeEntry encodes the entry of op at index.
	EncodeEntry func(index uint64, op O) ([]byte, error)
	// DecodeLine decodes one line: a base (IsBase, Base) or an entry
	// (Index, Op). ok false: the line is unreadable (a torn write, padding)
	// and is skipped; an error refuses the whole file (a newer build's).
	DecodeLine func(line []byte) (l Line[S, O], ok bool, err error)
	// Replay applies an entry again on load; an error refuses the file.
	Replay func(st S, index uint64, op O) error
	// CompactMin and CompactFactor: the journal is replaced by a base
	// when it is larger than CompactMin and CompactFactor times the last
	// base.
	CompactMin, CompactFactor int64
	// BeforeBase, if set, runs before each base replaces the journal.
	BeforeBase func() error
}

// Line is one decoded journal line.
type Line[S, O any] struct {
	Base   S
	IsBase bool
	Index  uint64
	Op     O
}

// Machine is a copyset.StateMachine on a state file. Its methods are
// safe for concurrent use; Apply is called from the copyset's apply
// goroutine.
type Machine[S, O, R any] struct {
	cfg  Config[S, O, R]
	file *statefile.File

	mu      sync.RWMutex
	st      S     // changed only by Apply, under mu
	baseLen int64 // size of the last base line (journal compaction)
	loaded  bool  // the file held a state when opened
}

var _ copyset.StateMachine = (*Machine[*struct{}, struct{}, struct{}])(nil)

// Open opens cfg.Path and loads its state: the whole-state line with the
// highest stamp (the last of equals), or the journal's last base and the
// entries after it above its stamp. Unreadable lines are skipped and
// logged.
func Open[S, O, R any](cfg Config[S, O, R]) (*Machine[S, O, R], error) {
	file, b, err := statefile.Open(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("%s state: %w", cfg.Name, err)
	}
	st, bad, err := Load(cfg, b)
	if err != nil {
		return nil, fmt.Errorf("%s state %s: %w", cfg.Name, cfg.Path, err)
	}
	if bad > 0 {
		cfg.Log.Warn(cfg.Name+" state file: skipped unreadable lines (torn write or snapshot padding)", "file", cfg.Path, "lines", bad)
	}
	return &Machine[S, O, R]{cfg: cfg, file: file, st: st, baseLen: int64(len(b)), loaded: len(b) > 0}, nil
}

// Load loads a state file's content b as Open does and says how many
// lines it skipped as unreadable.
func Load[S, O, R any](cfg Config[S, O, R], b []byte) (st S, bad int, err error) {
	if cfg.Journal != nil {
		return loadJournal(cfg, b)
	}
	st, bad = loadNewest(cfg, b)
	return st, bad, nil
}

// loadNewest returns the state of the valid line with the highest stamp,
// the last of equals, and how many lines did not decode.
func loadNewest[S, O, R any](cfg Config[S, O, R], b []byte) (S, int) {
	best := cfg.New()
	bad := statefile.EachLine(b, func(line []byte) bool {
		st, err := cfg.DecodeState(line)
		if err != nil {
			return false
		}
		if cfg.Applied(st) >= cfg.Applied(best) {
			best = st
		}
		return true
	})
	return best, bad
}

// loadJournal loads a journal: each base replaces the state, each entry
// above the state's stamp is applied again (ops are deterministic, so the
// state is the one that was written).
func loadJournal[S, O, R any](cfg Config[S, O, R], b []byte) (st S, bad int, err error) {
	j := cfg.Journal
	st = cfg.New()
	bad = statefile.EachLine(b, func(line []byte) bool {
		if err != nil {
			return true
		}
		l, ok, lerr := j.DecodeLine(line)
		switch {
		case lerr != nil:
			err = lerr
		case !ok:
			return false
		case l.IsBase:
			st = l.Base
		case l.Index > cfg.Applied(st):
			if rerr := j.Replay(st, l.Index, l.Op); rerr != nil {
				err = fmt.Errorf("op at index %d: %w", l.Index, rerr)
				return true
			}
			cfg.SetApplied(st, l.Index)
		}
		return true
	})
	return st, bad, err
}

// Loaded reports whether the file held a state when the machine opened.
func (m *Machine[S, O, R]) Loaded() bool { return m.loaded }

// Apply implements copyset.StateMachine (see the package comment). The
// result is an R or a *copyset.FatalError.
func (m *Machine[S, O, R]) Apply(index uint64, payload []byte) any {
	op, err := m.cfg.Decode(payload)
	if err != nil {
		m.cfg.Log.Error("undecodable "+m.cfg.Name+" op", "index", index, "err", err)
		return &copyset.FatalError{Err: fmt.Errorf("%s op at index %d: %w", m.cfg.Name, index, err)}
	}
	m.mu.Lock()
	if index <= m.cfg.Applied(m.st) {
		var res R
		if m.cfg.Replayed != nil {
			res = m.cfg.Replayed(m.st, index, op)
		}
		m.mu.Unlock()
		return res
	}
	res, changed := m.cfg.Apply(m.st, index, op)
	if !changed {
		m.mu.Unlock()
		return res
	}
	m.cfg.SetApplied(m.st, index)
	line, base, err := m.encodeLocked(index, op)
	m.mu.Unlock()
	if err != nil {
		return &copyset.FatalError{Err: fmt.Errorf("%s op at index %d: encode state: %w", m.cfg.Name, index, err)}
	}
	if err := m.persist(line, base); err != nil {
		return &copyset.FatalError{Err: fmt.Errorf("%s op at index %d: %w", m.cfg.Name, index, err)}
	}
	if m.cfg.Changed != nil {
		m.cfg.Changed(index, op, res)
	}
	return res
}

// encodeLocked encodes the line that persists the change of op at index:
// the whole state, or a journal entry unless the journal is empty or has
// outgrown its base (base says which). The caller holds m.mu.
func (m *Machine[S, O, R]) encodeLocked(index uint64, op O) (line []byte, base bool, err error) {
	j := m.cfg.Journal
	if j == nil {
		line, err = m.cfg.EncodeState(m.st)
		return line, false, err
	}
	size := m.file.Size()
	if size == 0 || (size > j.CompactMin && size > j.CompactFactor*m.baseLen) {
		line, err = m.cfg.EncodeState(m.st)
		return line, true, err
	}
	line, err = j.EncodeEntry(index, op)
	return line, false, err
}

// persist writes line: the whole state (appended, or as a journal's
// base replacing the file) or a journal entry.
func (m *Machine[S, O, R]) persist(line []byte, base bool) error {
	switch {
	case m.cfg.Journal == nil:
		return m.file.Append(line)
	case !base:
		return m.file.AppendEntry(line)
	}
	if f := m.cfg.Journal.BeforeBase; f != nil {
		if err := f(); err != nil {
			return err
		}
	}
	m.baseLen = int64(len(line))
	return m.file.Replace(line)
}

// Reset replaces the state with st and the file with st's whole-state
// line alone, durably, without Journal.BeforeBase: the conversion of a
// state kept in an older layout, before the first Apply. A crash before
// it returns leaves the file as it was.
func (m *Machine[S, O, R]) Reset(st S) error {
	line, err := m.cfg.EncodeState(st)
	if err != nil {
		return fmt.Errorf("%s state: encode: %w", m.cfg.Name, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.file.Replace(line); err != nil {
		return fmt.Errorf("%s state: %w", m.cfg.Name, err)
	}
	m.st, m.baseLen = st, int64(len(line))
	return nil
}

// View calls f with the state under the read lock; f must not keep it or
// change it.
func (m *Machine[S, O, R]) View(f func(st S)) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	f(m.st)
}

// RLock read-locks the state and returns it, for a reader that holds the
// lock across several steps; the caller must not change st nor keep it
// past RUnlock.
func (m *Machine[S, O, R]) RLock() (st S) {
	m.mu.RLock()
	return m.st
}

// RUnlock releases the read lock taken by RLock.
func (m *Machine[S, O, R]) RUnlock() { m.mu.RUnlock() }

// Applied returns the log index of the last op that changed the state.
func (m *Machine[S, O, R]) Applied() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.cfg.Applied(m.st)
}

// Sync implements copyset.StateMachine: fsync the state file.
func (m *Machine[S, O, R]) Sync() error { return m.file.Sync() }

// Files implements copyset.StateMachine.
func (m *Machine[S, O, R]) Files() ([]string, error) { return []string{m.cfg.File}, nil }

// Close implements copyset.StateMachine; a later Apply reopens the file.
func (m *Machine[S, O, R]) Close() error {
	if err := m.file.Close(); err != nil {
		return fmt.Errorf("%s state: close: %w", m.cfg.Name, err)
	}
	return nil
}
