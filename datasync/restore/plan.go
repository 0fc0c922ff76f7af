package restore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/chunkraft/chunkraft/datasync/dest"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
	chunkserverpb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// ExportCopysets lists the packets of every copyset of pool in src: copyset
// id -> packet names in name order. Objects that are not packets of a
// copyset of pool (the manifests, anything else) are left out.
func ExportCopysets(ctx context.Context, src dest.Dest, pool uint32) (map[uint32][]string, error) {
	infos, err := src.List(ctx, exportfmt.PoolPrefix(pool))
	if err != nil {
		return nil, fmt.Errorf("list the export: %w", err)
	}
	out := map[uint32][]string{}
	for _, info := range infos {
		if !strings.HasSuffix(info.Name, exportfmt.PacketSuffix) {
			continue
		}
		rest := strings.TrimPrefix(info.Name, exportfmt.PoolPrefix(pool))
		elem, _, ok := strings.Cut(rest, "/")
		digits, isCopyset := strings.CutPrefix(elem, "copyset-")
		if !ok || !isCopyset {
			continue
		}
		var cs uint32
		if _, err := fmt.Sscan(digits, &cs); err != nil || fmt.Sprint(cs) != digits {
			continue
		}
		out[cs] = append(out[cs], info.Name)
	}
	for _, names := range out {
		slices.Sort(names)
	}
	return out, nil
}

// plan is what the check pass learned of one copyset's export.
type plan struct {
	pool, copyset uint32
	names         []string
	// full: the export starts at the start (it has a snapshot phase).
	full bool
	// binlogStart is the first raft index of the binlog phase.
	binlogStart uint64
	// reach is the last raft index the export covers.
	reach uint64
	// maxAsOf is the largest as_of_index of the snapshot phase (0: none),
	// maxAsOfChunk the chunk that has it.
	maxAsOf, maxAsOfChunk uint64
	// startStateMs is the first packet's start_state_ms: when the export's
	// starting state was taken (0: the export does not say).
	startStateMs int64
	// firstMs is the appended_at_ms of the first binlog record at or after
	// index max(binlogStart, maxAsOf) that has one, firstIndex its index (0:
	// none): a time at or after it picks a restorable index.
	firstMs    int64
	firstIndex uint64
	// until is the last raft index to restore.
	until uint64
	// bytes and records count the packets' sizes and records.
	bytes, records uint64
	// resume is the restore marker the copyset goes on from (nil: it is
	// restored from the start of the export).
	resume *syncpb.RestoreMarker
}

func (p *plan) String() string { return fmt.Sprintf("copyset %d/%d", p.pool, p.copyset) }

// earliest is the earliest raft index the export restores exactly: for a
// resumed restore, where the restore marker left the copyset.
func (p *plan) earliest() uint64 {
	if p.resume != nil {
		return p.resume.GetUntilIndex()
	}
	return max(p.maxAsOf, p.binlogStart-1)
}

// earliestTime is the earliest --until-time the export restores exactly
// (Unix ms), why it is that one, and false when there is none to tell.
//
// A time T restores the ops appended at or before T. With the start time
// recorded (start_state_ms), every op up to binlogStart-1 was appended by
// then, so T at or after it is exact, provided the index T picks is at
// least maxAsOf: when a chunk was imaged after the start, T must also
// reach the record at maxAsOf. Without it (an export written before the
// field existed), nothing says when the ops before the binlog phase were
// appended, except that they came before every binlog record: T must
// reach a binlog record at or after the earliest index.
func (p *plan) earliestTime() (int64, string, bool) {
	images := fmt.Sprintf("its snapshot phase read chunk %d as of index %d", p.maxAsOfChunk, p.maxAsOf)
	switch {
	case p.startStateMs != 0 && p.maxAsOf < p.binlogStart:
		return p.startStateMs, fmt.Sprintf("when its starting state, index %d, was taken", p.binlogStart-1), true
	case p.firstMs == 0:
		return 0, "", false
	case p.startStateMs != 0:
		return max(p.startStateMs, p.firstMs), fmt.Sprintf("when the binlog record at index %d was appended (%s)", p.firstIndex, images), true
	}
	why := fmt.Sprintf("when its first binlog record, at index %d, was appended", p.firstIndex)
	if p.maxAsOf >= p.binlogStart {
		why = fmt.Sprintf("when the binlog record at index %d was appended (%s)", p.firstIndex, images)
	}
	return p.firstMs, why + "; the export does not record when its starting state was taken (it was written before exports recorded it), so only a time at or after one of its binlog records can be restored", true
}

