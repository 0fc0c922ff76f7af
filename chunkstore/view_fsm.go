package chunkstore

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/chunkraft/chunkraft/chunkstore/datastore"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/disagg"
	"github.com/chunkraft/chunkraft/internal/kinds"
	vpb "github.com/chunkraft/chunkraft/proto/chunkraft/viewpb"
)

// The read views' ops (kind view, disagg's viewpb.Op) are applied to the
// copyset's chunk store, so that one Streamed state, the chunk machine's,
// holds the views, their pre-images and the chunks (datastore/view.go
// argues why that keeps them consistent). The view machine has no files
// of its own: it is the chunk machine's store seen through another kind.

// viewMachine applies view ops to the chunk machine's store.
type viewMachine struct {
	chunks *chunkMachine
	log    *slog.Logger
}

var _ copyset.StateMachine = (*viewMachine)(nil)

// viewSpec is the view machine's spec; it opens after the chunk machine.
func viewSpec() copyset.MachineSpec {
	return copyset.MachineSpec{Kind: kinds.View, Name: "view", Dir: "view",
		Open: func(env copyset.MachineEnv, opened copyset.Machines) (copyset.StateMachine, error) {
			chunks, ok := copyset.MachineAs[*chunkMachine](opened, kinds.Chunk)
			if !ok {
				return nil, errors.New("view machine: the chunk machine must open before it")
			}
			return &viewMachine{chunks: chunks, log: env.Logger}, nil
		}}
}

// Apply implements copyset.StateMachine: a view op at index (its sequence
// number index << 8, the chunk ops' numbering). An undecodable op or an
// I/O failure stops the replica; an invalid op is refused the same way on
// every replica.
func (m *viewMachine) Apply(index uint64, payload []byte) any {
	seq, err := opSeq(index, 0)
	if err != nil {
		return &copyset.FatalError{Err: err}
	}
	op, err := disagg.DecodeViewOp(payload)
	if err != nil {
		m.log.Error("undecodable view op", "index", index, "err", err)
		return &copyset.FatalError{Err: err}
	}
	store := m.chunks.store
	switch o := op.Op.(type) {
	case *vpb.Op_Register:
		info, err := disagg.MarshalViewInfo(o.Register.GetInfo())
		if err == nil {
			spec := datastore.ViewSpec{Budget: o.Register.GetBudgetBytes(), Info: info}
			for _, r := range o.Register.GetRanges() {
				spec.Ranges = append(spec.Ranges, datastore.ChunkRange{Lo: r.GetLo(), Hi: r.GetHi()})
			}
			err = store.RegisterViewAt(seq, spec)
		}
		return m.result(index, seq, err)
	case *vpb.Op_Drop:
		m.log.Info("dropping read view", "view", o.Drop.GetView(), "reason", o.Drop.GetReason(), "decided_unix_ms", o.Drop.GetAtUnixMs())
		return m.result(index, o.Drop.GetView(), store.DropViewAt(seq, o.Drop.GetView()))
	}
	return disagg.ViewApplied{Err: fmt.Errorf("view op at index %d: empty op", index)}
}

// result is the apply result of a view op: a refusal for an invalid
// op, a FatalError for a local failure.
func (m *viewMachine) result(index, seq uint64, err error) any {
	switch {
	case err == nil:
		return disagg.ViewApplied{Seq: seq}
	case errors.Is(err, datastore.ErrInvalidArg):
		return disagg.ViewApplied{Err: err}
	}
	return &copyset.FatalError{Err: fmt.Errorf("apply view op at index %d: %w", index, err)}
}

// Sync implements copyset.StateMachine: view ops are durable when applied.
func (m *viewMachine) Sync() error { return nil }

// Files implements copyset.StateMachine: the views' files are the chunk
// machine's.
func (m *viewMachine) Files() ([]string, error) { return nil, nil }

// Close implements copyset.StateMachine.
func (m *viewMachine) Close() error { return nil }
