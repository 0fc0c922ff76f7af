package datasync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/internal/chunkread"
	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The exporter: the core of a sub-task's DataCollector. Export produces the
// packets of one copyset's export in point order and hands each to a
// sender; see "Why the export is exact" in the package documentation.

// ErrLogGone is wrapped by Export and FirstIndexAtOrAfter when the
// retained raft log no longer reaches back to where the export must
// start: the sub-task cannot go on (a kFull or kFullAndContinuous task can
// be created again, an incremental one with a later start time).
var ErrLogGone = errors.New("raft log no longer retained")

// Export defaults.
const (
	// DefaultPacketBytes is ExportOptions.PacketBytes when unset.
	DefaultPacketBytes = 4 << 20
	// DefaultIdle is ExportOptions.Idle when unset.
	DefaultIdle = time.Second
	// DefaultLinger is ExportOptions.Linger when unset.
	DefaultLinger = time.Second
	// maxPacketBytes bounds PacketBytes: two packets' worth of records and
	// one more chunk (16 MiB and its 16 MiB snapshot) stay under
	// exportfmt.MaxPacketSize.
	maxPacketBytes = exportfmt.MaxPacketSize / 4
	// pollInterval is how often a caught-up binlog phase looks for newly
	// committed entries at first; each look that finds none doubles it, up
	// to maxPollInterval (an idle copyset costs ~10 looks a second).
	pollInterval    = 10 * time.Millisecond
	maxPollInterval = 100 * time.Millisecond
)

// LogPin is a hold on a copyset's raft log from an index on
// (*copyset.LogPin).
type LogPin interface {
	// Entry reads the committed entry at index (copyset.Node.LogEntry),
	// failing first if the pin was capped or released.
	Entry(index uint64) (copyset.LogEntry, error)
	// Advance moves the pin forward to index.
	Advance(index uint64) error
	// Release lets the log go; idempotent.
	Release()
}

// Source is a copyset as the exporter sees it: its chunk store and its
// raft log (implemented over copyset.Node and the chunk machine's store).
type Source interface {
	Pool() uint32
	Copyset() uint32
	// ListChunks returns the chunk ids, ascending.
	ListChunks() []uint64
	// ChunkImage returns chunk id as of one moment; an error wrapping
	// chunkread.ErrChunkGone if the chunk no longer exists. The image's data lies in
	// buf (which the source fills in, allocating what it lacks) until the
	// next ChunkImage with buf.
	ChunkImage(id uint64, buf *chunkread.ImageBuffers) (chunkread.Image, error)
	// AppliedIndex is the highest log index the state machines applied.
	AppliedIndex() uint64
	// CommitIndex is the highest log index known committed: LogEntry reads
	// up to it.
	CommitIndex() uint64
	// ReadBarrier returns an applied index at or above the index of every
	// write the copyset acknowledged before the call
	// (copyset.Node.ReadBarrier); an error when this replica cannot tell
	// (it does not lead the copyset).
	ReadBarrier(ctx context.Context) (uint64, error)
	// LogEntry reads a committed entry (copyset.Node.LogEntry: errors wrap
	// copyset.ErrLogCompacted below the retained log and
	// copyset.ErrLogBeyondLast above the commit index).
	LogEntry(index uint64) (copyset.LogEntry, error)
	// PinLog holds the log from index on (copyset.Node.PinLog).
	PinLog(holder string, index uint64) (LogPin, error)
	// Materialize returns the data a clone chunk created with location
	// reads (for a CREATE_CLONE op of the binlog), size bytes.
	Materialize(ctx context.Context, location string, size uint32) ([]byte, error)
	// WriteFenced reports whether the chunk op of owner ("": a client's)
	// at log index was refused by a write fence at apply (an export holds
	// only the ops that changed the copyset); valid up to AppliedIndex.
	WriteFenced(index uint64, owner string) (holder string, refused bool)
}

