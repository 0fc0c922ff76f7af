package bench

import (
	"math/rand/v2"

	"github.com/chunkraft/chunkraft/cli"
)

// layout maps block numbers of a run to chunk addresses. Block g (0 <= g <
// total) is block g%blocksPerCopyset of copyset copysets[g/blocksPerCopyset];
// inside a copyset, block b is in chunk 1+b/blocksPerChunk at offset
// (b%blocksPerChunk)*bs. Blocks never straddle chunks.
type layout struct {
	pool             uint32
	copysets         []uint32
	bs               uint32
	blocksPerChunk   uint64 // whole blocks in a full chunk
	blocksPerCopyset uint64
	total            uint64
}

// blockAddr is where one block lives.
type blockAddr struct {
	id     cli.ChunkID
	offset uint32
}

func newLayout(c Config) layout {
	c = c.withDefaults()
	l := layout{pool: c.Pool, copysets: c.Copysets, bs: c.BS}
	if c.BS == 0 {
		return l
	}
	bs := uint64(c.BS)
	l.blocksPerChunk = ChunkSize / bs
	full := c.Span / ChunkSize
	l.blocksPerCopyset = full*l.blocksPerChunk + (c.Span%ChunkSize)/bs
	l.total = l.blocksPerCopyset * uint64(len(c.Copysets))
	return l
}

// addr returns the chunk and offset of block g.
func (l layout) addr(g uint64) blockAddr {
	cs := l.copysets[g/l.blocksPerCopyset]
	b := g % l.blocksPerCopyset
	return blockAddr{
		id:     cli.ChunkID{CopysetID: cli.CopysetID{Pool: l.pool, Copyset: cs}, Chunk: 1 + b/l.blocksPerChunk},
		offset: uint32((b % l.blocksPerChunk) * uint64(l.bs)),
	}
}

// region is worker w's share of the blocks in sequential modes: [start, end).
func (l layout) region(w, workers int) (start, end uint64) {
	n := uint64(workers)
	return l.total * uint64(w) / n, l.total * uint64(w+1) / n
}

// picker yields the block numbers one worker operates on.
type picker interface {
	next() uint64
}

// randomPicker picks uniformly random blocks.
type randomPicker struct {
	rng   *rand.Rand
	total uint64
}

func (p *randomPicker) next() uint64 { return p.rng.Uint64N(p.total) }

// seqPicker walks [start, end) in order, wrapping around.
type seqPicker struct {
	start, end, cur uint64
}

func (p *seqPicker) next() uint64 {
	g := p.cur
	p.cur++
	if p.cur >= p.end {
		p.cur = p.start
	}
	return g
}

// newPicker returns worker w's picker.
func (l layout) newPicker(m Mode, w, workers int, seed uint64) picker {
	if m.Sequential() {
		s, e := l.region(w, workers)
		return &seqPicker{start: s, end: e, cur: s}
	}
	return &randomPicker{rng: rand.New(rand.NewPCG(seed, uint64(w)+1)), total: l.total}
}

// prefillRun is one prefill write: count consecutive blocks from first, all
// in one chunk.
type prefillRun struct {
	first uint64
	count uint64
}

// prefillRuns cuts the whole block set into writes of about unit bytes (at
// least one block) that do not cross chunk boundaries.
func (l layout) prefillRuns(unit uint64) []prefillRun {
	per := max(unit/uint64(l.bs), 1)
	var out []prefillRun
	for ci := range l.copysets {
		base := uint64(ci) * l.blocksPerCopyset
		for b := uint64(0); b < l.blocksPerCopyset; {
			inChunk := l.blocksPerChunk - b%l.blocksPerChunk
			n := min(per, inChunk, l.blocksPerCopyset-b)
			out = append(out, prefillRun{first: base + b, count: n})
			b += n
		}
	}
	return out
}
