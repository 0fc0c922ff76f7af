package chunkserver

import (
	"errors"

	"github.com/chunkraft/chunkraft/chunkserver/datastore"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/integrity"
	"github.com/chunkraft/chunkraft/internal/kinds"
)

// machineSpecs are the state machines of every copyset, in the order they
// open: the host's (the chunk store first: the integrity machine scans
// through it and the read views apply to it; the fences, whose tables
// feed the server's epoch map; the read views), then each tenant's in the
// order of s.tenants (integrity, sync, disagg). The chunk, integrity and
// fence machines keep their files in the copyset data dir itself (their
// layout predates machine directories and must not change); the others
// each have a Dir. Only the chunk machine batches: it stamps (index,
// position).
func (s *Server) machineSpecs(layout datastore.Options, epochs *epochMap) []copyset.MachineSpec {
	specs := []copyset.MachineSpec{
		{Kind: kinds.Chunk, Name: "chunk", Batch: true,
			Open: func(env copyset.MachineEnv, _ copyset.Machines) (copyset.StateMachine, error) {
				opts := layout
				opts.Dir = env.DataDir
				store, err := datastore.Open(opts)
				if err != nil {
					return nil, err
				}
				return &chunkMachine{store: store, log: env.Logger}, nil
			}},
		{Kind: kinds.Fence, Name: "fence",
			Open: func(env copyset.MachineEnv, _ copyset.Machines) (copyset.StateMachine, error) {
				return openFenceMachine(env.DataDir, epochs, env.Logger)
			}},
		viewSpec(),
	}
	for _, t := range s.tenants {
		specs = append(specs, t.Specs()...)
	}
	return specs
}

// errNoChunkStore answers a lookup on a copyset without a chunk machine.
var errNoChunkStore = errors.New("copyset has no chunk store open")

// chunkMachineOf returns the chunk machine of n.
func chunkMachineOf(n *copyset.Node) (*chunkMachine, error) {
	m, ok := copyset.MachineOf[*chunkMachine](n, kinds.Chunk)
	if !ok {
		return nil, errNoChunkStore
	}
	return m, nil
}

// chunkStore returns the chunk machine's store of n.
func chunkStore(n *copyset.Node) (*datastore.Store, error) {
	m, err := chunkMachineOf(n)
	if err != nil {
		return nil, err
	}
	return m.store, nil
}

// scanStoreOf is integrity's Deps.Store: the chunk machine's store among
// the machines opened before the integrity machine.
func scanStoreOf(opened copyset.Machines) (integrity.ChunkStore, error) {
	chunks, ok := copyset.MachineAs[*chunkMachine](opened, kinds.Chunk)
	if !ok {
		return nil, errors.New("the chunk machine must open before it")
	}
	return scanStore{chunks.store}, nil
}

// scanStore is a chunk store as integrity scans read it.
type scanStore struct{ *datastore.Store }

func (s scanStore) ChunkSize() uint32 { return s.Options().ChunkSize }

func (s scanStore) ChunkMeta(id uint64) (integrity.ChunkMeta, bool, error) {
	info, err := s.GetChunkInfo(id)
	switch {
	case errors.Is(err, datastore.ErrChunkNotExist):
		return integrity.ChunkMeta{}, false, nil
	case err != nil:
		return integrity.ChunkMeta{}, false, err
	}
	return integrity.ChunkMeta{Sn: info.Sn, CorrectedSn: info.CorrectedSn, SnapSn: info.SnapSn,
		CloneUnwritten: info.CloneUnwritten, Location: info.Location}, true, nil
}