// Packet is one packet of an export, as handed to the sender.
type Packet struct {
	// Start and Next are the points the packet covers, [Start, Next).
	Start, Next *dspb.SyncPoint
	// Count is the number of records.
	Count uint64
	// Data is the exportfmt-encoded packet; nil for a heartbeat (Count 0,
	// Start equal to Next, not Finished). It is the sender's until send
	// returns: the export encodes its next packet into the same buffer,
	// so a sender that keeps the bytes must copy them.
	Data []byte
	// Finished marks the last packet of a kFull export. It is never a
	// heartbeat, even with Start equal to Next (a kFull export whose binlog
	// phase has no entry to export).
	Finished bool
	// BinlogStart is the first log index of the binlog phase: the pinned
	// applied index + 1 of the snapshot phase, or (an export starting at a
	// binlog point with binlogStart 0) that point's index. The caller
	// replicates it with the sub-task's first packet (Advance.binlog_start).
	BinlogStart uint64
	// StartStateMs is when the export's starting state was taken (the
	// header's start_state_ms), 0 when unknown; replicated with
	// BinlogStart.
	StartStateMs int64
	// CoveredMs is, for a binlog-phase packet or heartbeat, a time before
	// which every write the copyset acknowledged is at or below
	// CoveredIndex (0: not known).
	CoveredMs int64
	// CoveredIndex is, for a binlog-phase packet, Next's index - 1; for a
	// binlog-phase heartbeat, the last index of the entries after Start's
	// index - 1 that the export read and found without a chunk op (Start's
	// index - 1 when none): the export holds every chunk op up to it. 0
	// elsewhere.
	CoveredIndex uint64
	// WrittenAtMs is when the export built the packet or heartbeat, Unix
	// ms (the header's written_at_ms).
	WrittenAtMs int64
}

// ExportOptions configure Export.
type ExportOptions struct {
	// PacketBytes is the target size of a packet (default
	// DefaultPacketBytes, at most 16 MiB): records are added to a packet
	// while it stays under it. A chunk never spans packets and neither does
	// a log entry, so one chunk (or entry) bigger than it makes a bigger
	// packet.
	PacketBytes int
	// Mode is the sub-task's mode.
	Mode dspb.SyncMode
	// BinlogEnd is a kFull export's last log index to export; 0 until
	// known: the binlog phase then sets it to the commit index when it
	// begins and calls OnBinlogEnd before its first packet.
	BinlogEnd uint64
	// OnBinlogEnd is told the binlog end a kFull export chose (the caller
	// replicates it, SetBinlogEnd); its error stops Export. May be nil.
	OnBinlogEnd func(ctx context.Context, end uint64) error
	// StartStateMs is the stored start time (Packet.StartStateMs) of an
	// export that goes on from a snapshot or binlog point: the packets
	// carry it. An export from the very start takes its own.
	StartStateMs int64
	// Holder names the log pin (default "sync export <pool>/<copyset>").
	Holder string
	// Idle is the heartbeat period of a tailing export (kFullAndContinuous,
	// kIncrementalByTimestamp): an empty packet is sent when nothing was
	// sent for Idle (default DefaultIdle); and of any export waiting at
	// Gate.
	Idle time.Duration
	// Linger is how long a tailing export keeps a binlog packet that is not
	// full open for more entries once it has caught up (default
	// DefaultLinger; negative: send at once).
	Linger time.Duration
	// Gate, when set, bounds the snapshot phases run at once (the
	// server's): the phase waits for a slot, sending a heartbeat every
	// Idle meanwhile, and reuses the buffers the gate hands on.
	Gate *SnapshotGate
	// ExportID is the export's id, in every packet's header (export_id);
	// "" for a sub-task created before export ids.
	ExportID string
}

func (o ExportOptions) withDefaults(src Source) ExportOptions {
	if o.PacketBytes <= 0 {
		o.PacketBytes = DefaultPacketBytes
	}
	o.PacketBytes = min(o.PacketBytes, maxPacketBytes)
	if o.Holder == "" {
		o.Holder = fmt.Sprintf("sync export %d/%d", src.Pool(), src.Copyset())
	}
	if o.Idle <= 0 {
		o.Idle = DefaultIdle
	}
	if o.Linger == 0 {
		o.Linger = DefaultLinger
	}
	return o
}

