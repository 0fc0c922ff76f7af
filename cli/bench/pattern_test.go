package bench

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func stampAt(seq uint64) Stamp {
	return Stamp{Run: 0xabc, Pool: 1, Copyset: 3, Chunk: 2, Offset: 64 << 10, Seq: seq}
}

func where(s Stamp) Stamp { s.Run, s.Seq = 0, 0; return s }

func TestPatternRoundTrip(t *testing.T) {
	for _, n := range []int{SectorSize, 3 * SectorSize, 1 << 20} {
		buf := make([]byte, n)
		s := stampAt(77)
		EncodeBlock(buf, s)
		c := DecodeBlock(buf, where(s))
		if c.Kind != Pattern || c.Torn() || c.Versions[0] != (Version{Run: 0xabc, Seq: 77}) {
			t.Fatalf("%d bytes: decoded %v", n, c)
		}
		// A sub-range read decodes too: every sector names its own offset.
		sub := where(s)
		sub.Offset += SectorSize
		if n > SectorSize {
			if c := DecodeBlock(buf[SectorSize:2*SectorSize], sub); c.Kind != Pattern || c.Versions[0].Seq != 77 {
				t.Fatalf("%d bytes: second sector decoded %v", n, c)
			}
		}
	}
	// Different sequence numbers give different bodies.
	a, b := make([]byte, SectorSize), make([]byte, SectorSize)
	EncodeBlock(a, stampAt(1))
	EncodeBlock(b, stampAt(2))
	if string(a[bodyStart:bodyEnd]) == string(b[bodyStart:bodyEnd]) {
		t.Fatal("bodies of seq 1 and 2 are equal")
	}
}

func TestPatternDetectsCorruption(t *testing.T) {
	s := stampAt(9)
	fresh := func() []byte {
		b := make([]byte, 4*SectorSize)
		EncodeBlock(b, s)
		return b
	}
	// Flipping any single byte of any sector is detected.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := fresh()
		i := rng.IntN(len(b))
		b[i] ^= byte(1 + rng.IntN(255))
		c := DecodeBlock(b, where(s))
		if c.Kind == Pattern && !c.Torn() && c.Versions[0] == (Version{Run: s.Run, Seq: s.Seq}) {
			t.Fatalf("flip at byte %d not detected", i)
		}
	}
	cases := map[string]struct {
		mut  func([]byte)
		at   Stamp
		kind ContentKind
		text string
	}{
		"bit flip in body": {func(b []byte) { b[SectorSize+100] ^= 1 }, where(s), Bad, "checksum mismatch"},
		"misplaced block":  {func([]byte) {}, func() Stamp { w := where(s); w.Offset += 4 * SectorSize; return w }(), Bad, "misplaced"},
		"other copyset":    {func([]byte) {}, func() Stamp { w := where(s); w.Copyset = 4; return w }(), Bad, "misplaced"},
		"zeroed sector":    {func(b []byte) { clear(b[2*SectorSize : 3*SectorSize]) }, where(s), Bad, "zeros among pattern"},
		"foreign sector":   {func(b []byte) { fillRandom(b[:SectorSize]) }, where(s), Bad, "no pattern among pattern"},
		"all zeros":        {func(b []byte) { clear(b) }, where(s), Zeros, ""},
		"all foreign":      {func(b []byte) { fillRandom(b) }, where(s), Foreign, ""},
		"torn":             {func(b []byte) { EncodeBlock(b[:SectorSize], stampAt(8)) }, where(s), Pattern, "torn"},
	}
	for name, tc := range cases {
		b := fresh()
		tc.mut(b)
		c := DecodeBlock(b, tc.at)
		if c.Kind != tc.kind || !strings.Contains(c.String(), tc.text) {
			t.Errorf("%s: got %v (%s), want %v containing %q", name, c.Kind, c, tc.kind, tc.text)
		}
	}
	if c := DecodeBlock(make([]byte, 100), where(s)); c.Kind != Bad {
		t.Errorf("short read: %v", c)
	}
}
