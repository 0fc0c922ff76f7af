package cli

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// sizeUnits maps a lower-cased suffix to its multiplier. As in fio and dd,
// k/m/g/t are binary (1k = 1024): offsets and sizes of chunks are always
// powers of two, and "4k" meaning 4000 would only ever be a mistake.
var sizeUnits = map[string]uint64{
	"": 1, "b": 1,
	"k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
	"m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
	"g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
	"t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
}

// ParseSize parses a byte count: a decimal integer with an optional,
// case-insensitive binary suffix: b, k/kb/KiB, m/mb/MiB, g/gb/GiB, t/tb/TiB.
// "4k" and "4KiB" are both 4096.
func ParseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("bad size %q: want an integer with an optional suffix (4096, 4k, 1MiB)", s)
	}
	n, err := strconv.ParseUint(t[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bad size %q: %w", s, err)
	}
	mul, ok := sizeUnits[strings.ToLower(strings.TrimSpace(t[i:]))]
	if !ok {
		return 0, fmt.Errorf("bad size %q: unknown suffix %q (use k, m, g, t or KiB, MiB, GiB, TiB)", s, t[i:])
	}
	hi, v := bits.Mul64(n, mul)
	if hi != 0 {
		return 0, fmt.Errorf("bad size %q: too large", s)
	}
	return v, nil
}

// parseSize32 is ParseSize limited to what fits the protocol's uint32 fields.
func parseSize32(what, s string) (uint32, error) {
	v, err := ParseSize(s)
	if err != nil {
		return 0, fmt.Errorf("--%s: %w", what, err)
	}
	if v > math.MaxUint32 {
		return 0, fmt.Errorf("--%s: %s is larger than %d", what, s, uint64(math.MaxUint32))
	}
	return uint32(v), nil
}

// maxIDList bounds how many ids one range expression may expand to.
const maxIDList = 1 << 16

// ParseIDList parses a list of ids: "7", "1-16" or "1,3,8-10". Ranges are
// inclusive; repeated ids are kept once, in first-seen order.
func ParseIDList(s string) ([]uint32, error) {
	var out []uint32
	seen := map[uint32]bool{}
	add := func(v uint32) error {
		if seen[v] {
			return nil
		}
		if len(out) >= maxIDList {
			return fmt.Errorf("bad id list %q: more than %d ids", s, maxIDList)
		}
		seen[v] = true
		out = append(out, v)
		return nil
	}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseUint(strings.TrimSpace(lo), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("bad id %q in %q", part, s)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(strings.TrimSpace(hi), 10, 32); err != nil {
				return nil, fmt.Errorf("bad id range %q in %q", part, s)
			}
			if b < a {
				return nil, fmt.Errorf("bad id range %q in %q: end before start", part, s)
			}
			if b-a >= maxIDList {
				return nil, fmt.Errorf("bad id range %q: more than %d ids", part, maxIDList)
			}
		}
		for v := a; v <= b; v++ {
			if err := add(uint32(v)); err != nil {
				return nil, err
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty id list %q", s)
	}
	return out, nil
}
