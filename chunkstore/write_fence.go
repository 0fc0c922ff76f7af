package chunkstore

// A copyset's write fence stops the chunk writes of everyone but one owner
// from a replicated point on: an online migration fences its source
// copysets at the cutover (nobody writes any more) and its target copysets
// until it commits (only the migration writes). Reads are not fenced.
//
//   - The fence op (kinds.WriteFence, a JSON writeFenceOp) sets the fence
//     for an owner or lifts the owner's fence. A copyset holds at most one
//     fence: a set by another owner, or a lift by another owner, is refused
//     and changes nothing; setting the owner's fence again answers the index
//     it was set at; lifting an absent fence is a success that changes
//     nothing. The state is a copyset/statemachine.Machine on
//     writefence/state.jsonl: deterministic, replay-guarded by its stamp,
//     any prefix of the file an earlier state, a failed write a
//     copyset.FatalError.
//   - Every chunk op (WRITE, DELETE, DELETE_SNAP, CREATE_CLONE, PASTE) is
//     checked twice: when admitted (ChunkService's writable, a tenant's
//     group), so that a refused op is not proposed, and when applied
//     (chunkMachine.ApplyOp) on every replica, so that an op admitted just
//     before the fence committed but appended after it is refused alike
//     everywhere: an op of a log entry after the set op's is refused unless
//     it carries the fence's owner (chunkop.EncodeOwned; Store.ProposeGroupAs
//     proposes them; ChunkService's never carry one). A refused op changes
//     nothing and answers EPOCH_TOO_OLD.
//   - Why EPOCH_TOO_OLD: it is what Curve's chunkserver answers a writer its
//     file's epoch fenced off, and Curve's client neither retries it nor
//     looks for another leader (OnEpochTooOld fails the I/O), so a client
//     writing across a cutover stops at once and goes back to its metadata
//     server, which by then names the migrated location. The other statuses
//     a client could get are retried in place (OVERLOAD, FAILURE_UNKNOWN),
//     chase a leader (REDIRECTED, COPYSET_NOTEXIST), or say something false
//     about the disk or the request (NOSPACE, DISK_FAIL, INVALID_REQUEST).
//   - Replays decide alike. The apply of a chunk op at index i depends on
//     the fence in force at i, but a replica may replay i against a newer
//     fence state: a restart replays from the last raft snapshot while the
//     state file holds every fence op applied since, and a snapshot install
//     streams the file live, so it may hold fence ops after the snapshot
//     index. So the state keeps the fences lifted (owner, set index, lift
//     index), and the check asks which fence covered i: the held one if it
//     was set before i, else the lifted one whose span holds i. The most
//     recent keepLiftedFences lifted fences are kept: a replay reaches back
//     to a raft snapshot (every raft.snapshot_threshold entries), and that
//     many set-and-lift cycles of one copyset, a migration's each, do not
//     fall between two of them.
//   - The check costs the chunk path one atomic load: the machine publishes
//     an immutable fenceGate into the chunk machine (chunkMachine.gate) on
//     open and on every change, nil for a copyset that never had a fence.
//   - A snapshot install carries the fence: the state file is streamed with
//     the snapshot, the machines reopen on it and the gate is published
//     before the first apply.

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/copyset/statemachine"
	"github.com/chunkraft/chunkraft/internal/kinds"
)

const (
	// WriteFenceDir is the write fence machine's directory in a copyset
	// data dir.
	WriteFenceDir = "writefence"
	// WriteFenceFileName is its state file in WriteFenceDir.
	WriteFenceFileName = "state.jsonl"
	// MaxFenceOwner and MaxFenceReason bound a fence's owner and reason, in
	// bytes.
	MaxFenceOwner  = 128
	MaxFenceReason = 1024
	// keepLiftedFences bounds the lifted fences a copyset remembers for
	// the replay of the chunk ops they refused (see above).
	keepLiftedFences = 1024
)

// The fence ops.
const (
	fenceSet  = "set"
	fenceLift = "lift"
)

// writeFenceOp is the replicated op, JSON after the op header.
type writeFenceOp struct {
	Op     string `json:"op"` // fenceSet or fenceLift
	Owner  string `json:"owner"`
	Reason string `json:"reason,omitempty"`
}

// heldFence is the fence in force.
type heldFence struct {
	Owner  string `json:"owner"`
	Reason string `json:"reason,omitempty"`
	Since  uint64 `json:"since"` // the set op's index
}

