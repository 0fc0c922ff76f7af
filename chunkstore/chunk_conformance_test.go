package chunkstore

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/chunkraft/chunkraft/chunkstore/datastore"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/copyset/copysettest"
	"github.com/chunkraft/chunkraft/internal/chunkop"
	"github.com/chunkraft/chunkraft/internal/kinds"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// conformanceLayout is a small chunk layout: 64 KiB chunks of 4 KiB
// blocks, so that the suite's copies stay small.
var conformanceLayout = datastore.Options{ChunkSize: 64 << 10, BlockSize: 4 << 10}

// conformanceSpecs are the chunk store's machine specs up to and
// including kind, on conformanceLayout (no clone sources, no fences).
func conformanceSpecs(t *testing.T, kind copyset.Kind) []copyset.MachineSpec {
	t.Helper()
	s := &Store{log: slog.New(slog.DiscardHandler), layout: conformanceLayout}
	specs := s.Specs()
	for i, sp := range specs {
		if sp.Kind == kind {
			return specs[:i+1]
		}
	}
	t.Fatalf("no machine spec of kind %d", kind)
	return nil
}

// chunkWorkload writes blocks of a few chunks at one sn: the chunk ops
// the StateMachine contract names as idempotent by themselves (writes at
// fixed offsets). del adds chunk deletes (a chunk file deleted while a
// snapshot streams arrives as gone, not zero-filled: the store cannot
// open a file of zeros). cow adds sn bumps (so later writes copy on write
// into chunk snapshots) and snapshot deletes: these pass because ops carry
// their index into the store (datastore Replay), so a write refused for an
// older snapshot is not accepted when replayed after the snapshot's
// deletion, and because chunks stream as images (chunk_stream.go), not as
// fuzzy copies of a chunk file that could hold a block whose crc entry is
// from another moment, which a later copy-on-write read would refuse. Both
// are on in TestChunkMachineConforms.
type chunkWorkload struct {
	t        *testing.T
	del, cow bool
	sn       uint64
}

