package exportfmt

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"strconv"

	datasyncpb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
	"google.golang.org/protobuf/proto"
)

// Phase is the part of an export a point is in.
type Phase uint8

const (
	// PhaseStart is the very start of an export: kSNAPSHOT with no pk.
	PhaseStart Phase = iota
	// PhaseSnapshot is a (chunk, byte offset) of the snapshot phase.
	PhaseSnapshot
	// PhaseBinlog is a raft log index of the binlog phase.
	PhaseBinlog
)

// String names the phase.
func (p Phase) String() string {
	switch p {
	case PhaseStart:
		return "start"
	case PhaseSnapshot:
		return "snapshot"
	case PhaseBinlog:
		return "binlog"
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

// Point is a position in a copyset's export (see the package
// documentation). Points are comparable with ==; the zero Point is the
// start. Use [StartPoint], [SnapshotPoint] and [BinlogPoint] to make one.
type Point struct {
	Phase Phase
	// Chunk and Offset are the chunk id and byte offset of a snapshot point.
	Chunk  uint64
	Offset uint32
	// Index is the next raft log index of a binlog point (at least 1).
	Index uint64
}

// StartPoint returns the start of an export.
func StartPoint() Point { return Point{} }

// SnapshotPoint returns the snapshot point at byte offset off of chunk.
func SnapshotPoint(chunk uint64, off uint32) Point {
	return Point{Phase: PhaseSnapshot, Chunk: chunk, Offset: off}
}

// BinlogPoint returns the binlog point whose next raft index is index.
func BinlogPoint(index uint64) Point { return Point{Phase: PhaseBinlog, Index: index} }

// Compare orders points: -1 if p is before q, 0 if equal, +1 if after.
func (p Point) Compare(q Point) int {
	if c := cmp.Compare(p.Phase, q.Phase); c != 0 {
		return c
	}
	switch p.Phase {
	case PhaseSnapshot:
		if c := cmp.Compare(p.Chunk, q.Chunk); c != 0 {
			return c
		}
		return cmp.Compare(p.Offset, q.Offset)
	case PhaseBinlog:
		return cmp.Compare(p.Index, q.Index)
	}
	return 0
}

// String formats the point for messages: "start", "snapshot chunk 7 offset
// 4096", "binlog index 12".
func (p Point) String() string {
	switch p.Phase {
	case PhaseStart:
		return "start"
	case PhaseSnapshot:
		return fmt.Sprintf("snapshot chunk %d offset %d", p.Chunk, p.Offset)
	case PhaseBinlog:
		return fmt.Sprintf("binlog index %d", p.Index)
	}
	return fmt.Sprintf("invalid point (phase %d)", uint8(p.Phase))
}

// Proto returns the point as an upstream SyncPoint, in its canonical form.
func (p Point) Proto() *datasyncpb.SyncPoint {
	switch p.Phase {
	case PhaseSnapshot:
		return &datasyncpb.SyncPoint{
			Type:   datasyncpb.SyncType_kSNAPSHOT.Enum(),
			Pk:     proto.String(strconv.FormatUint(p.Chunk, 10)),
			Offset: proto.Uint64(uint64(p.Offset)),
		}
	case PhaseBinlog:
		return &datasyncpb.SyncPoint{Type: datasyncpb.SyncType_kBINLOG.Enum(), Offset: proto.Uint64(p.Index)}
	}
	return &datasyncpb.SyncPoint{Type: datasyncpb.SyncType_kSNAPSHOT.Enum()}
}

// valid reports whether p is a point ParsePoint could return.
func (p Point) valid() error {
	switch p.Phase {
	case PhaseStart:
		if p.Chunk != 0 || p.Offset != 0 || p.Index != 0 {
			return errors.New("a start point has no chunk, offset or index")
		}
	case PhaseSnapshot:
		if p.Index != 0 {
			return errors.New("a snapshot point has no index")
		}
	case PhaseBinlog:
		if p.Index == 0 {
			return errors.New("a binlog point's index is at least 1")
		}
		if p.Chunk != 0 || p.Offset != 0 {
			return errors.New("a binlog point has no chunk or offset")
		}
	default:
		return fmt.Errorf("unknown phase %d", uint8(p.Phase))
	}
	return nil
}

// ParsePoint converts an upstream SyncPoint to a Point, checking that it is
// one chunkraft uses (see the package documentation). Errors name the
// offending field.
func ParsePoint(sp *datasyncpb.SyncPoint) (Point, error) {
	if sp == nil {
		return Point{}, errors.New("no sync point")
	}
	if sp.Type == nil {
		return Point{}, errors.New("sync point has no type")
	}
	if sp.Ts != nil {
		return Point{}, fmt.Errorf("sync point has ts %d: chunkraft does not use ts", sp.GetTs())
	}
	switch sp.GetType() {
	case datasyncpb.SyncType_kSNAPSHOT:
		if sp.Pk == nil {
			if sp.GetOffset() != 0 {
				return Point{}, fmt.Errorf("kSNAPSHOT point without pk has offset %d: the start has none", sp.GetOffset())
			}
			return StartPoint(), nil
		}
		chunk, err := strconv.ParseUint(sp.GetPk(), 10, 64)
		if err != nil || strconv.FormatUint(chunk, 10) != sp.GetPk() {
			return Point{}, fmt.Errorf("kSNAPSHOT point: pk %q is not a chunk id in decimal", sp.GetPk())
		}
		if sp.GetOffset() > math.MaxUint32 {
			return Point{}, fmt.Errorf("kSNAPSHOT point: offset %d is past the largest chunk offset %d", sp.GetOffset(), uint32(math.MaxUint32))
		}
		return SnapshotPoint(chunk, uint32(sp.GetOffset())), nil
	case datasyncpb.SyncType_kBINLOG:
		if sp.Pk != nil {
			return Point{}, fmt.Errorf("kBINLOG point has pk %q: it has none", sp.GetPk())
		}
		if sp.GetOffset() == 0 {
			return Point{}, errors.New("kBINLOG point: offset (the next raft index) must be at least 1")
		}
		return BinlogPoint(sp.GetOffset()), nil
	}
	return Point{}, fmt.Errorf("sync point has unknown type %d", int32(sp.GetType()))
}
