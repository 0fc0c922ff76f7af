package copysettest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/kinds"
)

// testKind is a test-only kind, far from internal/kinds' table.
const testKind copyset.Kind = 201

func TestToyMachineConforms(t *testing.T) {
	RunStateMachineConformance(t, []copyset.MachineSpec{ToySpec(testKind, "toykv")}, ToyWorkload(testKind))
}

// A fifth machine, defined only here, registers next to others (two toy
// machines standing in for existing ones, and one under the reserved
// sync kind) and the set passes, with no edit to copyset.
func TestFifthMachineConforms(t *testing.T) {
	specs := []copyset.MachineSpec{
		ToySpec(testKind, "first"),
		ToySpec(testKind+1, "second"),
		{Kind: kinds.Sync, Name: "fifth", Dir: "fifth", Open: func(env copyset.MachineEnv, opened copyset.Machines) (copyset.StateMachine, error) {
			if _, ok := copyset.MachineAs[*ToyKV](opened, testKind); !ok {
				return nil, fmt.Errorf("fifth: the first machine must open before it")
			}
			return openCounter(env.Dir, "fifth/"+counterFile, false, false)
		}},
	}
	toy1, toy2 := ToyWorkload(testKind), ToyWorkload(testKind+1)
	w := Workload{
		Op: func(rng *rand.Rand, i int) []byte {
			switch rng.IntN(3) {
			case 0:
				return toy1.Op(rng, i)
			case 1:
				return toy2.Op(rng, i)
			}
			return counterOp(kinds.Sync, rng.IntN(5))
		},
		State: func(ms copyset.Machines) (string, error) {
			a, err := toy1.State(ms)
			if err != nil {
				return "", err
			}
			b, err := toy2.State(ms)
			if err != nil {
				return "", err
			}
			c, ok := copyset.MachineAs[*counter](ms, kinds.Sync)
			if !ok {
				return "", fmt.Errorf("no fifth machine")
			}
			return a + "--\n" + b + "--\n" + c.dump(), nil
		},
	}
	RunStateMachineConformance(t, specs, w)
}

// The suite catches a machine that breaks the contract.
func TestConformanceCatchesBrokenMachines(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(dir, rel string) (copyset.StateMachine, error)
		want string // a substring of a reported failure
	}{
		{"apply not idempotent", func(dir, rel string) (copyset.StateMachine, error) { return openCounter(dir, rel, false, true) }, "replay"},
		{"file replaced, not appended", func(dir, rel string) (copyset.StateMachine, error) { return openSortedKV(dir, rel, false) }, "fuzzy copy"},
		{"sync does not write", func(dir, rel string) (copyset.StateMachine, error) { return openSortedKV(dir, rel, true) }, "sync"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := copyset.MachineSpec{Kind: testKind, Name: "broken", Dir: "broken",
				Open: func(env copyset.MachineEnv, _ copyset.Machines) (copyset.StateMachine, error) {
					return tc.open(env.Dir, "broken/"+counterFile)
				}}
			w := Workload{
				Op: func(rng *rand.Rand, i int) []byte {
					if tc.name == "apply not idempotent" {
						return counterOp(testKind, rng.IntN(5))
					}
					// A new key per op: the rewritten file grows, and a
					// stream cuts a newer file short.
					return ToyOp(testKind, fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", rng.IntN(100)))
				},
				State: func(ms copyset.Machines) (string, error) {
					m, ok := copyset.MachineAs[dumper](ms, testKind)
					if !ok {
						return "", fmt.Errorf("no broken machine")
					}
					return m.dump(), nil
				},
			}
			rt := &recordingTB{TB: t}
			rt.run(func() { RunStateMachineConformance(rt, []copyset.MachineSpec{spec}, w) })
			if !rt.Failed() {
				t.Fatal("the suite passed a broken machine")
			}
			if !strings.Contains(rt.report(), tc.want) {
				t.Fatalf("the suite failed, but not on %q:\n%s", tc.want, rt.report())
			}
			t.Logf("reported as expected:\n%s", rt.report())
		})
	}
}

