package copysettest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/copyset"
)

// Workload is what the suite needs to drive a machine set: valid ops and a
// way to compare two replicas' states.
type Workload struct {
	// Op returns the i-th op of the log (1-based), header included
	// (copyset.PutOpHeader), drawn from rng. Ops are generated once, in
	// order, and every check applies the same log.
	Op func(rng *rand.Rand, i int) []byte
	// State returns the state of a replica's machines; two replicas have
	// converged when their states are equal.
	State func(ms copyset.Machines) (string, error)
	// Group, when set, draws the i-th entry of the log (1-based) whole:
	// ops of several kinds proposed together (copyset.Node.ProposeGroup),
	// each applied at its position in the entry. Op is then unused. Replay
	// is then checked from every op boundary, a crash inside a group
	// included, restarted, and replayed from every earlier entry.
	Group func(rng *rand.Rand, i int) [][]byte
	// Expect, when set, returns the state (as State renders it) of a
	// replica that applied the ops of entries, in order, each once: the
	// state the suite reaches by one apply of its log must equal it, so
	// that a state equal to itself by skipping too much is caught.
	Expect func(entries [][][]byte) string
	// Ops is the log length, in ops, or in entries with Group (default
	// 120).
	Ops int
	// Seed seeds the op generator and the suite's choices (default 1).
	Seed uint64
	// Raft, when set, adjusts the cluster check's raft options (FastRaft):
	// a machine that holds the log for consumers its synthetic state names
	// (MachineEnv.Log) lowers the pin bounds so that the leader still
	// truncates past a stopped follower.
	Raft func(*copyset.RaftOptions)
}

// entry is one raft log entry of the suite's log: the ops of one index.
type entry struct {
	index uint64
	ops   [][]byte
}

// RunStateMachineConformance checks that the machines of specs keep the
// StateMachine contract (copyset/fsm.go) under the workload w: replays
// from any index are idempotent, Sync makes the applied state durable in
// the machines' Files, a fuzzy copy of those files converges once the log
// is replayed from the snapshot index, and on a three-replica cluster
// (real raft and transport) a snapshot install, a cut-off replica and a
// restart of every replica preserve the state, while no replica's log is
// truncated past what its machines synced. Failures are reported on t.
func RunStateMachineConformance(t testing.TB, specs []copyset.MachineSpec, w Workload) {
	t.Helper()
	if (w.Op == nil && w.Group == nil) || w.State == nil {
		t.Fatal("conformance: the workload needs Op or Group, and State")
	}
	if w.Ops == 0 {
		w.Ops = 120
	}
	if w.Seed == 0 {
		w.Seed = 1
	}
	s := &suite{t: t, specs: specs, w: w, rng: rand.New(rand.NewPCG(w.Seed, 14)), root: t.TempDir()}
	s.log = s.makeLog()
	s.checkExpected()
	s.checkReplay()
	if w.Group != nil {
		s.checkReplayEveryIndex()
	}
	s.checkSyncDurable()
	s.checkFuzzyCopy()
	s.checkCluster()
}

type suite struct {
	t     testing.TB
	specs []copyset.MachineSpec
	w     Workload
	rng   *rand.Rand
	root  string
	log   []entry
	dirs  int
}

var suiteGroup = copyset.NewGroupID(1, 1)

// makeLog generates the log: the workload's groups, or its ops, where
// ops of machines whose spec says Batch share an index with up to three
// more such ops, as proposal batching does.
func (s *suite) makeLog() []entry {
	if s.w.Group != nil {
		log := make([]entry, s.w.Ops)
		for i := range log {
			log[i] = entry{index: uint64(i + 1), ops: s.w.Group(s.rng, i+1)}
		}
		return log
	}
	batch := map[copyset.Kind]bool{}
	for _, sp := range s.specs {
		batch[sp.Kind] = sp.Batch
	}
	batchable := func(op []byte) bool {
		k, _, err := copyset.DecodeOp(op)
		return err == nil && batch[k]
	}
	var log []entry
	for i := 1; i <= s.w.Ops; i++ {
		op := s.w.Op(s.rng, i)
		if n := len(log); n > 0 && batchable(op) && len(log[n-1].ops) < 4 && batchable(log[n-1].ops[0]) && s.rng.IntN(2) == 0 {
			log[n-1].ops = append(log[n-1].ops, op)
			continue
		}
		log = append(log, entry{index: uint64(len(log) + 1), ops: [][]byte{op}})
	}
	return log
}

