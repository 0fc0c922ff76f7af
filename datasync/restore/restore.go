package restore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/chunkraft/chunkraft/datasync/dest"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
)

// Options configures a restore.
type Options struct {
	// Source is the export's destination, opened.
	Source dest.Dest
	// Pool is the pool of the export to restore.
	Pool uint32
	// ToPool is the pool of the target copysets; 0 means Pool. Copyset C
	// of Pool is restored into copyset C of ToPool.
	ToPool uint32
	// Copysets restricts the restore to these copysets of Pool; empty
	// means every copyset the export has.
	Copysets []uint32
	// UntilIndex, when HasUntilIndex, is the raft index (of each
	// copyset) to restore to; UntilTimeMs, when HasUntilTime, selects per
	// copyset the last binlog record appended at or before it (Unix ms).
	// At most one of them.
	UntilIndex    uint64
	HasUntilIndex bool
	UntilTimeMs   int64
	HasUntilTime  bool
	// Target is the cluster written to.
	Target Target
	// ResumeFrom, when set, is where an earlier restore of these copysets
	// into ToPool wrote its restore markers: each copyset goes on from
	// its marker (see resume.go) instead of from the start of the export,
	// and its target copyset must be what that restore left, by Digests,
	// instead of empty. Not with HasUntilTime.
	ResumeFrom dest.Dest
	// Digests returns the digest of each of copysets of pool pool as a
	// restore marker records it (needed with ResumeFrom).
	Digests func(ctx context.Context, pool uint32, copysets []uint32) (map[uint32]string, error)
	// Geometry is the chunk geometry; zero means DefaultGeometry.
	Geometry Geometry
	// Parallel is how many copysets are checked and replayed at once (0:
	// DefaultParallel).
	Parallel int
	// ChunkParallel is how many ops of different chunks of one copyset's
	// binlog are in flight at once (0: DefaultChunkParallel); the ops of
	// one chunk are sent one after the other, in log order.
	ChunkParallel int
	// MaxWrite bounds the data of one write of a chunk rebuild (0:
	// DefaultMaxWrite).
	MaxWrite uint32
	// WriteDepth is how many writes of one chunk rebuild are in flight at
	// once (0: DefaultWriteDepth; see rebuilder.spread for why they may be).
	WriteDepth int
	// Progress, if set, is called after each packet (serialised).
	Progress func(Progress)
}

// DefaultParallel is the number of copysets restored at once by default:
// a pool's 16 copysets at once keep the cluster's write path busier than 8
// (docs/performance.md, "Copysets restored at once"), for about 90 MB of
// memory per copyset in flight.
const DefaultParallel = 16

// DefaultChunkParallel is the default of Options.ChunkParallel.
const DefaultChunkParallel = 8

// DefaultWriteDepth is the default of Options.WriteDepth: one write at a
// time. With 4, a 1 GiB restore of 16 copysets runs 25-30% faster while
// the disks keep up, but when they slow, 64 MiB of writes in flight delay
// the raft heartbeats: leaders change mid-restore, writes are redirected
// and retried, and the restore is slower than with one write at a time
// (docs/benchmarks.md, "Writes in flight per chunk rebuild, where the
// export's time goes, the pool's refill during a restore").
const DefaultWriteDepth = 1

// Phase is the pass a restore is in.
type Phase string

// The passes of a restore.
const (
	PhaseCheck  Phase = "check"
	PhaseReplay Phase = "restore"
)

// Progress is the state of a restore after a packet.
type Progress struct {
	Phase Phase
	// Pool and Copyset name the copyset of the packet (in the export).
	Pool, Copyset uint32
	// Packets and Records count the packets and records done in this
	// phase, of PacketsTotal (known in the replay phase) ; Bytes the
	// packet bytes.
	Packets, PacketsTotal int
	Records, Bytes        uint64
	// CopysetsDone of Copysets are finished in this phase.
	CopysetsDone, Copysets int
}

