package datasync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/internal/chunkop"
	"github.com/chunkraft/chunkraft/internal/chunkread"
	"github.com/chunkraft/chunkraft/internal/kinds"
	"github.com/chunkraft/chunkraft/internal/testwait"
	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
	cpb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
	"google.golang.org/protobuf/proto"
)

// The exporter against an in-memory Source: packets, points, modes, pins
// and errors. The exactness of an export of a real copyset under
// concurrent writes is chunkserver's TestExportExact (the chunk machine is
// chunkserver's).

const fakeBlock = 512

// fakeSource is a copyset in memory: chunk images, a raft log with a
// retained prefix cut off below first, and the pins taken on it.
type fakeSource struct {
	mu              sync.Mutex
	chunks          map[uint64]chunkread.Image
	gone            map[uint64]bool // listed, but gone when imaged
	entries         map[uint64]copyset.LogEntry
	first           uint64
	applied, commit uint64
	pins            map[*fakePin]bool
	maxPinned       uint64 // the highest index a pin was moved to
	appliedReads    int    // AppliedIndex calls
	// fenced: the log indices a write fence held, by its owner.
	fenced map[uint64]string
}

func newFakeSource() *fakeSource {
	return &fakeSource{chunks: map[uint64]chunkread.Image{}, gone: map[uint64]bool{},
		entries: map[uint64]copyset.LogEntry{}, first: 1, pins: map[*fakePin]bool{}}
}

func (s *fakeSource) Pool() uint32    { return 1 }
func (s *fakeSource) Copyset() uint32 { return 3 }

func (s *fakeSource) ListChunks() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []uint64
	for id := range s.chunks {
		ids = append(ids, id)
	}
	for id := range s.gone {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (s *fakeSource) ChunkImage(id uint64, _ *chunkread.ImageBuffers) (chunkread.Image, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	img, ok := s.chunks[id]
	if !ok {
		return chunkread.Image{}, fmt.Errorf("chunk %d: %w", id, chunkread.ErrChunkGone)
	}
	return img, nil
}

func (s *fakeSource) AppliedIndex() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.appliedReads++
	return s.applied
}

// reads returns how often the exporter read the applied index.
func (s *fakeSource) reads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.appliedReads
}
func (s *fakeSource) CommitIndex() uint64 { s.mu.Lock(); defer s.mu.Unlock(); return s.commit }

// ReadBarrier is the applied index: every entry of the fake is applied
// (and acknowledged) when added.
func (s *fakeSource) ReadBarrier(context.Context) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied, nil
}

func (s *fakeSource) LogEntry(i uint64) (copyset.LogEntry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.entryLocked(i)
}

func (s *fakeSource) entryLocked(i uint64) (copyset.LogEntry, error) {
	switch {
	case i < s.first:
		return copyset.LogEntry{}, fmt.Errorf("index %d: %w (first index %d)", i, copyset.ErrLogCompacted, s.first)
	case i > s.commit:
		return copyset.LogEntry{}, fmt.Errorf("index %d: %w (commit index %d)", i, copyset.ErrLogBeyondLast, s.commit)
	}
	return s.entries[i], nil
}

func (s *fakeSource) PinLog(holder string, i uint64) (LogPin, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case i < s.first || i == 0:
		return nil, fmt.Errorf("pin %d for %s: %w (first index %d)", i, holder, copyset.ErrLogCompacted, s.first)
	case i > s.commit+1:
		return nil, fmt.Errorf("pin %d for %s: %w", i, holder, copyset.ErrLogBeyondLast)
	}
	p := &fakePin{s: s, index: i}
	s.pins[p] = true
	return p, nil
}

func (s *fakeSource) Materialize(_ context.Context, location string, size uint32) ([]byte, error) {
	return bytes.Repeat([]byte(location[:1]), int(size)), nil
}

func (s *fakeSource) WriteFenced(index uint64, owner string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.fenced[index]
	return h, ok && h != owner
}

func (s *fakeSource) livePins() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.pins) }

// add appends a committed and applied entry of ops (nil: a configuration
// entry), appended at index seconds.
func (s *fakeSource) add(ops ...copyset.Op) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.commit++
	s.applied = s.commit
	e := copyset.LogEntry{Index: s.commit, Term: 2, AppendedAt: time.UnixMilli(int64(s.commit) * 1000), Type: copyset.LogEntryOps, Ops: ops}
	if ops == nil {
		e.Type = copyset.LogEntryConfiguration
	}
	s.entries[s.commit] = e
	return s.commit
}

type fakePin struct {
	s        *fakeSource
	index    uint64
	released bool
}

func (p *fakePin) Entry(i uint64) (copyset.LogEntry, error) {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	if p.released {
		return copyset.LogEntry{}, copyset.ErrPinReleased
	}
	if i < p.index {
		return copyset.LogEntry{}, fmt.Errorf("read %d below the pin at %d", i, p.index)
	}
	return p.s.entryLocked(i)
}