// newDir returns a fresh copyset data dir.
func (s *suite) newDir() string {
	s.dirs++
	d := filepath.Join(s.root, fmt.Sprintf("replica%d", s.dirs))
	if err := os.MkdirAll(d, 0o755); err != nil {
		s.t.Fatal(err)
	}
	return d
}

func (s *suite) open(dir string) copyset.Machines {
	s.t.Helper()
	ms, err := copyset.OpenMachines(s.specs, suiteGroup, dir, slog.New(slog.DiscardHandler))
	if err != nil {
		s.t.Fatalf("conformance: open machines on %s: %v", dir, err)
	}
	return ms
}

func (s *suite) close(ms copyset.Machines) {
	s.t.Helper()
	if err := copyset.CloseMachines(ms); err != nil {
		s.t.Errorf("conformance: close machines: %v", err)
	}
}

// apply applies log entries es to ms, as the copyset FSM does.
func (s *suite) apply(ms copyset.Machines, es []entry) {
	s.t.Helper()
	for _, e := range es {
		for pos, op := range e.ops {
			applyOp(s.t, ms, e.index, pos, op)
		}
	}
}

func applyOp(t testing.TB, ms copyset.Machines, index uint64, pos int, op []byte) {
	kind, payload, err := copyset.DecodeOp(op)
	if err != nil {
		t.Fatalf("conformance: workload op at index %d: %v", index, err)
	}
	m := ms.Get(kind)
	if m == nil {
		t.Fatalf("conformance: workload op at index %d has kind %d, which no spec registers", index, kind)
	}
	if res, ok := copyset.ApplyOp(m, index, pos, payload).(*copyset.FatalError); ok {
		t.Fatalf("conformance: apply index %d: %v", index, res)
	}
}

func (s *suite) state(ms copyset.Machines) string {
	s.t.Helper()
	st, err := s.w.State(ms)
	if err != nil {
		s.t.Fatalf("conformance: state: %v", err)
	}
	return st
}

// stateAt is the state of a fresh replica that applied the first n
// entries once.
func (s *suite) stateAt(n int) string {
	s.t.Helper()
	ms := s.open(s.newDir())
	defer s.close(ms)
	s.apply(ms, s.log[:n])
	return s.state(ms)
}

func (s *suite) same(what, got, want string) bool {
	s.t.Helper()
	if got == want {
		return true
	}
	s.t.Errorf("conformance: %s: state differs (got, want):\n%s", what, diff(got, want))
	return false
}

// checkReplay: applying a prefix, then replaying from an earlier index to
// the end (in the same process, and after a Sync, Close and reopen) gives
// the state of applying every entry once.
func (s *suite) checkReplay() {
	s.t.Helper()
	want := s.stateAt(len(s.log))
	for round := range 3 {
		p := 1 + s.rng.IntN(len(s.log))
		k := s.rng.IntN(p)
		ms := s.open(s.newDir())
		s.apply(ms, s.log[:p])
		s.apply(ms, s.log[k:])
		ok := s.same(fmt.Sprintf("replay: applied 1..%d, then replayed %d..%d", p, k+1, len(s.log)), s.state(ms), want)
		if !ok || round > 0 {
			s.close(ms)
			continue
		}
		// Restart: the replay starts from an index before what is durable.
		dir := s.dirs
		if err := syncAll(ms, s.specs); err != nil {
			s.t.Errorf("conformance: sync: %v", err)
		}
		s.close(ms)
		ms = s.open(filepath.Join(s.root, fmt.Sprintf("replica%d", dir)))
		k = s.rng.IntN(len(s.log))
		s.apply(ms, s.log[k:])
		s.same(fmt.Sprintf("restart: reopened, then replayed %d..%d", k+1, len(s.log)), s.state(ms), want)
		s.close(ms)
	}
}