// Totals count what a restore did.
type Totals struct {
	// Packets, Bytes: packets replayed and their size.
	Packets int    `json:"packets"`
	Bytes   uint64 `json:"bytes"`
	// Chunks rebuilt from the snapshot phase and from CREATE_CLONE records.
	Chunks uint64 `json:"chunks"`
	// Records replayed; Skipped: binlog records a chunk image reflects, and
	// PASTEs; Refused: ops the target refused as the source did.
	Records uint64 `json:"records"`
	Skipped uint64 `json:"skipped"`
	Refused uint64 `json:"refused"`
	// WrittenBytes: data bytes written to the target; TargetOps: mutating
	// ops sent.
	WrittenBytes uint64 `json:"writtenBytes"`
	TargetOps    uint64 `json:"targetOps"`
}

func (t *Totals) add(o Totals) {
	t.Packets += o.Packets
	t.Bytes += o.Bytes
	t.Chunks += o.Chunks
	t.Records += o.Records
	t.Skipped += o.Skipped
	t.Refused += o.Refused
	t.WrittenBytes += o.WrittenBytes
	t.TargetOps += o.TargetOps
}

// CopysetSummary is what the restore did to one copyset.
type CopysetSummary struct {
	Pool    uint32 `json:"pool"`
	Copyset uint32 `json:"copyset"`
	ToPool  uint32 `json:"toPool"`
	// UntilIndex is the raft index restored to; BinlogStart the export's
	// first binlog index; EarliestIndex the earliest it could restore, and
	// EarliestTimeMs the earliest --until-time (Unix ms; 0 when the export
	// cannot tell one).
	UntilIndex     uint64 `json:"untilIndex"`
	BinlogStart    uint64 `json:"binlogStart"`
	EarliestIndex  uint64 `json:"earliestIndex"`
	EarliestTimeMs int64  `json:"earliestTimeMs,omitempty"`
	Totals
	// Marker is where the restore left the copyset (set once it is
	// replayed completely): all of a RestoreMarker but the export's
	// location, the digest and the time, which the caller adds.
	Marker *syncpb.RestoreMarker `json:"-"`
}

// Summary is what a restore did: per copyset, and the totals.
type Summary struct {
	Copysets []CopysetSummary `json:"copysets"`
	Totals
	// Elapsed is the whole restore's time; Checked the part of it the
	// check pass took (reading and checking every packet, writing nothing).
	Elapsed time.Duration `json:"-"`
	Checked time.Duration `json:"-"`
	// MarkerLocation is where the restore markers were written (set by
	// the caller that wrote them; empty: none).
	MarkerLocation string `json:"markerLocation,omitempty"`
}