// untilTimeString shows a --until-time value in both forms the flag takes.
func untilTimeString(ms int64) string {
	return fmt.Sprintf("%s (Unix ms %d)", time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00"), ms)
}

// until is what Options says to restore to.
type until struct {
	index    uint64
	hasIndex bool
	timeMs   int64
	hasTime  bool
}

// readPacket gets and decodes packet name into *buf (grown as needed)
// and adds it to chain. The packet's record data alias *buf
// (exportfmt.DecodeAlias): the caller reads the next packet into the same
// buffer only once it is done with this one's records, or sets *buf to
// nil to leave the bytes to them. A reader of many 16 MiB packets so
// allocates (and the kernel faults in) no 16 MiB twice.
func readPacket(ctx context.Context, src dest.Dest, chain *exportfmt.Chain, name string, buf *[]byte) (*exportfmt.Packet, error) {
	b, err := src.GetInto(ctx, name, *buf)
	if err != nil {
		return nil, fmt.Errorf("read packet %s: %w", name, err)
	}
	*buf = b
	pkt, err := exportfmt.DecodeAlias(b)
	if err != nil {
		return nil, &exportfmt.BadPacketError{Name: name, Err: err}
	}
	if err := chain.AddPacket(name, pkt); err != nil {
		return nil, err
	}
	return pkt, nil
}

// check reads every packet of copyset cs (names, in name order), checks
// it and the chain, and fixes the until point (see the package
// documentation). progress is called after each packet.
//
// A copyset resumed from restore marker resume (names: the packets from
// its next record's on) is checked from there: the packets must be of the
// marker's export, the first must hold the marker's next record, and the
// until point is at or after where the marker left the copyset. The
// packets an earlier restore replayed may be purged.
func check(ctx context.Context, src dest.Dest, free *scratchList, pool, cs uint32, names []string, u until, resume *syncpb.RestoreMarker, progress func(pkt *exportfmt.Packet)) (*plan, error) {
	p := &plan{pool: pool, copyset: cs, names: names, resume: resume}
	if resume != nil {
		return p, checkResume(ctx, src, free, p, u, progress)
	}
	if err := checkPurged(ctx, src, pool, cs); err != nil {
		return nil, err
	}
	chain := exportfmt.NewChain(pool, cs)
	sc := free.get()
	defer free.put(sc)
	g, ib := free.g, sc.ib
	var timeIndex uint64        // the last binlog record appended at or before u.timeMs
	seen := map[uint64]string{} // snapshot-phase chunk -> its packet
	var read []packetSum        // what each packet is, for the manifest
	for _, name := range names {
		// Each packet into the same buffer: nothing keeps its records.
		pkt, err := readPacket(ctx, src, chain, name, &sc.pkt)
		if err != nil {
			return nil, err
		}
		if chain.Len() == 1 {
			p.startStateMs = pkt.Header.GetStartStateMs()
			switch pkt.Start.Phase {
			case exportfmt.PhaseStart:
				p.full = true
			case exportfmt.PhaseSnapshot:
				return nil, fmt.Errorf("the export starts at packet %s (%v), not at the start: its first packets are missing", name, pkt.Start)
			}
		}
		if pkt.Next.Phase == exportfmt.PhaseBinlog && pkt.Start.Phase != exportfmt.PhaseBinlog {
			p.binlogStart = pkt.Next.Index
		}
		if pkt.Start.Phase == exportfmt.PhaseBinlog && p.binlogStart == 0 {
			p.binlogStart = pkt.Start.Index
		}
		p.bytes += uint64(pkt.Size)
		p.records += uint64(len(pkt.Records))
		read = append(read, packetSum{crc: pkt.Header.BodyCrc32C, size: uint64(pkt.Size)})
		if pkt.Start.Phase == exportfmt.PhaseBinlog {
			for _, r := range pkt.Records {
				bl := r.GetBinlog()
				if err := CheckBinlog(g, bl); err != nil {
					return nil, &exportfmt.BadPacketError{Name: name, Err: fmt.Errorf("binlog record at index %d: %w", bl.Index, err)}
				}
				if u.hasTime && bl.AppendedAtMs <= u.timeMs {
					timeIndex = bl.Index
				}
				// Snapshot-phase packets sort first: maxAsOf is final here.
				if p.firstMs == 0 && bl.AppendedAtMs > 0 && bl.Index >= max(p.binlogStart, p.maxAsOf) {
					p.firstMs, p.firstIndex = bl.AppendedAtMs, bl.Index
				}
			}
		} else {
			for _, grp := range GroupByChunk(pkt.Records) {
				im, err := ib.header(grp.ID, grp.Recs) // the replay builds the data
				if err != nil {
					return nil, &exportfmt.BadPacketError{Name: name, Err: err}
				}
				if prev, ok := seen[im.ID]; ok {
					return nil, &exportfmt.BadPacketError{Name: name, Err: fmt.Errorf("chunk %d has snapshot records in packet %s too: a chunk never spans packets", im.ID, prev)}
				}
				seen[im.ID] = name
				if im.AsOf > p.maxAsOf {
					p.maxAsOf, p.maxAsOfChunk = im.AsOf, im.ID
				}
			}
		}
		if progress != nil {
			progress(pkt)
		}
	}
	end, ok := chain.Next()
	if !ok {
		return nil, errors.New("the export has no packet")
	}
	if err := checkManifest(ctx, src, pool, cs, names, read, chain.ExportID(), false); err != nil {
		return nil, err
	}
	if end.Phase != exportfmt.PhaseBinlog {
		return nil, fmt.Errorf("the export ends in its snapshot phase (packet %s ends at %v): it cannot be restored until the snapshot phase is complete", chain.Last(), end)
	}
	p.reach = end.Index - 1
	switch {
	case u.hasIndex:
		p.until = u.index
	case u.hasTime:
		e, why, ok := p.earliestTime()
		switch {
		case ok && u.timeMs < e:
			return nil, fmt.Errorf("--until-time %s cannot be restored from this export: the earliest time it can restore is %s, %s",
				untilTimeString(u.timeMs), untilTimeString(e), why)
		case !ok && p.startStateMs == 0:
			return nil, fmt.Errorf("--until-time %s cannot be restored from this export: it does not record when its starting state was taken (it was written before exports recorded it) and has no binlog record at or after index %d to tell the time by; restore it without --until-time, or with --until-index",
				untilTimeString(u.timeMs), p.earliest())
		}
		// !ok with a start time: the binlog does not reach the latest
		// image yet, which the index check below reports.
		p.until = max(timeIndex, p.binlogStart-1)
	default:
		p.until = p.reach
	}
	if p.until > p.reach {
		return nil, fmt.Errorf("--until-index %d is past the end of the export, raft index %d (packet %s)", p.until, p.reach, chain.Last())
	}
	if e := p.earliest(); p.until < e {
		why := fmt.Sprintf("its binlog phase starts at index %d", p.binlogStart)
		if p.maxAsOf >= p.binlogStart {
			why = fmt.Sprintf("its snapshot phase read chunk %d as of index %d", p.maxAsOfChunk, p.maxAsOf)
		}
		if u.hasTime {
			last := "no binlog record was appended by then"
			if timeIndex != 0 {
				last = fmt.Sprintf("the last record appended by then is at index %d", timeIndex)
			}
			return nil, fmt.Errorf("--until-time %s cannot be restored from this export: %s, and the earliest index it can restore is %d (%s)", untilTimeString(u.timeMs), last, e, why)
		}
		return nil, fmt.Errorf("index %d cannot be restored from this export: the earliest index it can restore is %d (%s)", p.until, e, why)
	}
	return p, nil
}

// CheckBinlog checks what the replay of a binlog record relies on.
func CheckBinlog(g Geometry, bl *syncpb.BinlogRecord) error {
	op := bl.Op
	switch op.GetOpType() {
	case chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_WRITE:
		n := uint64(len(bl.Data))
		if n == 0 || n%uint64(g.BlockSize) != 0 || op.GetOffset()%g.BlockSize != 0 || uint64(op.GetOffset())+n > uint64(g.ChunkSize) {
			return fmt.Errorf("write of chunk %d: %d bytes at offset %d are not whole %d-byte blocks inside the chunk",
				op.GetChunkId(), n, op.GetOffset(), g.BlockSize)
		}
		if op.GetSn() == 0 {
			return fmt.Errorf("write of chunk %d with sn 0", op.GetChunkId())
		}
	case chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_CREATE_CLONE:
		if n := uint64(len(bl.Data)); n%uint64(g.BlockSize) != 0 || n > uint64(g.ChunkSize) {
			return fmt.Errorf("clone chunk %d: %d bytes of materialised data are not whole %d-byte blocks of the chunk",
				op.GetChunkId(), n, g.BlockSize)
		}
		if op.GetSn() == 0 {
			return fmt.Errorf("clone chunk %d with sn 0", op.GetChunkId())
		}
	case chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_DELETE, chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_DELETE_SNAP,
		chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_PASTE:
	default:
		return fmt.Errorf("op %v of chunk %d is not a replicated chunk op", op.GetOpType(), op.GetChunkId())
	}
	return nil
}

// ChunkRecords are the snapshot-phase records of one chunk.
type ChunkRecords struct {
	ID   uint64
	Recs []*syncpb.Record
}

// GroupByChunk groups snapshot-phase records by chunk, chunks in order of
// first appearance.
func GroupByChunk(recs []*syncpb.Record) []ChunkRecords {
	var out []ChunkRecords
	at := map[uint64]int{}
	for _, r := range recs {
		id := r.GetSnapshot().GetChunkId()
		if c := r.GetCowSnapshot(); c != nil {
			id = c.ChunkId
		}
		i, ok := at[id]
		if !ok {
			i = len(out)
			at[id] = i
			out = append(out, ChunkRecords{ID: id})
		}
		out[i].Recs = append(out[i].Recs, r)
	}
	return out
}

// packetSum is a packet's body CRC and size, as a manifest entry has them.
type packetSum struct {
	crc  uint32
	size uint64
}

// checkManifest compares the copyset's manifest, if it has one, with its
// packets (names, in name order, and their sums): the manifest lists
// packets already written, so every packet it names must be there, the
// same one (its CRC and size) except the last, which a packet resent
// under its name (or the packet after a heartbeat) may have replaced since
// the manifest was written. Packets after the manifest's last are fine (it
// is written after them). A manifest that lists packets missing from the
// export means the export lost its end: restoring what is left would
// silently restore an earlier point. The manifest must be of the packets'
// export (exportID). For a resumed restore (names start past the export's
// first packet), the packets listed before names[0] are not checked: an
// earlier restore replayed them, and a purge may have deleted them.
func checkManifest(ctx context.Context, src dest.Dest, pool, cs uint32, names []string, read []packetSum, exportID string, resumed bool) error {
	name := exportfmt.ManifestName(pool, cs)
	m, err := ReadManifest(ctx, src, pool, cs)
	if err != nil || m == nil {
		return err
	}
	if m.ExportId != exportID {
		return fmt.Errorf("manifest %s is of export %s, the packets of export %s: the copyset holds files of two exports",
			name, exportfmt.ExportIDString(m.ExportId), exportfmt.ExportIDString(exportID))
	}
	at := make(map[string]int, len(names))
	for i, n := range names {
		at[n] = i
	}
	listed := m.Packets
	if resumed { // the packets before names[0] were replayed before (and may be purged)
		for len(listed) > 0 && len(names) > 0 && listed[0].Name < names[0] {
			listed = listed[1:]
		}
	}
	for i, e := range listed {
		last := i == len(listed)-1
		j, ok := at[e.Name]
		switch {
		case !ok:
			return fmt.Errorf("manifest %s lists packet %s, which the export does not have: packets are missing", name, e.Name)
		case j != i:
			return fmt.Errorf("manifest %s lists packet %s as its packet %d, the export has it as its packet %d: packets before it are missing or extra", name, e.Name, i, j)
		case !last && (read[i].crc != e.BodyCrc32C || read[i].size != e.Size):
			return &exportfmt.BadPacketError{Name: e.Name, Err: fmt.Errorf("it is not the packet manifest %s lists (body crc32c %08x, %d bytes; the manifest says %08x, %d bytes)",
				name, read[i].crc, read[i].size, e.BodyCrc32C, e.Size)}
		}
	}
	return nil
}
