package dm

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/datasync/dest"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/datasync/restore"
	"github.com/chunkraft/chunkraft/internal/chunkread"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
)

// Task-mode incremental goes on from where `chunkctl sync restore
// --marker` left a copyset: the restore marker (syncpb.RestoreMarker)
// says which export it replayed, up to which index, where in the export
// the next record is, which chunks are still clone chunks, and the
// restored copyset's digest. A share starts in Sync at that record, with
// those clone chunks, only when the target copyset is still exactly what
// the restore left (its digest, checked by the leader after the task's
// fence is set, so no client write can change it after the check) and the
// task's source is that export (its id, and a packet at the marker's next
// point or a last packet that leads to it). Replaying chunk ops from any
// other point could change their outcome (see datasync/doc.go), so
// anything else is refused.

// markerStart is what a copyset's restore marker gives its Start.
type markerStart struct {
	checkpoint *pb.Checkpoint
	clones     map[uint64]*pb.Clone
	digest     string
	until      uint64
}

// markerStarts reads the restore marker of each target copyset from the
// task's incremental-from and checks it against the task and the source
// export (names: the source copysets' packets). A copyset whose marker is
// missing or does not fit gets an error message instead.
func (s *Service) markerStarts(ctx context.Context, cfg *pb.TaskConfig, targets []copyset.GroupID, names map[uint32][]string) (map[uint32]*markerStart, map[uint32]string, error) {
	at, err := s.openLocation(ctx, cfg.GetIncrementalFrom())
	if err != nil {
		return nil, nil, fmt.Errorf("incremental-from: %w", err)
	}
	defer at.Close()
	src, err := s.openLocation(ctx, sourceOf(cfg))
	if err != nil {
		return nil, nil, fmt.Errorf("source: %w", err)
	}
	defer src.Close()
	starts, bad := map[uint32]*markerStart{}, map[uint32]string{}
	for _, g := range targets {
		ms, err := markerStartOf(ctx, at, src, cfg, g.Copyset(), names[g.Copyset()])
		if err != nil {
			bad[g.Copyset()] = err.Error()
			continue
		}
		starts[g.Copyset()] = ms
	}
	return starts, bad, nil
}

// markerStartOf reads and checks copyset cs's restore marker.
func markerStartOf(ctx context.Context, at, src dest.Dest, cfg *pb.TaskConfig, cs uint32, names []string) (*markerStart, error) {
	pool := cfg.GetSource().GetPool()
	m, err := restore.ReadMarker(ctx, at, pool, cs)
	if err != nil {
		return nil, err
	}
	if m.GetToPool() != cfg.GetTargetPool() {
		return nil, fmt.Errorf("the restore marker is of a restore into pool %d, not target pool %d", m.GetToPool(), cfg.GetTargetPool())
	}
	next, err := exportfmt.ParsePoint(m.GetNextPoint())
	if err != nil {
		return nil, fmt.Errorf("restore marker: %w", err)
	}
	if err := checkMarkerExport(ctx, src, m, next, pool, cs, names); err != nil {
		return nil, err
	}
	out := &markerStart{
		checkpoint: &pb.Checkpoint{Point: m.GetNextPoint(), Record: m.GetNextRecord(), SourceIndex: m.GetLastIndex(), SourceOp: m.GetLastOpPosition()},
		digest:     m.GetDigest(), until: m.GetUntilIndex(),
	}
	for _, c := range m.GetClones() {
		if out.clones == nil {
			out.clones = map[uint64]*pb.Clone{}
		}
		out.clones[c.GetChunkId()] = &pb.Clone{Sn: c.GetSn(), CorrectedSn: c.GetCorrectedSn(), Written: c.GetWritten()}
	}
	if out.digest == "" {
		return nil, errors.New("the restore marker has no digest of the restored copyset")
	}
	return out, nil
}

// checkMarkerExport checks that the source export is the one the marker's
// restore replayed and that it goes on from the marker's next point: it
// has the packet at next (of the marker's export, with the record the
// marker names), or it has not written it yet and its last packet (of the
// marker's export) leads to it.
func checkMarkerExport(ctx context.Context, src dest.Dest, m *syncpb.RestoreMarker, next exportfmt.Point, pool, cs uint32, names []string) error {
	if len(names) == 0 {
		return fmt.Errorf("the source %s has no packets of copyset %d/%d", src, pool, cs)
	}
	name := exportfmt.PacketName(pool, cs, next)
	has := slices.Contains(names, name)
	read := name
	if !has {
		read = names[len(names)-1]
		if read > name {
			return fmt.Errorf("the source %s has no packet %s, where the restore marker's next record is (the restore stopped at index %d), but has %s after it: it is not the export the restore read, or it has a gap",
				src, name, m.GetUntilIndex(), read)
		}
	}
	b, err := src.Get(ctx, read)
	if err != nil {
		return fmt.Errorf("read packet %s of %s: %w", read, src, err)
	}
	pkt, err := exportfmt.Decode(b)
	if err != nil {
		return fmt.Errorf("packet %s of %s: %w", read, src, err)
	}
	if id := pkt.Header.GetExportId(); id != m.GetExportId() {
		return fmt.Errorf("the source %s is export %s, the restore marker's is %s (%s): incremental goes on only in the export the restore read",
			src, exportfmt.ExportIDString(id), exportfmt.ExportIDString(m.GetExportId()), m.GetExport())
	}
	if has {
		if int(m.GetNextRecord()) > len(pkt.Records) || m.GetNextRecord() > 0 && int(m.GetNextRecord()) == len(pkt.Records) {
			return fmt.Errorf("packet %s of %s has %d records; the restore marker's next record is record %d of it", read, src, len(pkt.Records), m.GetNextRecord())
		}
		return nil
	}
	if pkt.Next.Compare(next) != 0 || m.GetNextRecord() != 0 {
		return fmt.Errorf("the last packet of %s, %s, leads to %s, not to the restore marker's next point %s (record %d)", src, read, pkt.Next, next, m.GetNextRecord())
	}
	return nil
}

// checkDigest compares the digest of the store st of copyset g with the
// one a restore marker recorded.
func checkDigest(g copyset.GroupID, st chunkread.Images, want string) error {
	got, n, err := digest(st)
	if err != nil {
		return fmt.Errorf("copyset %d/%d: digest: %w", g.Pool(), g.Copyset(), err)
	}
	if got != want {
		return fmt.Errorf("copyset %d/%d (%d chunks) has digest %s, the restore marker says %s: it changed since the restore (or is not the copyset restored); task-mode incremental goes on only from the state the restore left",
			g.Pool(), g.Copyset(), n, got, want)
	}
	return nil
}
