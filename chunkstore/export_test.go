package chunkstore

// RaiseLocalFence raises file's fence in this server's epochs.json alone,
// without committing it to any copyset: the state of a server fenced
// before fences were replicated.
func (s *Store) RaiseLocalFence(file, epoch uint64) error { return s.epochs.update(file, epoch) }
