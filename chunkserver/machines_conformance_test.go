package chunkserver

import (
	"crypto/sha256"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/chunkraft/chunkraft/chunkserver/datastore"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/copyset/copysettest"
	"github.com/chunkraft/chunkraft/internal/chunkop"
	"github.com/chunkraft/chunkraft/internal/kinds"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// conformanceLayout is a small chunk layout: 64 KiB chunks of 4 KiB
// blocks, so that the suite's copies stay small.
var conformanceLayout = datastore.Options{ChunkSize: 64 << 10, BlockSize: 4 << 10}

// conformanceSpecs are the server's machine specs up to and including
// kind, as machineSpecs opens them (no scan reporter, no fences).
func conformanceSpecs(t *testing.T, kind copyset.Kind) []copyset.MachineSpec {
	t.Helper()
	s := &Server{log: slog.New(slog.DiscardHandler)}
	specs := s.machineSpecs(conformanceLayout, nil)
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
// snapshot streams used to arrive zero-filled, and the store refused to
// open it; the stream now sends it as gone). cow adds sn bumps (so later
// writes copy on write into chunk snapshots) and snapshot deletes: these
// used to fail the suite, since replaying a write refused for an older
// snapshot after the snapshot's deletion accepted it, and a fuzzy copy of
// a chunk file could hold a block whose crc entry was from another moment,
// which a later copy-on-write read refused. Ops now carry their index into
// the store (datastore Replay) and chunks stream as images
// (chunk_stream.go). Both are on in TestChunkMachineConforms.
type chunkWorkload struct {
	t        *testing.T
	del, cow bool
	sn       uint64
}

func (w *chunkWorkload) op(rng *rand.Rand, i int) []byte {
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
		return w.op(rng, i)
	}
	op, err := chunkop.Encode(req, data)
	if err != nil {
		w.t.Fatal(err)
	}
	return op
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
