package cli

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// splitPeer parses "host:port" or "host:port:index" (the wire form of a peer
// id). IPv6 hosts must be bracketed: "[::1]:8200:0".
func splitPeer(s string) (host, port string, index uint32, err error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", "", 0, fmt.Errorf("empty peer address")
	}
	hostport := s
	if i := strings.LastIndexByte(s, ':'); i > 0 {
		if idx, perr := strconv.ParseUint(s[i+1:], 10, 32); perr == nil {
			if h, p, serr := net.SplitHostPort(s[:i]); serr == nil && validPort(p) && h != "" {
				return h, p, uint32(idx), nil
			}
		}
	}
	h, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", "", 0, fmt.Errorf("bad peer address %q: want host:port or host:port:0", s)
	}
	if h == "" || !validPort(p) {
		return "", "", 0, fmt.Errorf("bad peer address %q: want host:port or host:port:0", s)
	}
	return h, p, 0, nil
}

func validPort(p string) bool {
	n, err := strconv.ParseUint(p, 10, 16)
	return err == nil && n > 0
}

// PeerID normalises "host:port" or "host:port:N" to the wire peer id
// "host:port:N" (N defaults to 0). It does not resolve host names; see
// ResolvePeerID.
func PeerID(s string) (string, error) {
	h, p, idx, err := splitPeer(s)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(h, p) + ":" + strconv.FormatUint(uint64(idx), 10), nil
}

// PeerAddr returns the dialable "host:port" of "host:port" or "host:port:N".
func PeerAddr(s string) (string, error) {
	h, p, _, err := splitPeer(s)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(h, p), nil
}

// ResolvePeerID is PeerID with the host resolved to an IP address (IPv4
// preferred), because servers identify themselves as "ip:port:0": a copyset
// created with "localhost:8200" would name a peer no server answers to.
func ResolvePeerID(ctx context.Context, s string) (string, error) {
	h, p, idx, err := splitPeer(s)
	if err != nil {
		return "", err
	}
	if net.ParseIP(h) == nil {
		addrs, err := net.DefaultResolver.LookupIPAddr(ctx, h)
		if err != nil {
			return "", fmt.Errorf("resolve peer %q: %w", s, err)
		}
		if len(addrs) == 0 {
			return "", fmt.Errorf("resolve peer %q: no addresses", s)
		}
		h = addrs[0].IP.String()
		for _, a := range addrs {
			if v4 := a.IP.To4(); v4 != nil {
				h = v4.String()
				break
			}
		}
	}
	return net.JoinHostPort(h, p) + ":" + strconv.FormatUint(uint64(idx), 10), nil
}

// ParsePeerList splits a comma-separated list of peers ("host:port" or
// "host:port:N") and validates each. Empty elements are ignored; the same peer
// listed twice is an error. Elements are returned trimmed but otherwise as given.
func ParsePeerList(s string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		id, err := PeerID(f)
		if err != nil {
			return nil, err
		}
		if seen[id] {
			return nil, fmt.Errorf("peer %s listed twice", f)
		}
		seen[id] = true
		out = append(out, f)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty peer list")
	}
	return out, nil
}