func (w *chunkWorkload) op(rng *rand.Rand, i int) []byte {
	req, data := w.request(rng, i)
	op, err := chunkop.Encode(req, data, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	return op
}

// request draws the i-th chunk op's request and data.
func (w *chunkWorkload) request(rng *rand.Rand, i int) (*pb.ChunkRequest, []byte) {
	if w.sn == 0 {
		w.sn = 1
	}
	req := &pb.ChunkRequest{LogicPoolId: new(uint32(1)), CopysetId: new(uint32(1)),
		ChunkId: new(uint64(1 + rng.IntN(5))), Sn: new(w.sn)}
	var data []byte
	switch r := rng.IntN(20); {
	case r == 0 && w.cow:
		w.sn++
		req.Sn = new(w.sn)
		fallthrough
	case r < 16:
		req.OpType = pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE.Enum()
		blocks := conformanceLayout.ChunkSize / conformanceLayout.BlockSize
		n := 1 + rng.Uint32N(3)
		req.Offset = new(rng.Uint32N(blocks-n+1) * conformanceLayout.BlockSize)
		data = make([]byte, n*conformanceLayout.BlockSize)
		for j := range data {
			data[j] = byte(i + j*7)
		}
		req.Size = new(uint32(len(data)))
	case r < 18 && w.del:
		req.OpType = pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE.Enum()
	case w.cow:
		req.OpType = pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE_SNAP.Enum()
		req.CorrectedSn = new(w.sn)
	default:
		return w.request(rng, i)
	}
	return req, data
}

// chunkState lists every chunk of the store: its info, a hash of its
// data and of its snapshot's.
func chunkState(ms copyset.Machines) (string, error) {
	m, ok := copyset.MachineAs[*chunkMachine](ms, kinds.Chunk)
	if !ok {
		return "", fmt.Errorf("no chunk machine")
	}
	var b strings.Builder
	buf := make([]byte, conformanceLayout.ChunkSize)
	for _, id := range m.store.ListChunks() {
		info, err := m.store.GetChunkInfo(id)
		if err != nil {
			return "", fmt.Errorf("chunk %d: %w", id, err)
		}
		if err := m.store.ReadChunk(id, buf, 0); err != nil {
			return "", fmt.Errorf("read chunk %d: %w", id, err)
		}
		fmt.Fprintf(&b, "chunk %d sn %d corrected %d snap %d data %x", id, info.Sn, info.CorrectedSn, info.SnapSn, sha256.Sum256(buf))
		if info.SnapSn != 0 {
			if err := m.store.ReadChunkSnapshot(id, info.SnapSn, buf, 0); err != nil {
				return "", fmt.Errorf("read snapshot of chunk %d: %w", id, err)
			}
			fmt.Fprintf(&b, " snapdata %x", sha256.Sum256(buf))
		}
		b.WriteString("\n")
	}
	return b.String(), nil
}

func TestChunkMachineConforms(t *testing.T) {
	w := &chunkWorkload{t: t, del: true, cow: true}
	copysettest.RunStateMachineConformance(t, conformanceSpecs(t, kinds.Chunk),
		copysettest.Workload{Op: w.op, State: chunkState})
}

// TestChunkGroupsWithCheckpointConform: entries that are groups of one to
// four chunk ops (writes with sn bumps, snapshot and chunk deletes) and a
// checkpoint op of a toy machine stamping its state with the index alone
// keep both exactly once: replayed from every op boundary (inside a group
// too) and every earlier entry, from a fuzzy copy, by a snapshot install
// and after restarts, the chunks and the checkpoint converge.
func TestChunkGroupsWithCheckpointConform(t *testing.T) {
	const checkpointKind copyset.Kind = 203
	ckpt := copysettest.ToySpec(checkpointKind, "checkpoint")
	ckpt.Group = true
	w := &chunkWorkload{t: t, del: true, cow: true}
	op := 0
	copysettest.RunStateMachineConformance(t, append(conformanceSpecs(t, kinds.Chunk), ckpt), copysettest.Workload{
		Group: func(rng *rand.Rand, i int) [][]byte {
			ops := make([][]byte, 1+rng.IntN(4), 5)
			for j := range ops {
				op++
				ops[j] = w.op(rng, op)
			}
			return append(ops, copysettest.ToyOp(checkpointKind, "entry", fmt.Sprint(i)))
		},
		State: func(ms copyset.Machines) (string, error) {
			chunks, err := chunkState(ms)
			if err != nil {
				return "", err
			}
			m, ok := copyset.MachineAs[*copysettest.ToyKV](ms, checkpointKind)
			if !ok {
				return "", errors.New("no checkpoint machine")
			}
			return chunks + "checkpoint " + m.Dump(), nil
		},
		Ops:  32,                                                  // entries: the suite's replays from every op boundary are quadratic in ops
		Raft: func(o *copyset.RaftOptions) { o.TrailingLogs = 2 }, // a short log: the stopped follower needs an install
	})
}

// TestChunkOpsOfOneEntryReplay: two ops on one chunk in one log entry (a
// write refused because an older snapshot exists, then the snapshot's
// deletion) replayed over their own result: the write stays refused,
// because the ops are stamped with their position in the entry too.
func TestChunkOpsOfOneEntryReplay(t *testing.T) {
	store, err := datastore.Open(datastore.Options{Dir: t.TempDir(), ChunkSize: conformanceLayout.ChunkSize, BlockSize: conformanceLayout.BlockSize})
	if err != nil {
		t.Fatal(err)
	}
	m := &chunkMachine{store: store, log: slog.New(slog.DiscardHandler)}
	defer m.Close()
	bs := conformanceLayout.BlockSize
	op := func(typ pb.CHUNK_OP_TYPE, sn, cs uint64, fill byte) []byte {
		req := &pb.ChunkRequest{OpType: typ.Enum(), LogicPoolId: new(uint32(1)), CopysetId: new(uint32(1)), ChunkId: new(uint64(1)),
			Sn: new(sn), CorrectedSn: new(cs), Offset: new(uint32(0)), Size: new(bs)}
		var data []byte
		if typ == pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE {
			data = bytes.Repeat([]byte{fill}, int(bs))
		}
		b, err := chunkop.Encode(req, data, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, payload, _ := copyset.DecodeOp(b)
		return payload
	}
	apply := func(index uint64, pos int, payload []byte) chunkResult {
		res, ok := m.ApplyOp(index, pos, payload).(chunkResult)
		if !ok {
			t.Fatalf("apply %d/%d: %v", index, pos, res)
		}
		return res
	}
	apply(1, 0, op(pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, 1, 0, 1))
	apply(2, 0, op(pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, 2, 0, 2)) // snapshot sn 1
	entry := [][]byte{op(pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE, 3, 0, 3), op(pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE_SNAP, 0, 3, 0)}
	if res := apply(3, 0, entry[0]); res.status == pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
		t.Fatal("the write needing a snapshot while an older one exists succeeded")
	}
	apply(3, 1, entry[1])
	want := make([]byte, bs)
	if err := store.ReadChunk(1, want, 0); err != nil {
		t.Fatal(err)
	}
	for pos, p := range entry {
		apply(3, pos, p)
	}
	got := make([]byte, bs)
	if err := store.ReadChunk(1, got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("replaying the entry changed the chunk: block 0 is %d, was %d", got[0], want[0])
	}
}