// liftedFence is a fence that was lifted: chunk ops of entries strictly
// between Since and Until, but its owner's, were refused.
type liftedFence struct {
	Owner string `json:"owner"`
	Since uint64 `json:"since"`
	Until uint64 `json:"until"` // the lift op's index
}

// writeFenceState is the machine's state, one JSON line per change.
type writeFenceState struct {
	Applied uint64     `json:"applied"`
	Held    *heldFence `json:"held,omitempty"`
	// Lifted is oldest first; the spans are disjoint and ascending, and end
	// before Held's Since.
	Lifted []liftedFence `json:"lifted,omitempty"`
}

// writeFenceResult is a fence op's apply result.
type writeFenceResult struct {
	// Since is the index of the set op of the fence the op concerns (set:
	// the fence now held; lift: the fence lifted; 0: none).
	Since uint64
	// Err is why the op was refused (a *WriteFenceHeldError, or an op
	// without an owner); nothing changed.
	Err error
}

// WriteFenceHeldError refuses a fence op of a copyset whose fence another
// owner holds; nothing changed.
type WriteFenceHeldError struct {
	Group  copyset.GroupID
	Holder string // the fence's owner
	Since  uint64 // the index it was set at
	Owner  string // the owner of the refused op
	Lift   bool   // the refused op was a lift
}

func (e *WriteFenceHeldError) Error() string {
	what := "set another"
	if e.Lift {
		what = "lift it"
	}
	return fmt.Sprintf("copyset %s: the write fence is held by %q (since index %d): %q cannot %s", e.Group, e.Holder, e.Since, e.Owner, what)
}

// decodeWriteFenceOp decodes an op payload; an op this build does not know
// stops the replica.
func decodeWriteFenceOp(payload []byte) (*writeFenceOp, error) {
	op, err := statemachine.DecodeJSON[writeFenceOp](payload)
	if err != nil {
		return nil, err
	}
	if op.Op != fenceSet && op.Op != fenceLift {
		return nil, fmt.Errorf("write fence op %q: %w", op.Op, statemachine.ErrUnknownOp)
	}
	return op, nil
}

// encodeWriteFenceOp builds the replicated op.
func encodeWriteFenceOp(op *writeFenceOp) ([]byte, error) {
	b, err := json.Marshal(op)
	if err != nil {
		return nil, err
	}
	out := make([]byte, copyset.OpHeaderLen, copyset.OpHeaderLen+len(b))
	copyset.PutOpHeader(out, kinds.WriteFence)
	return append(out, b...), nil
}

// apply applies op at index to st in place and says whether st changed.
func (st *writeFenceState) apply(g copyset.GroupID, index uint64, op *writeFenceOp) (writeFenceResult, bool) {
	if op.Owner == "" {
		return writeFenceResult{Err: fmt.Errorf("copyset %s: write fence %s without an owner: %w", g, op.Op, ErrInvalidWriteFence)}, false
	}
	held := st.Held
	if held != nil && held.Owner != op.Owner {
		return writeFenceResult{Err: &WriteFenceHeldError{Group: g, Holder: held.Owner, Since: held.Since, Owner: op.Owner, Lift: op.Op == fenceLift}}, false
	}
	switch {
	case op.Op == fenceSet && held != nil: // the owner's own: set already
		return writeFenceResult{Since: held.Since}, false
	case op.Op == fenceSet:
		st.Held = &heldFence{Owner: op.Owner, Reason: op.Reason, Since: index}
		return writeFenceResult{Since: index}, true
	case held == nil: // a lift of no fence
		return writeFenceResult{}, false
	}
	st.Lifted = append(st.Lifted, liftedFence{Owner: held.Owner, Since: held.Since, Until: index})
	if over := len(st.Lifted) - keepLiftedFences; over > 0 {
		st.Lifted = slices.Delete(st.Lifted, 0, over)
	}
	st.Held = nil
	return writeFenceResult{Since: held.Since}, true
}

// fence returns the fence in force.
func (st *writeFenceState) fence() (WriteFence, bool) {
	if st.Held == nil {
		return WriteFence{}, false
	}
	return WriteFence{Owner: st.Held.Owner, Reason: st.Held.Reason, Since: st.Held.Since}, true
}

// gate is what the chunk path reads of st: nil when st holds no fence and
// remembers none.
func (st *writeFenceState) gate() *fenceGate {
	if st.Held == nil && len(st.Lifted) == 0 {
		return nil
	}
	g := &fenceGate{lifted: slices.Clone(st.Lifted)}
	if st.Held != nil {
		g.held, g.owner, g.since = true, st.Held.Owner, st.Held.Since
	}
	return g
}