func (p *fakePin) Advance(i uint64) error {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	if i < p.index || i > p.s.commit+1 {
		return fmt.Errorf("advance pin at %d to %d (commit %d)", p.index, i, p.s.commit)
	}
	p.index = i
	p.s.maxPinned = max(p.s.maxPinned, i)
	return nil
}

func (p *fakePin) Release() {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	p.released = true
	delete(p.s.pins, p)
}

// chunkOp is a chunk op of a log entry.
func chunkOp(t *testing.T, typ cpb.CHUNK_OP_TYPE, id, sn uint64, off uint32, data []byte) copyset.Op {
	t.Helper()
	req := &cpb.ChunkRequest{OpType: typ.Enum(), LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(3),
		ChunkId: proto.Uint64(id), Sn: proto.Uint64(sn), Offset: proto.Uint32(off), Size: proto.Uint32(uint32(len(data)))}
	if typ == cpb.CHUNK_OP_TYPE_CHUNK_OP_CREATE_CLONE {
		req.Location, req.Size = proto.String("m@cs"), proto.Uint32(4*fakeBlock)
	}
	enc, err := chunkop.Encode(req, data, nil)
	if err != nil {
		t.Fatal(err)
	}
	kind, payload, err := copyset.DecodeOp(enc)
	if err != nil {
		t.Fatal(err)
	}
	return copyset.Op{Kind: kind, Payload: payload}
}

// blocks makes chunk data of 4 blocks, each filled with its byte (0: zeros).
func blocks(b ...byte) []byte {
	var out []byte
	for _, c := range b {
		out = append(out, bytes.Repeat([]byte{c}, fakeBlock)...)
	}
	return out
}

// fixture is a copyset of five chunks (one gone, one all zero, one with a
// COW snapshot), entries 1-5 applied.
func fixture(t *testing.T) *fakeSource {
	s := newFakeSource()
	s.chunks[1] = chunkread.Image{ID: 1, Index: 3, Sn: 2, CorrectedSn: 1, BlockSize: fakeBlock, Data: blocks('a', 0, 'b', 'b')}
	s.chunks[2] = chunkread.Image{ID: 2, Index: 4, Sn: 1, BlockSize: fakeBlock, Data: blocks(0, 0, 0, 0)}
	s.gone[3] = true
	s.chunks[4] = chunkread.Image{ID: 4, Index: 5, Sn: 3, BlockSize: fakeBlock, Data: blocks('c', 'c', 'c', 'c'),
		SnapSn: 2, SnapCopied: []bool{false, true, true, false}, SnapData: blocks(0, 'd', 'e', 0)}
	s.chunks[5] = chunkread.Image{ID: 5, Index: 1, Sn: 1, BlockSize: fakeBlock, Data: blocks(0, 0, 0, 'f')}
	for i := range 5 {
		s.add(chunkOp(t, cpb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, 1, 1, 0, blocks(byte(i))))
	}
	return s
}

// collector keeps the packets an export sends.
type collector struct {
	mu      sync.Mutex
	packets []Packet
	onSend  func(p Packet) error
}

func (c *collector) send(_ context.Context, p Packet) error {
	p.Data = bytes.Clone(p.Data) // the export reuses the buffer once send returns
	c.mu.Lock()
	c.packets = append(c.packets, p)
	f := c.onSend
	c.mu.Unlock()
	if f != nil {
		return f(p)
	}
	return nil
}

func (c *collector) all() []Packet {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.packets)
}

// decodeChain decodes every packet that is not a heartbeat and checks
// that they chain.
func decodeChain(t *testing.T, packets []Packet) []*exportfmt.Packet {
	t.Helper()
	chain := exportfmt.NewChain(1, 3)
	var out []*exportfmt.Packet
	for i, p := range packets {
		if p.Data == nil {
			if p.Count != 0 || !proto.Equal(p.Start, p.Next) || p.Finished {
				t.Fatalf("packet %d: no data, but count %d, [%v, %v), finished %v", i, p.Count, p.Start, p.Next, p.Finished)
			}
			continue
		}
		d, err := exportfmt.Decode(p.Data)
		if err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
		if !proto.Equal(d.Header.StartPoint, p.Start) || !proto.Equal(d.Header.NextPoint, p.Next) ||
			d.Header.RecordCount != p.Count || d.Header.Finished != p.Finished {
			t.Fatalf("packet %d: header %v, packet [%v, %v) count %d finished %v", i, d.Header, p.Start, p.Next, p.Count, p.Finished)
		}
		if err := chain.AddPacket(exportfmt.PacketName(1, 3, d.Start), d); err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
		out = append(out, d)
	}
	return out
}

func startPoint() *dspb.SyncPoint { return exportfmt.StartPoint().Proto() }

