package dm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/chunkstore"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/datasync/dest"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/datasync/restore"
	"github.com/chunkraft/chunkraft/internal/chunkread"
	"github.com/chunkraft/chunkraft/internal/objstore"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
	cspb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	dmpb "github.com/chunkraft/chunkraft/proto/dm/pb"
)

// The applier: on the leader of a target copyset, one per Running share.
// It reads the source copyset's export packet by packet from the share's
// checkpoint and applies each packet's units (a snapshot-phase packet's
// chunk images, a binlog-phase packet's records) as the sync restore does
// (restore.PlanRebuild, restore.Replay), but through the target's chunk
// store as grouped proposals: the chunk ops of one or more units with the
// share's Advance in one raft entry (chunkstore.Store.ProposeGroup), so
// that the ops and the checkpoint they lead to are applied together or
// not at all, across crashes, leader changes and snapshot installs.
//
// Exactly once rests on three rules:
//   - one proposer per share: the applier runs on the leader only, and
//     proposes a group only once the group before it has applied;
//   - a run starts from the checkpoint read after a full barrier
//     (copyset.Node.Barrier), so every group an earlier run appended has
//     applied or never will;
//   - an Advance applies only from the share's checkpoint: a group
//     proposed twice would find its Advance refused, which the applier
//     reports as a divergence (the share pauses, not resumable) rather
//     than go on.
//
// The checkpoint names the next unit of a packet and the next op of that
// unit (Checkpoint.Record, Step): a unit's ops may span groups. Its plan
// is computed from the replay state the share held before the unit, which
// its last group's Advance updates, so a run that starts inside a unit
// computes the same plan and goes on at the op it reached. The outcome of
// an op a plan depends on (a write or delete of a chunk that is still a
// clone chunk in the source) is predicted from the clone's sn as the chunk
// store decides it, and checked when the group has applied.

// Units of a group: at most this many chunk ops (one more op, the Advance,
// rides along) and this many bytes of chunk data: a rebuild's write of 1
// MiB (restore.DefaultMaxWrite) goes alone, as a restore sends it; groups
// of 16 MiB loaded a pool at 55% of a restore's rate, of 1 MiB at 71%
// (docs/benchmarks.md, "dm").
const (
	maxGroupOps   = copyset.MaxOpsPerEntry - 1
	maxGroupBytes = restore.DefaultMaxWrite
)

// packetReads is how many packets the appliers of one server read and
// check at once (applier.fetch).
const packetReads = 1

// pollMin and pollMax bound the wait for a packet the export does not have
// yet.
const (
	pollMin = 100 * time.Millisecond
	pollMax = 250 * time.Millisecond
)

// applyError is why a share stops: a ProcessError, and whether auto-resume
// may resume it.
type applyError struct {
	pe        *dmpb.ProcessError
	resumable bool
	at        *pb.Place // the source position of the op that failed, if known
}

func (e *applyError) Error() string { return e.pe.GetMessage() }

// Error codes of the shares' errors (ProcessError.ErrCode), in a range of
// their own.
const (
	codeExportGap  = 46001
	codeBadPacket  = 46002
	codeDivergence = 46003
	codeSource     = 46004
	codeTarget     = 46005
)

func stopped(code int32, resumable bool, scope, msg, workaround string, cause error) *applyError {
	pe := &dmpb.ProcessError{ErrCode: code, ErrClass: "dm-worker", ErrScope: scope, ErrLevel: "high",
		Message: msg, Workaround: workaround}
	if cause != nil {
		pe.RawCause = cause.Error()
	}
	if resumable {
		pe.ErrLevel = "medium"
	}
	return &applyError{pe: pe, resumable: resumable}
}

// afterGroupHook, nil but in tests, runs once a group applied, before
// flush takes in its answer; its error is taken as the proposal's.
var afterGroupHook func(ctx context.Context, n *copyset.Node, reqs []*cspb.ChunkRequest, adv *pb.Advance) error

// errRestart: the run lost track of a group it proposed (its outcome is
// unknown); the next run starts after a barrier.
var errRestart = errors.New("dm: a group's outcome is unknown")

