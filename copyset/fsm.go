package copyset

import (
	"context"
	"errors"
	"fmt"
	"google.golang.org/protobuf/proto"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// Kind names the state machine an operation is dispatched to. A kind's
// number is part of the raft log format; the numbers are assigned in one
// table outside this package (internal/kinds), never reused or renumbered.
type Kind uint8

// opVersion is the version of the op header layout.
const opVersion = 1

// OpHeaderLen is the length of the header in front of every replicated op:
// one byte of header version, one byte of Kind.
const OpHeaderLen = 2

// PutOpHeader writes the op header for kind into buf[:OpHeaderLen], so that
// callers can build an op in one buffer without copying the payload.
func PutOpHeader(buf []byte, kind Kind) {
	buf[0] = opVersion
	buf[1] = byte(kind)
}

// EncodeOp returns msg marshalled behind the op header of kind, in one
// buffer: the replicated op of a machine whose ops are protobuf messages.
func EncodeOp(kind Kind, msg proto.Message) ([]byte, error) {
	head := make([]byte, OpHeaderLen, OpHeaderLen+proto.Size(msg))
	out, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(head, msg) // the size just computed
	if err != nil {
		return nil, fmt.Errorf("encode op of kind %d: %w", kind, err)
	}
	PutOpHeader(out, kind)
	return out, nil
}

// DecodeOp splits an op into its kind and payload.
func DecodeOp(op []byte) (Kind, []byte, error) {
	if len(op) < OpHeaderLen {
		return 0, nil, fmt.Errorf("decode op: %d bytes, header needs %d", len(op), OpHeaderLen)
	}
	if op[0] != opVersion {
		return 0, nil, fmt.Errorf("decode op: header version %d, want %d", op[0], opVersion)
	}
	return Kind(op[1]), op[OpHeaderLen:], nil
}

// StateMachine is one replicated state machine hosted on a copyset (the
// chunk store, integrity jobs, fences, sync sub-tasks, the disagg lock
// table, read views), registered by a MachineSpec (machine.go).
//
// What a snapshot means for a machine. A local raft snapshot copies no data:
// the copyset calls Sync on every machine and records the index (snapshot.go).
// Sending a snapshot to a follower streams the machine's Files live: the list
// and each file's size are taken when the stream starts, and the bytes are
// read afterwards while Apply goes on. Each file is opened when the stream
// reaches it and sent cut at its listed size: left out if it was gone when
// listed, sent as gone (not created on the follower) if it is gone by the
// time it is opened, read through to the end once open even if deleted
// meanwhile, zero-padded if it shrank. So a file written in place may
// arrive with parts newer than others. The follower loads what it received
// as its state and replays the log from the snapshot index + 1. Hence:
//   - A file cut at a size it had while the files were listed (for an
//     append-only file: any prefix, a torn last record included) must load
//     as a valid state: the state as of some log index at or before that of
//     the file it was cut from, never a half-applied op. (A file created
//     whole, by rename, at its full size, such as a chunk file, need only
//     load at that size.)
//   - What the stream sends must hold every op up to the snapshot index (Sync
//     made it durable before the snapshot; a file rewritten since, e.g.
//     compacted, must hold it in every prefix the stream may cut). It may
//     hold later ops too.
//   - Apply must recognise and skip what the loaded state already reflects
//     (by an index stamped in the state, as integrity does), or apply ops
//     that give the same result whatever of them the state holds already
//     (chunk writes at fixed offsets).
type StateMachine interface {
	// Apply applies one committed operation's payload at log index. It is
	// called in log order from one goroutine and must be deterministic and
	// idempotent: a crash replays from the last durable point, a snapshot
	// install from the snapshot index (see above). The result is handed to
	// the proposer on the leader and dropped elsewhere. It may never block
	// on the network: the apply goroutine is shared by every machine of the
	// copyset and every proposer waits on it; work that needs a peer goes to
	// a goroutine the machine owns. Ops of a Batch machine may share an
	// index with other ops, and so may the one op of a Group machine in a
	// grouped proposal (MachineSpec.Group); the index of any other
	// machine's op is that op's alone.
	Apply(index uint64, payload []byte) any
	// Sync makes everything applied so far durable (data and the directory
	// entries of new files). It is called between applies before a raft
	// snapshot, which lets raft truncate the log up to the applied index:
	// once Sync returns, no crash may lose an op applied before it, since
	// its log entry may be gone.
	Sync() error
	// Files lists the machine's files, relative to the copyset data
	// directory (inside the spec's Dir when it names one), in the order a
	// snapshot streams them to a follower.
	Files() ([]string, error)
	// Close releases the machine's resources. No Apply follows. It is
	// called at shutdown and before a received snapshot replaces the data
	// directory (the machine is then opened again on the new files).
	Close() error
}

// OpApplier is a StateMachine that tells apart the ops of one log entry
// (a Batch machine's ops may share an index): the copyset calls ApplyOp,
// with the op's position among the entry's ops (0 for an entry of one
// op), instead of Apply. The chunk machine stamps its state with (index,
// position), so that an op replayed after a later op of its entry is not
// mistaken for the op at the stamp.
type OpApplier interface {
	StateMachine
	ApplyOp(index uint64, pos int, payload []byte) any
}

// ApplyOp applies the op at position pos of log entry index to m:
// ApplyOp for an OpApplier, else Apply.
func ApplyOp(m StateMachine, index uint64, pos int, payload []byte) any {
	if oa, ok := m.(OpApplier); ok {
		return oa.ApplyOp(index, pos, payload)
	}
	return m.Apply(index, payload)
}

// Streamer is a StateMachine whose files a fuzzy copy cannot follow: one
// whose Apply reads its own earlier state (the chunk store's copy-on-write
// reads a block's older content, which a live copy may hold from a later
// moment, or torn from its checksum). A snapshot stream then takes the
// machine's files from Stream instead of reading its Files live: each file
// comes as a consistent image, which must load as a state at or after the
// snapshot index from which the replay of the log converges (the machine
// stamps its images with the index they reflect and skips the ops before
// it). Files still lists the machine's files for everything else.
type Streamer interface {
	StateMachine
	// Stream starts a stream of the machine's files. It is called when a
	// snapshot is opened for sending, while applies go on; the stream
	// yields its files later, as the follower takes them.
	Stream() (FileStream, error)
}

// FileStream yields the files of one Streamer for one snapshot stream.
type FileStream interface {
	// Reserve bounds, for the stream's size, what Next yields in total:
	// the sum over its files of len(name) + 10 + len(data). It is called
	// once, before Next.
	Reserve() int64
	// Next returns the next file, its name relative to the copyset data
	// dir (inside the spec's Dir when it names one) and its whole
	// content, or io.EOF after the last.
	Next() (name string, data []byte, err error)
	// Close releases the stream; no Next follows.
	Close() error
}

// FatalError is an apply result that says the replica's state machine
// could not apply the op (an I/O error, a full disk) and so can no longer
// follow the log without diverging: the copyset stops on this replica (see
// Node.Broken) instead of skipping the op. The other replicas carry on.
type FatalError struct{ Err error }

func (e *FatalError) Error() string { return "fatal apply error: " + e.Err.Error() }
func (e *FatalError) Unwrap() error { return e.Err }

// ErrBroken is the apply result of every op after a FatalError: the
// replica applies nothing more until it is restarted.
var ErrBroken = errors.New("copyset replica is broken: applying stopped")

// ErrUnknownKind is the apply result of an op whose Kind has no registered
// state machine on this copyset.
var ErrUnknownKind = errors.New("no state machine registered for op kind")

// fsm is the raft.BatchingFSM of one copyset. It decodes the op header of
// each committed entry, dispatches to the registered state machine and
// tracks the applied index and configuration epoch.
type fsm struct {
	machines atomic.Pointer[machineSet]
	log      *slog.Logger

	// reg is the machine specs the machines were opened from.
	reg *registry
	// restore swaps in a received snapshot; set by the node.
	restore func(m snapManifest) (*machineSet, error)

	applied atomic.Uint64 // highest index handed to this FSM and applied
	epoch   atomic.Uint64 // configuration entries applied

	// out is ApplyBatch's result slice, reused: raft's FSM goroutine, the
	// only caller, takes the results out of it before it calls again.
	out []any

	// broken is set by the first FatalError; onBroken is told once.
	broken   atomic.Pointer[FatalError]
	onBroken func(index uint64, err *FatalError)

	mu      sync.Mutex // serialises moves of applied
	applies signal     // fired whenever applied moves
}

// machineSet is the state machines of a copyset indexed by Kind. It is
// replaced whole when a snapshot is installed.
type machineSet [256]StateMachine

func newFSM(reg *registry, machines *machineSet, log *slog.Logger) *fsm {
	f := &fsm{reg: reg, log: log}
	f.machines.Store(machines)
	return f
}

func (f *fsm) machine(k Kind) StateMachine { return f.machines.Load()[k] }

var _ raft.BatchingFSM = (*fsm)(nil)

// Apply implements raft.FSM.
func (f *fsm) Apply(l *raft.Log) any {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch implements raft.BatchingFSM. The slice it returns is valid
// until the next call.
func (f *fsm) ApplyBatch(logs []*raft.Log) []any {
	out := slices.Grow(f.out[:0], len(logs))[:len(logs)]
	clear(out)
	f.out = out
	var last uint64
	for i, l := range logs {
		if f.broken.Load() != nil {
			out[i] = ErrBroken
			continue
		}
		switch l.Type {
		case raft.LogCommand:
			res, fe := f.applyCommand(l)
			out[i] = res
			if fe != nil {
				f.broken.Store(fe)
				f.log.Error("copyset replica stops: apply failed", "index", l.Index, "err", fe.Err)
				if f.onBroken != nil {
					f.onBroken(l.Index, fe)
				}
				continue
			}
		case raft.LogConfiguration:
			f.epoch.Add(1)
		}
		last = l.Index
	}
	if last > 0 {
		f.advance(last)
	}
	return out
}

// applyCommand applies a command entry: one op, or every op of a batch
// envelope (propose.go) in order. A FatalError stops the batch; its later
// ops are answered ErrBroken and the error is returned as fatal.
func (f *fsm) applyCommand(l *raft.Log) (any, *FatalError) {
	if len(l.Data) > 0 && l.Data[0] == opBatchVersion {
		ops, err := decodeBatch(l.Data)
		if err != nil {
			f.log.Error("undecodable op batch in raft log", "index", l.Index, "err", err)
			return fmt.Errorf("apply index %d: %w", l.Index, err), nil
		}
		results := make(batchResult, len(ops))
		for j, op := range ops {
			res := f.applyOp(l.Index, j, op)
			if fe, ok := res.(*FatalError); ok {
				results[j] = fe
				for k := j + 1; k < len(ops); k++ {
					results[k] = ErrBroken
				}
				return results, fe
			}
			results[j] = res
		}
		return results, nil
	}
	res := f.applyOp(l.Index, 0, l.Data)
	if fe, ok := res.(*FatalError); ok {
		return fe, fe
	}
	return res, nil
}

// applyOp dispatches the op at position pos of entry index to its state
// machine.
func (f *fsm) applyOp(index uint64, pos int, op []byte) any {
	kind, payload, err := DecodeOp(op)
	if err != nil {
		f.log.Error("undecodable op in raft log", "index", index, "err", err)
		return fmt.Errorf("apply index %d: %w", index, err)
	}
	m := f.machine(kind)
	if m == nil {
		f.log.Error("op for unregistered state machine", "index", index, "kind", kind)
		return fmt.Errorf("apply index %d kind %d: %w", index, kind, ErrUnknownKind)
	}
	return ApplyOp(m, index, pos, payload)
}

func (f *fsm) advance(index uint64) { f.setApplied(index, false) }

// setApplied moves the applied index to index; only forward unless reset
// (a snapshot install may move it anywhere).
func (f *fsm) setApplied(index uint64, reset bool) {
	f.mu.Lock()
	moved := index > f.applied.Load() || (reset && index != f.applied.Load())
	if moved {
		f.applied.Store(index)
	}
	f.mu.Unlock()
	if moved {
		f.applies.fire()
	}
}

// waitApplied blocks until the FSM has applied index, or ctx ends.
func (f *fsm) waitApplied(ctx context.Context, index uint64) error {
	for {
		// The channel first: a move after the check below fires it.
		ch := f.applies.wait()
		if f.applied.Load() >= index {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("wait for apply of index %d (applied %d): %w", index, f.applied.Load(), ctx.Err())
		}
	}
}

// Snapshot implements raft.FSM. It runs between applies: every machine
// fsyncs what it applied, so the snapshot index is durable in their files
// and raft may truncate the log up to it.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	for k, m := range f.machines.Load() {
		if m == nil {
			continue
		}
		if err := m.Sync(); err != nil {
			return nil, fmt.Errorf("snapshot: sync state machine %d: %w", k, err)
		}
	}
	return &fsmSnapshot{manifest: snapManifest{Version: 1, Epoch: f.epoch.Load()}}, nil
}