type dumper interface {
	copyset.StateMachine
	dump() string
}

// recordingTB is a testing.TB that records failures instead of failing
// the test; FailNow ends the goroutine run started.
type recordingTB struct {
	testing.TB
	mu     sync.Mutex
	failed bool
	msgs   []string
}

func (r *recordingTB) run(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

func (r *recordingTB) Helper() {}
func (r *recordingTB) Fail() {
	r.mu.Lock()
	r.failed = true
	r.mu.Unlock()
}
func (r *recordingTB) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}
func (r *recordingTB) FailNow() { r.Fail(); runtime.Goexit() }
func (r *recordingTB) Error(args ...any) {
	r.log(fmt.Sprint(args...))
	r.Fail()
}
func (r *recordingTB) Errorf(format string, args ...any) {
	r.log(fmt.Sprintf(format, args...))
	r.Fail()
}
func (r *recordingTB) Fatal(args ...any) { r.log(fmt.Sprint(args...)); r.FailNow() }
func (r *recordingTB) Fatalf(format string, args ...any) {
	r.log(fmt.Sprintf(format, args...))
	r.FailNow()
}
func (r *recordingTB) log(s string) {
	r.mu.Lock()
	r.msgs = append(r.msgs, s)
	r.mu.Unlock()
}
func (r *recordingTB) report() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.msgs, "\n")
}

const counterFile = "state"

// counter is a test machine: op "c<n>" adds one to counter n, one
// appended "index position n" line per op. Its state is stamped with the
// place of its last op: (index, position) when byPos (an OpApplier, fit
// for a Batch spec), else the index alone (position 0: fit for a spec
// that says Group, once per group). broken: Apply does not skip ops
// already in the state (not idempotent).
type counter struct {
	f       *os.File
	rel     string
	n       map[int]int
	applied uint64
	pos     int
	byPos   bool
	broken  bool
}

func counterOp(kind copyset.Kind, n int) []byte {
	op := make([]byte, copyset.OpHeaderLen)
	copyset.PutOpHeader(op, kind)
	return append(op, fmt.Sprintf("c%d", n)...)
}

func openCounter(dir, rel string, byPos, broken bool) (*counter, error) {
	m := &counter{rel: rel, n: map[int]int{}, byPos: byPos, broken: broken}
	path := filepath.Join(dir, counterFile)
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	whole := strings.LastIndexByte(string(b), '\n') + 1
	for _, line := range strings.Split(string(b[:whole]), "\n") {
		var idx uint64
		var pos, n int
		if _, err := fmt.Sscanf(line, "%d %d %d", &idx, &pos, &n); err == nil && m.after(idx, pos) {
			m.n[n]++
			m.applied, m.pos = idx, pos
		}
	}
	if m.f, err = os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644); err != nil {
		return nil, err
	}
	if err := m.f.Truncate(int64(whole)); err != nil {
		return nil, err
	}
	if _, err := m.f.Seek(int64(whole), 0); err != nil {
		return nil, err
	}
	return m, nil
}

// after reports whether the op at (index, pos) comes after the stamp.
func (m *counter) after(index uint64, pos int) bool {
	return index > m.applied || index == m.applied && pos > m.pos
}

func (m *counter) Apply(index uint64, payload []byte) any { return m.ApplyOp(index, 0, payload) }

func (m *counter) ApplyOp(index uint64, pos int, payload []byte) any {
	if !m.byPos {
		pos = 0
	}
	if !m.after(index, pos) && !m.broken {
		return nil
	}
	var n int
	if _, err := fmt.Sscanf(string(payload), "c%d", &n); err != nil {
		return fmt.Errorf("counter: bad op %q", payload)
	}
	if _, err := fmt.Fprintf(m.f, "%d %d %d\n", index, pos, n); err != nil {
		return &copyset.FatalError{Err: err}
	}
	m.n[n]++
	if m.after(index, pos) {
		m.applied, m.pos = index, pos
	}
	return nil
}
func (m *counter) Sync() error              { return m.f.Sync() }
func (m *counter) Files() ([]string, error) { return []string{m.rel}, nil }
func (m *counter) Close() error             { return m.f.Close() }
func (m *counter) dump() string             { return fmt.Sprint(m.n) }

