package dm

import (
	"maps"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/copyset"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	dmpb "github.com/chunkraft/chunkraft/proto/dm/pb"
)

// progress is what the applier of a share on this server knows beyond the
// replicated share: whether it has applied every packet the source holds
// (synced), how old the packet it applies is (its lag: since its first op
// was appended on the source, or, without ops, since it was written), and
// its recent rates. QueryStatus reads it through DMInternal List; it lives
// while the applier runs.
type progress struct {
	mu        sync.Mutex
	synced    bool
	pendingMs int64 // when the packet being applied began (see applier.next); 0: none known
	// The last sample of the share's counters and the rates since the one
	// before it.
	at                 time.Time
	ops, bytes         uint64
	opsRate, bytesRate float64
	// For the validator (validator.go): the share's checkpoint and unit
	// after the last group; per chunk, the source index its state
	// reflects, for the chunks a group of this run changed (lastOp), and
	// for the others at most floor (the checkpoint's source index when the
	// run began) or their image's place (asOf); the validator's last pass.
	cp     *pb.Checkpoint
	unit   dmpb.UnitType
	lastOp map[uint64]uint64
	floor  uint64
	asOf   map[uint64]uint64
	val    *pb.ValidatorLive
}

// sampleEvery is the shortest time between two samples of the rates.
const sampleEvery = time.Second

type progressKey struct {
	g    copyset.GroupID
	name string
}

// progressFor returns the progress of task name's share on copyset g,
// made on first use; the returned function drops it.
func (s *Service) progressFor(g copyset.GroupID, name string) (*progress, func()) {
	s.progMu.Lock()
	defer s.progMu.Unlock()
	if s.progs == nil {
		s.progs = map[progressKey]*progress{}
	}
	k := progressKey{g, name}
	p := &progress{}
	s.progs[k] = p
	return p, func() {
		s.progMu.Lock()
		defer s.progMu.Unlock()
		if s.progs[k] == p {
			delete(s.progs, k)
		}
	}
}

// progressOf returns the progress of task name's share on copyset g, nil
// when no applier runs it here.
func (s *Service) progressOf(g copyset.GroupID, name string) *progress {
	s.progMu.Lock()
	defer s.progMu.Unlock()
	return s.progs[progressKey{g, name}]
}

// begin notes the share a run starts from.
func (p *progress) begin(sh *pb.SubTask) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cp, p.unit, p.floor = proto.CloneOf(sh.GetCheckpoint()), sh.GetUnit(), sh.GetCheckpoint().GetSourceIndex()
	p.lastOp, p.asOf = map[uint64]uint64{}, map[uint64]uint64{}
	for id, at := range sh.GetAsOf() {
		p.asOf[id] = at.GetIndex()
	}
}

// advanced notes the share after a group that changed chunks (each at
// the source index given).
func (p *progress) advanced(sh *pb.SubTask, chunks map[uint64]uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cp, p.unit = proto.CloneOf(sh.GetCheckpoint()), sh.GetUnit()
	for id, at := range chunks {
		p.lastOp[id] = max(p.lastOp[id], at)
	}
}

// view is what the validator needs of the applier at one moment.
type view struct {
	cp     *pb.Checkpoint
	unit   dmpb.UnitType
	lastOp func(chunk uint64) uint64
}

// now returns the applier's state now.
func (p *progress) now() view {
	p.mu.Lock()
	defer p.mu.Unlock()
	last, floor, asOf := maps.Clone(p.lastOp), p.floor, maps.Clone(p.asOf)
	return view{cp: p.cp, unit: p.unit, lastOp: func(chunk uint64) uint64 {
		if at, ok := last[chunk]; ok {
			return at
		}
		return max(floor, asOf[chunk])
	}}
}

// validated notes the validator's last pass.
func (p *progress) validated(v *pb.ValidatorLive) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.val = v
}

// applying notes that the applier applies a packet that began at sinceMs.
func (p *progress) applying(sinceMs int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.synced, p.pendingMs = false, sinceMs
}

// waiting notes that the applier has applied every packet the source
// holds.
func (p *progress) waiting() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.synced, p.pendingMs = true, 0
}

// sample takes the share's counters c at now and updates the rates once
// sampleEvery has passed since the last sample.
func (p *progress) sample(now time.Time, c *pb.Counters) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.at.IsZero() {
		p.at, p.ops, p.bytes = now, c.GetOps(), c.GetBytes()
		return
	}
	d := now.Sub(p.at)
	if d < sampleEvery {
		return
	}
	p.opsRate = float64(c.GetOps()-p.ops) / d.Seconds()
	p.bytesRate = float64(c.GetBytes()-p.bytes) / d.Seconds()
	p.at, p.ops, p.bytes = now, c.GetOps(), c.GetBytes()
}

// fill writes the progress into l as of now: the rates fall to 0 when no
// sample was taken for a while (nothing applied).
func (p *progress) fill(l *pb.Located, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l.Live, l.Synced = true, p.synced
	if !p.synced && p.pendingMs > 0 {
		l.LagMs = max(0, now.UnixMilli()-p.pendingMs)
	}
	if now.Sub(p.at) < 3*sampleEvery {
		l.OpsPerSec, l.BytesPerSec = p.opsRate, p.bytesRate
	}
	l.Validator = p.val
}