// fsmSnapshot writes the manifest of a local snapshot; the store fills in
// the index and term raft gives it.
type fsmSnapshot struct{ manifest snapManifest }

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	head, err := snapHeader(snapKindManifest, s.manifest)
	if err == nil {
		_, err = sink.Write(head)
	}
	if err != nil {
		sink.Cancel()
		return fmt.Errorf("persist snapshot manifest: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}

// Restore implements raft.FSM. It is called only after a snapshot streamed
// from the leader was staged: it reads the manifest, swaps the staged files
// in as the live data and reopens the state machines on them.
func (f *fsm) Restore(rc io.ReadCloser) error {
	_, man, err := readSnapHeader(rc)
	rc.Close()
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if f.restore == nil {
		return errors.New("restore: no snapshot installer")
	}
	machines, err := f.restore(man)
	if err != nil {
		return fmt.Errorf("restore snapshot at index %d: %w", man.Index, err)
	}
	f.machines.Store(machines)
	f.epoch.Store(man.Epoch)
	f.setApplied(man.Index, true)
	return nil
}

// snapSource is what a snapshot stream sends of one machine: its live
// files by name, or the files of its own stream (a Streamer).
type snapSource struct {
	kind   Kind
	names  []string
	stream FileStream
}

// sources lists what a snapshot stream sends of every machine. On error
// the streams already started are closed.
func (f *fsm) sources() ([]snapSource, error) {
	var out []snapSource
	fail := func(err error) ([]snapSource, error) {
		for _, s := range out {
			if s.stream != nil {
				s.stream.Close()
			}
		}
		return nil, err
	}
	for k, m := range f.machines.Load() {
		if m == nil {
			continue
		}
		if st, ok := m.(Streamer); ok {
			fs, err := st.Stream()
			if err != nil {
				return fail(fmt.Errorf("stream state machine %d: %w", k, err))
			}
			out = append(out, snapSource{kind: Kind(k), stream: fs})
			continue
		}
		names, err := m.Files()
		if err == nil {
			err = f.reg.checkFiles(Kind(k), names)
		}
		if err != nil {
			return fail(fmt.Errorf("list files of state machine %d: %w", k, err))
		}
		out = append(out, snapSource{kind: Kind(k), names: names})
	}
	return out, nil
}

// closeMachines closes every state machine.
func (f *fsm) closeMachines() error {
	var errs []error
	for k, m := range f.machines.Load() {
		if m != nil {
			if err := m.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close state machine %d: %w", k, err))
			}
		}
	}
	return errors.Join(errs...)
}