// applier applies one share.
type applier struct {
	s     *Service
	n     *copyset.Node
	m     *Machine
	name  string
	share *pb.SubTask // as of the last group applied
	src   dest.Dest
	geo   restore.Geometry
	rp    *restore.Replay
	ib    *restore.ImageBuilder
	store chunkread.Store

	srcPool, srcCs uint32

	// The group being built: its ops, what each must answer, and what its
	// Advance carries.
	reqs    []*cspb.ChunkRequest
	expect  []expect
	places  []*pb.Place // the source position each op carries out (nil: a rebuild's)
	opsDone []*pb.Place // operators the group carries out
	bytes   int
	add     *pb.Counters
	asOf    map[uint64]*pb.Place
	touched map[uint64]bool // clone chunks whose state changed
	lagging uint64          // refused ops of applied groups not counted yet

	// paced is when the data applied so far may have been applied at the
	// share's throttle (sync.throttle-bytes-per-sec).
	paced time.Time
	// prog is the share's progress as status reports it.
	prog     *progress
	dropProg func()
}

// expect is what a chunk op of a group must answer.
type expect int

const (
	mustApply  expect = iota // a rebuild's op
	anyOutcome               // a binlog op: applied, or refused as the source refused it
	mustRefuse               // a clone chunk's op predicted BACKWARD
)

func (s *Service) newApplier(ctx context.Context, n *copyset.Node, m *Machine, share *pb.SubTask) (*applier, error) {
	c := share.GetConfig()
	loc := c.GetSource().GetExport()
	if loc == "" {
		loc = c.GetSource().GetRelay()
	}
	u, err := dest.Parse(loc)
	if err != nil {
		return nil, stopped(codeSource, false, "upstream", fmt.Sprintf("source %s: %v", loc, err), "stop the task and start it with a valid source", err)
	}
	src, err := dest.Open(ctx, u, s.deps.ObjectStore)
	if err != nil {
		return nil, stopped(codeSource, true, "upstream", fmt.Sprintf("open the source %s: %v", loc, err), "make the source reachable; the task resumes by itself", err)
	}
	store, err := chunkread.Of(n)
	if err != nil {
		src.Close()
		return nil, err
	}
	a := &applier{s: s, n: n, m: m, name: c.GetName(), share: share, src: src, geo: restore.DefaultGeometry,
		ib: restore.NewImageBuilder(restore.DefaultGeometry), store: store,
		srcPool: c.GetSource().GetPool(), srcCs: share.GetSourceCopyset()}
	a.rp = replayOf(share, a.geo)
	a.prog, a.dropProg = s.progressFor(n.Group(), a.name)
	a.prog.sample(time.Now(), share.GetCounters())
	a.prog.begin(share)
	a.reset()
	// The share's copyset is fenced for its task (fence.go); a share
	// found without its fence gets it before anything is applied.
	if f, ok := chunkstore.LocalWriteFence(n); !ok || f.Owner != fenceOwner(a.name) {
		if _, err := s.deps.Chunks.SetWriteFence(ctx, n.Group(), fenceOwner(a.name), fenceReason(a.name)); err != nil {
			src.Close()
			var held *chunkstore.WriteFenceHeldError
			if errors.As(err, &held) {
				return nil, stopped(codeTarget, false, "downstream", fmt.Sprintf("copyset %d/%d: %v", n.Group().Pool(), n.Group().Copyset(), err),
					"stop the task that holds the copyset, or migrate into another pool", err)
			}
			return nil, err
		}
	}
	return a, nil
}

// replayOf is the replay state share holds.
func replayOf(share *pb.SubTask, g restore.Geometry) *restore.Replay {
	rp := &restore.Replay{G: g, AsOf: map[uint64]restore.Place{}, Clones: map[uint64]*restore.Clone{}}
	for id, p := range share.GetAsOf() {
		rp.AsOf[id] = restore.Place{Index: p.GetIndex(), Op: p.GetOp()}
	}
	for id, c := range share.GetClones() {
		rp.Clones[id] = restore.CloneFromBitmap(c.GetSn(), c.GetCorrectedSn(), g.ChunkSize/g.BlockSize, c.GetWritten())
	}
	return rp
}

// cloneProto is cl as a share holds it.
func cloneProto(cl *restore.Clone) *pb.Clone {
	return &pb.Clone{Sn: cl.Sn, CorrectedSn: cl.CorrectedSn, Written: cl.Bitmap()}
}

func (a *applier) close() {
	a.dropProg()
	a.src.Close()
}

