package chunkstore

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/chunkraft/chunkraft/chunkstore/datastore"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/chunkop"
	"github.com/chunkraft/chunkraft/internal/chunkread"
	"github.com/chunkraft/chunkraft/internal/kinds"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// chunkMachine is the chunk store of one copyset as a copyset.StateMachine.
// Its op is internal/chunkop's (a Curve ChunkRequest and its data).
type chunkMachine struct {
	store   *datastore.Store
	sources *cloneSource // what clone chunks read from (ChunkStore)
	log     *slog.Logger
	// gate is the copyset's write fence, published by its write fence
	// machine (write_fence.go); nil: none.
	gate atomic.Pointer[fenceGate]
	// last is the sequence number (opSeq) of the last chunk op applied
	// since the machine opened; 0 before the first.
	last atomic.Uint64
}

var (
	_ copyset.OpApplier  = (*chunkMachine)(nil)
	_ chunkread.Provider = (*chunkMachine)(nil)
)

// ChunkStore implements chunkread.Provider: the store as tenants read it.
func (m *chunkMachine) ChunkStore() chunkread.Store {
	return reader{store: m.store, sources: m.sources, gate: &m.gate, last: &m.last}
}

// opSeq returns the sequence number of the chunk op at position pos of log
// entry index for the store's replay stamps: index << 8 | pos (an entry
// holds at most copyset.MaxOpsPerEntry ops), so that an op replayed after
// a later op of the same entry is told apart from it.
func opSeq(index uint64, pos int) (uint64, error) {
	if pos < 0 || pos >= copyset.MaxOpsPerEntry || index >= 1<<56 {
		return 0, fmt.Errorf("chunk op %d of log entry %d: beyond the %d ops an entry holds", pos, index, copyset.MaxOpsPerEntry)
	}
	return index<<8 | uint64(pos), nil
}

// SeqIndex and SeqOp split an op sequence number (opSeq) into the log
// index and the position of the op in its entry.
func SeqIndex(seq uint64) uint64 { return seq >> 8 }

// SeqOp is the position part of seq (see SeqIndex).
func SeqOp(seq uint64) uint32 { return uint32(seq & 0xff) }

var _ copyset.StateMachine = (*chunkMachine)(nil)

// chunkResult is the apply result handed back to the proposer.
type chunkResult struct {
	status pb.CHUNK_OP_STATUS
	err    error // detail for logs when status is not SUCCESS
}

// Apply implements copyset.StateMachine. Outcomes that are the same on
// every replica (BACKWARD, CHUNK_EXIST, a missing chunk, an op the write
// fence in force at its index refuses: EPOCH_TOO_OLD, ...) are results;
// a local failure (I/O error, full disk, a corrupt block under a
// copy-on-write) is a copyset.FatalError: this replica stops instead of
// silently diverging from the others.
func (m *chunkMachine) Apply(index uint64, payload []byte) any { return m.ApplyOp(index, 0, payload) }