// Restore restores the export (see the package documentation). On error
// the summary holds the copysets replayed completely.
func Restore(ctx context.Context, o Options) (*Summary, error) {
	start := time.Now()
	if o.Geometry == (Geometry{}) {
		o.Geometry = DefaultGeometry
	}
	if err := o.Geometry.check(); err != nil {
		return nil, err
	}
	if o.HasUntilIndex && o.HasUntilTime {
		return nil, errors.New("restore: give --until-index or --until-time, not both")
	}
	if o.ToPool == 0 {
		o.ToPool = o.Pool
	}
	if o.Parallel <= 0 {
		o.Parallel = DefaultParallel
	}
	if o.ChunkParallel <= 0 {
		o.ChunkParallel = DefaultChunkParallel
	}
	if o.MaxWrite == 0 {
		o.MaxWrite = DefaultMaxWrite
	}
	if o.WriteDepth <= 0 {
		o.WriteDepth = DefaultWriteDepth
	}
	all, err := ExportCopysets(ctx, o.Source, o.Pool)
	if err != nil {
		return nil, err
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("the export at %s has no packets of pool %d", o.Source, o.Pool)
	}
	ids := slices.Clone(o.Copysets)
	if len(ids) == 0 {
		for id := range all {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	for _, id := range ids {
		if _, ok := all[id]; !ok {
			return nil, fmt.Errorf("the export at %s has no packets of copyset %d/%d", o.Source, o.Pool, id)
		}
	}
	var markers map[uint32]*syncpb.RestoreMarker
	if o.ResumeFrom != nil {
		if markers, err = readMarkers(ctx, &o, ids, all); err != nil {
			return nil, err
		}
	}
	u := until{index: o.UntilIndex, hasIndex: o.HasUntilIndex, timeMs: o.UntilTimeMs, hasTime: o.HasUntilTime}
	pr := &progress{fn: o.Progress, copysets: len(ids)}

	// Pass 1: check everything, write nothing.
	free := &scratchList{g: o.Geometry}
	plans := make([]*plan, len(ids))
	pr.start(PhaseCheck, 0)
	err = forEach(ctx, len(ids), o.Parallel, func(ctx context.Context, i int) error {
		p, err := check(ctx, o.Source, free, o.Pool, ids[i], all[ids[i]], u, markers[ids[i]], func(pkt *exportfmt.Packet) {
			pr.packet(o.Pool, ids[i], pkt)
		})
		if err != nil {
			return fmt.Errorf("copyset %d/%d: %w", o.Pool, ids[i], err)
		}
		plans[i] = p
		pr.copysetDone()
		return nil
	})
	if err != nil {
		return nil, err
	}
	if markers != nil {
		if err := checkResumed(ctx, &o, markers); err != nil {
			return nil, err
		}
	} else {
		for _, id := range ids {
			if err := o.Target.CheckEmpty(ctx, o.ToPool, id); err != nil {
				return nil, err
			}
		}
	}

	checked := time.Since(start)

	// Pass 2: replay.
	total := 0
	for _, p := range plans {
		total += len(p.names)
	}
	pr.start(PhaseReplay, total)
	sums := make([]CopysetSummary, len(plans))
	done := make([]bool, len(plans))
	err = forEach(ctx, len(plans), o.Parallel, func(ctx context.Context, i int) error {
		r := &replayer{o: &o, p: plans[i], pr: pr, free: free}
		s, err := r.run(ctx)
		if err != nil {
			return fmt.Errorf("copyset %d/%d: %w", o.Pool, plans[i].copyset, err)
		}
		sums[i], done[i] = s, true
		pr.copysetDone()
		return nil
	})
	sum := &Summary{Elapsed: time.Since(start), Checked: checked}
	for i, s := range sums {
		if !done[i] {
			continue
		}
		sum.Copysets = append(sum.Copysets, s)
		sum.add(s.Totals)
	}
	return sum, err
}

// replayer replays one copyset.
type replayer struct {
	o    *Options
	p    *plan
	pr   *progress
	free *scratchList
	sum  CopysetSummary
	asOf map[uint64]Place // chunk -> t_c of its snapshot-phase image
}

// lane replays the ops of some of a copyset's chunks, in order: every op
// of a chunk goes to the same lane. Ops of different chunks commute (each
// changes its chunk only), so lanes run in parallel.
type lane struct {
	r   *replayer
	rb  *rebuilder
	tot Totals
	// rp is the lane's replay state: the copyset's AsOf, the lane's
	// chunks' Clones.
	rp *Replay
}

func (r *replayer) newLane() *lane {
	return &lane{r: r, rb: &rebuilder{t: r.o.Target, g: r.o.Geometry, maxWrite: r.o.MaxWrite, depth: r.o.WriteDepth},
		rp: &Replay{G: r.o.Geometry, AsOf: r.asOf, Clones: map[uint64]*Clone{}}}
}

// done adds the lane's counts to the copyset's.
func (l *lane) done(sum *CopysetSummary) {
	l.tot.WrittenBytes, l.tot.TargetOps = l.rb.bytes.Load(), l.rb.ops.Load()
	sum.add(l.tot)
}

func (r *replayer) chunk(id uint64) Chunk {
	return Chunk{Pool: r.o.ToPool, Copyset: r.p.copyset, ID: id}
}

// job is one binlog record for a lane, from packet name.
type job struct {
	name string
	bl   *syncpb.BinlogRecord
}

func (r *replayer) run(ctx context.Context) (CopysetSummary, error) {
	p := r.p
	r.sum = CopysetSummary{Pool: p.pool, Copyset: p.copyset, ToPool: r.o.ToPool, UntilIndex: p.until,
		BinlogStart: p.binlogStart, EarliestIndex: p.earliest()}
	if ms, _, ok := p.earliestTime(); ok {
		r.sum.EarliestTimeMs = ms
	}
	r.asOf = map[uint64]Place{}
	chain := exportfmt.NewChain(p.pool, p.copyset)
	sc := r.free.get()
	defer r.free.put(sc)
	ib := sc.ib
	snap := r.newLane() // the snapshot phase, one chunk after the other

	// The binlog lanes, started with the binlog phase.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		lanes []*lane
		queue []chan job
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	startLanes := func() {
		for range r.o.ChunkParallel {
			l, q := r.newLane(), make(chan job, 64)
			lanes, queue = append(lanes, l), append(queue, q)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range q {
					if ctx.Err() != nil {
						continue // drain
					}
					if err := l.binlog(ctx, j.bl); err != nil {
						mu.Lock()
						if first == nil {
							first = fmt.Errorf("packet %s, binlog index %d: %w", j.name, j.bl.Index, err)
							cancel()
						}
						mu.Unlock()
					}
				}
			}()
		}
	}
	stopLanes := func() error {
		for _, q := range queue {
			close(q)
		}
		wg.Wait()
		snap.done(&r.sum)
		for _, l := range lanes {
			l.done(&r.sum)
		}
		return first
	}

	// next, nextRecord: the first record after the until point (see
	// syncpb.RestoreMarker); last the last binlog record replayed; skip
	// the records of the first packet an earlier restore replayed.
	var (
		err        error
		next       exportfmt.Point
		nextRecord int
		nextFound  bool
		last       Place
		skip       int
	)
	if m := p.resume; m != nil {
		startLanes()
		seedClones(m, r.o.Geometry, lanes)
		last, skip = Place{m.GetLastIndex(), m.GetLastOpPosition()}, int(m.GetNextRecord())
		next, _ = exportfmt.ParsePoint(m.GetNextPoint()) // readMarkers checked it
		nextRecord = skip
		nextFound = len(p.names) == 0
	}
	for _, name := range p.names {
		// A snapshot-phase packet's buffer is reused: its chunks are
		// rebuilt before the next read.
		var pkt *exportfmt.Packet
		if pkt, err = readPacket(ctx, r.o.Source, chain, name, &sc.pkt); err != nil {
			if ctx.Err() == nil {
				err = fmt.Errorf("%w (it passed the check before the replay began: was the export changed?)", err)
			}
			break
		}
		if pkt.Start.Phase == exportfmt.PhaseBinlog && pkt.Start.Index > p.until {
			next, nextRecord, nextFound = pkt.Start, 0, true
			break
		}
		if pkt.Start.Phase == exportfmt.PhaseBinlog {
			sc.pkt = nil // the lanes' jobs hold its records' data
			if lanes == nil {
				startLanes()
			}
			for i, rec := range pkt.Records[skip:] {
				i += skip
				bl := rec.GetBinlog()
				if bl.Index > p.until {
					next, nextRecord, nextFound = pkt.Start, i, true
					break
				}
				if ctx.Err() != nil {
					break
				}
				last = Place{bl.Index, bl.OpPosition}
				select {
				case queue[bl.Op.GetChunkId()%uint64(len(queue))] <- job{name, bl}:
				case <-ctx.Done():
				}
			}
		} else {
			for _, grp := range GroupByChunk(pkt.Records) {
				var im *Image
				if im, err = ib.Build(grp.ID, grp.Recs); err != nil {
					err = &exportfmt.BadPacketError{Name: name, Err: err}
					break
				}
				if err = snap.rb.rebuild(ctx, r.chunk(im.ID), im); err != nil {
					err = fmt.Errorf("packet %s: %w", name, err)
					break
				}
				r.asOf[im.ID] = Place{im.AsOf, im.AsOfOp}
				snap.tot.Chunks++
			}
			if err != nil {
				break
			}
			snap.tot.Records += uint64(len(pkt.Records))
		}
		if ctx.Err() != nil {
			break
		}
		skip = 0
		r.sum.Packets++
		r.sum.Bytes += uint64(pkt.Size)
		r.pr.packet(p.pool, p.copyset, pkt)
		if nextFound {
			break
		}
	}
	if lerr := stopLanes(); lerr != nil {
		err = lerr // a lane's failure is what cancelled the rest
	}
	if err == nil {
		err = ctx.Err() // stopped early, not done
	}
	if err == nil {
		if !nextFound {
			next, _ = chain.Next()
			nextRecord = 0
		}
		id := chain.ExportID()
		if p.resume != nil && chain.Len() == 0 {
			id = p.resume.GetExportId()
		}
		r.sum.Marker = r.marker(id, next, nextRecord, last, append(lanes, snap))
	}
	return r.sum, err
}

// marker is the restore marker of the replayed copyset (without the
// export's location, the digest and the time): the first record after the
// until point is record nextRecord of the packet at next, last the last
// record replayed, and the clone chunks those the lanes follow.
func (r *replayer) marker(exportID string, next exportfmt.Point, nextRecord int, last Place, lanes []*lane) *syncpb.RestoreMarker {
	m := &syncpb.RestoreMarker{FormatVersion: exportfmt.Version, LogicPoolId: r.p.pool, CopysetId: r.p.copyset,
		ExportId: exportID, ToPool: r.o.ToPool, UntilIndex: r.p.until, LastIndex: last.Index, LastOpPosition: last.Op,
		NextPoint: next.Proto(), NextRecord: uint32(nextRecord)}
	for _, l := range lanes {
		for id, cl := range l.rp.Clones {
			m.Clones = append(m.Clones, &syncpb.MarkerClone{ChunkId: id, Sn: cl.Sn, CorrectedSn: cl.CorrectedSn, Written: cl.Bitmap()})
		}
	}
	slices.SortFunc(m.Clones, func(a, b *syncpb.MarkerClone) int { return cmp.Compare(a.ChunkId, b.ChunkId) })
	return m
}

// binlog replays one binlog record (Replay.Next says what it takes).
func (l *lane) binlog(ctx context.Context, bl *syncpb.BinlogRecord) error {
	c := l.r.chunk(bl.Op.GetChunkId())
	step, err := l.rp.Next(bl)
	if err != nil {
		return err
	}
	switch step.Action {
	case Skip:
		l.tot.Skipped++
		return nil
	case RefusedByClone:
		l.tot.Records++
		l.tot.Refused++
		return nil
	case CreateClone:
		return l.clone(ctx, c, step)
	}
	var o Outcome
	switch op := step.Op; op.Kind {
	case OpWrite:
		o, err = l.r.o.Target.WriteChunk(ctx, c, op.Offset, op.Data, op.Sn)
		if err == nil && o == Applied {
			l.rb.bytes.Add(uint64(len(op.Data)))
		}
	case OpDelete:
		o, err = l.r.o.Target.DeleteChunk(ctx, c, op.Sn)
	default:
		o, err = l.r.o.Target.DeleteChunkSnapshotOrCorrectSn(ctx, c, op.Sn)
	}
	if err != nil {
		return fmt.Errorf("%v of %s: %w", bl.Op.GetOpType(), c, err)
	}
	l.rp.Done(bl, o)
	l.rb.ops.Add(1)
	l.tot.Records++
	if o != Applied {
		l.tot.Refused++
	}
	return nil
}

// clone replays a CREATE_CLONE: on an existing chunk the source's create
// changed nothing (the same clone again, or CHUNK_EXIST); otherwise the
// chunk is rebuilt as the op's sn and corrected sn with the materialised
// data.
func (l *lane) clone(ctx context.Context, c Chunk, step Step) error {
	l.tot.Records++
	exists, err := l.r.o.Target.ChunkExists(ctx, c)
	if err != nil {
		return fmt.Errorf("clone %s: %w", c, err)
	}
	if exists {
		l.tot.Refused++
		return nil
	}
	if err := l.rb.rebuild(ctx, c, step.Image); err != nil {
		return fmt.Errorf("clone: %w", err)
	}
	l.rp.Cloned(step)
	l.tot.Chunks++
	return nil
}

// progress serialises and aggregates progress reports.
type progress struct {
	fn       func(Progress)
	copysets int
	mu       sync.Mutex
	cur      Progress
}

func (p *progress) start(ph Phase, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cur = Progress{Phase: ph, PacketsTotal: total, Copysets: p.copysets}
}

func (p *progress) packet(pool, cs uint32, pkt *exportfmt.Packet) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cur.Pool, p.cur.Copyset = pool, cs
	p.cur.Packets++
	p.cur.Records += uint64(len(pkt.Records))
	p.cur.Bytes += uint64(pkt.Size)
	if p.fn != nil {
		p.fn(p.cur)
	}
}

func (p *progress) copysetDone() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cur.CopysetsDone++
	if p.fn != nil {
		p.fn(p.cur)
	}
}

// forEach runs fn(0..n-1), at most limit at once, each in its own
// goroutine under a context cancelled at the first error, and waits for
// all; it returns the first error.
func forEach(ctx context.Context, n, limit int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, limit)
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(ctx, i); err != nil {
				mu.Lock()
				if first == nil {
					first = err
					cancel()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}
