package copyset

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// MachineSpec registers one state machine kind on every copyset of a
// server (ManagerOptions.Machines). The kind numbers live outside this
// package (internal/kinds): copyset names no tenant.
type MachineSpec struct {
	// Kind is the op header kind routed to the machine; never 0.
	Kind Kind
	// Name names the machine in errors and logs.
	Name string
	// Batch says the machine's ops may share one raft entry, and so one log
	// index, with other ops (propose.go). A machine that recognises replays
	// by an index stamped in its state may set it only if it tells the ops
	// of one entry apart: it is an OpApplier and stamps (index, position),
	// as the chunk machine does. A machine that stamps the index alone
	// (the statefile machines) must not: a replay would skip every op of
	// the entry after the first.
	Batch bool
	// Group says one op of the machine may ride in a grouped proposal
	// (group.go), sharing its entry's log index with the group's other
	// ops. Set it when the machine recognises replays by an index stamped
	// in its own state alone (a copyset/statemachine tenant): a group
	// holds at most one op of such a kind, so the index still names that
	// op. Leave it unset for a machine whose Apply assumes its index is
	// its op's alone elsewhere: one that stamps another machine's state
	// with the index (the view machine numbers its ops in the chunk
	// store's sequence as position 0 of their entry, which a chunk op of
	// the same group may hold). A Batch machine may appear in a group any
	// number of times whatever Group says.
	Group bool
	// Dir is the machine's own subdirectory of the copyset data dir,
	// created before Open; its Files must lie under it. Every new machine
	// sets one. Empty: the data dir itself, for the machines whose files
	// predate subdirectories (the on-disk layout must not change).
	Dir string
	// Open opens the machine of one copyset. opened holds the machines of
	// the specs before this one, already open on the same copyset.
	Open func(env MachineEnv, opened Machines) (StateMachine, error)
}

// MachineEnv is what a copyset gives a machine it opens.
type MachineEnv struct {
	Group GroupID
	// DataDir is the copyset data dir; StateMachine.Files are relative to it.
	DataDir string
	// Dir is the machine's own directory: DataDir/MachineSpec.Dir, or
	// DataDir when the spec names none.
	Dir string
	// Logger carries the copyset's pool and copyset.
	Logger *slog.Logger
	// Log is the machine's hold on its replica's log (logpin.go): a
	// machine whose replicated state says where its consumers are in the
	// log sets it after it opens and after every apply, and releases it
	// when it closes. Never nil.
	Log *LogHold
}

// Machines is the state machines open on one copyset, by kind.
type Machines struct{ set *machineSet }

// Get returns the machine of kind, or nil.
func (ms Machines) Get(kind Kind) StateMachine {
	if ms.set == nil {
		return nil
	}
	return ms.set[kind]
}

// MachineAs returns the machine of kind as a T; false when there is none or
// it is not a T. A machine that wraps another (a test recorder, say) and
// has an Unwrap() StateMachine method is looked through.
func MachineAs[T StateMachine](ms Machines, kind Kind) (T, bool) {
	m := ms.Get(kind)
	for m != nil {
		if t, ok := m.(T); ok {
			return t, true
		}
		w, ok := m.(interface{ Unwrap() StateMachine })
		if !ok {
			break
		}
		m = w.Unwrap()
	}
	var zero T
	return zero, false
}

// MachineOf returns the machine of kind on n as a T; false when the copyset
// has none or it is not a T. Every typed lookup goes through it.
func MachineOf[T StateMachine](n *Node, kind Kind) (T, bool) {
	return MachineAs[T](n.Machines(), kind)
}

// registry is a manager's validated machine specs.
type registry struct {
	specs []MachineSpec
	// batch[k] says ops of kind k may share a raft entry: one array load
	// per op on the write path.
	batch [256]bool
	// group[k] says one op of kind k may ride in a group (group.go).
	group [256]bool
	// names[k] names machine k ("" for no machine).
	names [256]string
	// dirs[k] is the subdirectory of machine k ("" for none).
	dirs [256]string
}