// reset empties the group being built.
func (a *applier) reset() {
	a.reqs, a.expect, a.places, a.opsDone, a.bytes = nil, nil, nil, nil, 0
	a.add = &pb.Counters{}
	a.asOf, a.touched = map[uint64]*pb.Place{}, map[uint64]bool{}
}

// run applies packets until ctx ends or an error stops the share. The
// packets are read one ahead, by a goroutine run owns (fetchAhead), so
// that reading and decoding the next packet overlaps applying this one;
// the groups themselves go one at a time. A packet is decoded in place
// (its records' data alias the buffer it was read into): two buffers
// take turns, each back to the reader once its packet's groups have all
// applied.
func (a *applier) run(ctx context.Context) error {
	at, err := a.checkpointPoint()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	ahead := make(chan fetched, 1)
	free := make(chan []byte, 2)
	free <- nil
	free <- nil
	var blocked atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.fetchAhead(ctx, at, ahead, free, &blocked)
	}()
	defer func() {
		cancel()
		<-done
	}()
	for {
		var f fetched
		select {
		case f = <-ahead:
		default:
			blocked.Store(true)
			select {
			case f = <-ahead:
			case <-ctx.Done():
				return ctx.Err()
			}
			blocked.Store(false)
		}
		if f.err != nil {
			return f.err
		}
		// Its lag: since its first op was appended on the source (a
		// binlog packet), else since it was written.
		since := f.pkt.Header.GetFirstAppendedAtMs()
		if since == 0 {
			since = f.pkt.Header.GetWrittenAtMs()
		}
		a.prog.applying(since)
		if err := a.packet(ctx, f.pkt); err != nil {
			return err
		}
		free <- f.buf // every group of the packet has applied
		if a.share.GetStage() == dmpb.Stage_Finished {
			return nil
		}
	}
}

// fetched is a packet read ahead and the buffer it aliases, or why the
// reading stopped.
type fetched struct {
	pkt *exportfmt.Packet
	buf []byte
	err error
}

// checkpointPoint is the point of the packet the share's checkpoint is in.
func (a *applier) checkpointPoint() (exportfmt.Point, error) {
	if a.share.GetCheckpoint().GetPoint() == nil {
		return exportfmt.StartPoint(), nil
	}
	at, err := exportfmt.ParsePoint(a.share.GetCheckpoint().GetPoint())
	if err != nil {
		return at, stopped(codeDivergence, false, "internal", fmt.Sprintf("checkpoint %s: %v", CheckpointString(a.share.GetCheckpoint()), err), "", err)
	}
	return at, nil
}