// Export exports copyset src from point from on, handing each packet to
// send in point order; it stops at the first error of send (returned as
// is), when a kFull export has sent its Finished packet (nil), or when ctx
// ends (ctx.Err(), the only way a tailing export ends). Its other errors
// name the copyset and the point it started from; those wrapping
// ErrLogGone or a *copyset.LogPinCappedError (the retention bound moved
// the pin) mean the sub-task cannot go on.
//
// From the very start or a kSNAPSHOT point (modes kFull and
// kFullAndContinuous) it exports the snapshot phase, then the binlog
// phase from binlogStart. At the very start binlogStart is ignored: the
// export pins the log at the applied index + 1, which becomes the binlog
// start (Packet.BinlogStart); from a kSNAPSHOT point (a resumed export)
// binlogStart is the stored one, and the log must still reach back to it
// (else an error wrapping ErrLogGone). From a kBINLOG point it exports the
// binlog phase only (kIncrementalByTimestamp: from FirstIndexAtOrAfter's
// index; it tails the log like kFullAndContinuous). Every record of a
// chunk comes from one chunkread.Image, so a chunk never spans packets and
// snapshot points always have offset 0. The log pin is advanced as
// packets are sent and released on return.
func Export(ctx context.Context, src Source, from *dspb.SyncPoint, binlogStart uint64, opts ExportOptions,
	send func(ctx context.Context, p Packet) error) error {
	opts = opts.withDefaults(src)
	at, err := exportfmt.ParsePoint(from)
	if err != nil {
		return fmt.Errorf("sync export of copyset %d/%d: %w", src.Pool(), src.Copyset(), err)
	}
	e := &exporter{src: src, opts: opts, binlogStart: binlogStart, startStateMs: opts.StartStateMs}
	e.send = func(ctx context.Context, p Packet) error {
		if err := send(ctx, p); err != nil {
			e.sendErr = err
			return err
		}
		return nil
	}
	defer e.release()
	err = e.run(ctx, at)
	switch {
	case err == nil:
		return nil
	case e.sendErr != nil:
		return e.sendErr
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return ctx.Err()
	}
	return fmt.Errorf("sync export of copyset %d/%d from %v: %w", src.Pool(), src.Copyset(), at, err)
}

// exporter is one run of Export.
type exporter struct {
	src         Source
	opts        ExportOptions
	send        func(ctx context.Context, p Packet) error
	pin         LogPin
	binlogStart uint64
	// startStateMs is when the starting state at binlogStart - 1 was
	// taken (Packet.StartStateMs).
	startStateMs int64
	// cover is what the binlog phase knows of the writes acknowledged so
	// far (Packet.CoveredMs).
	cover   coverage
	sendErr error // the error send returned, which stopped the export
	// images holds the buffers of the images in the packet being built,
	// spare those free for the next images.
	images, spare []*chunkread.ImageBuffers
	// scratch is the buffer the last packet was encoded in, which the next
	// one reuses (send returned: it is done with it). After a failed send
	// it is dropped: the transport may still hold it.
	scratch []byte
	// slot is the gate's slot the snapshot phase holds, nil without one.
	slot *snapshotBuffers
}

func (e *exporter) release() {
	e.leave()
	if e.pin != nil {
		e.pin.Release()
	}
}

