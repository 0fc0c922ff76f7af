package integrity

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/copyset/copysettest"
	"github.com/chunkraft/chunkraft/internal/chunkread"
	"github.com/chunkraft/chunkraft/internal/kinds"
	"github.com/klauspost/crc32"
)

// The chunk store of the conformance test is the copysettest toy machine
// registered as kinds.Chunk (its own append-only file in its Dir "chunks"):
// key "chunk<id>.<block>" holds one block of a chunk, hex encoded. A chunk
// exists once one of its blocks was written; unwritten blocks read as zeros.
const (
	toyBlockSize = 16
	toyBlocks    = 4
	toyChunkSize = toyBlockSize * toyBlocks
	toyChunkDir  = "chunks"
)

// toyChunks is chunk data by id: a chunkread.Chunks.
type toyChunks map[uint64][]byte

func (c toyChunks) ListChunks() []uint64 {
	ids := make([]uint64, 0, len(c))
	for id := range c {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (c toyChunks) ChunkSize() uint32 { return toyChunkSize }

func (c toyChunks) GetChunkHash(id uint64, off, length uint32) (string, error) {
	d, ok := c[id]
	if !ok {
		return "0", nil
	}
	if uint64(off)+uint64(length) > uint64(len(d)) {
		return "", fmt.Errorf("chunk %d: range %d+%d beyond its %d bytes", id, off, length, len(d))
	}
	return strconv.FormatUint(uint64(crc32.Checksum(d[off:off+length], scanCRCTable)), 10), nil
}

func (c toyChunks) ChunkMeta(id uint64) (chunkread.Meta, bool, error) {
	_, ok := c[id]
	return chunkread.Meta{Sn: 1}, ok, nil
}

// write sets one block of a chunk.
func (c toyChunks) write(id uint64, block int, data []byte) {
	if c[id] == nil {
		c[id] = make([]byte, toyChunkSize)
	}
	copy(c[id][block*toyBlockSize:], data)
}

// toyWriteOp is the toy store op writing one block of a chunk.
func toyWriteOp(id uint64, block int, data []byte) []byte {
	return copysettest.ToyOp(kinds.Chunk, fmt.Sprintf("chunk%d.%d", id, block), hex.EncodeToString(data))
}

// toyStore is the chunkread.Chunks the integrity machine scans: the chunks the
// toy machine's replicated state holds, read from it at every call.
type toyStore struct{ kv *copysettest.ToyKV }

func (s toyStore) chunks() (toyChunks, error) {
	c := toyChunks{}
	for line := range strings.Lines(s.kv.Dump()) {
		k, v, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "=")
		var id uint64
		var block int
		if _, err := fmt.Sscanf(k, "chunk%d.%d", &id, &block); err != nil || block < 0 || block >= toyBlocks {
			return nil, fmt.Errorf("toy store: bad key %q", k)
		}
		data, err := hex.DecodeString(v)
		if err != nil || len(data) != toyBlockSize {
			return nil, fmt.Errorf("toy store: bad block %s=%q", k, v)
		}
		c.write(id, block, data)
	}
	return c, nil
}

func (s toyStore) ListChunks() []uint64 {
	c, _ := s.chunks() // a bad line lists no chunk; the scans report it
	return c.ListChunks()
}

func (s toyStore) ChunkSize() uint32 { return toyChunkSize }

func (s toyStore) GetChunkHash(id uint64, off, length uint32) (string, error) {
	c, err := s.chunks()
	if err != nil {
		return "", err
	}
	return c.GetChunkHash(id, off, length)
}

func (s toyStore) ChunkMeta(id uint64) (chunkread.Meta, bool, error) {
	c, err := s.chunks()
	if err != nil {
		return chunkread.Meta{}, false, err
	}
	return c.ChunkMeta(id)
}

// toyStoreOf is the Deps.Store of the test: the toy machine opened first.
func toyStoreOf(opened copyset.Machines) (chunkread.Chunks, error) {
	kv, ok := copyset.MachineAs[*copysettest.ToyKV](opened, kinds.Chunk)
	if !ok {
		return nil, fmt.Errorf("the toy chunk store must open before the integrity machine")
	}
	return toyStore{kv}, nil
}

// integrityWorkload drives the integrity machine with the chunk store it
// scans: job ops of every type (progress from the job's cursor, as the
// scan worker proposes it, tracked on a shadow state), scan ops and block
// writes to the store (tracked on a shadow store, which gives the crc every
// scan op must compute at its index).
type integrityWorkload struct {
	t        *testing.T
	shadow   jobsState
	chunks   toyChunks
	wantCRC  map[uint64]uint32 // log index of a scan op -> its crc
	finished int               // jobs the log finishes
}

// op returns op i of the log, at log index i: neither machine's spec says
// Batch, so every op has an entry of its own.
func (w *integrityWorkload) op(rng *rand.Rand, i int) []byte {
	switch r := rng.IntN(10); {
	case r < 3:
		id, block := uint64(1+rng.IntN(4)), rng.IntN(toyBlocks)
		data := make([]byte, toyBlockSize)
		for j := range data {
			data[j] = byte(i + j*7)
		}
		w.chunks.write(id, block, data)
		return toyWriteOp(id, block, data)
	case r < 4:
		chunk, block := uint64(1+rng.IntN(5)), rng.IntN(toyBlocks) // chunk 5 is never written
		off, size := uint32(block*toyBlockSize), uint32((1+rng.IntN(toyBlocks-block))*toyBlockSize)
		crc, err := RangeCRC(w.chunks, chunk, off, size)
		if err != nil {
			w.t.Fatal(err)
		}
		w.wantCRC[uint64(i)] = crc
		op, err := encodeScanOp(copyset.NewGroupID(1, 1), chunk, off, size)
		if err != nil {
			w.t.Fatal(err)
		}
		return op
	}
	types := []string{opSchedule, opSchedule, opStart, opStart, opProgress, opProgress, opProgress, opPause, opResume, opCancel, opFail}
	op := &jobOp{Type: types[rng.IntN(len(types))], ID: 1 + rng.Int32N(w.shadow.NextID+1), Now: int64(1000 + i)}
	switch op.Type {
	case opSchedule:
		op.ID, op.Pool, op.Copyset, op.SchedTime = 0, 1, 1, int64(i)
	case opStart:
		op.Total = 2
	case opProgress:
		for _, j := range w.shadow.Jobs {
			if j.State == JobRunning && rng.IntN(4) > 0 {
				op.ID = j.ID // mostly a running job, so that jobs finish
			}
		}
		from := ScanCursor{}
		for _, j := range w.shadow.Jobs {
			if j.ID == op.ID {
				from = j.Cursor
			}
		}
		to := ScanCursor{Chunk: from.Chunk + 1}
		op.From, op.To, op.ChunksDone, op.RangesScanned = &from, &to, int(to.Chunk), to.Chunk
		op.Progress, op.Finished = int32(40*to.Chunk), to.Chunk >= 2
		if rng.IntN(4) == 0 {
			op.Results = []ScanMismatch{{Chunk: from.Chunk}}
		}
	case opFail:
		op.Error = "disk gone"
	}
	if _, changed, _ := w.shadow.apply(uint64(i), op); changed {
		w.shadow.Applied = uint64(i)
		if op.Finished {
			w.finished++
		}
	}
	b, err := encodeJobOp(op)
	if err != nil {
		w.t.Fatal(err)
	}
	return b
}

// integrityConformanceState is the integrity machine's replicated state,
// then the chunk store's.
func integrityConformanceState(ms copyset.Machines) (string, error) {
	m, ok := copyset.MachineAs[*Machine](ms, kinds.Integrity)
	if !ok {
		return "", fmt.Errorf("no integrity machine")
	}
	kv, ok := copyset.MachineAs[*copysettest.ToyKV](ms, kinds.Chunk)
	if !ok {
		return "", fmt.Errorf("no toy chunk store")
	}
	var b []byte
	var err error
	m.View(func(st *jobsState) { b, err = json.MarshalIndent(st, "", " ") })
	if err != nil {
		return "", err
	}
	return string(b) + "\n" + kv.Dump(), nil
}

// The integrity machine, opened after the chunk store as the server opens
// it, keeps the StateMachine contract, and its scan ops hash the store's
// replicated data as of their log index.
func TestIntegrityMachineConforms(t *testing.T) {
	svc := New(Deps{Store: toyStoreOf, Logger: slog.New(slog.DiscardHandler)})
	specs := []copyset.MachineSpec{copysettest.ToySpec(kinds.Chunk, toyChunkDir), svc.Spec()}
	w := &integrityWorkload{t: t, chunks: toyChunks{}, wantCRC: map[uint64]uint32{}}
	copysettest.RunStateMachineConformance(t, specs,
		copysettest.Workload{Op: w.op, State: integrityConformanceState})

	// The workload reached the job states worth checking.
	seen := map[JobState]bool{}
	for _, j := range w.shadow.Jobs {
		seen[j.State] = true
	}
	t.Logf("jobs at the end of the log: %d, next id %d, %d finished, states %v", len(w.shadow.Jobs), w.shadow.NextID, w.finished, seen)
	if w.shadow.NextID < 5 || w.finished == 0 {
		t.Errorf("the workload scheduled %d jobs, finished %d, reached states %v: too little to check", w.shadow.NextID, w.finished, seen)
	}

	// Every scan op was reported, by a replica applying the log in order,
	// with the crc of the data written before it; some of those ranges
	// were of chunks written by then.
	matched, reports := map[uint64]bool{}, len(svc.reports)
	for range reports {
		sm := <-svc.reports
		if want, ok := w.wantCRC[sm.GetIndex()]; ok && sm.GetLen() > 0 && sm.GetCrc() == want {
			matched[sm.GetIndex()] = true
		}
	}
	written := 0
	for _, crc := range w.wantCRC {
		if crc != crc32.Update(0, scanCRCTable, []byte("absent")) && crc != 0 {
			written++
		}
	}
	t.Logf("scan ops %d (%d of written chunks), reports %d", len(w.wantCRC), written, reports)
	if len(w.wantCRC) == 0 || written == 0 || reports == cap(svc.reports) {
		t.Errorf("scan ops %d, of written chunks %d, reports %d (queue of %d): too little to check", len(w.wantCRC), written, reports, cap(svc.reports))
	}
	for idx, crc := range w.wantCRC {
		if !matched[idx] {
			t.Errorf("scan op at index %d: no replica reported crc %s", idx, crcValue(crc))
		}
	}
}
