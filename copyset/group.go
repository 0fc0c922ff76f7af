package copyset

import (
	"context"
	"errors"
	"fmt"
)

// Grouped proposals.
//
// A group is several ops, of one kind or several, that a tenant needs
// applied together: in one raft entry, so at one log index, in the order
// given, each at its position in the entry (the position OpApplier
// machines are told). A tenant that replays the ops of another copyset's
// entry on this one proposes them with its own checkpoint op in one group,
// so that the checkpoint and the ops it covers are in the log, and hence
// in every replica's state after a crash, a leader change or a snapshot
// install, together or not at all. A group is the batch envelope
// (propose.go) the batcher builds: the FSM, the log readers and the
// snapshot code see an entry, whoever built it, and apply it op by op, so
// a group adds no log format. What sets it apart is how it is proposed:
//
//   - It goes as its own entry, always in an envelope (one op included):
//     never merged with other proposals, never split. An envelope is not
//     a batchable op (registry.batchable), so the batcher neither packs
//     it with others nor waits for an in-flight slot for it.
//   - It holds 1 to MaxOpsPerEntry ops of MaxGroupBytes at most in all
//     (each op with its header).
//   - Every op's kind is registered on the copyset, and either its spec
//     says Batch (it may appear any number of times: the machine tells the
//     ops of one entry apart by position, or never looks at the index), or
//     its spec says Group and it appears once (a machine that stamps its
//     own state with the index alone: with one op per group the index
//     still names that op).
//
// ProposeGroup checks these rules before proposing: a group that breaks
// one is an error wrapping ErrInvalidGroup and nothing is proposed.
//
// The group is atomic against crashes and snapshots, not a transaction.
// raft snapshots are taken between entries, never inside one, and a
// restart or a snapshot install replays whole entries from an earlier
// index, so a replica that stopped after some of a group's ops applies the
// whole group again; each machine skips what its state already holds. But
// an op its machine refuses (an error result, the same on every replica)
// neither undoes the ops before it nor stops those after it; only a
// FatalError stops the group (its later ops are answered ErrBroken) and
// the replica.

// MaxGroupBytes bounds the ops of a group, their headers included: the
// largest single op the servers accept (a 16 MiB chunk write and its
// headers: max_message_size is at least 17 MiB) with room for a tenant's
// own small ops, and more than the envelopes the batcher builds
// (maxBatchBytes), so that the ops of any entry plus a checkpoint fit in
// one group.
const MaxGroupBytes = 16<<20 + 64<<10

// ErrInvalidGroup is wrapped by the error of a group that breaks a rule of
// grouped proposals: it was not proposed.
var ErrInvalidGroup = errors.New("invalid grouped proposal")

// ProposeGroup proposes ops as one raft entry (a group, see above) on the
// leader n and returns the entry's index and each op's apply result, in
// op order. A group that breaks a rule is an error wrapping
// ErrInvalidGroup and nothing is proposed; other errors are Propose's,
// with index 0 and no results. When the whole entry failed to apply on
// this replica (a broken replica), every op's result is that failure.
func (n *Node) ProposeGroup(ctx context.Context, ops [][]byte) (uint64, []any, error) {
	parts := make([][][]byte, len(ops))
	for i := range ops {
		parts[i] = ops[i : i+1 : i+1]
	}
	return n.ProposeGroupParts(ctx, parts)
}

// ProposeGroupParts is ProposeGroup with each op given as the parts it is
// the concatenation of, its op header in its first part: the entry is
// built from them with one copy of their bytes, where joining each op
// first would copy a large payload twice.
func (n *Node) ProposeGroupParts(ctx context.Context, ops [][][]byte) (uint64, []any, error) {
	if err := n.fsm.reg.checkGroup(ops); err != nil {
		return 0, nil, fmt.Errorf("copyset %s: %w", n.group, err)
	}
	index, res, err := n.Propose(ctx, encodeBatchParts(ops))
	if err != nil {
		return 0, nil, err
	}
	if br, ok := res.(batchResult); ok && len(br) == len(ops) {
		return index, br, nil
	}
	results := make([]any, len(ops))
	for i := range results {
		results[i] = res
	}
	return index, results, nil
}

// ProposeGroupAs is ProposeGroup with each op's result converted to an R
// as ProposeAs converts one (R = any keeps the results of a group of
// several kinds as they are, errors aside). It returns the entry's index
// and every result: the errors of ProposeGroup with index 0; otherwise an
// error for the first op whose result is an error (a *FatalError,
// ErrBroken, ErrUnknownKind, a machine's refusal: errors.As finds it) or
// not an R, naming the op's position, with the index (the group
// committed) and the results, the zero R at the ops that failed.
func ProposeGroupAs[R any](ctx context.Context, n *Node, ops [][]byte) (uint64, []R, error) {
	index, res, err := n.ProposeGroup(ctx, ops)
	if err != nil {
		return 0, nil, err
	}
	out := make([]R, len(res))
	var first error
	for i, r := range res {
		v, err := resultAs[R](n.group, index, r)
		if err != nil && first == nil {
			first = fmt.Errorf("group of %d ops, op %d: %w", len(ops), i, err)
		}
		out[i] = v
	}
	return index, out, first
}

// checkGroup checks ops, each the concatenation of its parts, against the
// rules of a group.
func (r *registry) checkGroup(ops [][][]byte) error {
	if len(ops) == 0 || len(ops) > MaxOpsPerEntry {
		return fmt.Errorf("%w: %d ops, want 1 to %d", ErrInvalidGroup, len(ops), MaxOpsPerEntry)
	}
	var (
		size int
		seen [256]bool
	)
	for i, parts := range ops {
		if len(parts) == 0 {
			return fmt.Errorf("%w: op %d: empty", ErrInvalidGroup, i)
		}
		for _, p := range parts {
			size += len(p)
		}
		kind, _, err := DecodeOp(parts[0])
		if err != nil {
			return fmt.Errorf("%w: op %d: %w", ErrInvalidGroup, i, err)
		}
		name := r.names[kind]
		switch {
		case name == "":
			return fmt.Errorf("%w: op %d: kind %d: %w", ErrInvalidGroup, i, kind, ErrUnknownKind)
		case r.batch[kind]:
		case !r.group[kind]:
			return fmt.Errorf("%w: op %d: machine %s (kind %d) is neither Batch nor Group: its ops go alone", ErrInvalidGroup, i, name, kind)
		case seen[kind]:
			return fmt.Errorf("%w: op %d: a second op of machine %s (kind %d), which stamps the log index alone: once per group", ErrInvalidGroup, i, name, kind)
		}
		seen[kind] = true
	}
	if size > MaxGroupBytes {
		return fmt.Errorf("%w: %d bytes of ops, at most %d", ErrInvalidGroup, size, MaxGroupBytes)
	}
	return nil
}