// TestExportFull: a kFull export from the start: the snapshot phase (gone,
// zero and COW-snapshotted chunks, a chunk never split), the binlog phase
// to the end it chose (chunk ops only, a clone materialised, entries not
// split), the last packet finished, the chain unbroken, the pin advanced
// and released.
func TestExportFull(t *testing.T) {
	s := fixture(t)
	var c collector
	var end uint64
	first := true
	c.onSend = func(Packet) error {
		if first { // entries committed during the snapshot phase
			first = false
			s.add(chunkOp(t, cpb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, 1, 2, fakeBlock, blocks('g', 'g')),
				copyset.Op{Kind: kinds.Fence, Payload: []byte("x")})
			s.add() // a configuration entry
			s.add(chunkOp(t, cpb.CHUNK_OP_TYPE_CHUNK_OP_CREATE_CLONE, 9, 1, 0, nil))
			s.add(chunkOp(t, cpb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, 5, 1, 0, blocks('h', 'h')))
			s.add(chunkOp(t, cpb.CHUNK_OP_TYPE_CHUNK_OP_DELETE, 4, 0, 0, nil))
		}
		return nil
	}
	opts := ExportOptions{Mode: dspb.SyncMode_kFull, PacketBytes: 2500,
		OnBinlogEnd: func(_ context.Context, e uint64) error { end = e; return nil }}
	if err := Export(context.Background(), s, startPoint(), 0, opts, c.send); err != nil {
		t.Fatal(err)
	}
	packets := c.all()
	decoded := decodeChain(t, packets)
	if len(decoded) != len(packets) {
		t.Fatalf("%d of %d packets are heartbeats", len(packets)-len(decoded), len(packets))
	}
	if end != 10 {
		t.Fatalf("binlog end %d, want the commit index 10", end)
	}
	last := decoded[len(decoded)-1]
	if !last.Header.Finished || last.Next != exportfmt.BinlogPoint(11) {
		t.Fatalf("last packet: finished %v, next %v; want finished at binlog 11", last.Header.Finished, last.Next)
	}
	for i, p := range packets {
		if p.BinlogStart != 6 {
			t.Fatalf("packet %d: binlog start %d, want 6", i, p.BinlogStart)
		}
		if p.Finished != (i == len(packets)-1) {
			t.Fatalf("packet %d of %d: finished %v", i, len(packets), p.Finished)
		}
	}
	if decoded[0].Start != exportfmt.StartPoint() {
		t.Fatalf("first packet starts at %v", decoded[0].Start)
	}

	// Records: which packet holds each chunk, and what they say.
	packetOf := map[uint64]int{}
	var snaps []string
	var binlog []string
	for i, d := range decoded {
		size := 0
		units := map[string]bool{} // the chunks and entries of the packet
		for _, r := range d.Records {
			size += proto.Size(r)
			units[fmt.Sprint(r.GetSnapshot().GetChunkId()+r.GetCowSnapshot().GetChunkId(), "/", r.GetBinlog().GetIndex())] = true
			var id uint64
			switch k := r.Kind.(type) {
			case *syncpb.Record_Snapshot:
				id = k.Snapshot.ChunkId
				sr := k.Snapshot
				snaps = append(snaps, fmt.Sprintf("chunk %d sn %d/%d at %d: %d bytes %q, zero %d, as of %d",
					id, sr.Sn, sr.CorrectedSn, sr.Offset, len(sr.Data), firstByte(sr.Data), sr.ZeroLength, sr.AsOfIndex))
			case *syncpb.Record_CowSnapshot:
				id = k.CowSnapshot.ChunkId
				cr := k.CowSnapshot
				snaps = append(snaps, fmt.Sprintf("chunk %d snapshot %d at %d: %d bytes %q, as of %d",
					id, cr.SnapshotSn, cr.Offset, len(cr.Data), firstByte(cr.Data), cr.AsOfIndex))
			case *syncpb.Record_Binlog:
				b := k.Binlog
				binlog = append(binlog, fmt.Sprintf("%d: %v chunk %d, %d bytes %q", b.Index, b.Op.GetOpType(), b.Op.GetChunkId(), len(b.Data), firstByte(b.Data)))
				if b.AppendedAtMs != int64(b.Index)*1000 || b.Term != 2 {
					t.Fatalf("binlog record %d: appended at %d ms, term %d", b.Index, b.AppendedAtMs, b.Term)
				}
				continue
			}
			if j, ok := packetOf[id]; ok && j != i {
				t.Fatalf("chunk %d spans packets %d and %d", id, j, i)
			}
			packetOf[id] = i
		}
		if len(units) > 1 && size > opts.PacketBytes {
			t.Fatalf("packet %d: %d bytes of %d chunks or entries, more than the target %d", i, size, len(units), opts.PacketBytes)
		}
	}
	wantSnaps := []string{
		`chunk 1 sn 2/1 at 0: 512 bytes "a", zero 0, as of 3`,
		`chunk 1 sn 2/1 at 1024: 1024 bytes "b", zero 0, as of 3`,
		`chunk 2 sn 1/0 at 0: 0 bytes "", zero 2048, as of 4`,
		`chunk 4 sn 3/0 at 0: 2048 bytes "c", zero 0, as of 5`,
		`chunk 4 snapshot 2 at 512: 1024 bytes "d", as of 5`,
		`chunk 5 sn 1/0 at 1536: 512 bytes "f", zero 0, as of 1`,
	}
	if !slices.Equal(snaps, wantSnaps) {
		t.Fatalf("snapshot records:\n%s\nwant\n%s", strings.Join(snaps, "\n"), strings.Join(wantSnaps, "\n"))
	}
	wantBinlog := []string{
		`6: CHUNK_OP_WRITE chunk 1, 1024 bytes "g"`,
		`8: CHUNK_OP_CREATE_CLONE chunk 9, 2048 bytes "m"`,
		`9: CHUNK_OP_WRITE chunk 5, 1024 bytes "h"`,
		`10: CHUNK_OP_DELETE chunk 4, 0 bytes ""`,
	}
	if !slices.Equal(binlog, wantBinlog) {
		t.Fatalf("binlog records:\n%s\nwant\n%s", strings.Join(binlog, "\n"), strings.Join(wantBinlog, "\n"))
	}
	if packetOf[1] != packetOf[2] || packetOf[4] == packetOf[2] {
		t.Fatalf("chunks in packets %v: want 1 and 2 together, 4 apart", packetOf)
	}
	if s.livePins() != 0 || s.maxPinned != 11 {
		t.Fatalf("%d pins left, pin moved up to %d (want none left, moved to 11)", s.livePins(), s.maxPinned)
	}
}

