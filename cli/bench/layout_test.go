package bench

import "testing"

func testConfig(m Mode, bs uint32, span uint64, copysets ...uint32) Config {
	if len(copysets) == 0 {
		copysets = []uint32{1, 2, 3}
	}
	return Config{Mode: m, BS: bs, IODepth: 4, Pool: 1, Copysets: copysets, Span: span, Sn: 1, Ops: 100, RWMixRead: 70}
}

func TestLayoutAddressesAlignedAndInsideSpan(t *testing.T) {
	for _, tc := range []struct {
		bs   uint32
		span uint64
	}{
		{4 << 10, 64 << 20},
		{1 << 20, 64 << 20},
		{4 << 20, 40 << 20}, // last chunk partial: 8 MiB = 2 blocks
		{12 << 10, 20 << 20},
		{64 << 10, 4 << 20}, // span smaller than a chunk
	} {
		cfg := testConfig(RandWrite, tc.bs, tc.span, 5, 9)
		if err := cfg.Validate(); err != nil {
			t.Fatalf("bs %d span %d: %v", tc.bs, tc.span, err)
		}
		l := newLayout(cfg)
		// Blocks never straddle a chunk and stay inside the span.
		perChunk := uint64(ChunkSize / tc.bs)
		want := (tc.span/ChunkSize)*perChunk + (tc.span%ChunkSize)/uint64(tc.bs)
		if l.blocksPerCopyset != want || l.total != 2*want {
			t.Fatalf("bs %d span %d: %d blocks per copyset, %d total; want %d, %d", tc.bs, tc.span, l.blocksPerCopyset, l.total, want, 2*want)
		}
		seen := map[blockAddr]bool{}
		for g := range l.total {
			a := l.addr(g)
			if a.offset%SectorSize != 0 || a.offset%tc.bs != 0 {
				t.Fatalf("block %d: offset %d not aligned", g, a.offset)
			}
			if uint64(a.offset)+uint64(tc.bs) > ChunkSize {
				t.Fatalf("block %d: offset %d + bs crosses the chunk", g, a.offset)
			}
			if pos := (a.id.Chunk-1)*ChunkSize + uint64(a.offset) + uint64(tc.bs); pos > tc.span {
				t.Fatalf("block %d: ends at %d, past span %d", g, pos, tc.span)
			}
			if a.id.Pool != 1 || (a.id.Copyset != 5 && a.id.Copyset != 9) || a.id.Chunk < 1 {
				t.Fatalf("block %d: bad id %v", g, a.id)
			}
			if seen[a] {
				t.Fatalf("block %d: address %v used twice", g, a)
			}
			seen[a] = true
		}
	}
}

func TestRandomPickerInRange(t *testing.T) {
	cfg := testConfig(RandWrite, 4<<10, 1<<20)
	l := newLayout(cfg)
	p := l.newPicker(RandWrite, 0, 4, 42)
	hits := map[uint64]int{}
	for range 100000 {
		g := p.next()
		if g >= l.total {
			t.Fatalf("picked %d of %d blocks", g, l.total)
		}
		hits[g]++
	}
	// 768 blocks, 100k picks: every block is hit, none wildly more than the rest.
	if len(hits) != int(l.total) {
		t.Fatalf("hit %d of %d blocks", len(hits), l.total)
	}
	for g, n := range hits {
		if n < 50 || n > 300 {
			t.Fatalf("block %d picked %d times; want about 130", g, n)
		}
	}
	// Same seed, same worker: same sequence; another worker differs.
	a, b, c := l.newPicker(RandWrite, 1, 4, 7), l.newPicker(RandWrite, 1, 4, 7), l.newPicker(RandWrite, 2, 4, 7)
	same, diff := true, false
	for range 100 {
		x, y, z := a.next(), b.next(), c.next()
		same = same && x == y
		diff = diff || x != z
	}
	if !same || !diff {
		t.Fatalf("seeded pickers: same=%v diff=%v", same, diff)
	}
}