// newRegistry validates specs: at least one, each with a kind other than
// 0, no kind twice, an Open function, a Dir that is a plain relative path
// inside the data dir and no Dir twice.
func newRegistry(specs []MachineSpec) (*registry, error) {
	if len(specs) == 0 {
		return nil, errors.New("machine specs: none registered")
	}
	r := &registry{specs: append([]MachineSpec(nil), specs...)}
	var seen [256]bool
	dirs := map[string]string{}
	for i, s := range specs {
		name := s.Name
		if name == "" {
			name = fmt.Sprintf("#%d", i)
		}
		switch {
		case s.Kind == 0:
			return nil, fmt.Errorf("machine spec %s: kind 0 is not a kind", name)
		case seen[s.Kind]:
			return nil, fmt.Errorf("machine spec %s: kind %d registered twice", name, s.Kind)
		case s.Open == nil:
			return nil, fmt.Errorf("machine spec %s (kind %d): no Open function", name, s.Kind)
		}
		if s.Dir != "" {
			if !filepath.IsLocal(s.Dir) || filepath.Clean(s.Dir) != s.Dir {
				return nil, fmt.Errorf("machine spec %s (kind %d): dir %q is not a plain path inside the data dir", name, s.Kind, s.Dir)
			}
			if other, ok := dirs[s.Dir]; ok {
				return nil, fmt.Errorf("machine spec %s (kind %d): dir %q is also %s's", name, s.Kind, s.Dir, other)
			}
			dirs[s.Dir] = name
		}
		seen[s.Kind] = true
		r.batch[s.Kind] = s.Batch
		r.group[s.Kind] = s.Group
		r.names[s.Kind] = name
		r.dirs[s.Kind] = s.Dir
	}
	return r, nil
}

// batchable reports whether op may share a log entry (and so a log index)
// with other ops: its kind's spec says Batch.
func (r *registry) batchable(op []byte) bool {
	return len(op) >= OpHeaderLen && op[0] == opVersion && r.batch[op[1]]
}

// open opens every machine of copyset g on dataDir in spec order, each
// with a hold on pins. On an error the machines opened so far are closed,
// last first.
func (r *registry) open(g GroupID, dataDir string, log *slog.Logger, pins *logPins) (*machineSet, error) {
	set := new(machineSet)
	fail := func(err error) (*machineSet, error) {
		for i := len(r.specs) - 1; i >= 0; i-- {
			if m := set[r.specs[i].Kind]; m != nil {
				m.Close()
			}
		}
		return nil, err
	}
	for _, s := range r.specs {
		env := MachineEnv{Group: g, DataDir: dataDir, Dir: dataDir, Logger: log, Log: pins.newHold(s.Name + " machine")}
		if s.Dir != "" {
			env.Dir = filepath.Join(dataDir, s.Dir)
			if err := os.MkdirAll(env.Dir, 0o755); err != nil {
				return fail(fmt.Errorf("open state machine %s: %w", s.Name, err))
			}
		}
		m, err := s.Open(env, Machines{set})
		if err == nil && m == nil {
			err = errors.New("no machine returned by Open")
		}
		if err != nil {
			return fail(fmt.Errorf("open state machine %s: %w", s.Name, err))
		}
		set[s.Kind] = m
	}
	return set, nil
}

// checkFiles checks that the files of machine k lie in its directory.
func (r *registry) checkFiles(k Kind, names []string) error {
	dir := r.dirs[k]
	if dir == "" {
		return nil
	}
	for _, name := range names {
		if !strings.HasPrefix(name, dir+"/") || !filepath.IsLocal(name) {
			return fmt.Errorf("state machine %d lists file %q outside its dir %q", k, name, dir)
		}
	}
	return nil
}

// OpenMachines opens the machines of specs on dataDir as a copyset g does
// (validated, in spec order, each in its Dir), without raft: for harnesses
// that drive machines directly (copyset/copysettest). CloseMachines closes
// them again.
func OpenMachines(specs []MachineSpec, g GroupID, dataDir string, log *slog.Logger) (Machines, error) {
	reg, err := newRegistry(specs)
	if err != nil {
		return Machines{}, err
	}
	// Their log holds hold no log: there is none.
	set, err := reg.open(g, dataDir, log, newLogPins(g, DefaultMaxPinnedEntries, DefaultMaxPinnedBytes, log))
	if err != nil {
		return Machines{}, err
	}
	return Machines{set}, nil
}

// CloseMachines closes every machine of ms, highest kind first.
func CloseMachines(ms Machines) error {
	if ms.set == nil {
		return nil
	}
	var errs []error
	for k := len(ms.set) - 1; k > 0; k-- {
		if m := ms.set[k]; m != nil {
			if err := m.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close state machine %d: %w", k, err))
			}
		}
	}
	return errors.Join(errs...)
}