func firstByte(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return string(b[:1])
}

// TestExportFullNothingToBinlog: a kFull export whose binlog phase has no
// entry ends with a finished packet [start, start) that is sent and
// decodes.
func TestExportFullNothingToBinlog(t *testing.T) {
	s := fixture(t)
	var c collector
	if err := Export(context.Background(), s, startPoint(), 0, ExportOptions{Mode: dspb.SyncMode_kFull}, c.send); err != nil {
		t.Fatal(err)
	}
	packets := c.all()
	decoded := decodeChain(t, packets)
	last := packets[len(packets)-1]
	if len(packets) != 2 || !last.Finished || last.Data == nil || !proto.Equal(last.Start, last.Next) ||
		decoded[1].Start != exportfmt.BinlogPoint(6) {
		t.Fatalf("packets %v; want the snapshot phase in one, then a finished empty one at binlog 6", packets)
	}
}

// TestExportHeartbeat: a tailing export sends an empty packet when idle,
// the entries committed meanwhile, and stops (pin released) when ctx ends.
// A heartbeat covers the entries read since its point (none holding a
// chunk op) and, as every packet of the binlog phase, the writes
// acknowledged before a read barrier that the export has read up to.
func TestExportHeartbeat(t *testing.T) {
	s := fixture(t)
	var c collector
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	seen := make(chan Packet, 100)
	c.onSend = func(p Packet) error { seen <- p; return nil }
	done := make(chan error, 1)
	go func() {
		done <- Export(ctx, s, binlogAt(6), 6, ExportOptions{Mode: dspb.SyncMode_kFullAndContinuous,
			Idle: 20 * time.Millisecond, Linger: -1}, c.send)
	}()
	wait := func(what string, ok func(p Packet) bool) {
		t.Helper()
		timeout := time.After(5 * time.Second)
		for {
			select {
			case p := <-seen:
				if ok(p) {
					return
				}
			case err := <-done:
				t.Fatalf("export ended waiting for %s: %v", what, err)
			case <-timeout:
				t.Fatalf("no %s in 5 s", what)
			}
		}
	}
	// covers: a packet that covers index and every write acknowledged
	// before since (Unix ms).
	covers := func(p Packet, index uint64, since int64) bool {
		return p.CoveredIndex == index && p.CoveredMs >= since && p.StartStateMs == 0
	}
	heartbeat := func(at, covered uint64, since int64) func(p Packet) bool {
		return func(p Packet) bool {
			return p.Data == nil && p.Count == 0 && proto.Equal(p.Start, binlogAt(at)) && proto.Equal(p.Next, binlogAt(at)) &&
				covers(p, covered, since)
		}
	}
	began := time.Now().UnixMilli()
	wait("heartbeat at 6", heartbeat(6, 5, began))
	s.add(chunkOp(t, cpb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, 2, 1, 0, blocks('z')))
	acked := time.Now().UnixMilli() // the fake acknowledges an entry when it is added
	wait("packet [6, 7) with the write", func(p Packet) bool {
		return p.Count == 1 && proto.Equal(p.Next, binlogAt(7)) && p.CoveredIndex == 6 && p.CoveredMs != 0
	})
	wait("heartbeat at 7 covering the write", heartbeat(7, 6, acked))
	// Entries without chunk ops (the sync machine's own Advance and Touch
	// ops) are held back, heartbeats go on at 7, until records come: a
	// packet for them would replicate an Advance, one more such entry.
	// The heartbeats cover them.
	for range 3 {
		s.add(copyset.Op{Kind: kinds.Sync, Payload: []byte{1}})
	}
	acked = time.Now().UnixMilli()
	wait("heartbeat at 7 covering the entries without records", heartbeat(7, 9, acked))
	wait("another heartbeat at 7", heartbeat(7, 9, acked))
	s.add(chunkOp(t, cpb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, 2, 1, 0, blocks('y')))
	wait("packet [7, 11)", func(p Packet) bool {
		return p.Count == 1 && proto.Equal(p.Start, binlogAt(7)) && proto.Equal(p.Next, binlogAt(11)) && covers(p, 10, acked)
	})
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("export returned %v, want context.Canceled", err)
	}
	decodeChain(t, c.all())
	if s.livePins() != 0 {
		t.Fatalf("%d pins left", s.livePins())
	}
}

