package exportfmt

import (
	"fmt"
	"strconv"
	"strings"
)

// Object names of an export, relative to the destination's root (see
// docs/sync-format.md):
//
//	pool-<P>/copyset-<C>/0-start.pkt
//	pool-<P>/copyset-<C>/1-snap-<chunk, 20 digits>-<offset, 10 digits>.pkt
//	pool-<P>/copyset-<C>/2-binlog-<index, 20 digits>.pkt
//	pool-<P>/copyset-<C>/manifest.pb
//
// P and C are decimal without leading zeros. The leading digit is the
// phase and the numbers are zero-padded, so within a copyset the lexical
// order of packet names is the order of their start points.
const (
	// PacketSuffix ends every packet name.
	PacketSuffix = ".pkt"
	// ManifestFile is the last element of a copyset's manifest name.
	ManifestFile = "manifest.pb"

	startElem  = "0-start"
	snapPrefix = "1-snap-"
	binPrefix  = "2-binlog-"
)

// CopysetPrefix returns the name prefix of every object of copyset
// (pool, copyset), ending in '/': "pool-1/copyset-3/".
func CopysetPrefix(pool, copyset uint32) string {
	return fmt.Sprintf("pool-%d/copyset-%d/", pool, copyset)
}

// PoolPrefix returns the name prefix of every object of pool, ending in
// '/': "pool-1/".
func PoolPrefix(pool uint32) string { return fmt.Sprintf("pool-%d/", pool) }

// ManifestName returns the name of the manifest of copyset (pool, copyset).
func ManifestName(pool, copyset uint32) string {
	return CopysetPrefix(pool, copyset) + ManifestFile
}

// ManifestPartName returns the name of sealed part part (1, 2, ...) of the
// manifest of copyset (pool, copyset): "pool-1/copyset-3/manifest-0000000002.pb".
func ManifestPartName(pool, copyset, part uint32) string {
	return fmt.Sprintf("%smanifest-%010d.pb", CopysetPrefix(pool, copyset), part)
}

// PacketName returns the object name of the packet of copyset
// (pool, copyset) that starts at start. It panics on an invalid point (one
// ParsePoint would refuse).
func PacketName(pool, copyset uint32, start Point) string {
	if err := start.valid(); err != nil {
		panic("exportfmt: PacketName: " + err.Error())
	}
	var elem string
	switch start.Phase {
	case PhaseStart:
		elem = startElem
	case PhaseSnapshot:
		elem = fmt.Sprintf("%s%020d-%010d", snapPrefix, start.Chunk, start.Offset)
	case PhaseBinlog:
		elem = fmt.Sprintf("%s%020d", binPrefix, start.Index)
	}
	return CopysetPrefix(pool, copyset) + elem + PacketSuffix
}

// ParsePacketName parses a name PacketName returns; anything else (another
// spelling of the same numbers included) is an error naming the problem.
func ParsePacketName(name string) (pool, copyset uint32, start Point, err error) {
	bad := func(why string) error { return fmt.Errorf("%q is not a packet name: %s", name, why) }
	parts := strings.Split(name, "/")
	if len(parts) != 3 {
		return 0, 0, Point{}, bad("want pool-<P>/copyset-<C>/<point>" + PacketSuffix)
	}
	p, ok := parseUint32(parts[0], "pool-")
	if !ok {
		return 0, 0, Point{}, bad("first element is not pool-<P>")
	}
	c, ok := parseUint32(parts[1], "copyset-")
	if !ok {
		return 0, 0, Point{}, bad("second element is not copyset-<C>")
	}
	elem, ok := strings.CutSuffix(parts[2], PacketSuffix)
	if !ok {
		return 0, 0, Point{}, bad("it does not end in " + PacketSuffix)
	}
	switch {
	case elem == startElem:
		start = StartPoint()
	case strings.HasPrefix(elem, snapPrefix):
		chunk, off, ok := strings.Cut(elem[len(snapPrefix):], "-")
		ch, err1 := strconv.ParseUint(chunk, 10, 64)
		o, err2 := strconv.ParseUint(off, 10, 32)
		if !ok || err1 != nil || err2 != nil {
			return 0, 0, Point{}, bad("want " + snapPrefix + "<chunk>-<offset>")
		}
		start = SnapshotPoint(ch, uint32(o))
	case strings.HasPrefix(elem, binPrefix):
		idx, err := strconv.ParseUint(elem[len(binPrefix):], 10, 64)
		if err != nil || idx == 0 {
			return 0, 0, Point{}, bad("want " + binPrefix + "<index at least 1>")
		}
		start = BinlogPoint(idx)
	default:
		return 0, 0, Point{}, bad("the last element is not " + startElem + ", " + snapPrefix + "... or " + binPrefix + "...")
	}
	if PacketName(p, c, start) != name {
		return 0, 0, Point{}, bad("numbers not in their canonical width (want " + PacketName(p, c, start) + ")")
	}
	return p, c, start, nil
}

// parseUint32 parses prefix followed by a canonical decimal uint32.
func parseUint32(s, prefix string) (uint32, bool) {
	digits, ok := strings.CutPrefix(s, prefix)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseUint(digits, 10, 32)
	if err != nil || strconv.FormatUint(v, 10) != digits {
		return 0, false
	}
	return uint32(v), true
}