// sortedKV is a broken toy: the whole map is rewritten on every apply,
// "applied <index>" first, then the keys sorted, through a temporary file
// renamed over the state. Its index stamp is right, but a stream that cuts
// the file at the size it had at the snapshot may get the newer file's
// prefix, which lacks keys set before the snapshot. lazy: it writes only
// on Close, so Sync makes nothing durable.
type sortedKV struct {
	dir, rel string
	kv       map[string]string
	applied  uint64
	lazy     bool
}

func openSortedKV(dir, rel string, lazy bool) (*sortedKV, error) {
	m := &sortedKV{dir: dir, rel: rel, kv: map[string]string{}, lazy: lazy}
	b, err := os.ReadFile(filepath.Join(dir, counterFile))
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) > 0 {
		fmt.Sscanf(lines[0], "applied %d", &m.applied)
	}
	for _, l := range lines[1:] {
		if k, v, ok := strings.Cut(l, "="); ok && k != "" && v != "" {
			m.kv[k] = v
		}
	}
	return m, nil
}

func (m *sortedKV) Apply(index uint64, payload []byte) any {
	if index <= m.applied {
		return nil
	}
	k, v, ok := strings.Cut(string(payload), "=")
	if !ok {
		return fmt.Errorf("bad op %q", payload)
	}
	m.kv[k], m.applied = v, index
	if m.lazy {
		return nil
	}
	if err := m.write(); err != nil {
		return &copyset.FatalError{Err: err}
	}
	return nil
}

func (m *sortedKV) write() error {
	tmp := filepath.Join(m.dir, counterFile+".tmp")
	if err := os.WriteFile(tmp, []byte(fmt.Sprintf("applied %d\n%s", m.applied, m.dump())), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(m.dir, counterFile))
}

func (m *sortedKV) dump() string { return dumpMap(m.kv) }

func (m *sortedKV) Sync() error { return nil }
func (m *sortedKV) Files() ([]string, error) {
	if _, err := os.Stat(filepath.Join(m.dir, counterFile)); os.IsNotExist(err) {
		return nil, nil
	}
	return []string{m.rel}, nil
}
func (m *sortedKV) Close() error {
	if m.lazy {
		return m.write()
	}
	return nil
}

// The Sync check fails a replica whose log was truncated past what its
// machines synced: here a recorder that saw no Sync at all.
func TestSyncCheckCatchesTruncationWithoutSync(t *testing.T) {
	specs := []copyset.MachineSpec{ToySpec(testKind, "toykv")}
	c := NewCluster(t, 3, specs, FastRaft())
	g := copyset.NewGroupID(1, 1)
	c.Create(g)
	var proposed []uint64
	for i := range 60 {
		idx, _ := c.propose(g, ToyOp(testKind, fmt.Sprintf("k%d", i%7), fmt.Sprint(i)))
		proposed = append(proposed, idx)
	}
	leader := c.Leader(g)
	c.Snapshot(leader, g)
	if first := c.Node(leader, g).Status().FirstIndex; first <= proposed[0] {
		t.Fatalf("leader log not truncated: first index %d", first)
	}
	rt := &recordingTB{TB: t}
	s := &suite{t: rt, specs: specs}
	rt.run(func() { s.checkSynced(c, &syncRecorder{}, g, proposed, "test") })
	if !rt.Failed() || !strings.Contains(rt.report(), "Sync must run before the log it covers goes") {
		t.Fatalf("the check passed a truncation without Sync: %q", rt.report())
	}
}