// checkExpected: one apply of the whole log gives the workload's
// expected state.
func (s *suite) checkExpected() {
	s.t.Helper()
	if s.w.Expect == nil {
		return
	}
	entries := make([][][]byte, len(s.log))
	for i, e := range s.log {
		entries[i] = e.ops
	}
	s.same("one apply of the whole log vs the workload's expectation", s.stateAt(len(s.log)), s.w.Expect(entries))
}

// checkReplayEveryIndex: a replica stopped after any op (inside an entry
// too: a crash between two ops of a group), its files synced, restarted
// and replayed from any earlier entry to the end, has the state of one
// apply: each op of a group lands once, whatever of the group its files
// held.
func (s *suite) checkReplayEveryIndex() {
	s.t.Helper()
	want := s.stateAt(len(s.log))
	src := s.newDir()
	ms := s.open(src)
	defer s.close(ms)
	for e, ent := range s.log {
		for pos, op := range ent.ops {
			applyOp(s.t, ms, ent.index, pos, op)
			if err := syncAll(ms, s.specs); err != nil {
				s.t.Fatalf("conformance: sync: %v", err)
			}
			names, err := listFiles(ms, s.specs)
			if err != nil {
				s.t.Fatalf("conformance: %v", err)
			}
			for k := 0; k <= e; k++ {
				dst := s.newDir()
				for _, n := range names {
					if err := copyFile(filepath.Join(src, n), filepath.Join(dst, n)); err != nil {
						s.t.Fatalf("conformance: copy %s: %v", n, err)
					}
				}
				cp := s.open(dst)
				s.apply(cp, s.log[k:])
				ok := s.same(fmt.Sprintf("replay: stopped after op %d of entry %d, restarted, replayed %d..%d", pos, ent.index, s.log[k].index, len(s.log)), s.state(cp), want)
				s.close(cp)
				if err := os.RemoveAll(dst); err != nil {
					s.t.Errorf("conformance: %v", err)
				}
				if !ok {
					return
				}
			}
		}
	}
}

func syncAll(ms copyset.Machines, specs []copyset.MachineSpec) error {
	for _, sp := range specs {
		if err := ms.Get(sp.Kind).Sync(); err != nil {
			return fmt.Errorf("sync %s: %w", sp.Name, err)
		}
	}
	return nil
}

func listFiles(ms copyset.Machines, specs []copyset.MachineSpec) ([]string, error) {
	var out []string
	for _, sp := range specs {
		names, err := ms.Get(sp.Kind).Files()
		if err != nil {
			return nil, fmt.Errorf("files of %s: %w", sp.Name, err)
		}
		for _, n := range names {
			if sp.Dir != "" && !strings.HasPrefix(n, sp.Dir+"/") {
				return nil, fmt.Errorf("%s lists %q outside its dir %q", sp.Name, n, sp.Dir)
			}
		}
		out = append(out, names...)
	}
	return out, nil
}

