package chunkstore

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/kinds"
)

// The write fence as tenants use it (write_fence.go): set, lift and read a
// copyset's fence on its leader, and write as the fence's owner
// (ProposeGroupAs). A migration sets the fence of a source copyset at the
// cutover and waits until its export covers the index SetWriteFence
// answers; it sets the fence of a target copyset before it writes there
// and lifts it once it commits.

// WriteFence is a copyset's write fence.
type WriteFence struct {
	Owner  string
	Reason string
	// Since is the log index of the op that set the fence: the chunk ops
	// of every later entry but the owner's are refused.
	Since uint64
}

// ErrInvalidWriteFence is what a fence call with a bad owner or reason
// wraps; nothing was proposed.
var ErrInvalidWriteFence = errors.New("invalid write fence")

// validFenceOwner checks an owner: 1 to MaxFenceOwner printable ASCII
// characters without spaces (it is shown in copyset status and sent as a
// response trailer).
func validFenceOwner(owner string) error {
	if owner == "" {
		return fmt.Errorf("%w: empty owner", ErrInvalidWriteFence)
	}
	if len(owner) > MaxFenceOwner {
		return fmt.Errorf("%w: owner of %d bytes, at most %d", ErrInvalidWriteFence, len(owner), MaxFenceOwner)
	}
	for i := 0; i < len(owner); i++ {
		if c := owner[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("%w: owner %q: only printable ASCII without spaces", ErrInvalidWriteFence, owner)
		}
	}
	return nil
}

// SetWriteFence sets copyset g's write fence for owner, on this server's
// replica of g, which must lead it, and returns the log index it holds
// from: the chunk ops of every later entry but owner's are refused
// (EPOCH_TOO_OLD), on every replica. Setting owner's fence again changes
// nothing and answers the index it was set at. Errors: an invalid owner or
// reason (ErrInvalidWriteFence) and a copyset not hosted here
// (copyset.ErrNotHosted), nothing proposed; *copyset.NotLeaderError naming
// the leader; *WriteFenceHeldError when another owner holds the fence
// (nothing changed); *copyset.OutcomeUnknownError when the leadership was
// lost after the op was appended (a retry on the new leader is harmless).
func (s *Store) SetWriteFence(ctx context.Context, g copyset.GroupID, owner, reason string) (uint64, error) {
	if err := validFenceOwner(owner); err != nil {
		return 0, err
	}
	if len(reason) > MaxFenceReason || !utf8.ValidString(reason) {
		return 0, fmt.Errorf("%w: a reason of at most %d bytes of UTF-8", ErrInvalidWriteFence, MaxFenceReason)
	}
	n, m, err := s.fenceLeader(ctx, g)
	if err != nil {
		return 0, err
	}
	if f, ok := m.current(); ok {
		if f.Owner == owner {
			return f.Since, nil
		}
		return 0, &WriteFenceHeldError{Group: g, Holder: f.Owner, Since: f.Since, Owner: owner}
	}
	res, err := proposeWriteFence(ctx, n, &writeFenceOp{Op: fenceSet, Owner: owner, Reason: reason})
	if err != nil {
		return 0, err
	}
	return res.Since, nil
}

// LiftWriteFence lifts owner's write fence of copyset g, on this server's
// replica of g, which must lead it: chunk ops of later entries pass again.
// Lifting an absent fence changes nothing and succeeds. Errors as
// SetWriteFence's; another owner's fence is a *WriteFenceHeldError and
// stays.
func (s *Store) LiftWriteFence(ctx context.Context, g copyset.GroupID, owner string) error {
	if err := validFenceOwner(owner); err != nil {
		return err
	}
	n, m, err := s.fenceLeader(ctx, g)
	if err != nil {
		return err
	}
	f, ok := m.current()
	switch {
	case !ok:
		return nil
	case f.Owner != owner:
		return &WriteFenceHeldError{Group: g, Holder: f.Owner, Since: f.Since, Owner: owner, Lift: true}
	}
	_, err = proposeWriteFence(ctx, n, &writeFenceOp{Op: fenceLift, Owner: owner})
	return err
}

// WriteFence returns copyset g's write fence, read on this server's
// replica of g, which must lead it, after a read barrier: every fence op
// acknowledged before the call is in the answer. false: no fence. Errors
// as SetWriteFence's.
func (s *Store) WriteFence(ctx context.Context, g copyset.GroupID) (WriteFence, bool, error) {
	_, m, err := s.fenceLeader(ctx, g)
	if err != nil {
		return WriteFence{}, false, err
	}
	f, ok := m.current()
	return f, ok, nil
}

// LocalWriteFence returns the write fence of n's copyset as this replica
// applied it, without a read barrier: on a follower it lags the leader's
// by up to a commit timeout, and on a leader it may miss a fence op being
// committed (copyset status and metrics show it). false: no fence.
func LocalWriteFence(n *copyset.Node) (WriteFence, bool) {
	m, ok := copyset.MachineOf[*writeFenceMachine](n, kinds.WriteFence)
	if !ok {
		return WriteFence{}, false
	}
	return m.current()
}

// fenceLeader returns this server's replica of g and its write fence
// machine after a read barrier: the replica leads g and has applied every
// op acknowledged before the call.
func (s *Store) fenceLeader(ctx context.Context, g copyset.GroupID) (*copyset.Node, *writeFenceMachine, error) {
	var n *copyset.Node
	if s.copysets != nil {
		n = s.copysets.Get(g)
	}
	if n == nil {
		return nil, nil, fmt.Errorf("copyset %s: %w", g, copyset.ErrNotHosted)
	}
	if err := n.Broken(); err != nil {
		return nil, nil, fmt.Errorf("copyset %s: %w", g, err)
	}
	if _, err := n.ReadBarrier(ctx); err != nil {
		return nil, nil, err
	}
	m, ok := copyset.MachineOf[*writeFenceMachine](n, kinds.WriteFence)
	if !ok {
		return nil, nil, fmt.Errorf("copyset %s: no write fence machine", g)
	}
	return n, m, nil
}

// proposeWriteFence commits op in n's log and returns its result; a
// refusal (the fence of another owner, set meanwhile) is its error.
func proposeWriteFence(ctx context.Context, n *copyset.Node, op *writeFenceOp) (writeFenceResult, error) {
	b, err := encodeWriteFenceOp(op)
	if err != nil {
		return writeFenceResult{}, err
	}
	_, res, err := copyset.ProposeAs[writeFenceResult](ctx, n, b)
	if err == nil {
		err = res.Err
	}
	return res, err
}