func (e *exporter) run(ctx context.Context, at exportfmt.Point) error {
	mode := e.opts.Mode
	switch mode {
	case dspb.SyncMode_kFull, dspb.SyncMode_kFullAndContinuous, dspb.SyncMode_kIncrementalByTimestamp:
	default:
		return fmt.Errorf("unknown sync mode %d", int32(mode))
	}
	if at.Phase == exportfmt.PhaseBinlog {
		if e.binlogStart == 0 {
			e.binlogStart = at.Index
		}
		if err := e.pinAt(at.Index); err != nil {
			return err
		}
		return e.binlog(ctx, at.Index)
	}
	if mode == dspb.SyncMode_kIncrementalByTimestamp {
		return fmt.Errorf("a %v export has no snapshot phase: it starts at a binlog point", mode)
	}
	if at.Phase == exportfmt.PhaseStart {
		// Through the gate first: the binlog start is the applied index
		// + 1 once the phase may run (the sync machine's log hold keeps
		// the log from the sub-task's creation on meanwhile).
		if err := e.enter(ctx, at); err != nil {
			return err
		}
		if err := e.pinApplied(); err != nil {
			return err
		}
	} else {
		if at.Offset != 0 {
			return fmt.Errorf("snapshot point with offset %d: an export cuts packets at chunk boundaries (offset 0) only", at.Offset)
		}
		if e.binlogStart == 0 {
			return errors.New("a resumed snapshot phase needs the sub-task's binlog start (0 given)")
		}
		// A new leader may not have applied what the old one had when it
		// pinned: wait, so that every image reflects the ops before the
		// binlog start.
		if err := waitFor(ctx, func() bool { return e.src.AppliedIndex()+1 >= e.binlogStart }); err != nil {
			return fmt.Errorf("wait for applied index %d: %w", e.binlogStart-1, err)
		}
		// Pinned before the gate: the binlog start is fixed, and the log
		// must not go while the phase waits.
		if err := e.pinAt(e.binlogStart); err != nil {
			return err
		}
		if err := e.enter(ctx, at); err != nil {
			return err
		}
	}
	err := e.snapshot(ctx, at)
	// A tailing export lives on in the binlog phase: it does not keep the
	// snapshot phase's chunk-sized buffers.
	e.leave()
	if err != nil {
		return err
	}
	return e.binlog(ctx, e.binlogStart)
}

// enter waits at the gate (ExportOptions.Gate) for the snapshot phase
// from at, sending a heartbeat at at every Idle meanwhile, and takes the
// buffers the gate hands on.
func (e *exporter) enter(ctx context.Context, at exportfmt.Point) error {
	g := e.opts.Gate
	if g == nil {
		return nil
	}
	for {
		b, err := g.acquire(ctx, e.opts.Idle)
		if err != nil {
			return err
		}
		if b != nil {
			e.slot, e.spare, e.scratch = b, b.spare, b.scratch
			return nil
		}
		if err := e.send(ctx, Packet{Start: at.Proto(), Next: at.Proto(), BinlogStart: e.binlogStart, StartStateMs: e.startStateMs,
			WrittenAtMs: time.Now().UnixMilli()}); err != nil {
			return err
		}
	}
}

// leave ends the snapshot phase: its buffers go back to the gate with its
// slot, or (no gate) to the collector.
func (e *exporter) leave() {
	slot := e.slot
	if slot != nil {
		slot.spare, slot.scratch = append(e.spare, e.images...), e.scratch
	}
	// Before the release: an idle gate collects, and the buffers must not
	// be live through the exporter then.
	e.slot, e.images, e.spare, e.scratch = nil, nil, nil, nil
	if slot != nil {
		e.opts.Gate.release(slot)
	}
}

// pinApplied pins the log at the applied index + 1, the binlog start of a
// new snapshot phase, and takes the time of that starting state: the
// clock once the applied index was read, by when every op up to it was
// applied, and so appended. A compaction racing the pin (the applied index
// moved and a snapshot truncated past it) is retried with the new applied
// index.
func (e *exporter) pinApplied() error {
	var err error
	for range 5 {
		i := e.src.AppliedIndex()
		if e.pin, err = e.src.PinLog(e.opts.Holder, i+1); err == nil {
			e.binlogStart, e.startStateMs = i+1, time.Now().UnixMilli()
			return nil
		}
		if !errors.Is(err, copyset.ErrLogCompacted) {
			break
		}
	}
	return fmt.Errorf("pin the log at the applied index: %w", err)
}