// checkSyncDurable: once Sync returns, the machines' Files hold every op
// applied before it: a copy of them, opened with no replay, has the state
// at that index (the raft log up to it may be gone).
func (s *suite) checkSyncDurable() {
	s.t.Helper()
	p := 1 + s.rng.IntN(len(s.log))
	src := s.newDir()
	ms := s.open(src)
	defer s.close(ms)
	s.apply(ms, s.log[:p])
	if err := syncAll(ms, s.specs); err != nil {
		s.t.Errorf("conformance: sync: %v", err)
		return
	}
	names, err := listFiles(ms, s.specs)
	if err != nil {
		s.t.Errorf("conformance: %v", err)
		return
	}
	dst := s.newDir()
	for _, n := range names {
		if err := copyFile(filepath.Join(src, n), filepath.Join(dst, n)); err != nil {
			s.t.Fatalf("conformance: copy %s: %v", n, err)
		}
	}
	cp := s.open(dst)
	defer s.close(cp)
	s.same(fmt.Sprintf("sync: files copied after Sync at index %d, opened without replay", s.log[p-1].index), s.state(cp), s.stateAt(p))
}

// checkFuzzyCopy streams the files as a snapshot install does. The
// snapshot is taken at a Sync (the snapshot index); the stream lists the
// files and their sizes later, during an apply (so a file appended to may
// be cut inside that apply's record); then each file is read in up to
// three pieces, each after a random number of further applies, cut at its
// listed size (zero padded if it shrank or is gone). A Streamer's stream
// starts at the listing and yields each file after further applies. The copy, with the
// log replayed from the snapshot index + 1, must converge to the source's
// final state.
func (s *suite) checkFuzzyCopy() {
	s.t.Helper()
	want := s.stateAt(len(s.log))
	for round := range 4 {
		snap := 1 + s.rng.IntN(len(s.log)/2)
		src := s.newDir()
		ms := s.open(src)
		s.apply(ms, s.log[:snap])
		if err := syncAll(ms, s.specs); err != nil {
			s.t.Errorf("conformance: sync: %v", err)
			s.close(ms)
			return
		}
		// The apply goroutine goes on between the stream's listing and
		// reads; it applies one entry per step and acknowledges it.
		step, ack := make(chan struct{}), make(chan struct{})
		done := make(chan struct{})
		var fatal atomic.Pointer[string]
		go func() {
			defer close(done)
			for i := snap; i < len(s.log); i++ {
				<-step
				for pos, op := range s.log[i].ops {
					kind, payload, _ := copyset.DecodeOp(op)
					if res, ok := copyset.ApplyOp(ms.Get(kind), s.log[i].index, pos, payload).(*copyset.FatalError); ok {
						msg := res.Error()
						fatal.Store(&msg)
					}
				}
				ack <- struct{}{}
			}
		}()
		sent := snap // entries the apply goroutine was told to apply
		advance := func(n int) {
			for ; n > 0 && sent < len(s.log); n-- {
				step <- struct{}{}
				<-ack
				sent++
			}
		}
		sizeOf := func(name string) int64 {
			st, err := os.Stat(filepath.Join(src, name))
			if err != nil {
				return -1
			}
			return st.Size()
		}
		finish := func() {
			advance(len(s.log))
			<-done
		}

		// List during one apply: each file at a size between its size
		// before and after that apply. A Streamer's stream starts there.
		advance(s.rng.IntN(4))
		names, err := listFiles(ms, s.fuzzySpecs(ms))
		var streams []copyset.FileStream
		for _, sp := range s.specs {
			if st, ok := ms.Get(sp.Kind).(copyset.Streamer); ok && err == nil {
				var fs copyset.FileStream
				if fs, err = st.Stream(); err == nil {
					streams = append(streams, fs)
				}
			}
		}
		if err != nil {
			finish()
			s.close(ms)
			s.t.Errorf("conformance: %v", err)
			return
		}
		sizes := make([]int64, len(names))
		for i, n := range names {
			sizes[i] = sizeOf(n)
		}
		advance(1)
		for i, n := range names {
			if after := sizeOf(n); sizes[i] >= 0 && after > sizes[i] {
				sizes[i] += s.rng.Int64N(after - sizes[i] + 1)
			}
		}

		dst := s.newDir()
		for i, n := range names {
			if sizes[i] < 0 {
				continue // gone when listed: left out
			}
			var cuts []int64
			for range s.rng.IntN(3) {
				cuts = append(cuts, s.rng.Int64N(sizes[i]+1))
			}
			slices.Sort(cuts)
			// The stream opens a file when its section is reached: one
			// gone by then is sent as gone (not created); once open it
			// reads to the end, deleted or not.
			advance(1 + s.rng.IntN(6))
			in, err := os.Open(filepath.Join(src, n))
			if errors.Is(err, os.ErrNotExist) {
				continue
			} else if err != nil {
				s.t.Errorf("conformance: stream %s: %v", n, err)
				continue
			}
			off := int64(0)
			for j, end := range append(cuts, sizes[i]) {
				if j > 0 {
					advance(1 + s.rng.IntN(6))
				}
				if err := copyRange(in, filepath.Join(dst, n), off, end); err != nil {
					s.t.Errorf("conformance: stream %s: %v", n, err)
				}
				off = end
			}
			in.Close()
		}
		// A stream yields each file when the follower takes it.
		for _, fs := range streams {
			reserve, sent := fs.Reserve(), int64(0)
			for {
				advance(1 + s.rng.IntN(6))
				name, data, err := fs.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					s.t.Errorf("conformance: stream: %v", err)
					break
				}
				if sent += int64(len(name)) + 10 + int64(len(data)); sent > reserve {
					s.t.Errorf("conformance: stream: %d bytes sent, %d reserved", sent, reserve)
				}
				if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, name)), 0o755); err != nil {
					s.t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dst, name), data, 0o644); err != nil {
					s.t.Fatal(err)
				}
			}
			if err := fs.Close(); err != nil {
				s.t.Errorf("conformance: close stream: %v", err)
			}
		}
		finish()
		if msg := fatal.Load(); msg != nil {
			s.close(ms)
			s.t.Fatalf("conformance: apply under stream: %s", *msg)
		}
		s.same("fuzzy copy: source after its applies", s.state(ms), want)
		s.close(ms)

		cp := s.open(dst)
		s.apply(cp, s.log[snap:])
		s.same(fmt.Sprintf("fuzzy copy (round %d): files streamed from snapshot index %d under load, log replayed from %d", round, s.log[snap-1].index, s.log[snap-1].index+1), s.state(cp), want)
		s.close(cp)
	}
}

