package exportfmt

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/internal/objstore"
	datasyncpb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
)

func randomPoints(n int) []Point {
	r := rand.New(rand.NewPCG(1, 2))
	pts := []Point{
		StartPoint(), SnapshotPoint(0, 0), SnapshotPoint(0, 1), SnapshotPoint(1, 0),
		SnapshotPoint(math.MaxUint64, math.MaxUint32), BinlogPoint(1), BinlogPoint(math.MaxUint64),
		SnapshotPoint(9, 1<<20), SnapshotPoint(10, 0), BinlogPoint(9), BinlogPoint(10),
	}
	for range n {
		switch r.IntN(3) {
		case 0:
			pts = append(pts, SnapshotPoint(r.Uint64()>>r.IntN(64), r.Uint32()>>r.IntN(32)))
		default:
			pts = append(pts, BinlogPoint(1+r.Uint64()>>r.IntN(64)))
		}
	}
	return pts
}

// Sorting names sorts points: the start, then the snapshot phase, then the
// binlog phase, each in its own order.
func TestNameOrderIsPointOrder(t *testing.T) {
	pts := randomPoints(2000)
	byName := slices.Clone(pts)
	slices.SortFunc(byName, func(a, b Point) int { return strings.Compare(PacketName(1, 3, a), PacketName(1, 3, b)) })
	byPoint := slices.Clone(pts)
	slices.SortFunc(byPoint, Point.Compare)
	if !slices.Equal(byName, byPoint) {
		for i := range byName {
			if byName[i] != byPoint[i] {
				t.Fatalf("at %d: name order has %v (%s), point order %v (%s)", i,
					byName[i], PacketName(1, 3, byName[i]), byPoint[i], PacketName(1, 3, byPoint[i]))
			}
		}
	}
	if byPoint[0] != StartPoint() || byPoint[len(byPoint)-1] != BinlogPoint(math.MaxUint64) {
		t.Errorf("first %v, last %v", byPoint[0], byPoint[len(byPoint)-1])
	}
	// The manifest sorts after every packet of its copyset.
	if m := ManifestName(1, 3); m <= PacketName(1, 3, BinlogPoint(math.MaxUint64)) || !strings.HasPrefix(m, CopysetPrefix(1, 3)) {
		t.Errorf("manifest name %s", m)
	}
}

func TestPacketNameRoundTrip(t *testing.T) {
	for _, pt := range randomPoints(500) {
		for _, cs := range [][2]uint32{{1, 3}, {0, 0}, {math.MaxUint32, math.MaxUint32}} {
			name := PacketName(cs[0], cs[1], pt)
			if err := objstore.ValidateName(name); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if !strings.HasPrefix(name, CopysetPrefix(cs[0], cs[1])) || !strings.HasPrefix(name, PoolPrefix(cs[0])) {
				t.Fatalf("%s is not under its prefixes", name)
			}
			p, c, got, err := ParsePacketName(name)
			if err != nil || p != cs[0] || c != cs[1] || got != pt {
				t.Fatalf("ParsePacketName(%s) = %d, %d, %v, %v; want %d, %d, %v", name, p, c, got, err, cs[0], cs[1], pt)
			}
		}
	}
	for name, want := range map[string]string{
		"pool-1/copyset-3/0-start.pkt":                                "",
		"pool-1/copyset-3/1-snap-00000000000000000007-0000004096.pkt": "",
		"pool-1/copyset-3/2-binlog-00000000000000000012.pkt":          "",
		"pool-1/copyset-3/manifest.pb":                                "does not end in .pkt",
		"pool-1/copyset-3/2-binlog-12.pkt":                            "canonical width",
		"pool-01/copyset-3/0-start.pkt":                               "pool-<P>",
		"pool-1/cs-3/0-start.pkt":                                     "copyset-<C>",
		"pool-1/copyset-3/2-binlog-00000000000000000000.pkt":          "index at least 1",
		"pool-1/copyset-3/1-snap-00000000000000000007.pkt":            "<chunk>-<offset>",
		"pool-1/copyset-3/1-snap-00000000000000000007-9999999999.pkt": "<chunk>-<offset>",
		"pool-1/copyset-3/3-other.pkt":                                "last element",
		"pool-1/copyset-3":                                            "want pool-",
		"x/pool-1/copyset-3/0-start.pkt":                              "want pool-",
		"pool-4294967296/copyset-3/0-start.pkt":                       "pool-<P>",
	} {
		_, _, _, err := ParsePacketName(name)
		switch {
		case want == "" && err != nil:
			t.Errorf("ParsePacketName(%s): %v", name, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("ParsePacketName(%s) = %v; want an error containing %q", name, err, want)
		}
	}
}

func TestPointProto(t *testing.T) {
	for _, pt := range randomPoints(200) {
		got, err := ParsePoint(pt.Proto())
		if err != nil || got != pt {
			t.Fatalf("ParsePoint(%v.Proto()) = %v, %v", pt, got, err)
		}
	}
	snap, bin := datasyncpb.SyncType_kSNAPSHOT.Enum(), datasyncpb.SyncType_kBINLOG.Enum()
	// Accepted spellings.
	if p, err := ParsePoint(&datasyncpb.SyncPoint{Type: snap, Pk: proto.String("7")}); err != nil || p != SnapshotPoint(7, 0) {
		t.Errorf("pk without offset = %v, %v", p, err)
	}
	if p, err := ParsePoint(&datasyncpb.SyncPoint{Type: snap, Offset: proto.Uint64(0)}); err != nil || p != StartPoint() {
		t.Errorf("start with offset 0 = %v, %v", p, err)
	}
	for _, c := range []struct {
		sp   *datasyncpb.SyncPoint
		want string
	}{
		{nil, "no sync point"},
		{&datasyncpb.SyncPoint{}, "no type"},
		{&datasyncpb.SyncPoint{Type: datasyncpb.SyncType(5).Enum()}, "unknown type"},
		{&datasyncpb.SyncPoint{Type: snap, Ts: proto.Uint64(1)}, "ts"},
		{&datasyncpb.SyncPoint{Type: snap, Offset: proto.Uint64(5)}, "without pk"},
		{&datasyncpb.SyncPoint{Type: snap, Pk: proto.String("07")}, "not a chunk id"},
		{&datasyncpb.SyncPoint{Type: snap, Pk: proto.String("-1")}, "not a chunk id"},
		{&datasyncpb.SyncPoint{Type: snap, Pk: proto.String("")}, "not a chunk id"},
		{&datasyncpb.SyncPoint{Type: snap, Pk: proto.String("1"), Offset: proto.Uint64(1 << 32)}, "past the largest"},
		{&datasyncpb.SyncPoint{Type: bin}, "at least 1"},
		{&datasyncpb.SyncPoint{Type: bin, Offset: proto.Uint64(0)}, "at least 1"},
		{&datasyncpb.SyncPoint{Type: bin, Offset: proto.Uint64(3), Pk: proto.String("1")}, "has pk"},
	} {
		if _, err := ParsePoint(c.sp); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParsePoint(%v) = %v; want an error containing %q", c.sp, err, c.want)
		}
	}
	if s := SnapshotPoint(7, 4096).String(); s != "snapshot chunk 7 offset 4096" {
		t.Errorf("String = %q", s)
	}
}
