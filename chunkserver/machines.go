package chunkserver

import (
	"errors"

	"github.com/chunkraft/chunkraft/chunkserver/datastore"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/kinds"
)

// machineSpecs are the state machines of every copyset, in the order they
// open: the chunk store first (the integrity machine scans through it),
// then integrity, then the fences (each copyset's table feeds the server's
// epoch map). All three keep their files in the copyset data dir itself,
// where they were before machines had their own directories.
func (s *Server) machineSpecs(layout datastore.Options, epochs *epochMap) []copyset.MachineSpec {
	return []copyset.MachineSpec{
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
		{Kind: kinds.Integrity, Name: "integrity",
			Open: func(env copyset.MachineEnv, opened copyset.Machines) (copyset.StateMachine, error) {
				chunks, ok := copyset.MachineAs[*chunkMachine](opened, kinds.Chunk)
				if !ok {
					return nil, errors.New("the chunk machine must open before it")
				}
				return s.openIntegrity(env.Group, env.DataDir, chunks.store)
			}},
		{Kind: kinds.Fence, Name: "fence",
			Open: func(env copyset.MachineEnv, _ copyset.Machines) (copyset.StateMachine, error) {
				return openFenceMachine(env.DataDir, epochs, env.Logger)
			}},
	}
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

// machineOf returns the integrity machine of n, or nil.
func machineOf(n *copyset.Node) *integrityMachine {
	m, _ := copyset.MachineOf[*integrityMachine](n, kinds.Integrity)
	return m
}