// pinAt pins the log at index, where the export goes on.
func (e *exporter) pinAt(index uint64) error {
	pin, err := e.src.PinLog(e.opts.Holder, index)
	if errors.Is(err, copyset.ErrLogCompacted) {
		return fmt.Errorf("%w: the export must go on from log index %d, which this replica no longer holds (%w)",
			ErrLogGone, index, err)
	}
	if err != nil {
		return fmt.Errorf("pin the log at index %d: %w", index, err)
	}
	e.pin = pin
	return nil
}

// emit encodes and sends the packet [start, next) of records. A
// binlog-phase packet carries the time before which every acknowledged
// write is in it or before it (coverage.upTo); every packet the export's
// id and the time it was built.
func (e *exporter) emit(ctx context.Context, start, next exportfmt.Point, records []*syncpb.Record, finished bool) error {
	var coveredMs int64
	var coveredIndex uint64
	if start.Phase == exportfmt.PhaseBinlog {
		coveredIndex = next.Index - 1
		coveredMs = e.cover.upTo(coveredIndex)
	}
	written := time.Now().UnixMilli()
	hdr := &syncpb.PacketHeader{LogicPoolId: e.src.Pool(), CopysetId: e.src.Copyset(),
		StartPoint: start.Proto(), NextPoint: next.Proto(), Finished: finished, BinlogStart: e.binlogStart,
		StartStateMs: e.startStateMs, CoveredMs: coveredMs, ExportId: e.opts.ExportID, WrittenAtMs: written}
	data, buf, err := exportfmt.EncodeInto(e.scratch, hdr, records)
	if err != nil {
		return err
	}
	e.scratch = nil // not reused unless send is done with it
	if err := e.send(ctx, Packet{Start: start.Proto(), Next: next.Proto(), Count: uint64(len(records)),
		Data: data, Finished: finished, BinlogStart: e.binlogStart, StartStateMs: e.startStateMs,
		CoveredMs: coveredMs, CoveredIndex: coveredIndex, WrittenAtMs: written}); err != nil {
		return err
	}
	e.scratch = buf
	return nil
}

// snapshot exports the snapshot phase from at (the start or a snapshot
// point of offset 0) to the binlog start.
func (e *exporter) snapshot(ctx context.Context, at exportfmt.Point) error {
	ids := e.src.ListChunks()
	if at.Phase == exportfmt.PhaseSnapshot {
		ids = ids[sort.Search(len(ids), func(i int) bool { return ids[i] >= at.Chunk }):]
	}
	start := at
	var records []*syncpb.Record
	size := 0
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return err
		}
		img, err := e.src.ChunkImage(id, e.imageBuffers())
		if errors.Is(err, chunkread.ErrChunkGone) {
			e.spare = append(e.spare, e.images[len(e.images)-1])
			e.images = e.images[:len(e.images)-1]
			continue // the binlog deletes it (or creates it again)
		}
		if err != nil {
			return fmt.Errorf("image of chunk %d: %w", id, err)
		}
		recs, err := imageRecords(id, img)
		if err != nil {
			return err
		}
		n := recordsSize(recs)
		if len(records) > 0 && size+n > e.opts.PacketBytes {
			next := exportfmt.SnapshotPoint(id, 0)
			if err := e.emit(ctx, start, next, records, false); err != nil {
				return err
			}
			e.sent()
			start, records, size = next, nil, 0
		}
		records = append(records, recs...)
		size += n
	}
	return e.emit(ctx, start, exportfmt.BinlogPoint(e.binlogStart), records, false)
}

// imageBuffers returns buffers for the next image of the packet being
// built: spare ones when there are.
func (e *exporter) imageBuffers() *chunkread.ImageBuffers {
	var b *chunkread.ImageBuffers
	if n := len(e.spare); n > 0 {
		b, e.spare = e.spare[n-1], e.spare[:n-1]
	} else {
		b = &chunkread.ImageBuffers{}
	}
	e.images = append(e.images, b)
	return b
}

