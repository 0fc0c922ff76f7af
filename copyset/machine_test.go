package copyset

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/internal/testwait"
)

func TestRegistryRejectsBadSpecs(t *testing.T) {
	open := func(MachineEnv, Machines) (StateMachine, error) { return &recordMachine{}, nil }
	for _, tc := range []struct {
		name  string
		specs []MachineSpec
		want  string
	}{
		{"none", nil, "none registered"},
		{"kind 0", []MachineSpec{{Kind: 0, Name: "zero", Open: open}}, "machine spec zero: kind 0 is not a kind"},
		{"duplicate kind", []MachineSpec{{Kind: 7, Name: "a", Open: open}, {Kind: 7, Name: "b", Open: open}},
			"machine spec b: kind 7 registered twice"},
		{"no open", []MachineSpec{{Kind: 7, Name: "a"}}, "machine spec a (kind 7): no Open function"},
		{"dir outside", []MachineSpec{{Kind: 7, Name: "a", Dir: "../x", Open: open}}, `dir "../x" is not a plain path`},
		{"dir absolute", []MachineSpec{{Kind: 7, Name: "a", Dir: "/x", Open: open}}, `dir "/x" is not a plain path`},
		{"dir unclean", []MachineSpec{{Kind: 7, Name: "a", Dir: "x/../y", Open: open}}, `dir "x/../y" is not a plain path`},
		{"duplicate dir", []MachineSpec{{Kind: 7, Name: "a", Dir: "x", Open: open}, {Kind: 8, Name: "b", Dir: "x", Open: open}},
			`machine spec b (kind 8): dir "x" is also a's`},
	} {
		_, err := newRegistry(tc.specs)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

// dirMachine lives in its own directory and lists its files relative to
// the copyset data dir.
type dirMachine struct {
	recordMachine
	sub    string // the spec's Dir
	files  []string
	closed *[]string
}

func (m *dirMachine) Files() ([]string, error) { return m.files, nil }
func (m *dirMachine) Close() error {
	*m.closed = append(*m.closed, m.sub)
	return nil
}

// Machines open in spec order, each seeing the ones before it, in their own
// directories; a failed open closes what opened, last first.
func TestRegistryOpensInOrder(t *testing.T) {
	var closed []string
	var sawA bool
	specs := []MachineSpec{
		{Kind: 1, Name: "a", Open: func(env MachineEnv, _ Machines) (StateMachine, error) {
			if env.Dir != env.DataDir {
				t.Errorf("machine without Dir got dir %s, data dir %s", env.Dir, env.DataDir)
			}
			return &dirMachine{sub: "a", closed: &closed}, nil
		}},
		{Kind: 2, Name: "b", Dir: "b", Open: func(env MachineEnv, opened Machines) (StateMachine, error) {
			_, sawA = MachineAs[*dirMachine](opened, 1)
			if _, ok := MachineAs[*recordMachine](opened, 1); ok {
				t.Error("MachineAs found a *recordMachine where a *dirMachine is")
			}
			if _, ok := MachineAs[*dirMachine](opened, 3); ok {
				t.Error("MachineAs found machine 3 before it opened")
			}
			if st, err := os.Stat(env.Dir); err != nil || !st.IsDir() || env.Dir != filepath.Join(env.DataDir, "b") {
				t.Errorf("machine dir %s: %v", env.Dir, err)
			}
			return &dirMachine{sub: "b", closed: &closed, files: []string{"b/state"}}, nil
		}},
		{Kind: 3, Name: "c", Dir: "c", Open: func(MachineEnv, Machines) (StateMachine, error) {
			return nil, errors.New("disk gone")
		}},
	}
	r, err := newRegistry(specs)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	_, err = r.open(NewGroupID(1, 1), dir, slog.New(slog.DiscardHandler), newLogPins(NewGroupID(1, 1), 1, 1, slog.New(slog.DiscardHandler)))
	if err == nil || !strings.Contains(err.Error(), "open state machine c: disk gone") {
		t.Fatalf("open error %v", err)
	}
	if !sawA {
		t.Error("machine b did not see machine a")
	}
	if want := []string{"b", "a"}; !slices.Equal(closed, want) {
		t.Errorf("closed %v after a failed open, want %v", closed, want)
	}

	// Without the failing machine: files of a Dir machine must lie in it.
	r, err = newRegistry(specs[:2])
	if err != nil {
		t.Fatal(err)
	}
	set, err := r.open(NewGroupID(1, 1), dir, slog.New(slog.DiscardHandler), newLogPins(NewGroupID(1, 1), 1, 1, slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	f := newFSM(r, set, slog.New(slog.DiscardHandler))
	srcs, err := f.sources()
	var files []string
	for _, src := range srcs {
		files = append(files, src.names...)
	}
	if err != nil || !slices.Equal(files, []string{"b/state"}) {
		t.Fatalf("files %v %v", files, err)
	}
	set[2].(*dirMachine).files = []string{"state"}
	if _, err := f.sources(); err == nil || !strings.Contains(err.Error(), `lists file "state" outside its dir "b"`) {
		t.Fatalf("file outside the machine's dir: %v", err)
	}
}

// MachineOf finds a copyset's machine by kind and type and reports false,
// never panics, for a missing kind or another type.
func TestMachineOf(t *testing.T) {
	s := startTestServer(t, "127.0.0.1:0", t.TempDir(), fastRaft())
	defer s.stop()
	g := NewGroupID(1, 1)
	n, err := s.mgr.Create(context.Background(), g, []PeerID{s.peer()})
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := MachineOf[*fileMachine](n, kindFile); !ok || m.dir != filepath.Join(n.Dir(), "data") {
		t.Fatalf("MachineOf(kindFile) = %v, %v", m, ok)
	}
	if _, ok := MachineOf[*recordMachine](n, kindFile); ok {
		t.Fatal("MachineOf found a *recordMachine under kindFile")
	}
	if m, ok := MachineOf[*fileMachine](n, kindFile+1); ok || m != nil {
		t.Fatalf("MachineOf(unregistered kind) = %v, %v", m, ok)
	}
}

// A manager refuses invalid specs with a one-line error.
func TestManagerRejectsBadSpecs(t *testing.T) {
	_, err := NewManager(ManagerOptions{Dir: t.TempDir(), Machines: []MachineSpec{{Kind: 5, Name: "x"}}})
	if err == nil || err.Error() != "copyset manager: machine spec x (kind 5): no Open function" {
		t.Fatalf("NewManager: %v", err)
	}
}

// subFileMachine is a fileMachine in its own directory sub of the data
// dir, listing its files relative to the data dir.
type subFileMachine struct {
	fileMachine
	sub string
}

func (m *subFileMachine) Files() ([]string, error) {
	names, err := m.fileMachine.Files()
	for i, name := range names {
		names[i] = m.sub + "/" + name
	}
	return names, err
}

// A machine in its own directory: its files reach a follower by snapshot
// install into the same directory, and the follower keeps applying there.
func TestMachineDirSnapshotInstall(t *testing.T) {
	root := t.TempDir()
	g := NewGroupID(1, 1)
	specs := []MachineSpec{{Kind: kindFile, Name: "sub", Dir: "sub", Open: func(env MachineEnv, _ Machines) (StateMachine, error) {
		return &subFileMachine{fileMachine: fileMachine{dir: env.Dir}, sub: "sub"}, nil
	}}}
	var servers []*testServer
	defer func() { stopAll(servers) }()
	for i := range 3 {
		servers = append(servers, startTestServerWith(t, "127.0.0.1:0", filepath.Join(root, strconv.Itoa(i)), fastRaft(), specs))
	}
	peers := []PeerID{servers[0].peer(), servers[1].peer(), servers[2].peer()}
	for _, s := range servers {
		if _, err := s.mgr.Create(context.Background(), g, peers); err != nil {
			t.Fatal(err)
		}
	}
	leader := waitLeader(t, g, servers...)
	victim := slices.IndexFunc(servers, func(s *testServer) bool { return s.mgr.Get(g) != leader })
	vs := servers[victim]
	vs.stop()
	servers[victim] = nil
	live := slices.DeleteFunc(slices.Clone(servers), func(s *testServer) bool { return s == nil })
	for i := range 100 {
		propose(t, g, live, fileOp("f"+strconv.Itoa(i%9), "v"+strconv.Itoa(i)))
	}
	leader = waitLeader(t, g, live...)
	if err := leader.Snapshot(context.Background()); err != nil {
		t.Fatal(err)
	}
	servers[victim] = startTestServerWith(t, vs.addr, vs.dir, fastRaft(), specs)
	waitCaughtUp(t, g, leader, servers[victim])
	follower := servers[victim].mgr.Get(g)
	testwait.Until(t, 10*time.Second, func() error {
		return sameDirs(t, filepath.Join(leader.Dir(), "data", "sub"), filepath.Join(follower.Dir(), "data", "sub"))
	})
	if got := dirContents(t, filepath.Join(follower.Dir(), "data", "sub")); got["f8"] != "v98" {
		t.Fatalf("follower's sub dir after install: %v", got)
	}
	recs, err := follower.snaps.records()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(recs, func(r snapRecord) bool { return r.Received && r.Installed }) {
		t.Fatalf("the follower caught up without a snapshot install: %+v", recs)
	}
}

// wrapMachine wraps another machine, as a test recorder does.
type wrapMachine struct{ StateMachine }

func (w *wrapMachine) Unwrap() StateMachine { return w.StateMachine }

// OpenMachines opens specs as a copyset does (each in its Dir), MachineAs
// looks through wrappers, CloseMachines closes every machine.
func TestOpenMachinesAndUnwrap(t *testing.T) {
	dir := t.TempDir()
	var closed []string
	specs := []MachineSpec{
		{Kind: 1, Name: "a", Dir: "a", Open: func(env MachineEnv, _ Machines) (StateMachine, error) {
			if st, err := os.Stat(env.Dir); err != nil || !st.IsDir() || env.Dir != filepath.Join(dir, "a") {
				t.Errorf("machine a: dir %s not made: %v", env.Dir, err)
			}
			return &wrapMachine{&wrapMachine{&dirMachine{sub: "a", closed: &closed}}}, nil
		}},
		{Kind: 2, Name: "b", Open: func(_ MachineEnv, opened Machines) (StateMachine, error) {
			if _, ok := MachineAs[*dirMachine](opened, 1); !ok {
				t.Error("MachineAs did not look through the wrappers of machine a")
			}
			return &dirMachine{sub: "b", closed: &closed}, nil
		}},
	}
	ms, err := OpenMachines(specs, NewGroupID(1, 1), dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := MachineAs[*wrapMachine](ms, 1); !ok {
		t.Error("MachineAs did not find the outer wrapper")
	}
	if _, ok := MachineAs[*recordMachine](ms, 1); ok {
		t.Error("MachineAs found a *recordMachine inside the wrappers")
	}
	if err := CloseMachines(ms); err != nil || !slices.Equal(closed, []string{"b", "a"}) {
		t.Fatalf("CloseMachines: %v, closed %q", err, closed)
	}
	if _, err := OpenMachines([]MachineSpec{{Kind: 0, Name: "zero", Open: specs[1].Open}}, NewGroupID(1, 1), dir, nil); err == nil {
		t.Fatal("OpenMachines accepted a bad spec")
	}
}
