package copyset

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// GroupID identifies a copyset's raft group: logicPoolId<<32 | copysetId,
// as Curve does. Its String form (decimal) names the copyset's directory.
type GroupID uint64

// NewGroupID returns the group id of copyset copysetID in logical pool poolID.
func NewGroupID(poolID, copysetID uint32) GroupID {
	return GroupID(uint64(poolID)<<32 | uint64(copysetID))
}

// Pool returns the logical pool id.
func (g GroupID) Pool() uint32 { return uint32(uint64(g) >> 32) }

// Copyset returns the copyset id within its pool.
func (g GroupID) Copyset() uint32 { return uint32(uint64(g)) }

// String returns the decimal group id.
func (g GroupID) String() string { return strconv.FormatUint(uint64(g), 10) }

// ParseGroupID parses the decimal form written by String.
func ParseGroupID(s string) (GroupID, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse group id %q: %w", s, err)
	}
	return GroupID(v), nil
}

// PeerID is a replica's identity on the wire: "ip:port:0" (Curve/braft
// PeerId with index 0; one replica of a copyset per chunkserver).
type PeerID string

// ParsePeer accepts "host:port" or "host:port:index" and returns the
// canonical peer id "host:port:0" and the dialable address "host:port".
// A non-zero index is rejected: one replica of a copyset per server.
func ParsePeer(s string) (PeerID, string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", "", fmt.Errorf("parse peer: empty")
	}
	addr := s
	if strings.Count(s, ":") == 2 {
		i := strings.LastIndexByte(s, ':')
		if idx := s[i+1:]; idx != "0" {
			return "", "", fmt.Errorf("parse peer %q: index %q must be 0", s, idx)
		}
		addr = s[:i]
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", "", fmt.Errorf("parse peer %q: %w", s, err)
	}
	if host == "" {
		return "", "", fmt.Errorf("parse peer %q: empty host", s)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return "", "", fmt.Errorf("parse peer %q: bad port %q", s, port)
	}
	return PeerID(addr + ":0"), addr, nil
}

// Addr returns the dialable "host:port" of a canonical peer id.
func (p PeerID) Addr() string {
	s := string(p)
	if i := strings.LastIndexByte(s, ':'); i > 0 && strings.Count(s, ":") == 2 {
		return s[:i]
	}
	return s
}
