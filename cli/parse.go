package cli

import (
	"errors"
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

// idForms is what an id list may look like, for error messages.
const idForms = "want an id, a range or a list: 7, 1-16, 1,3,8-10"

// parseID parses one id of an id list.
func parseID(s string) (uint32, error) {
	v, err := strconv.ParseUint(s, 10, 32)
	switch {
	case err == nil:
		return uint32(v), nil
	case errors.Is(err, strconv.ErrRange):
		return 0, fmt.Errorf("id %s is larger than %d", s, uint64(math.MaxUint32))
	}
	return 0, fmt.Errorf("%q is not a whole number", s)
}

// ParseIDList parses a list of ids: "7", "1-16" or "1,3,8-10". Ranges are
// inclusive; repeated ids are kept once, in first-seen order. Errors name
// the part of s that breaks a rule and the rule.
func ParseIDList(s string) ([]uint32, error) {
	var out []uint32
	seen := map[uint32]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		lo, hi = strings.TrimSpace(lo), strings.TrimSpace(hi)
		switch {
		case isRange && lo == "":
			return nil, fmt.Errorf("range %q has no start (%s)", part, idForms)
		case isRange && hi == "":
			return nil, fmt.Errorf("range %q has no end (%s)", part, idForms)
		}
		a, err := parseID(lo)
		if err != nil {
			return nil, fmt.Errorf("%w (%s)", err, idForms)
		}
		b := a
		if isRange {
			if b, err = parseID(hi); err != nil {
				return nil, fmt.Errorf("range %q: %w (%s)", part, err, idForms)
			}
			if b < a {
				return nil, fmt.Errorf("range %q ends before it starts", part)
			}
			if b-a >= maxIDList {
				return nil, fmt.Errorf("range %q holds more than %d ids", part, maxIDList)
			}
		}
		for v := uint64(a); v <= uint64(b); v++ {
			if seen[uint32(v)] {
				continue
			}
			if len(out) >= maxIDList {
				return nil, fmt.Errorf("%q holds more than %d ids", s, maxIDList)
			}
			seen[uint32(v)] = true
			out = append(out, uint32(v))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no ids in %q (%s)", s, idForms)
	}
	return out, nil
}

// idValue is a flag holding one id (--copyset of the commands that take a
// single copyset): a list or a range is refused with the reason.
type idValue struct{ p *uint32 }

func (v idValue) String() string {
	if v.p == nil {
		return "0"
	}
	return strconv.FormatUint(uint64(*v.p), 10)
}

func (v idValue) Type() string { return "uint32" }

func (v idValue) Set(s string) error {
	if strings.ContainsAny(s, ",-") {
		if _, err := ParseIDList(s); err == nil {
			return errors.New("this command takes one copyset id, not a list or a range")
		}
	}
	id, err := parseID(strings.TrimSpace(s))
	if err != nil {
		return err
	}
	*v.p = id
	return nil
}
