package chunkserver

import (
	"errors"
	"fmt"
	"log/slog"
	"syscall"

	"github.com/chunkraft/chunkraft/chunkserver/datastore"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/chunkop"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// chunkMachine is the chunk store of one copyset as a copyset.StateMachine.
// Its op is internal/chunkop's (a Curve ChunkRequest and its data).
type chunkMachine struct {
	store *datastore.Store
	log   *slog.Logger
}

var _ copyset.StateMachine = (*chunkMachine)(nil)

// chunkResult is the apply result handed back to the proposer.
type chunkResult struct {
	status pb.CHUNK_OP_STATUS
	err    error // detail for logs when status is not SUCCESS
}

// Apply implements copyset.StateMachine. Outcomes that are the same on
// every replica (BACKWARD, CHUNK_EXIST, a missing chunk, ...) are results;
// a local failure (I/O error, full disk, a corrupt block under a
// copy-on-write) is a copyset.FatalError: this replica stops instead of
// silently diverging from the others.
func (m *chunkMachine) Apply(index uint64, payload []byte) any {
	req, data, err := chunkop.Decode(payload)
	if err != nil {
		m.log.Error("undecodable chunk op", "index", index, "err", err)
		return &copyset.FatalError{Err: err}
	}
	id := req.GetChunkId()
	switch req.GetOpType() {
	case pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE:
		err = m.store.WriteChunkAt(index, id, req.GetSn(), data, req.GetOffset())
	case pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE:
		err = m.store.DeleteChunkAt(index, id, req.GetSn())
	case pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE_SNAP:
		err = m.store.DeleteChunkSnapshotOrCorrectSnAt(index, id, req.GetCorrectedSn())
	case pb.CHUNK_OP_TYPE_CHUNK_OP_CREATE_CLONE:
		err = m.store.CreateCloneChunkAt(index, id, req.GetSn(), req.GetCorrectedSn(), req.GetSize(), req.GetLocation())
	case pb.CHUNK_OP_TYPE_CHUNK_OP_PASTE:
		err = m.store.PasteChunkAt(index, id, data, req.GetOffset())
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
	return chunkResult{status: st, err: err}
}

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
