package dm

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
)

// The text form of an operator's chunk ops (HandleError's sqls), one op
// per line (or per `;`-separated part of a line):
//
//	write <chunk> <offset> <length> sn=<n> [csn=<n>] data=zero|b64:<base64>
//	delete <chunk> sn=<n>
//	delete-snap <chunk> csn=<n>
//	noop
//
// A write covers whole 4 KiB blocks of one chunk, at most maxOpWrite
// bytes; data=zero writes zeros, b64: exactly <length> bytes.

// maxOpWrite bounds an operator's write.
const maxOpWrite = 64 << 10

// opBlock and opChunkSize are the geometry an operator's write must fit.
const (
	opBlock     = 4 << 10
	opChunkSize = 16 << 20
)

// ParseChunkOps parses lines, each holding one or more `;`-separated ops
// in the text form; a malformed op is an error naming the op and the
// column (1-based, in its line) where it goes wrong. Empty parts are
// ignored.
func ParseChunkOps(lines []string) ([]*pb.ChunkOp, error) {
	var ops []*pb.ChunkOp
	for li, line := range lines {
		col := 0
		for part := range strings.SplitSeq(line, ";") {
			if strings.TrimSpace(part) != "" {
				op, err := parseChunkOp(part, col)
				if err != nil {
					if len(lines) > 1 {
						return nil, fmt.Errorf("op %d: %w", li+1, err)
					}
					return nil, err
				}
				ops = append(ops, op)
			}
			col += len(part) + 1
		}
	}
	return ops, nil
}

// field is one space-separated word of an op and its column.
type field struct {
	s   string
	col int
}

func fields(s string, base int) []field {
	var out []field
	start := -1
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ' ' || s[i] == '\t' {
			if start >= 0 {
				out = append(out, field{s[start:i], base + start + 1})
				start = -1
			}
			continue
		}
		if start < 0 {
			start = i
		}
	}
	return out
}

