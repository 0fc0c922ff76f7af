package exportfmt

import (
	"errors"
	"fmt"

	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
)

// The manifest layout (docs/sync-format.md):
//
//	offset  size  field
//	0       6     magic "CRSMAN"
//	6       1     format version (Version)
//	7       4     CRC-32C of the bytes from offset 11 on, uint32 little-endian
//	11      ...   Manifest, protobuf
const (
	// ManifestMagic starts every manifest.
	ManifestMagic = "CRSMAN"
	// MaxManifestSize bounds an encoded manifest (about two million
	// packets).
	MaxManifestSize = 256 << 20
)

// NewManifest returns the empty manifest of copyset (pool, copyset).
func NewManifest(pool, copyset uint32) *syncpb.Manifest {
	return &syncpb.Manifest{FormatVersion: Version, LogicPoolId: pool, CopysetId: copyset}
}

// Entry returns the manifest entry of packet p named name.
func (p *Packet) Entry(name string) *syncpb.ManifestEntry {
	h := p.Header
	return &syncpb.ManifestEntry{
		Name:              name,
		StartPoint:        h.StartPoint,
		NextPoint:         h.NextPoint,
		RecordCount:       h.RecordCount,
		BodyCrc32C:        h.BodyCrc32C,
		Size:              uint64(p.Size),
		Finished:          h.Finished,
		FirstAppendedAtMs: h.FirstAppendedAtMs,
		LastAppendedAtMs:  h.LastAppendedAtMs,
	}
}

// Append adds entry e, a packet just written, to manifest m: it replaces
// the last entry when e has the same name (the packet was resent, and its
// object replaced itself), and otherwise continues the chain from the last
// entry. Anything else (a gap, an overlap, an entry of another copyset, an
// empty packet being replaced by an earlier one) is an error and m is
// unchanged. The entries already in m are not re-checked (CheckManifest
// does that).
func Append(m *syncpb.Manifest, e *syncpb.ManifestEntry) error {
	if m == nil || e == nil {
		return errors.New("exportfmt: append: nil manifest or entry")
	}
	start, err := ParsePoint(e.StartPoint)
	if err != nil {
		return fmt.Errorf("exportfmt: append %s: start_point: %w", e.Name, err)
	}
	next, err := ParsePoint(e.NextPoint)
	if err != nil {
		return fmt.Errorf("exportfmt: append %s: next_point: %w", e.Name, err)
	}
	c := NewChain(m.LogicPoolId, m.CopysetId)
	replace := false
	n := len(m.Packets)
	if n > 0 {
		replace = m.Packets[n-1].Name == e.Name
		if replace {
			n-- // chain from the entry before the replaced one
		}
	}
	switch {
	case n > 0:
		if err := addEntry(c, m.Packets[n-1]); err != nil {
			return fmt.Errorf("exportfmt: append: manifest entry %d: %w", n-1, err)
		}
	case m.Previous != nil: // the first entry of a part continues the part before
		if err := addEntry(c, m.Previous); err != nil {
			return fmt.Errorf("exportfmt: append: the manifest's previous entry: %w", err)
		}
	}
	if err := c.Add(e.Name, start, next); err != nil {
		return fmt.Errorf("exportfmt: append to manifest of copyset %d/%d: %w", m.LogicPoolId, m.CopysetId, err)
	}
	if replace {
		m.Packets[len(m.Packets)-1] = e
	} else {
		m.Packets = append(m.Packets, e)
	}
	return nil
}

func addEntry(c *Chain, e *syncpb.ManifestEntry) error {
	start, err := ParsePoint(e.StartPoint)
	if err != nil {
		return &BadPacketError{Name: e.Name, Err: fmt.Errorf("start_point: %w", err)}
	}
	next, err := ParsePoint(e.NextPoint)
	if err != nil {
		return &BadPacketError{Name: e.Name, Err: fmt.Errorf("next_point: %w", err)}
	}
	return c.Add(e.Name, start, next)
}

// CheckManifest checks that the entries of m form a chain (see Chain),
// from its previous entry when it has one (a part after the first), and
// returns the chain (previous included).
func CheckManifest(m *syncpb.Manifest) (*Chain, error) {
	if m.FormatVersion != Version {
		return nil, fmt.Errorf("exportfmt: manifest of copyset %d/%d: format version %d (this reader knows %d)",
			m.LogicPoolId, m.CopysetId, m.FormatVersion, Version)
	}
	if (m.SealedParts == 0) != (m.Previous == nil) {
		return nil, fmt.Errorf("exportfmt: manifest of copyset %d/%d: %d sealed parts before it, previous entry %v: want both or neither",
			m.LogicPoolId, m.CopysetId, m.SealedParts, m.Previous != nil)
	}
	c := NewChain(m.LogicPoolId, m.CopysetId)
	if m.Previous != nil {
		if err := addEntry(c, m.Previous); err != nil {
			return nil, fmt.Errorf("exportfmt: manifest of copyset %d/%d, previous entry: %w", m.LogicPoolId, m.CopysetId, err)
		}
	}
	for i, e := range m.Packets {
		if err := addEntry(c, e); err != nil {
			return nil, fmt.Errorf("exportfmt: manifest of copyset %d/%d, entry %d: %w", m.LogicPoolId, m.CopysetId, i, err)
		}
	}
	return c, nil
}

// EncodeManifest encodes m.
func EncodeManifest(m *syncpb.Manifest) ([]byte, error) {
	return encodeFramed("manifest", ManifestMagic, MaxManifestSize, m)
}

// DecodeManifest decodes a manifest, checking its magic, version and
// checksum (not its chain: see CheckManifest).
func DecodeManifest(b []byte) (*syncpb.Manifest, error) {
	m := &syncpb.Manifest{}
	if err := decodeFramed("manifest", ManifestMagic, MaxManifestSize, b, m); err != nil {
		return nil, err
	}
	if m.FormatVersion != Version {
		return nil, fmt.Errorf("exportfmt: decode manifest: it says format version %d, the prefix %d", m.FormatVersion, Version)
	}
	return m, nil
}