// TestExportIncrementalStart: FirstIndexAtOrAfter finds the first entry
// appended at or after a time, and names the earliest time it can serve
// when the log before it is gone; an export from a compacted binlog point
// fails with ErrLogGone, one from a snapshot point in incremental mode is
// refused.
func TestExportIncrementalStart(t *testing.T) {
	s := newFakeSource()
	if i, err := FirstIndexAtOrAfter(s, 5); err != nil || i != 1 {
		t.Fatalf("empty log: %d, %v; want 1", i, err)
	}
	for range 10 { // appended at 1000, 2000, ... 10000 ms
		s.add(chunkOp(t, cpb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, 1, 1, 0, blocks('x')))
	}
	for _, c := range []struct{ ms, want uint64 }{{0, 1}, {1000, 1}, {3500, 4}, {4000, 4}, {4001, 5}, {10000, 10}, {99999, 11}} {
		if i, err := FirstIndexAtOrAfter(s, c.ms); err != nil || i != c.want {
			t.Fatalf("start %d ms: %d, %v; want %d", c.ms, i, err, c.want)
		}
	}
	s.first = 5 // entries 1-4 compacted away
	for _, ms := range []uint64{0, 3000, 5000} {
		_, err := FirstIndexAtOrAfter(s, ms)
		if !errors.Is(err, ErrLogGone) || !strings.Contains(err.Error(), "retains its log from index 5") ||
			!strings.Contains(err.Error(), "earliest start time it can serve is 5001 ms") {
			t.Fatalf("start %d ms with the log from index 5: %v", ms, err)
		}
	}
	if i, err := FirstIndexAtOrAfter(s, 5001); err != nil || i != 6 {
		t.Fatalf("start 5001 ms: %d, %v; want 6", i, err)
	}
	opts := ExportOptions{Mode: dspb.SyncMode_kIncrementalByTimestamp}
	var c collector
	if err := Export(context.Background(), s, binlogAt(3), 0, opts, c.send); !errors.Is(err, ErrLogGone) {
		t.Fatalf("export from compacted index 3: %v, want ErrLogGone", err)
	}
	if err := Export(context.Background(), s, startPoint(), 0, opts, c.send); err == nil || !strings.Contains(err.Error(), "no snapshot phase") {
		t.Fatalf("incremental export from the start: %v", err)
	}
	if len(c.all()) != 0 || s.livePins() != 0 {
		t.Fatalf("failed exports sent %d packets, left %d pins", len(c.all()), s.livePins())
	}
}

// TestExportResume: an export stopped by its sender after two packets and
// resumed from the stored point with the stored binlog start continues
// with exactly the packets of an export that was never stopped; a resume
// whose binlog start the log no longer holds fails with ErrLogGone.
func TestExportResume(t *testing.T) {
	opts := ExportOptions{Mode: dspb.SyncMode_kFull, PacketBytes: 1500}
	var whole collector
	if err := Export(context.Background(), fixture(t), startPoint(), 0, opts, whole.send); err != nil {
		t.Fatal(err)
	}

	s := fixture(t)
	errStop := errors.New("receiver went away")
	var first collector
	first.onSend = func(Packet) error {
		if len(first.all()) == 3 {
			return errStop
		}
		return nil
	}
	if err := Export(context.Background(), s, startPoint(), 0, opts, first.send); err != errStop {
		t.Fatalf("export with a failing sender: %v, want the sender's error", err)
	}
	if s.livePins() != 0 {
		t.Fatalf("%d pins left after a failed send", s.livePins())
	}
	if n := len(first.all()); n != 3 {
		t.Fatalf("%d packets sent, want 3: none after the refused one", n)
	}
	got := first.all()[:2] // the third was refused
	at := got[1].Next
	if at.GetType() != dspb.SyncType_kSNAPSHOT || at.Pk == nil {
		t.Fatalf("second packet ends at %v, want a snapshot point", at)
	}
	var rest collector
	resumed := opts
	resumed.StartStateMs = got[0].StartStateMs
	if err := Export(context.Background(), s, at, got[0].BinlogStart, resumed, rest.send); err != nil {
		t.Fatal(err)
	}
	got = append(got, rest.all()...)
	decodeChain(t, got)
	want := whole.all()
	if len(got) != len(want) {
		t.Fatalf("resumed export: %d packets, uninterrupted %d", len(got), len(want))
	}
	// The exports ran at different times: their packets differ in the
	// times they carry only, and the resumed one carries the time of its
	// first run's starting state throughout.
	for i := range want {
		if got[i].StartStateMs != got[0].StartStateMs || got[i].StartStateMs == 0 {
			t.Fatalf("packet %d of the resumed export has start time %d, its first packet %d", i, got[i].StartStateMs, got[0].StartStateMs)
		}
		if !bytes.Equal(withoutTimes(t, got[i].Data), withoutTimes(t, want[i].Data)) {
			t.Fatalf("packet %d of the resumed export differs from the uninterrupted one", i)
		}
	}

	s.first = 7 // the binlog start 6 is gone
	err := Export(context.Background(), s, at, 6, opts, rest.send)
	if !errors.Is(err, ErrLogGone) || !strings.Contains(err.Error(), "log index 6") {
		t.Fatalf("resume with the binlog start compacted: %v", err)
	}
	for _, c := range []struct {
		from  *dspb.SyncPoint
		start uint64
		want  string
	}{
		{snapAt(4, 512), 6, "chunk boundaries"},
		{snapAt(4, 0), 0, "needs the sub-task's binlog start"},
		{&dspb.SyncPoint{}, 6, "no type"},
	} {
		if err := Export(context.Background(), s, c.from, c.start, opts, rest.send); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("export from %v, binlog start %d: %v, want %q", c.from, c.start, err, c.want)
		}
	}
	if s.livePins() != 0 {
		t.Fatalf("%d pins left", s.livePins())
	}
}