func parseChunkOp(s string, base int) (*pb.ChunkOp, error) {
	fs := fields(s, base)
	bad := func(f field, format string, args ...any) error {
		return fmt.Errorf("%q, column %d: %s", strings.TrimSpace(s), f.col, fmt.Sprintf(format, args...))
	}
	num := func(f field, what string, bits int) (uint64, error) {
		v, err := strconv.ParseUint(f.s, 10, bits)
		if err != nil {
			return 0, bad(f, "%s %q is not a number", what, f.s)
		}
		return v, nil
	}
	// keys parses key=value fields into vals; every key must be allowed,
	// and appear once.
	keys := func(rest []field, allowed ...string) (map[string]field, error) {
		vals := map[string]field{}
		for _, f := range rest {
			k, v, ok := strings.Cut(f.s, "=")
			if !ok {
				return nil, bad(f, "%q: want key=value (%s)", f.s, strings.Join(allowed, ", "))
			}
			known := false
			for _, a := range allowed {
				known = known || a == k
			}
			if !known {
				return nil, bad(f, "unknown key %q (want %s)", k, strings.Join(allowed, ", "))
			}
			if _, dup := vals[k]; dup {
				return nil, bad(f, "%s given twice", k)
			}
			vals[k] = field{v, f.col + len(k) + 1}
		}
		return vals, nil
	}
	need := func(vals map[string]field, last field, k string) (uint64, error) {
		f, ok := vals[k]
		if !ok {
			return 0, bad(field{col: last.col + len(last.s)}, "%s=<n> is missing", k)
		}
		return num(f, k, 64)
	}
	if len(fs) == 0 {
		return nil, fmt.Errorf("an empty op")
	}
	verb := fs[0]
	chunk := func(min int, usage string) (uint64, error) {
		if len(fs) < min {
			last := fs[len(fs)-1]
			return 0, bad(field{col: last.col + len(last.s)}, "too few fields: want %s", usage)
		}
		return num(fs[1], "chunk", 64)
	}
	op := &pb.ChunkOp{}
	switch verb.s {
	case "noop":
		if len(fs) > 1 {
			return nil, bad(fs[1], "noop takes nothing")
		}
		return &pb.ChunkOp{Kind: pb.ChunkOp_NOOP}, nil
	case "delete", "delete-snap":
		usage, key, kind := "delete <chunk> sn=<n>", "sn", pb.ChunkOp_DELETE
		if verb.s == "delete-snap" {
			usage, key, kind = "delete-snap <chunk> csn=<n>", "csn", pb.ChunkOp_DELETE_SNAP
		}
		id, err := chunk(3, usage)
		if err != nil {
			return nil, err
		}
		vals, err := keys(fs[2:], key)
		if err != nil {
			return nil, err
		}
		v, err := need(vals, fs[len(fs)-1], key)
		if err != nil {
			return nil, err
		}
		op.Kind, op.Chunk = kind, id
		if key == "sn" {
			op.Sn = v
		} else {
			op.CorrectedSn = v
		}
		return op, nil
	case "write":
		const usage = "write <chunk> <offset> <length> sn=<n> [csn=<n>] data=zero|b64:<base64>"
		id, err := chunk(5, usage)
		if err != nil {
			return nil, err
		}
		off, err := num(fs[2], "offset", 32)
		if err != nil {
			return nil, err
		}
		n, err := num(fs[3], "length", 32)
		if err != nil {
			return nil, err
		}
		switch {
		case off%opBlock != 0:
			return nil, bad(fs[2], "offset %d is not a multiple of %d", off, opBlock)
		case n == 0 || n%opBlock != 0 || n > maxOpWrite:
			return nil, bad(fs[3], "length %d: want a multiple of %d, at most %d", n, opBlock, maxOpWrite)
		case off+n > opChunkSize:
			return nil, bad(fs[3], "offset %d + length %d is past the chunk's %d bytes", off, n, opChunkSize)
		}
		vals, err := keys(fs[4:], "sn", "csn", "data")
		if err != nil {
			return nil, err
		}
		last := fs[len(fs)-1]
		if op.Sn, err = need(vals, last, "sn"); err != nil {
			return nil, err
		}
		if f, ok := vals["csn"]; ok {
			if op.CorrectedSn, err = num(f, "csn", 64); err != nil {
				return nil, err
			}
		}
		d, ok := vals["data"]
		switch {
		case !ok:
			return nil, bad(field{col: last.col + len(last.s)}, "data=zero|b64:<base64> is missing")
		case d.s == "zero":
		case strings.HasPrefix(d.s, "b64:"):
			b, err := base64.StdEncoding.DecodeString(d.s[4:])
			if err != nil {
				return nil, bad(d, "data: bad base64: %v", err)
			}
			if uint64(len(b)) != n {
				return nil, bad(d, "data is %d bytes, the length says %d", len(b), n)
			}
			op.Data = b
		default:
			return nil, bad(d, "data %q: want zero or b64:<base64>", d.s)
		}
		op.Kind, op.Chunk, op.Offset, op.Length = pb.ChunkOp_WRITE, id, uint32(off), uint32(n)
		return op, nil
	}
	return nil, bad(verb, "unknown op %q (want write, delete, delete-snap or noop)", verb.s)
}

// ChunkOpString is op in the text form (data abbreviated to its length).
func ChunkOpString(op *pb.ChunkOp) string {
	switch op.GetKind() {
	case pb.ChunkOp_WRITE:
		s := fmt.Sprintf("write %d %d %d sn=%d", op.GetChunk(), op.GetOffset(), op.GetLength(), op.GetSn())
		if op.GetCorrectedSn() != 0 {
			s += fmt.Sprintf(" csn=%d", op.GetCorrectedSn())
		}
		if len(op.GetData()) == 0 {
			return s + " data=zero"
		}
		return s + " data=b64:..."
	case pb.ChunkOp_DELETE:
		return fmt.Sprintf("delete %d sn=%d", op.GetChunk(), op.GetSn())
	case pb.ChunkOp_DELETE_SNAP:
		return fmt.Sprintf("delete-snap %d csn=%d", op.GetChunk(), op.GetCorrectedSn())
	}
	return "noop"
}
