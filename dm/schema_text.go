package dm

import (
	"fmt"
	"strconv"
	"strings"

	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
)

// The text form of a chunk's schema, the state a share tracks for it
// (OperateSchema's schema, `chunkctl dm binlog-schema update`):
//
//	normal
//	clone sn=<n> csn=<n> [written=<blocks>]
//
// normal: the chunk is a normal chunk (a write or delete applies as the
// source applied it). clone: it is a clone chunk in the source, with that
// sn and corrected sn, its blocks <blocks> written since it was created
// and the others still read from its clone source. <blocks> are 4 KiB
// block indexes of the 16 MiB chunk (0 to 4095) and ranges of them,
// comma-separated: written=0-255,1024.

// schemaBlocks is the number of blocks a clone's written bitmap covers.
const schemaBlocks = opChunkSize / opBlock

// ParseSchema parses a chunk's schema in the text form: the clone state,
// or nil for a normal chunk. A malformed schema is an error naming the
// column (1-based) where it goes wrong.
func ParseSchema(s string) (*pb.Clone, error) {
	fs := fields(s, 0)
	bad := func(col int, format string, args ...any) error {
		return fmt.Errorf("schema %q, column %d: %s", strings.TrimSpace(s), col, fmt.Sprintf(format, args...))
	}
	if len(fs) == 0 {
		return nil, fmt.Errorf("schema: empty (want \"normal\" or \"clone sn=<n> csn=<n> [written=<blocks>]\")")
	}
	switch fs[0].s {
	case "normal":
		if len(fs) > 1 {
			return nil, bad(fs[1].col, "normal takes nothing after it")
		}
		return nil, nil
	case "clone":
	default:
		return nil, bad(fs[0].col, "%q: want normal or clone", fs[0].s)
	}
	c := &pb.Clone{}
	seen := map[string]bool{}
	for _, f := range fs[1:] {
		k, v, ok := strings.Cut(f.s, "=")
		if !ok {
			return nil, bad(f.col, "%q: want key=value (sn, csn, written)", f.s)
		}
		if seen[k] {
			return nil, bad(f.col, "%s given twice", k)
		}
		seen[k] = true
		vcol := f.col + len(k) + 1
		switch k {
		case "sn", "csn":
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return nil, bad(vcol, "%s %q is not a number", k, v)
			}
			if k == "sn" {
				c.Sn = n
			} else {
				c.CorrectedSn = n
			}
		case "written":
			w, err := parseBlocks(v)
			if err != nil {
				return nil, bad(vcol, "written: %v", err)
			}
			c.Written = w
		default:
			return nil, bad(f.col, "unknown key %q (want sn, csn, written)", k)
		}
	}
	end := fs[len(fs)-1]
	switch {
	case !seen["sn"]:
		return nil, bad(end.col+len(end.s), "sn=<n> is missing")
	case !seen["csn"]:
		return nil, bad(end.col+len(end.s), "csn=<n> is missing")
	case c.Sn == 0:
		return nil, bad(1, "a clone's sn is at least 1")
	}
	if c.Written == nil {
		c.Written = make([]byte, schemaBlocks/8)
	}
	if blockRanges(c.Written, false) == "" {
		return nil, bad(1, "every block written: that is a normal chunk (say normal)")
	}
	return c, nil
}

// parseBlocks parses comma-separated block indexes and ranges into a
// bitmap of schemaBlocks blocks (block i in bit i % 8 of byte i / 8).
func parseBlocks(s string) ([]byte, error) {
	w := make([]byte, schemaBlocks/8)
	if s == "" {
		return w, nil
	}
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseUint(lo, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("block %q is not a number", lo)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(hi, 10, 32); err != nil {
				return nil, fmt.Errorf("block %q is not a number", hi)
			}
		}
		switch {
		case b < a:
			return nil, fmt.Errorf("range %s runs backwards", part)
		case b >= schemaBlocks:
			return nil, fmt.Errorf("block %d is past the chunk's last, %d", b, schemaBlocks-1)
		}
		for i := a; i <= b; i++ {
			w[i/8] |= 1 << (i % 8)
		}
	}
	return w, nil
}

// SchemaString is a chunk's schema in the text form: the clone state c,
// or normal for nil.
func SchemaString(c *pb.Clone) string {
	if c == nil {
		return "normal"
	}
	s := fmt.Sprintf("clone sn=%d csn=%d", c.GetSn(), c.GetCorrectedSn())
	if w := blockRanges(c.GetWritten(), true); w != "" {
		s += " written=" + w
	}
	return s
}

// blockRanges lists the blocks of bitmap w that are set (or, set false,
// clear) as comma-separated indexes and ranges.
func blockRanges(w []byte, set bool) string {
	var parts []string
	start := -1
	for i := 0; i <= schemaBlocks; i++ {
		in := i < schemaBlocks && (i/8 < len(w) && w[i/8]&(1<<(i%8)) != 0) == set
		switch {
		case in && start < 0:
			start = i
		case !in && start >= 0:
			if start == i-1 {
				parts = append(parts, strconv.Itoa(start))
			} else {
				parts = append(parts, fmt.Sprintf("%d-%d", start, i-1))
			}
			start = -1
		}
	}
	return strings.Join(parts, ",")
}