// withoutTimes returns packet b encoded again without the times of its
// header that depend on when it was exported (start_state_ms, covered_ms,
// written_at_ms).
func withoutTimes(t *testing.T, b []byte) []byte {
	t.Helper()
	p, err := exportfmt.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	h := proto.CloneOf(p.Header)
	if h.StartStateMs == 0 {
		t.Fatalf("packet at %v has no start time", p.Start)
	}
	h.StartStateMs, h.CoveredMs, h.WrittenAtMs = 0, 0, 0
	out, err := exportfmt.Encode(h, p.Records)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestExportFullStoredEnd: a kFull export resumed in its binlog phase with
// the stored binlog end exports up to it and no further, finished, without
// choosing another end.
func TestExportFullStoredEnd(t *testing.T) {
	s := fixture(t)
	for range 5 {
		s.add(chunkOp(t, cpb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, 2, 1, 0, blocks('y')))
	}
	var c collector
	opts := ExportOptions{Mode: dspb.SyncMode_kFull, BinlogEnd: 8, PacketBytes: 1200,
		OnBinlogEnd: func(context.Context, uint64) error { t.Error("binlog end chosen again"); return nil }}
	if err := Export(context.Background(), s, binlogAt(6), 6, opts, c.send); err != nil {
		t.Fatal(err)
	}
	decoded := decodeChain(t, c.all())
	var indexes []uint64
	for _, d := range decoded {
		for _, r := range d.Records {
			indexes = append(indexes, r.GetBinlog().GetIndex())
		}
	}
	last := decoded[len(decoded)-1]
	if !slices.Equal(indexes, []uint64{6, 7, 8}) || len(decoded) != 2 || !last.Header.Finished || last.Next != exportfmt.BinlogPoint(9) {
		t.Fatalf("%d packets of records %v ending at %v finished %v; want 6-8 in two, finished at binlog 9",
			len(decoded), indexes, last.Next, last.Header.Finished)
	}
	if err := Export(context.Background(), s, binlogAt(10), 6, opts, c.send); err == nil || !strings.Contains(err.Error(), "past the binlog end 8") {
		t.Fatalf("export from beyond the binlog end: %v", err)
	}
}

// BenchmarkExportSnapshot: the snapshot phase of 16 MiB chunks, 3/4 of
// their blocks written, a quarter copied into a COW snapshot (the bytes
// per second are the chunks' data, sent and discarded).
func BenchmarkExportSnapshot(b *testing.B) {
	const chunkSize, bs, chunks = 16 << 20, 4 << 10, 16
	data, snap := make([]byte, chunkSize), make([]byte, chunkSize)
	copied := make([]bool, chunkSize/bs)
	for i := range copied {
		if i%4 != 3 {
			for j := i * bs; j < (i+1)*bs; j += 64 {
				data[j] = byte(i + j)
			}
		}
		copied[i] = i%4 == 0
		snap[i*bs] = byte(i)
	}
	s := newFakeSource()
	for id := uint64(1); id <= chunks; id++ {
		s.chunks[id] = chunkread.Image{ID: id, Index: 1, Sn: 2, BlockSize: bs, Data: data, SnapSn: 1, SnapCopied: copied, SnapData: snap}
	}
	s.add()
	b.SetBytes(chunks * chunkSize)
	for b.Loop() {
		err := Export(context.Background(), s, startPoint(), 0, ExportOptions{Mode: dspb.SyncMode_kFull},
			func(context.Context, Packet) error { return nil })
		if err != nil {
			b.Fatal(err)
		}
	}
}

// TestExportWaitsForApplied: a snapshot phase resumed on a replica that has
// not applied the entries before the binlog start waits for them (ctx
// bounds the wait) before it images a chunk.
func TestExportWaitsForApplied(t *testing.T) {
	s := fixture(t)
	s.mu.Lock()
	s.applied = 3 // entries 4 and 5 committed, not applied yet
	s.mu.Unlock()
	var c collector
	opts := ExportOptions{Mode: dspb.SyncMode_kFull}
	// waiting waits until export, running on s, has read the applied index
	// three more times (found it behind, and looked again twice) without
	// returning.
	waiting := func(exported chan error) {
		t.Helper()
		since := s.reads()
		testwait.Until(t, 5*time.Second, func() error {
			select {
			case err := <-exported:
				t.Fatalf("export on a replica behind the binlog start returned %v without waiting", err)
			default:
			}
			if n := s.reads() - since; n < 3 {
				return fmt.Errorf("the export read the applied index %d times, want 3", n)
			}
			return nil
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exported := make(chan error, 1)
	go func() { exported <- Export(ctx, s, snapAt(4, 0), 6, opts, c.send) }()
	waiting(exported)
	cancel()
	if err := <-exported; err != context.Canceled {
		t.Fatalf("export on a replica behind the binlog start: %v, want it cancelled", err)
	}
	if len(c.all()) != 0 || s.livePins() != 0 {
		t.Fatalf("sent %d packets, left %d pins", len(c.all()), s.livePins())
	}
	c.onSend = func(Packet) error {
		if s.AppliedIndex() < 5 {
			t.Error("a packet was sent before the replica applied index 5")
		}
		return nil
	}
	go func() { exported <- Export(context.Background(), s, snapAt(4, 0), 6, opts, c.send) }()
	waiting(exported)
	s.mu.Lock()
	s.applied = 5
	s.mu.Unlock()
	if err := <-exported; err != nil {
		t.Fatal(err)
	}
	if d := decodeChain(t, c.all()); len(d) == 0 || d[0].Start != exportfmt.SnapshotPoint(4, 0) {
		t.Fatalf("resumed export: %d packets", len(d))
	}
}

// TestExportMaterializeError: a clone whose source cannot be read stops
// the export with an error naming the entry and the location.
func TestExportMaterializeError(t *testing.T) {
	s := &failingClones{fixture(t)}
	s.add(chunkOp(t, cpb.CHUNK_OP_TYPE_CHUNK_OP_CREATE_CLONE, 9, 1, 0, nil))
	var c collector
	err := Export(context.Background(), s, binlogAt(6), 6, ExportOptions{Mode: dspb.SyncMode_kFull}, c.send)
	if err == nil || !strings.Contains(err.Error(), `log index 6: materialise clone chunk 9 from "m@cs": source down`) {
		t.Fatalf("export of a clone with an unreadable source: %v", err)
	}
	if len(c.all()) != 0 || s.livePins() != 0 {
		t.Fatalf("sent %d packets, left %d pins", len(c.all()), s.livePins())
	}
}

type failingClones struct{ *fakeSource }

func (failingClones) Materialize(context.Context, string, uint32) ([]byte, error) {
	return nil, errors.New("source down")
}

// TestExportSkipsFencedOps: a chunk op a write fence refused at apply is
// not exported (a replay would apply it), the fence owner's own ops are;
// and the binlog phase exports no entry the replica has not applied (the
// fence in force there is not known before).
func TestExportSkipsFencedOps(t *testing.T) {
	s := fixture(t)
	owned := func(id uint64, owner string) copyset.Op {
		req := &cpb.ChunkRequest{OpType: cpb.CHUNK_OP_TYPE_CHUNK_OP_WRITE.Enum(), LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(3),
			ChunkId: proto.Uint64(id), Sn: proto.Uint64(1), Offset: proto.Uint32(0), Size: proto.Uint32(fakeBlock)}
		enc, err := chunkop.EncodeOwned(req, blocks('o'), nil, owner)
		if err != nil {
			t.Fatal(err)
		}
		kind, payload, err := copyset.DecodeOp(enc)
		if err != nil {
			t.Fatal(err)
		}
		return copyset.Op{Kind: kind, Payload: payload}
	}
	s.add(chunkOp(t, cpb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, 1, 1, 0, blocks('a')))            // 6: before the fence
	s.add(copyset.Op{Kind: kinds.WriteFence, Payload: []byte("set")})                    // 7: the fence
	s.add(chunkOp(t, cpb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, 2, 1, 0, blocks('b')))            // 8: refused
	s.add(owned(3, "dm:t"), chunkOp(t, cpb.CHUNK_OP_TYPE_CHUNK_OP_DELETE, 5, 0, 0, nil)) // 9: the owner's, then refused
	s.add(chunkOp(t, cpb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, 4, 1, 0, blocks('c')))            // 10: after the lift
	s.mu.Lock()
	s.fenced = map[uint64]string{8: "dm:t", 9: "dm:t"}
	s.applied = 8 // 9 and 10 committed, not applied yet
	s.mu.Unlock()
	var c collector
	c.onSend = func(p Packet) error {
		if p.Next.GetType() == dspb.SyncType_kBINLOG && p.Next.GetOffset() > s.AppliedIndex()+1 {
			t.Errorf("a packet up to %v was sent with the replica applied to %d", p.Next, s.AppliedIndex())
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exported := make(chan error, 1)
	go func() {
		exported <- Export(ctx, s, binlogAt(6), 6, ExportOptions{Mode: dspb.SyncMode_kIncrementalByTimestamp, Idle: 10 * time.Millisecond, Linger: -1}, c.send)
	}()
	var got []string
	records := func() []string {
		var out []string
		for _, d := range decodeChain(t, c.all()) {
			for _, r := range d.Records {
				b := r.GetBinlog()
				out = append(out, fmt.Sprintf("%d.%d chunk %d", b.GetIndex(), b.GetOpPosition(), b.GetOp().GetChunkId()))
			}
		}
		return out
	}
	testwait.Until(t, 5*time.Second, func() error {
		if got = records(); len(got) < 1 {
			return fmt.Errorf("records %v", got)
		}
		return nil
	})
	s.mu.Lock()
	s.applied = 10
	s.mu.Unlock()
	want := []string{"6.0 chunk 1", "9.0 chunk 3", "10.0 chunk 4"}
	testwait.Until(t, 5*time.Second, func() error {
		if got = records(); !slices.Equal(got, want) {
			return fmt.Errorf("records %v, want %v", got, want)
		}
		return nil
	})
	cancel()
	if err := <-exported; err != context.Canceled {
		t.Fatalf("export: %v", err)
	}
}

// TestExportFlushesAtAWriteFence: a tailing export that reads a write
// fence op sends what it holds at once, and a heartbeat covering the
// fence, without waiting for its linger or idle time.
func TestExportFlushesAtAWriteFence(t *testing.T) {
	s := fixture(t)
	var c collector
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exported := make(chan error, 1)
	go func() {
		exported <- Export(ctx, s, binlogAt(6), 6, ExportOptions{Mode: dspb.SyncMode_kIncrementalByTimestamp, Idle: time.Hour, Linger: time.Hour}, c.send)
	}()
	s.add(chunkOp(t, cpb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, 1, 1, 0, blocks('a')))  // 6
	s.add(copyset.Op{Kind: kinds.WriteFence, Payload: []byte(`{"op":"set"}`)}) // 7
	testwait.Until(t, 10*time.Second, func() error {
		var covered uint64
		var records int
		for _, p := range c.all() {
			covered = max(covered, p.CoveredIndex)
			records += int(p.Count)
		}
		if records != 1 || covered < 7 {
			return fmt.Errorf("sent %d records, covered up to %d; want 1 and 7", records, covered)
		}
		return nil
	})
	cancel()
	if err := <-exported; err != context.Canceled {
		t.Fatalf("export: %v", err)
	}
}

// TestExportStampsPackets: every packet of an export carries the export's
// id and the time it was built (header export_id and written_at_ms, and
// Packet.WrittenAtMs), and so does a heartbeat (its WrittenAtMs).
func TestExportStampsPackets(t *testing.T) {
	s := fixture(t)
	id := NewExportID()
	var c collector
	before := time.Now().UnixMilli()
	if err := Export(context.Background(), s, startPoint(), 0, ExportOptions{Mode: dspb.SyncMode_kFull, PacketBytes: 1, ExportID: id}, c.send); err != nil {
		t.Fatal(err)
	}
	after := time.Now().UnixMilli()
	packets := c.all()
	for i, d := range decodeChain(t, packets) {
		if h := d.Header; h.GetExportId() != id || h.GetWrittenAtMs() < before || h.GetWrittenAtMs() > after {
			t.Fatalf("packet %d: export %q written at %d, want %q within [%d, %d]", i, h.GetExportId(), h.GetWrittenAtMs(), id, before, after)
		}
	}
	for i, p := range packets {
		if p.WrittenAtMs < before || p.WrittenAtMs > after {
			t.Fatalf("packet %d: written at %d, not within [%d, %d]", i, p.WrittenAtMs, before, after)
		}
	}
	if len(packets) < 3 {
		t.Fatalf("%d packets", len(packets))
	}

	// A tailing export's heartbeat.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	beat := make(chan Packet, 1)
	done := make(chan error, 1)
	go func() {
		done <- Export(ctx, s, binlogAt(6), 6, ExportOptions{Mode: dspb.SyncMode_kFullAndContinuous, Idle: 10 * time.Millisecond, Linger: -1, ExportID: id},
			func(_ context.Context, p Packet) error {
				if p.Data == nil {
					select {
					case beat <- p:
					default:
					}
				}
				return nil
			})
	}()
	select {
	case p := <-beat:
		if p.WrittenAtMs < after {
			t.Fatalf("heartbeat written at %d, before %d", p.WrittenAtMs, after)
		}
	case err := <-done:
		t.Fatalf("export ended: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("no heartbeat in 5 s")
	}
}
