package restore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/chunkraft/chunkraft/datasync/dest"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/internal/objstore"
	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
)

// A resumed restore goes on from where an earlier restore left a copyset
// (Options.ResumeFrom): the restore marker that restore wrote (--marker)
// says which export it replayed, the index it stopped at, where in the
// export the next record is, which chunks are still clone chunks and the
// restored copyset's digest. The resumed restore replays the export from
// that record on into the same target copyset, provided the copyset is
// still what the restore left (its digest) and the export is the one the
// restore read and still holds that record's packet. That is also how a
// purged export (exportfmt.PurgeName) restores the range it kept: onto a
// copyset restored before the purge, from a packet the purge kept.

// purgeRecord is copyset (pool, cs)'s purge record, nil when it has
// none.
func purgeRecord(ctx context.Context, src dest.Dest, pool, cs uint32) (*syncpb.PurgeRecord, error) {
	name := exportfmt.PurgeName(pool, cs)
	b, err := src.Get(ctx, name)
	switch {
	case errors.Is(err, objstore.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	r, err := exportfmt.DecodePurge(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return r, nil
}

// purgedText says what purge record r of copyset (pool, cs) records.
func purgedText(pool, cs uint32, r *syncpb.PurgeRecord) string {
	first, _ := exportfmt.ParsePoint(r.GetFirstKept())
	return fmt.Sprintf("the export's first %d packets, every one before %s, were purged (by %s at %s)",
		r.GetPackets(), exportfmt.PacketName(pool, cs, first), r.GetBy(), time.UnixMilli(r.GetPurgedAtMs()).UTC().Format(time.RFC3339))
}

// checkPurged refuses a copyset whose first packets were purged: what is
// left starts past the chunk images a restore from the start needs.
func checkPurged(ctx context.Context, src dest.Dest, pool, cs uint32) error {
	r, err := purgeRecord(ctx, src, pool, cs)
	if err != nil || r == nil {
		return err
	}
	return fmt.Errorf("%s: a restore replays a copyset from its start, so this export cannot be restored from it; restore from an export that holds them, or go on from the restore marker of a restore made before the purge (--resume-from)",
		purgedText(pool, cs, r))
}

// readMarkers reads the restore marker of each copyset ids from o's
// ResumeFrom and checks it against the restore: into o.ToPool, with the
// export of all (copyset -> packet names) holding its next record's
// packet. It returns the markers, and cuts each copyset's names in all to
// those from that packet on (none when the export has not written it yet).
func readMarkers(ctx context.Context, o *Options, ids []uint32, all map[uint32][]string) (map[uint32]*syncpb.RestoreMarker, error) {
	if o.Digests == nil {
		return nil, errors.New("restore: a resumed restore needs the target's digests")
	}
	if o.HasUntilTime {
		return nil, errors.New("--until-time cannot go with --resume-from: the restore marker does not say when its last record was appended; give --until-index")
	}
	out := make(map[uint32]*syncpb.RestoreMarker, len(ids))
	for _, cs := range ids {
		m, err := ReadMarker(ctx, o.ResumeFrom, o.Pool, cs)
		if err != nil {
			return nil, err
		}
		if m.GetToPool() != o.ToPool {
			return nil, fmt.Errorf("copyset %d/%d: the restore marker at %s is of a restore into pool %d, not pool %d", o.Pool, cs, o.ResumeFrom, m.GetToPool(), o.ToPool)
		}
		if m.GetDigest() == "" {
			return nil, fmt.Errorf("copyset %d/%d: the restore marker at %s has no digest of the restored copyset", o.Pool, cs, o.ResumeFrom)
		}
		names, err := resumeNames(ctx, o.Source, o.Pool, cs, all[cs], m)
		if err != nil {
			return nil, fmt.Errorf("copyset %d/%d: %w", o.Pool, cs, err)
		}
		all[cs] = names
		out[cs] = m
	}
	return out, nil
}

// resumeNames is the part of names (copyset cs's packets, in name order)
// a restore resumed from marker m replays: from the packet of m's next
// point on. The export must hold that packet or, when it has not written
// it yet, end right at it.
func resumeNames(ctx context.Context, src dest.Dest, pool, cs uint32, names []string, m *syncpb.RestoreMarker) ([]string, error) {
	next, err := exportfmt.ParsePoint(m.GetNextPoint())
	if err != nil {
		return nil, fmt.Errorf("restore marker: %w", err)
	}
	want := exportfmt.PacketName(pool, cs, next)
	i, found := slices.BinarySearch(names, want)
	if found {
		return names[i:], nil
	}
	where := fmt.Sprintf("packet %s, where the restore marker's next record is (the restore stopped at index %d)", want, m.GetUntilIndex())
	if i < len(names) {
		r, err := purgeRecord(ctx, src, pool, cs)
		if err != nil {
			return nil, err
		}
		if first, perr := exportfmt.ParsePoint(r.GetFirstKept()); r != nil && perr == nil && exportfmt.PacketName(pool, cs, first) > want {
			return nil, fmt.Errorf("%s: the export no longer holds %s, so it cannot go on from that restore", purgedText(pool, cs, r), where)
		}
		return nil, fmt.Errorf("the export has no %s, but has %s after it: it is not the export the restore read, or it has a gap", where, names[i])
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("the export has no packets, not even %s", where)
	}
	last := names[len(names)-1]
	_, _, end, err := exportfmt.ReadHead(ctx, src, last)
	if err != nil {
		return nil, fmt.Errorf("packet %s: %w", last, err)
	}
	if end.Compare(next) != 0 || m.GetNextRecord() != 0 {
		return nil, fmt.Errorf("the export's last packet, %s, leads to %s, not to the restore marker's next point %s (record %d)", last, end, next, m.GetNextRecord())
	}
	return nil, nil // nothing after the restored state yet
}

// checkResumed checks that each target copyset of markers is still what
// the restore that wrote its marker left: the same digest.
func checkResumed(ctx context.Context, o *Options, markers map[uint32]*syncpb.RestoreMarker) error {
	ids := make([]uint32, 0, len(markers))
	for cs := range markers {
		ids = append(ids, cs)
	}
	slices.Sort(ids)
	got, err := o.Digests(ctx, o.ToPool, ids)
	if err != nil {
		return fmt.Errorf("the digests of the target copysets: %w", err)
	}
	for _, cs := range ids {
		d, ok := got[cs]
		switch {
		case !ok:
			return fmt.Errorf("target copyset %d/%d: no digest", o.ToPool, cs)
		case d != markers[cs].GetDigest():
			return fmt.Errorf("target copyset %d/%d has digest %s, its restore marker says %s: it changed since that restore (or is not the copyset restored); a resumed restore goes on only from the state the restore left",
				o.ToPool, cs, d, markers[cs].GetDigest())
		}
	}
	return nil
}

// seedClones gives the lanes the clone chunks of marker m, each to the
// lane its chunk's ops go to (chunk id modulo the lanes).
func seedClones(m *syncpb.RestoreMarker, g Geometry, lanes []*lane) {
	for _, c := range m.GetClones() {
		l := lanes[c.GetChunkId()%uint64(len(lanes))]
		l.rp.Clones[c.GetChunkId()] = CloneFromBitmap(c.GetSn(), c.GetCorrectedSn(), g.blocks(), c.GetWritten())
	}
}

// checkResume is check for a copyset resumed from p.resume: p.names are
// the packets from the one of the marker's next record on.
func checkResume(ctx context.Context, src dest.Dest, free *scratchList, p *plan, u until, progress func(pkt *exportfmt.Packet)) error {
	m := p.resume
	next, err := exportfmt.ParsePoint(m.GetNextPoint())
	if err != nil {
		return fmt.Errorf("restore marker: %w", err)
	}
	if next.Phase != exportfmt.PhaseBinlog {
		return fmt.Errorf("the restore marker's next point %s is not a binlog point", next)
	}
	chain := exportfmt.NewChain(p.pool, p.copyset)
	sc := free.get()
	defer free.put(sc)
	p.reach = next.Index - 1
	var read []packetSum
	for i, name := range p.names {
		pkt, err := readPacket(ctx, src, chain, name, &sc.pkt)
		if err != nil {
			return err
		}
		if pkt.Start.Phase != exportfmt.PhaseBinlog {
			return &exportfmt.BadPacketError{Name: name, Err: fmt.Errorf("a snapshot-phase packet (%v) after the restore marker's next point %s", pkt.Start, next)}
		}
		if i == 0 {
			if id := pkt.Header.GetExportId(); id != m.GetExportId() {
				return fmt.Errorf("the export is export %s, the restore marker's is %s (%s): a restore goes on only in the export it read",
					exportfmt.ExportIDString(id), exportfmt.ExportIDString(m.GetExportId()), m.GetExport())
			}
			if n := int(m.GetNextRecord()); n > len(pkt.Records) || n > 0 && n == len(pkt.Records) {
				return fmt.Errorf("packet %s has %d records; the restore marker's next record is record %d of it", name, len(pkt.Records), n)
			}
			p.binlogStart = pkt.Header.GetBinlogStart()
		}
		p.bytes += uint64(pkt.Size)
		p.records += uint64(len(pkt.Records))
		read = append(read, packetSum{crc: pkt.Header.BodyCrc32C, size: uint64(pkt.Size)})
		for _, r := range pkt.Records {
			bl := r.GetBinlog()
			if err := CheckBinlog(free.g, bl); err != nil {
				return &exportfmt.BadPacketError{Name: name, Err: fmt.Errorf("binlog record at index %d: %w", bl.Index, err)}
			}
		}
		if progress != nil {
			progress(pkt)
		}
	}
	if end, ok := chain.Next(); ok {
		p.reach = end.Index - 1
		if err := checkManifest(ctx, src, p.pool, p.copyset, p.names, read, chain.ExportID(), true); err != nil {
			return err
		}
	}
	p.until = p.reach
	if u.hasIndex {
		p.until = u.index
	}
	switch {
	case p.until > p.reach:
		return fmt.Errorf("--until-index %d is past the end of the export, raft index %d", p.until, p.reach)
	case p.until < m.GetUntilIndex():
		return fmt.Errorf("index %d cannot be restored by going on from the restore marker: its restore left the copyset at index %d", p.until, m.GetUntilIndex())
	}
	return nil
}
