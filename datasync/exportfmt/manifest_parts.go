package exportfmt

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
)

// ManifestPartEntries is how many entries a sealed manifest part holds: the
// manifest itself keeps at most this many (and at least one) after Seal, so
// that rewriting it costs the same on the first day of a continuous export
// as on the hundredth (about 0.5 MB).
const ManifestPartEntries = 4096

// Seal cuts the entries of manifest m (manifest.pb, in the writer's hands)
// beyond its last per into sealed parts: while m has more than per entries,
// its first per become part m.SealedParts+1, which is returned, and m keeps
// the rest, its previous entry the part's last. The parts are returned in
// order; the writer stores each (ManifestPartName) before it stores m. The
// last entry always stays in m, so a resent last packet (Append replaces
// the last entry) never touches a sealed part.
func Seal(m *syncpb.Manifest, per int) []*syncpb.Manifest {
	if per < 1 {
		per = ManifestPartEntries
	}
	var parts []*syncpb.Manifest
	at := 0 // the first entry not sealed yet
	for ; len(m.Packets)-at > per; at += per {
		part := &syncpb.Manifest{
			FormatVersion: m.FormatVersion, LogicPoolId: m.LogicPoolId, CopysetId: m.CopysetId,
			Packets: m.Packets[at : at+per : at+per], SealedParts: m.SealedParts, Previous: m.Previous, Part: m.SealedParts + 1,
			ExportId: m.ExportId,
		}
		parts = append(parts, part)
		m.SealedParts++
		m.Previous = part.Packets[per-1]
	}
	if at > 0 { // the rest, copied once (the parts keep their own slices)
		m.Packets = append([]*syncpb.ManifestEntry(nil), m.Packets[at:]...)
	}
	return parts
}

// JoinManifest returns the whole list of a copyset's manifest: m
// (manifest.pb) after its sealed parts, parts[i] being part i+1. Each part
// must be of m's copyset, carry its number, count the parts before it and
// name the last entry of the part before as its previous one, and be of
// m's export (export_id); m must come after the last. The result is one manifest with every entry, no parts;
// its chain is not checked (CheckManifest does that).
func JoinManifest(m *syncpb.Manifest, parts []*syncpb.Manifest) (*syncpb.Manifest, error) {
	if m.Part != 0 {
		return nil, fmt.Errorf("exportfmt: manifest of copyset %d/%d says it is sealed part %d", m.LogicPoolId, m.CopysetId, m.Part)
	}
	if int(m.SealedParts) != len(parts) {
		return nil, fmt.Errorf("exportfmt: manifest of copyset %d/%d has %d sealed parts, %d given", m.LogicPoolId, m.CopysetId, m.SealedParts, len(parts))
	}
	all := &syncpb.Manifest{FormatVersion: m.FormatVersion, LogicPoolId: m.LogicPoolId, CopysetId: m.CopysetId, ExportId: m.ExportId}
	var prev *syncpb.ManifestEntry
	for i, p := range parts {
		n := uint32(i + 1)
		switch {
		case p.LogicPoolId != m.LogicPoolId || p.CopysetId != m.CopysetId:
			return nil, fmt.Errorf("exportfmt: manifest part %d of copyset %d/%d is of copyset %d/%d", n, m.LogicPoolId, m.CopysetId, p.LogicPoolId, p.CopysetId)
		case p.Part != n || p.SealedParts != n-1:
			return nil, fmt.Errorf("exportfmt: manifest part %d of copyset %d/%d says it is part %d after %d", n, m.LogicPoolId, m.CopysetId, p.Part, p.SealedParts)
		case p.FormatVersion != m.FormatVersion:
			return nil, fmt.Errorf("exportfmt: manifest part %d of copyset %d/%d: format version %d, the manifest's %d", n, m.LogicPoolId, m.CopysetId, p.FormatVersion, m.FormatVersion)
		case p.ExportId != m.ExportId:
			return nil, fmt.Errorf("exportfmt: manifest part %d of copyset %d/%d is of export %s, the manifest of export %s", n, m.LogicPoolId, m.CopysetId,
				ExportIDString(p.ExportId), ExportIDString(m.ExportId))
		case len(p.Packets) == 0:
			return nil, fmt.Errorf("exportfmt: manifest part %d of copyset %d/%d lists no packet", n, m.LogicPoolId, m.CopysetId)
		case !proto.Equal(p.Previous, prev):
			return nil, fmt.Errorf("exportfmt: manifest part %d of copyset %d/%d does not follow part %d (its previous entry is %s, that part ends with %s)",
				n, m.LogicPoolId, m.CopysetId, n-1, p.Previous.GetName(), prev.GetName())
		}
		all.Packets = append(all.Packets, p.Packets...)
		prev = p.Packets[len(p.Packets)-1]
	}
	if !proto.Equal(m.Previous, prev) {
		return nil, fmt.Errorf("exportfmt: manifest of copyset %d/%d does not follow its last sealed part (its previous entry is %s, the part ends with %s)",
			m.LogicPoolId, m.CopysetId, m.Previous.GetName(), prev.GetName())
	}
	all.Packets = append(all.Packets, m.Packets...)
	return all, nil
}