// sent frees the image buffers of the packet just sent: all but the last
// image's, which was read for the next packet.
func (e *exporter) sent() {
	last := len(e.images) - 1
	e.spare = append(e.spare, e.images[:last]...)
	e.images = append(e.images[:0], e.images[last])
}

// imageRecords returns the records of chunk id's image: snapshot records
// for its runs of non-zero blocks (one zero_length record for a chunk all
// zero, so that it exists), then COW snapshot records for the runs of
// blocks copied into its snapshot (one with no data for a snapshot with
// none copied). The records alias the image's buffers.
func imageRecords(id uint64, img chunkread.Image) ([]*syncpb.Record, error) {
	bs := int(img.BlockSize)
	switch {
	case img.ID != id:
		return nil, fmt.Errorf("image of chunk %d is of chunk %d", id, img.ID)
	case bs == 0 || len(img.Data) == 0 || len(img.Data)%bs != 0 || len(img.Data) > math.MaxUint32:
		return nil, fmt.Errorf("image of chunk %d: %d bytes of data are not whole blocks of %d", id, len(img.Data), bs)
	case img.SnapSn != 0 && (len(img.SnapData) != len(img.Data) || len(img.SnapCopied) != len(img.Data)/bs):
		return nil, fmt.Errorf("image of chunk %d: snapshot of %d bytes and %d block marks for %d bytes of data",
			id, len(img.SnapData), len(img.SnapCopied), len(img.Data))
	}
	blocks := len(img.Data) / bs
	zero := make([]byte, bs)
	var out []*syncpb.Record
	eachRun(blocks, func(i int) bool { return !bytes.Equal(img.Data[i*bs:(i+1)*bs], zero) }, func(a, b int) {
		out = append(out, &syncpb.Record{Kind: &syncpb.Record_Snapshot{Snapshot: &syncpb.SnapshotRecord{
			ChunkId: id, Sn: img.Sn, CorrectedSn: img.CorrectedSn, Offset: uint32(a * bs),
			Data: img.Data[a*bs : b*bs], AsOfIndex: img.Index, AsOfOp: img.Op}}})
	})
	if len(out) == 0 {
		out = append(out, &syncpb.Record{Kind: &syncpb.Record_Snapshot{Snapshot: &syncpb.SnapshotRecord{
			ChunkId: id, Sn: img.Sn, CorrectedSn: img.CorrectedSn, ZeroLength: uint32(len(img.Data)), AsOfIndex: img.Index, AsOfOp: img.Op}}})
	}
	if img.SnapSn == 0 {
		return out, nil
	}
	cow := func(a, b int) {
		out = append(out, &syncpb.Record{Kind: &syncpb.Record_CowSnapshot{CowSnapshot: &syncpb.CowSnapshotRecord{
			ChunkId: id, SnapshotSn: img.SnapSn, Offset: uint32(a * bs), Data: img.SnapData[a*bs : b*bs], AsOfIndex: img.Index, AsOfOp: img.Op}}})
	}
	n := len(out)
	eachRun(blocks, func(i int) bool { return img.SnapCopied[i] }, cow)
	if len(out) == n {
		cow(0, 0)
	}
	return out, nil
}

// eachRun calls run(a, b) for every maximal run [a, b) of [0, n) where in
// holds, in order.
func eachRun(n int, in func(i int) bool, run func(a, b int)) {
	for i := 0; i < n; {
		if !in(i) {
			i++
			continue
		}
		j := i + 1
		for j < n && in(j) {
			j++
		}
		run(i, j)
		i = j
	}
}

// recordsSize is the encoded size of records in a body.
func recordsSize(records []*syncpb.Record) int {
	n := 0
	for _, r := range records {
		s := proto.Size(r)
		n += protowire.SizeTag(1) + protowire.SizeBytes(s)
	}
	return n
}

// waitFor polls cond every pollInterval until it holds or ctx ends.
func waitFor(ctx context.Context, cond func() bool) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
