package chunkstore

import pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"

// RaiseLocalFence raises file's fence in this server's epochs.json alone,
// without committing it to any copyset: the state of a server fenced
// before fences were replicated.
func (s *Store) RaiseLocalFence(file, epoch uint64) error { return s.epochs.update(file, epoch) }

// ChunkOpStatus is the status of a chunk op's apply result (what
// copyset.Node.Propose answers for it); false if res is not one.
func ChunkOpStatus(res any) (pb.CHUNK_OP_STATUS, bool) {
	r, ok := res.(chunkResult)
	return r.status, ok
}