// ApplyOp implements copyset.OpApplier: Apply for the op at position pos
// of its entry.
func (m *chunkMachine) ApplyOp(index uint64, pos int, payload []byte) any {
	d := opDecoders.Get().(*chunkop.Decoder)
	defer opDecoders.Put(d) // req is d's: nothing here keeps it past the return
	req, data, pre, owner, err := d.DecodeOwned(payload)
	if err != nil {
		m.log.Error("undecodable chunk op", "index", index, "err", err)
		return &copyset.FatalError{Err: err}
	}
	if g := m.gate.Load(); g != nil {
		if holder, refused := g.refuses(index, owner); refused {
			return chunkResult{status: pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_EPOCH_TOO_OLD,
				err: fmt.Errorf("chunk op at index %d: the write fence of %q refuses it", index, holder)}
		}
	}
	id := req.GetChunkId()
	seq, err := opSeq(index, pos)
	if err != nil {
		return &copyset.FatalError{Err: err}
	}
	m.last.Store(seq)
	switch req.GetOpType() {
	case pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE:
		var dpre *datastore.PreImage
		if pre != nil {
			dpre = &datastore.PreImage{ViewSeq: pre.ViewSeq, Lo: pre.Lo, Data: pre.Data}
		}
		err = m.store.WriteChunkPreAt(seq, id, req.GetSn(), data, req.GetOffset(), dpre)
	case pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE:
		err = m.store.DeleteChunkAt(seq, id, req.GetSn())
	case pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE_SNAP:
		err = m.store.DeleteChunkSnapshotOrCorrectSnAt(seq, id, req.GetCorrectedSn())
	case pb.CHUNK_OP_TYPE_CHUNK_OP_CREATE_CLONE:
		err = m.store.CreateCloneChunkAt(seq, id, req.GetSn(), req.GetCorrectedSn(), req.GetSize(), req.GetLocation())
	case pb.CHUNK_OP_TYPE_CHUNK_OP_PASTE:
		err = m.store.PasteChunkAt(seq, id, data, req.GetOffset())
	default:
		err = fmt.Errorf("chunk op type %v is not replicated", req.GetOpType())
		m.log.Error("unexpected chunk op in raft log", "index", index, "err", err)
		return &copyset.FatalError{Err: err}
	}
	st := storeStatus(err)
	switch st {
	case pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_DISK_FAIL, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_NOSPACE,
		pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_CRC_FAIL:
		return &copyset.FatalError{Err: fmt.Errorf("apply %v to chunk %d at index %d: %w", req.GetOpType(), id, index, err)}
	}
	if err == nil {
		return chunkApplied
	}
	return chunkResult{status: st, err: err}
}

// opDecoders recycles the decoders ApplyOp decodes ops with (whose
// requests it reuses).
var opDecoders = sync.Pool{New: func() any { return new(chunkop.Decoder) }}

// chunkApplied is the result of an op applied without error, boxed once:
// a chunkResult in an interface is an allocation, and results are only
// read.
var chunkApplied any = chunkResult{status: pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS}

// storeStatus maps a datastore error to the protocol status.
func storeStatus(err error) pb.CHUNK_OP_STATUS {
	switch {
	case err == nil:
		return pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS
	case errors.Is(err, datastore.ErrInvalidArg):
		return pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST
	case errors.Is(err, datastore.ErrChunkNotExist):
		return pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_CHUNK_NOTEXIST
	case errors.Is(err, datastore.ErrBackward):
		return pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_BACKWARD
	case errors.Is(err, datastore.ErrChunkExist):
		return pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_CHUNK_EXIST
	case errors.Is(err, datastore.ErrSnapshotConflict), errors.Is(err, datastore.ErrStatusConflict):
		return pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_FAILURE_UNKNOWN
	case errors.Is(err, datastore.ErrCRC):
		return pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_CRC_FAIL
	case errors.Is(err, syscall.ENOSPC):
		return pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_NOSPACE
	default:
		return pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_DISK_FAIL
	}
}

// Close implements copyset.StateMachine.
func (m *chunkMachine) Close() error { return m.store.Close() }

// Sync implements copyset.StateMachine: fsync every dirty chunk file.
func (m *chunkMachine) Sync() error { return m.store.Sync() }

// Files implements copyset.StateMachine: chunk files, then chunk snapshot
// files, for a snapshot stream.
func (m *chunkMachine) Files() ([]string, error) { return m.store.Files(), nil }

// chunkMachineOf returns the chunk machine of n.
func chunkMachineOf(n *copyset.Node) (*chunkMachine, error) {
	m, ok := copyset.MachineOf[*chunkMachine](n, kinds.Chunk)
	if !ok {
		return nil, chunkread.ErrNoStore
	}
	return m, nil
}

// chunkStoreOf returns the chunk machine's store of n.
func chunkStoreOf(n *copyset.Node) (*datastore.Store, error) {
	m, err := chunkMachineOf(n)
	if err != nil {
		return nil, err
	}
	return m.store, nil
}