func TestSequentialWalks(t *testing.T) {
	cfg := testConfig(SeqWrite, 4<<10, 64<<10) // 16 blocks per copyset, 48 in all
	cfg.IODepth = 5
	l := newLayout(cfg)
	covered := map[uint64]int{}
	var prevEnd uint64
	for w := range cfg.IODepth {
		s, e := l.region(w, cfg.IODepth)
		if s != prevEnd || e <= s {
			t.Fatalf("worker %d region [%d,%d) after %d", w, s, e, prevEnd)
		}
		prevEnd = e
		p := l.newPicker(SeqWrite, w, cfg.IODepth, 1)
		n := e - s
		for i := range 2 * n { // twice around
			g := p.next()
			if want := s + i%n; g != want {
				t.Fatalf("worker %d step %d: block %d, want %d", w, i, g, want)
			}
			if i < n {
				covered[g]++
			}
		}
	}
	if prevEnd != l.total || len(covered) != int(l.total) {
		t.Fatalf("regions cover %d of %d blocks (end %d)", len(covered), l.total, prevEnd)
	}
	// Consecutive blocks of a region are consecutive offsets in a chunk.
	a, b := l.addr(0), l.addr(1)
	if a.id != b.id || b.offset != a.offset+4<<10 {
		t.Fatalf("blocks 0 and 1: %v %d, %v %d", a.id, a.offset, b.id, b.offset)
	}
}

func TestPrefillRunsCoverEveryBlockOnce(t *testing.T) {
	for _, bs := range []uint32{4 << 10, 12 << 10, 1 << 20, 4 << 20} {
		cfg := testConfig(RandRead, bs, 40<<20)
		l := newLayout(cfg)
		runs := l.prefillRuns(max(prefillUnit, uint64(bs)))
		next := uint64(0)
		for _, r := range runs {
			if r.first != next || r.count == 0 {
				t.Fatalf("bs %d: run %+v, want first %d", bs, r, next)
			}
			if r.count*uint64(bs) > max(prefillUnit, uint64(bs)) {
				t.Fatalf("bs %d: run of %d blocks is larger than the unit", bs, r.count)
			}
			first, last := l.addr(r.first), l.addr(r.first+r.count-1)
			if first.id != last.id || uint64(last.offset) != uint64(first.offset)+(r.count-1)*uint64(bs) {
				t.Fatalf("bs %d: run %+v is not contiguous in one chunk: %v..%v", bs, r, first, last)
			}
			next += r.count
		}
		if next != l.total {
			t.Fatalf("bs %d: runs cover %d of %d blocks", bs, next, l.total)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := testConfig(RandWrite, 4<<10, 64<<20)
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Config){
		"mode":      func(c *Config) { c.Mode = "randtrim" },
		"bs small":  func(c *Config) { c.BS = 512 },
		"bs odd":    func(c *Config) { c.BS = 6000 },
		"bs large":  func(c *Config) { c.BS = 8 << 20 },
		"iodepth":   func(c *Config) { c.IODepth = 0 },
		"mix":       func(c *Config) { c.RWMixRead = 101 },
		"copysets":  func(c *Config) { c.Copysets = nil },
		"span":      func(c *Config) { c.Span = 5000 },
		"span tiny": func(c *Config) { c.Span = 4 << 10; c.BS = 8 << 10 },
		"sn":        func(c *Config) { c.Sn = 0 },
		"seq depth": func(c *Config) { c.Mode = SeqRead; c.Span = 8 << 10; c.IODepth = 64 },
	} {
		c := ok
		mut(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: no error for %+v", name, c)
		}
	}
	c := ok
	c.Runtime, c.Ops = 0, 0
	if d := c.withDefaults(); d.Runtime != DefaultRuntime || d.Span != 64<<20 {
		t.Errorf("defaults: runtime %s span %d", d.Runtime, d.Span)
	}
	c.Ops = 5
	if d := c.withDefaults(); d.Runtime != 0 {
		t.Errorf("with --ops the runtime is unbounded, got %s", d.Runtime)
	}
	if _, err := ParseMode("randrw"); err != nil {
		t.Error(err)
	}
}