// fetchAhead reads the packets of the chain from at on into out, each
// into a buffer taken from free, until ctx ends or a read fails (its
// error is the last thing sent). While the applier waits on it (blocked)
// for a packet the export does not have yet, the share is synced.
func (a *applier) fetchAhead(ctx context.Context, at exportfmt.Point, out chan<- fetched, free <-chan []byte, blocked *atomic.Bool) {
	for {
		var buf []byte
		select {
		case buf = <-free:
		case <-ctx.Done():
			return
		}
		pkt, buf, err := a.fetch(ctx, at, buf, blocked)
		select {
		case out <- fetched{pkt: pkt, buf: buf, err: err}:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
		at = pkt.Next
	}
}

// fetch reads the packet at point at into buf (or a larger buffer it
// returns), waiting while the export does not have it yet. A later packet
// without it is a gap.
func (a *applier) fetch(ctx context.Context, at exportfmt.Point, buf []byte, blocked *atomic.Bool) (*exportfmt.Packet, []byte, error) {
	name := exportfmt.PacketName(a.srcPool, a.srcCs, at)
	wait := pollMin
	for {
		// Reading and checking a packet of up to 64 MiB is a burst of
		// memory work: one at a time per server, so that the appliers of
		// many copysets starting at once do not starve the server's raft
		// traffic (docs/benchmarks.md, dm).
		select {
		case a.s.reads <- struct{}{}:
		case <-ctx.Done():
			return nil, buf, ctx.Err()
		}
		var (
			pkt *exportfmt.Packet
			bad error
		)
		b, err := a.src.GetInto(ctx, name, buf)
		if err == nil {
			buf = b
			pkt, bad = exportfmt.DecodeAlias(b)
		}
		<-a.s.reads
		switch {
		case err == nil && bad != nil:
			return nil, buf, stopped(codeBadPacket, false, "upstream", fmt.Sprintf("packet %s of %s: %v", name, a.src, bad),
				"repair the export (write the packet again), then resume-task", bad)
		case err == nil:
			if pkt.Header.GetLogicPoolId() != a.srcPool || pkt.Header.GetCopysetId() != a.srcCs || pkt.Start.Compare(at) != 0 {
				return nil, buf, stopped(codeBadPacket, false, "upstream", fmt.Sprintf("packet %s of %s is of copyset %d/%d from %s, not %d/%d from %s",
					name, a.src, pkt.Header.GetLogicPoolId(), pkt.Header.GetCopysetId(), pkt.Start, a.srcPool, a.srcCs, at),
					"repair the export, then resume-task", nil)
			}
			return pkt, buf, nil
		case ctx.Err() != nil:
			return nil, buf, ctx.Err()
		case !errors.Is(err, objstore.ErrNotExist):
			return nil, buf, stopped(codeSource, true, "upstream", fmt.Sprintf("read packet %s of %s: %v", name, a.src, err),
				"make the source readable; the task resumes by itself", err)
		}
		if later, err := a.laterPacket(ctx, name); err != nil {
			return nil, buf, stopped(codeSource, true, "upstream", fmt.Sprintf("list %s: %v", a.src, err), "make the source readable; the task resumes by itself", err)
		} else if later != "" {
			return nil, buf, stopped(codeExportGap, false, "upstream", fmt.Sprintf("the export %s has no packet %s (the next after %s) but has %s: a gap in the chain",
				a.src, name, at, later), "repair the export (write the missing packet), then resume-task", nil)
		}
		if blocked.Load() {
			a.prog.waiting()
		}
		select {
		case <-ctx.Done():
			return nil, buf, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, pollMax)
	}
}

// laterPacket returns the first packet of the source copyset named after
// name, "" when there is none or name itself is listed (the export wrote
// it after the read that missed it: the listing holds every packet written
// before it began).
func (a *applier) laterPacket(ctx context.Context, name string) (string, error) {
	infos, err := a.src.List(ctx, exportfmt.CopysetPrefix(a.srcPool, a.srcCs))
	if err != nil {
		return "", err
	}
	for _, info := range infos {
		if info.Name == name {
			// Written since the read that missed it: no gap.
			return "", nil
		}
		if info.Name > name && strings.HasSuffix(info.Name, exportfmt.PacketSuffix) {
			return info.Name, nil
		}
	}
	return "", nil
}

// unit is the ops of one unit of a packet and what applying them does to
// the replay state.
type unit struct {
	ops    []restore.Op
	chunk  uint64
	chunks []uint64 // each op's chunk when they differ (an operator's); nil: chunk
	csn    []uint64 // each op's corrected sn for its request (an operator's writes); nil: none
	at     *pb.Place
	expect []expect
	// done changes the replay state and counters once the unit's last op
	// is in a group.
	done func()
}

// packet applies pkt from the checkpoint's unit and step on.
func (a *applier) packet(ctx context.Context, pkt *exportfmt.Packet) error {
	binlog := pkt.Start.Phase == exportfmt.PhaseBinlog
	cp := a.share.GetCheckpoint()
	var groups []restore.ChunkRecords
	n := len(pkt.Records)
	if !binlog {
		groups = restore.GroupByChunk(pkt.Records)
		n = len(groups)
	}
	unitType := dmpb.UnitType_Load
	if binlog {
		unitType = dmpb.UnitType_Sync
	}
	last := &pb.Place{}
	for i := int(cp.GetRecord()); i < n; i++ {
		var u unit
		var err error
		step := 0
		if i == int(cp.GetRecord()) {
			step = int(cp.GetStep())
		}
		if binlog {
			bl := pkt.Records[i].GetBinlog()
			u, err = a.binlogUnit(bl, step)
			last = &pb.Place{Index: bl.GetIndex(), Op: bl.GetOpPosition()}
		} else {
			u, err = a.imageUnit(groups[i])
		}
		if err != nil {
			return stopped(codeBadPacket, false, "upstream", fmt.Sprintf("packet %s of copyset %d/%d, unit %d: %v", pkt.Start, a.srcPool, a.srcCs, i, err),
				"repair the export, then resume-task", err)
		}
		for j := step; j < len(u.ops); j++ {
			if len(a.reqs) >= maxGroupOps || (len(a.reqs) > 0 && a.bytes+len(u.ops[j].Data) > maxGroupBytes) {
				if err := a.flush(ctx, pkt, i, j, unitType, last, false); err != nil {
					return err
				}
			}
			id := u.chunk
			if u.chunks != nil {
				id = u.chunks[j]
			}
			r := a.request(id, u.ops[j])
			if u.csn != nil && u.csn[j] != 0 {
				r.CorrectedSn = proto.Uint64(u.csn[j])
			}
			a.reqs = append(a.reqs, r)
			a.expect = append(a.expect, u.expect[j])
			a.places = append(a.places, u.at)
			a.bytes += len(u.ops[j].Data)
		}
		u.done()
	}
	// The packet is done: the next one starts at its next point.
	return a.flush(ctx, pkt, n, 0, unitType, last, true)
}

// imageUnit is the rebuild of a snapshot-phase chunk image.
func (a *applier) imageUnit(g restore.ChunkRecords) (unit, error) {
	im, err := a.ib.Build(g.ID, g.Recs)
	if err != nil {
		return unit{}, err
	}
	ops := restore.PlanRebuild(im, a.geo, restore.DefaultMaxWrite).Ops()
	if im.Pieces == nil {
		// The image is in the builder's buffers, which the next image
		// reuses: the group keeps copies.
		for i := range ops {
			ops[i].Data = append([]byte(nil), ops[i].Data...)
		}
	}
	place := &pb.Place{Index: im.AsOf, Op: im.AsOfOp}
	return unit{ops: ops, chunk: g.ID, expect: make([]expect, len(ops)), done: func() {
		a.rp.AsOf[g.ID] = restore.Place{Index: im.AsOf, Op: im.AsOfOp}
		a.asOf[g.ID] = place
		a.add.Chunks++
		a.add.Records += uint64(len(g.Recs))
		a.add.Ops += uint64(len(ops))
		for _, op := range ops {
			a.add.Bytes += uint64(len(op.Data))
		}
	}}, nil
}

// binlogUnit is the replay of one binlog record (restore.Replay.Next); a
// run that starts at step > 0 of a CREATE_CLONE knows the chunk did not
// exist (it was being rebuilt).
func (a *applier) binlogUnit(bl *syncpb.BinlogRecord, step int) (unit, error) {
	if err := restore.CheckBinlog(a.geo, bl); err != nil {
		return unit{}, err
	}
	at := &pb.Place{Index: bl.GetIndex(), Op: bl.GetOpPosition()}
	o := a.operatorAt(at)
	if o == nil || o.GetOp() == dmpb.ErrorOp_Inject {
		u, err := a.recordUnit(bl, step)
		if err != nil || o == nil {
			u.at = at
			return u, err
		}
		return a.withOperator(o, u), nil
	}
	// Skip or Replace: the record itself is not replayed.
	return a.withOperator(o, unit{done: func() { a.add.Records++ }}), nil
}

// operatorAt is the share's operator at source position at, or nil.
func (a *applier) operatorAt(at *pb.Place) *pb.Operator {
	for _, o := range a.share.GetOperators() {
		if proto.Equal(o.GetAt(), at) {
			return o
		}
	}
	return nil
}

// withOperator is unit u (what the record itself does: nothing for Skip
// and Replace) after operator o's ops, which apply whatever the target
// answers; the operator is done with the unit's last op.
func (a *applier) withOperator(o *pb.Operator, u unit) unit {
	out := unit{at: o.GetAt()}
	for _, op := range o.GetOps() {
		r, ok := chunkOpOf(op)
		if !ok {
			continue // noop
		}
		csn := uint64(0) // a delete-snap's corrected sn is its op's Sn
		if op.GetKind() == pb.ChunkOp_WRITE {
			csn = op.GetCorrectedSn()
		}
		out.ops = append(out.ops, r)
		out.chunks = append(out.chunks, op.GetChunk())
		out.csn = append(out.csn, csn)
		out.expect = append(out.expect, anyOutcome)
	}
	for i, op := range u.ops {
		out.ops = append(out.ops, op)
		out.chunks = append(out.chunks, u.chunk)
		out.csn = append(out.csn, 0)
		out.expect = append(out.expect, u.expect[i])
	}
	n := len(out.ops) - len(u.ops)
	out.done = func() {
		a.add.Ops += uint64(n)
		for _, op := range out.ops[:n] {
			a.add.Bytes += uint64(len(op.Data))
		}
		a.opsDone = append(a.opsDone, o.GetAt())
		if u.done != nil {
			u.done()
		}
	}
	return out
}

// chunkOpOf is an operator's chunk op as the applier proposes it; a noop
// is none.
func chunkOpOf(op *pb.ChunkOp) (restore.Op, bool) {
	switch op.GetKind() {
	case pb.ChunkOp_WRITE:
		data := op.GetData()
		if len(data) == 0 {
			data = make([]byte, op.GetLength())
		}
		return restore.Op{Kind: restore.OpWrite, Offset: op.GetOffset(), Data: data, Sn: op.GetSn()}, true
	case pb.ChunkOp_DELETE:
		return restore.Op{Kind: restore.OpDelete, Sn: op.GetSn()}, true
	case pb.ChunkOp_DELETE_SNAP:
		return restore.Op{Kind: restore.OpCorrect, Sn: op.GetCorrectedSn()}, true
	}
	return restore.Op{}, false
}

// recordUnit is the replay of binlog record bl itself.
func (a *applier) recordUnit(bl *syncpb.BinlogRecord, step int) (unit, error) {
	id := bl.GetOp().GetChunkId()
	counted := func() { a.add.Records++ }
	st, err := a.rp.Next(bl)
	if err != nil {
		return unit{}, err
	}
	switch st.Action {
	case restore.Skip:
		a.touched[id] = true // a PASTE may have marked its blocks
		return unit{done: counted}, nil
	case restore.RefusedByClone:
		return unit{done: func() { counted(); a.add.Refused++ }}, nil
	case restore.CreateClone:
		exists := false
		if step == 0 {
			_, ok, err := a.store.ChunkMeta(id)
			if err != nil {
				return unit{}, fmt.Errorf("target chunk %d: %w", id, err)
			}
			exists = ok
		}
		if exists {
			return unit{done: func() { counted(); a.add.Refused++ }}, nil
		}
		ops := restore.PlanRebuild(st.Image, a.geo, restore.DefaultMaxWrite).Ops()
		return unit{ops: ops, chunk: id, expect: make([]expect, len(ops)), done: func() {
			counted()
			a.rp.Cloned(st)
			a.touched[id] = true
			a.add.Chunks++
			a.add.Ops += uint64(len(ops))
			for _, op := range ops {
				a.add.Bytes += uint64(len(op.Data))
			}
		}}, nil
	}
	e := anyOutcome
	if cl := a.rp.Clones[id]; cl != nil {
		// The chunk store's rule for a chunk with the clone's sn and
		// corrected sn: a write below either, or a delete below its sn, is
		// BACKWARD (a write above both was refused by Next).
		backward := false
		switch st.Op.Kind {
		case restore.OpWrite:
			backward = st.Op.Sn < cl.Sn || st.Op.Sn < cl.CorrectedSn
		case restore.OpDelete:
			backward = st.Op.Sn != 0 && st.Op.Sn < cl.Sn
		}
		e = mustApply
		if backward {
			e = mustRefuse
		}
	}
	op := st.Op
	return unit{ops: []restore.Op{op}, chunk: id, expect: []expect{e}, done: func() {
		counted()
		a.add.Ops++
		a.add.Bytes += uint64(len(op.Data))
		if e == mustApply {
			a.rp.Done(bl, restore.Applied)
			a.touched[id] = true
		}
	}}, nil
}

// request is op on chunk id of the target copyset.
func (a *applier) request(id uint64, op restore.Op) *cspb.ChunkRequest {
	g := a.n.Group()
	r := &cspb.ChunkRequest{LogicPoolId: proto.Uint32(g.Pool()), CopysetId: proto.Uint32(g.Copyset()), ChunkId: proto.Uint64(id)}
	switch op.Kind {
	case restore.OpWrite:
		r.OpType = cspb.CHUNK_OP_TYPE_CHUNK_OP_WRITE.Enum()
		r.Offset, r.Size, r.Sn, r.Data = proto.Uint32(op.Offset), proto.Uint32(uint32(len(op.Data))), proto.Uint64(op.Sn), op.Data
	case restore.OpDelete:
		r.OpType, r.Sn = cspb.CHUNK_OP_TYPE_CHUNK_OP_DELETE.Enum(), proto.Uint64(op.Sn)
	default:
		r.OpType, r.CorrectedSn = cspb.CHUNK_OP_TYPE_CHUNK_OP_DELETE_SNAP.Enum(), proto.Uint64(op.Sn)
	}
	return r
}

// flush proposes the group built so far with the Advance to unit `next`,
// op `step` of pkt (the packet's end when packetDone: its next point) and
// checks what it applied.
func (a *applier) flush(ctx context.Context, pkt *exportfmt.Packet, next, step int, unitType dmpb.UnitType, last *pb.Place, packetDone bool) error {
	from := a.share.GetCheckpoint()
	to := proto.CloneOf(from)
	to.Record, to.Step = uint32(next), uint32(step)
	if from.GetPoint() == nil {
		to.Point = pkt.Start.Proto()
	}
	if packetDone {
		to.Point, to.Record, to.Step = pkt.Next.Proto(), 0, 0
		a.add.Packets++
		if pkt.Next.Phase == exportfmt.PhaseBinlog {
			unitType = dmpb.UnitType_Sync // what comes next is the binlog
		}
	}
	if last.GetIndex() != 0 {
		to.SourceIndex, to.SourceOp = last.GetIndex(), last.GetOp()
	}
	to.WrittenAtMs = max(to.GetWrittenAtMs(), pkt.Header.GetLastAppendedAtMs())
	adv := &pb.Advance{Name: a.name, From: from, To: to, Unit: unitType, Add: proto.CloneOf(a.add), AsOf: a.asOf, NowMs: time.Now().UnixMilli(),
		OperatorsDone: a.opsDone}
	adv.Add.Refused += a.lagging
	for id := range a.touched {
		if cl := a.rp.Clones[id]; cl != nil {
			if adv.Clones == nil {
				adv.Clones = map[uint64]*pb.Clone{}
			}
			adv.Clones[id] = cloneProto(cl)
		} else if _, had := a.share.GetClones()[id]; had {
			adv.ClonesDone = append(adv.ClonesDone, id)
		}
	}
	// Past every image's place, the places are of no more use; a full
	// task is finished there.
	if packetDone && pkt.Next.Phase == exportfmt.PhaseBinlog && a.pastImages(pkt.Next.Index) {
		adv.ClearAsOf, adv.AsOf = true, nil
		adv.Finished = a.share.GetConfig().GetMode() == pb.Mode_FULL
		if adv.Finished {
			adv.Unit = dmpb.UnitType_Load // a full task ends with its Load, as upstream's
		}
	}
	b, err := EncodeOp(&pb.Op{Op: &pb.Op_Advance{Advance: adv}})
	if err != nil {
		return err
	}
	var res Result
	var statuses []cspb.CHUNK_OP_STATUS
	if len(a.reqs) == 0 {
		_, res, err = copyset.ProposeAs[Result](ctx, a.n, b)
	} else {
		var gr chunkstore.GroupResult
		gr, err = a.s.deps.Chunks.ProposeGroupAs(ctx, a.n.Group(), fenceOwner(a.name), a.reqs, [][]byte{b})
		if err == nil {
			statuses = gr.Chunk
			r, ok := gr.Tail[0].(Result)
			if !ok {
				err = fmt.Errorf("dm advance: apply result %T", gr.Tail[0])
			}
			res = r
		}
	}
	if err == nil && afterGroupHook != nil {
		err = afterGroupHook(ctx, a.n, a.reqs, adv)
	}
	if err != nil {
		err = a.proposeError(err)
		if ae, ok := err.(*applyError); ok {
			ae.at = a.firstPlace()
		}
		return err
	}
	if res.Err != nil {
		return stopped(codeDivergence, false, "internal", fmt.Sprintf("copyset %d/%d: the advance to %s was refused: %v", a.n.Group().Pool(), a.n.Group().Copyset(), CheckpointString(to), res.Err),
			"stop the task; the target copyset may hold ops applied twice", res.Err)
	}
	a.lagging = 0
	for i, st := range statuses {
		ok := true
		switch a.expect[i] {
		case mustApply:
			ok = st == cspb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS
		case mustRefuse:
			ok = st == cspb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_BACKWARD
		default:
			switch st {
			case cspb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS:
			case cspb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_BACKWARD, cspb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_FAILURE_UNKNOWN:
				a.lagging++ // refused as the source refused it
			default:
				ok = false
			}
		}
		if !ok {
			a.share = res.SubTask
			ae := stopped(codeDivergence, false, "downstream", fmt.Sprintf("copyset %d/%d: %v of chunk %d in entry %d answered %v where the source's answer was expected: the target diverged",
				a.n.Group().Pool(), a.n.Group().Copyset(), a.reqs[i].GetOpType(), a.reqs[i].GetChunkId(), res.SubTask.GetUpdatedIndex(), st),
				"stop the task and migrate into an empty pool again", nil)
			ae.at = a.places[i]
			return ae
		}
	}
	a.share = res.SubTask
	a.prog.sample(time.Now(), a.share.GetCounters())
	a.prog.advanced(a.share, a.changedChunks())
	a.s.metrics.applied(a.name, adv.GetAdd())
	if packetDone && pkt.Start.Phase == exportfmt.PhaseBinlog {
		a.s.metrics.packetApplied(a.name, pkt.Header.GetFirstAppendedAtMs(), time.Now())
	}
	bytes := a.bytes
	a.reset()
	return a.throttle(ctx, bytes)
}

// changedChunks is each chunk the group changed and the source index its
// state now reflects: its op's (a binlog op), its image's place (a chunk
// image), else the index the checkpoint covers.
func (a *applier) changedChunks() map[uint64]uint64 {
	out := map[uint64]uint64{}
	at := covered(a.share.GetCheckpoint())
	for i, r := range a.reqs {
		id, idx := r.GetChunkId(), at
		if i < len(a.places) && a.places[i] != nil {
			idx = a.places[i].GetIndex()
		} else if p := a.asOf[id]; p != nil {
			idx = p.GetIndex()
		}
		out[id] = max(out[id], idx)
	}
	return out
}

// covered is the source index up to which share checkpoint cp has applied
// every op: the entries before its packet, and before its last op's.
func covered(cp *pb.Checkpoint) uint64 {
	c := cp.GetSourceIndex()
	if c > 0 {
		c--
	}
	if p, err := exportfmt.ParsePoint(cp.GetPoint()); err == nil && p.Phase == exportfmt.PhaseBinlog && p.Index > 0 {
		c = max(c, p.Index-1)
	}
	return c
}

// firstPlace is the source position of the group's first binlog op, or
// nil.
func (a *applier) firstPlace() *pb.Place {
	for _, p := range a.places {
		if p != nil {
			return p
		}
	}
	return nil
}

// pace is when n more bytes at rate bytes per second are applied, the
// ones before by paced (a pace that fell behind now starts again from
// now: idle time is not saved up).
func pace(paced, now time.Time, n int, rate uint64) time.Time {
	if paced.Before(now) {
		paced = now
	}
	return paced.Add(time.Duration(float64(n) / float64(rate) * float64(time.Second)))
}

// throttle waits after a group of n data bytes until the share's data so
// far has taken at least as long as its throttle asks.
func (a *applier) throttle(ctx context.Context, n int) error {
	rate := a.share.GetConfig().GetSync().GetThrottleBytesPerSec()
	if rate == 0 || n == 0 {
		return nil
	}
	now := time.Now()
	a.paced = pace(a.paced, now, n, rate)
	if wait := a.paced.Sub(now); wait > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	return nil
}

// pastImages reports whether the binlog from index on comes after the
// place of every chunk image the share rebuilt.
func (a *applier) pastImages(index uint64) bool {
	for _, p := range a.rp.AsOf {
		if p.Index >= index {
			return false
		}
	}
	return true
}

// proposeError classifies a failed proposal: not the leader or the
// outcome unknown end the run (the next one starts after a barrier); the
// target's refusals stop the share, resumable.
func (a *applier) proposeError(err error) error {
	if _, lost := copyset.LeaderLost(err); lost {
		return errRestart
	}
	var se *chunkstore.StatusError
	if errors.As(err, &se) {
		switch se.Status {
		case cspb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_REDIRECTED, cspb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_FAILURE_UNKNOWN:
			return errRestart
		case cspb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_OVERLOAD, cspb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_NOSPACE:
			return stopped(codeTarget, true, "downstream", fmt.Sprintf("copyset %d/%d: %v", a.n.Group().Pool(), a.n.Group().Copyset(), err),
				"the task resumes by itself once the target has room", err)
		}
		return stopped(codeTarget, false, "downstream", fmt.Sprintf("copyset %d/%d: %v", a.n.Group().Pool(), a.n.Group().Copyset(), err),
			"see the target copyset's status", err)
	}
	return errRestart
}
