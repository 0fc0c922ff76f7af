package datasync

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"strconv"

	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
)

// Bounds of a SyncPoint's values.
const (
	// MaxSnapshotOffset bounds a kSNAPSHOT point's byte offset in its chunk.
	MaxSnapshotOffset = math.MaxUint32
	// MaxLogIndex bounds a kBINLOG point's offset and a binlog end: far
	// beyond any raft log, small enough that index+1 never overflows.
	MaxLogIndex = 1 << 62
)

// ValidateSyncPoint checks a point's shape (package doc, "SyncPoint"):
// kSNAPSHOT with no pk and no offset (the very start) or with both, pk a
// chunk id in canonical decimal; kBINLOG with an offset in
// [1, MaxLogIndex] and no pk; ts is never used.
func ValidateSyncPoint(p *dspb.SyncPoint) error {
	if p == nil {
		return errors.New("sync point is missing")
	}
	if p.Type == nil {
		return errors.New("sync point has no type")
	}
	if p.Ts != nil {
		return errors.New("sync point: ts is not used by chunkraft; leave it unset")
	}
	switch p.GetType() {
	case dspb.SyncType_kSNAPSHOT:
		if (p.Pk == nil) != (p.Offset == nil) {
			return errors.New("kSNAPSHOT sync point: pk and offset come together (both absent at the very start)")
		}
		if p.Pk == nil {
			return nil
		}
		id, err := strconv.ParseUint(p.GetPk(), 10, 64)
		if err != nil || strconv.FormatUint(id, 10) != p.GetPk() {
			return fmt.Errorf("kSNAPSHOT sync point: pk %q is not a chunk id in decimal", p.GetPk())
		}
		if p.GetOffset() > MaxSnapshotOffset {
			return fmt.Errorf("kSNAPSHOT sync point: offset %d is beyond %d", p.GetOffset(), uint64(MaxSnapshotOffset))
		}
	case dspb.SyncType_kBINLOG:
		if p.Pk != nil {
			return errors.New("kBINLOG sync point: pk is not used; leave it unset")
		}
		if p.GetOffset() < 1 || p.GetOffset() > MaxLogIndex {
			return fmt.Errorf("kBINLOG sync point: offset %d is not a log index in [1, %d]", p.GetOffset(), uint64(MaxLogIndex))
		}
	default:
		return fmt.Errorf("sync point: unknown type %d", p.GetType())
	}
	return nil
}

// comparePoints orders two valid points in export order: the snapshot
// phase (its start, then by chunk id and offset) before the binlog phase
// (by log index).
func comparePoints(a, b *dspb.SyncPoint) int {
	if c := cmp.Compare(a.GetType(), b.GetType()); c != 0 {
		return c
	}
	if a.GetType() == dspb.SyncType_kSNAPSHOT {
		if a.Pk == nil || b.Pk == nil { // the very start comes first
			return cmp.Compare(present(a.Pk), present(b.Pk))
		}
		ai, _ := strconv.ParseUint(a.GetPk(), 10, 64)
		bi, _ := strconv.ParseUint(b.GetPk(), 10, 64)
		if c := cmp.Compare(ai, bi); c != 0 {
			return c
		}
	}
	return cmp.Compare(a.GetOffset(), b.GetOffset())
}

func present(s *string) int {
	if s == nil {
		return 0
	}
	return 1
}

// PointString names a point in messages: "snapshot start", "snapshot
// chunk 7 offset 4096", "binlog index 12".
func PointString(p *dspb.SyncPoint) string {
	switch {
	case p == nil:
		return "no point"
	case p.GetType() == dspb.SyncType_kBINLOG:
		return fmt.Sprintf("binlog index %d", p.GetOffset())
	case p.Pk == nil:
		return "snapshot start"
	}
	return fmt.Sprintf("snapshot chunk %s offset %d", p.GetPk(), p.GetOffset())
}