// fuzzySpecs are the specs whose machines stream their files live (not
// Streamers).
func (s *suite) fuzzySpecs(ms copyset.Machines) []copyset.MachineSpec {
	var out []copyset.MachineSpec
	for _, sp := range s.specs {
		if _, ok := ms.Get(sp.Kind).(copyset.Streamer); !ok {
			out = append(out, sp)
		}
	}
	return out
}

// copyRange writes bytes [off, end) of the open file in at off in dst,
// zero padded where in is shorter, as the snapshot stream sends them.
func copyRange(in *os.File, dst string, off, end int64) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	buf := make([]byte, end-off)
	if _, err := in.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		out.Close()
		return err
	}
	_, err = out.WriteAt(buf, off)
	return errors.Join(err, out.Close())
}

// copyFile copies src to dst. A src that does not exist (a machine lists
// a file it has not written yet) is left out, as a snapshot stream leaves
// out a file gone when listed.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}

// diff shows the first differing line of two states.
func diff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var a, b string
		if i < len(g) {
			a = g[i]
		}
		if i < len(w) {
			b = w[i]
		}
		if a != b {
			return fmt.Sprintf("  line %d: got  %q\n  line %d: want %q\n  (%d lines vs %d)", i+1, a, i+1, b, len(g), len(w))
		}
	}
	return "  (equal lines)"
}

// IndentedJSON is msg as indented protojson: a Workload.State of a machine
// whose state is a proto message, so that a difference shows on its line.
func IndentedJSON(msg proto.Message) (string, error) {
	b, err := protojson.Marshal(msg)
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", " "); err != nil {
		return "", err
	}
	return out.String(), nil
}
