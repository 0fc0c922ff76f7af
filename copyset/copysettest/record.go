package copysettest

import (
	"sync"

	"github.com/chunkraft/chunkraft/copyset"
)

// syncRecorder records, per copyset data dir, how far the machines opened
// there were applied and synced, and how often they were opened.
type syncRecorder struct {
	mu   sync.Mutex
	dirs map[string]*dirRecord
}

type dirRecord struct {
	opens   int
	applied uint64 // highest index applied by the current machines
	synced  uint64 // highest index every machine had applied at a Sync of all
	// syncs[kind] is the applied index at that machine's last Sync.
	syncs map[copyset.Kind]uint64
}

func (r *syncRecorder) dir(d string) *dirRecord {
	if r.dirs == nil {
		r.dirs = map[string]*dirRecord{}
	}
	if r.dirs[d] == nil {
		r.dirs[d] = &dirRecord{syncs: map[copyset.Kind]uint64{}}
	}
	return r.dirs[d]
}

// wrap returns specs whose machines report to r.
func (r *syncRecorder) wrap(specs []copyset.MachineSpec) []copyset.MachineSpec {
	out := make([]copyset.MachineSpec, len(specs))
	for i, sp := range specs {
		open, kinds := sp.Open, len(specs)
		sp.Open = func(env copyset.MachineEnv, opened copyset.Machines) (copyset.StateMachine, error) {
			m, err := open(env, opened)
			if err != nil {
				return nil, err
			}
			r.mu.Lock()
			d := r.dir(env.DataDir)
			if i == 0 {
				d.opens++
				d.applied = 0
				clear(d.syncs)
			}
			r.mu.Unlock()
			rec := &recorded{StateMachine: m, r: r, dir: env.DataDir, kind: sp.Kind, kinds: kinds}
			if st, ok := m.(copyset.Streamer); ok {
				return &recordedStreamer{recorded: rec, st: st}, nil
			}
			return rec, nil
		}
		out[i] = sp
	}
	return out
}

// state returns a copy of d's record.
func (r *syncRecorder) state(d string) dirRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := *r.dir(d)
	return rec
}

// recorded is a machine whose Apply and Sync calls are recorded.
type recorded struct {
	copyset.StateMachine
	r     *syncRecorder
	dir   string
	kind  copyset.Kind
	kinds int
}

func (m *recorded) Unwrap() copyset.StateMachine { return m.StateMachine }

// recordedStreamer is a recorded Streamer, which streams as it would.
type recordedStreamer struct {
	*recorded
	st copyset.Streamer
}

func (m *recordedStreamer) Stream() (copyset.FileStream, error) { return m.st.Stream() }

func (m *recorded) Apply(index uint64, payload []byte) any { return m.ApplyOp(index, 0, payload) }

// ApplyOp makes every recorded machine an OpApplier that passes positions
// on to the machine it records.
func (m *recorded) ApplyOp(index uint64, pos int, payload []byte) any {
	res := copyset.ApplyOp(m.StateMachine, index, pos, payload)
	m.r.mu.Lock()
	d := m.r.dir(m.dir)
	d.applied = max(d.applied, index)
	m.r.mu.Unlock()
	return res
}

func (m *recorded) Sync() error {
	m.r.mu.Lock()
	d := m.r.dir(m.dir)
	at := d.applied
	m.r.mu.Unlock()
	err := m.StateMachine.Sync()
	if err != nil {
		return err
	}
	m.r.mu.Lock()
	defer m.r.mu.Unlock()
	d.syncs[m.kind] = at
	if len(d.syncs) == m.kinds {
		low := at
		for _, v := range d.syncs {
			low = min(low, v)
		}
		d.synced = max(d.synced, low)
	}
	return nil
}