// fenceGate is a copyset's write fence as the chunk path checks it: built
// from the machine's state on every change and never modified, read with
// one atomic load (chunkMachine.gate). A nil gate refuses nothing.
type fenceGate struct {
	held   bool
	owner  string // the held fence's owner
	since  uint64 // the held fence's set index
	lifted []liftedFence
}

// blocks reports whether a chunk op of owner ("": a client) is refused if
// proposed now: another owner holds the fence.
func (g *fenceGate) blocks(owner string) bool {
	return g != nil && g.held && g.owner != owner
}

// refuses reports whether the chunk op of owner ("": a client) at log
// index is refused: its entry comes after the set op of the held fence,
// or between the set and lift ops of a lifted one (a replay), and that
// fence is another owner's. It names the fence's owner.
func (g *fenceGate) refuses(index uint64, owner string) (string, bool) {
	if g == nil {
		return "", false
	}
	if g.held && index > g.since {
		return g.owner, g.owner != owner
	}
	n := len(g.lifted)
	if n == 0 || index >= g.lifted[n-1].Until {
		return "", false
	}
	i := sort.Search(n, func(i int) bool { return g.lifted[i].Until > index })
	if f := g.lifted[i]; f.Since < index {
		return f.Owner, f.Owner != owner
	}
	return "", false
}

// writeFenceMachine is the kinds.WriteFence machine of one copyset: a
// statemachine.Machine on WriteFenceDir/WriteFenceFileName that publishes
// its fence to the copyset's chunk machine.
type writeFenceMachine struct {
	*statemachine.Machine[*writeFenceState, *writeFenceOp, writeFenceResult]
	chunks *chunkMachine
	log    *slog.Logger
}

var _ copyset.StateMachine = (*writeFenceMachine)(nil)

// writeFenceSpec is the write fence machine's spec; it opens after the
// chunk machine, which it gates. Its ops carry their index alone in its
// state: not Batch, and not Group (a fence op is an entry of its own, so
// that every chunk op is before or after it).
func writeFenceSpec() copyset.MachineSpec {
	return copyset.MachineSpec{Kind: kinds.WriteFence, Name: "writefence", Dir: WriteFenceDir,
		Open: func(env copyset.MachineEnv, opened copyset.Machines) (copyset.StateMachine, error) {
			chunks, ok := copyset.MachineAs[*chunkMachine](opened, kinds.Chunk)
			if !ok {
				return nil, errors.New("write fence machine: the chunk machine must open before it")
			}
			return openWriteFenceMachine(env, chunks)
		}}
}

// openWriteFenceMachine loads the state file and publishes its fence to
// chunks.
func openWriteFenceMachine(env copyset.MachineEnv, chunks *chunkMachine) (*writeFenceMachine, error) {
	m := &writeFenceMachine{chunks: chunks, log: env.Logger.With("component", "writefence")}
	g := env.Group
	sm, err := statemachine.Open(statemachine.JSONState(statemachine.Config[*writeFenceState, *writeFenceOp, writeFenceResult]{
		Name: "write fence", Path: filepath.Join(env.Dir, WriteFenceFileName), File: filepath.Join(WriteFenceDir, WriteFenceFileName),
		Log:    m.log,
		New:    func() *writeFenceState { return &writeFenceState{} },
		Decode: decodeWriteFenceOp,
		Apply: func(st *writeFenceState, index uint64, op *writeFenceOp) (writeFenceResult, bool) {
			return st.apply(g, index, op)
		},
		Changed: m.changed,
	}, func(st *writeFenceState) *uint64 { return &st.Applied }))
	if err != nil {
		return nil, err
	}
	m.Machine = sm
	m.publish()
	return m, nil
}

// publish hands the state's gate to the chunk machine.
func (m *writeFenceMachine) publish() {
	m.View(func(st *writeFenceState) { m.chunks.gate.Store(st.gate()) })
}

// changed follows a persisted change: the chunk path sees it before the
// next op applies (both run on the copyset's apply goroutine).
func (m *writeFenceMachine) changed(index uint64, op *writeFenceOp, _ writeFenceResult) {
	m.publish()
	if op.Op == fenceSet {
		m.log.Info("write fence set", "index", index, "owner", op.Owner, "reason", op.Reason)
	} else {
		m.log.Info("write fence lifted", "index", index, "owner", op.Owner)
	}
}

// current returns the fence in force on this replica.
func (m *writeFenceMachine) current() (f WriteFence, ok bool) {
	m.View(func(st *writeFenceState) { f, ok = st.fence() })
	return f, ok
}
