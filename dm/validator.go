package dm

import (
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/copyset"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	dmpb "github.com/chunkraft/chunkraft/proto/dm/pb"
)

// The validator (upstream's, for chunks). While a task with
// validator.mode fast or full is in Sync, the leader of each target
// copyset compares its chunks with the source cluster's, a pass at a
// time: fast compares existence, sn and corrected sn, full also the
// data's hash. A chunk is compared only when both sides hold it as of the
// same source op, so that writes going on never make it differ:
//
//   - the source reads each chunk between two readings of the last chunk
//     op its copyset applied (L1 before, L2 after; ChunksResponse);
//   - the target has applied every source op up to L2 (covered), and the
//     last source op on the chunk it applied is at or before L1.
//
// Then no op on the chunk lies between L1 and what the target applied,
// and both read the chunk as of the same op. Otherwise the chunk is
// pending. A chunk that keeps differing for the task's row-error-delay
// becomes an error row, replicated in the share (ValidatorOp), unless it
// has one New or Ignored already. A pass with every chunk compared and
// equal moves the validator's checkpoint to the index it compared at.

// Validator modes.
const (
	validateFast = "fast"
	validateFull = "full"
)

// validatorPass is the longest time between two passes; a short
// row-error-delay shortens it to a third of the delay.
const validatorPass = 5 * time.Second

// checkpointEvery bounds how often an unchanged pass moves the checkpoint.
const checkpointEvery = 10 * time.Second

// rowDelay is a task's row-error-delay.
func rowDelay(cfg *pb.TaskConfig) time.Duration {
	if ms := cfg.GetValidator().GetRowErrorDelayMs(); ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return DefaultRowErrorDelay
}

// validating reports whether a task's config runs a validator.
func validating(cfg *pb.TaskConfig) bool {
	m := cfg.GetValidator().GetMode()
	return m == validateFast || m == validateFull
}

// validator is the validator of one share on its target's leader, owned
// by the share's run.
type validator struct {
	s      *Service
	n      *copyset.Node
	cfg    *pb.TaskConfig
	srcCs  uint32
	prog   *progress
	since  map[uint64]time.Time // chunk -> when it was first seen differing
	lastCp time.Time
	passes uint64
}

// validate runs share sh's validator until ctx ends.
func (s *Service) validate(ctx context.Context, n *copyset.Node, sh *pb.SubTask, prog *progress) {
	v := &validator{s: s, n: n, cfg: sh.GetConfig(), srcCs: sh.GetSourceCopyset(), prog: prog, since: map[uint64]time.Time{}}
	every := min(validatorPass, rowDelay(v.cfg)/3)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		live := v.pass(ctx)
		v.passes++
		live.Passes = v.passes
		prog.validated(live)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sideState is a chunk as one side read it (nil: absent).
type sideState = *pb.ChunkState

// pass compares every chunk once and returns what it saw.
func (v *validator) pass(ctx context.Context) *pb.ValidatorLive {
	live := &pb.ValidatorLive{Running: true}
	start := time.Now()
	defer func() { live.PassMs = time.Since(start).Milliseconds() }()
	before := v.prog.now()
	if before.unit != dmpb.UnitType_Sync {
		live.Error = fmt.Sprintf("waiting for the Sync unit (now %v)", before.unit)
		return live
	}
	full := v.cfg.GetValidator().GetMode() == validateFull
	src, err := v.sourceStates(ctx, full)
	if err != nil {
		live.Error = err.Error()
		return live
	}
	dst := v.s.chunksLocal(ctx, v.n.Group(), &pb.ChunksRequest{States: true, Hash: full})
	if dst.GetCode() != 0 {
		live.Error = "target: " + dst.GetMsg()
		return live
	}
	after := v.prog.now()
	if !proto.Equal(before.cp, after.cp) {
		// The target applied a group while it was read: every chunk waits
		// for the next pass.
		live.Pending = uint64(len(dst.GetIds()))
		return live
	}
	covered := covered(after.cp)
	srcBy, dstBy := map[uint64]sideState{}, map[uint64]sideState{}
	for _, c := range src.GetStates() {
		srcBy[c.GetId()] = c
	}
	for _, c := range dst.GetStates() {
		dstBy[c.GetId()] = c
	}
	ids := append(slices.Clone(src.GetIds()), dst.GetIds()...)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	now := time.Now()
	sh := v.share()
	for _, id := range ids {
		s, d := srcBy[id], dstBy[id]
		from, to := src.GetFromIndex(), src.GetToIndex()
		if s != nil {
			from, to = s.GetFromIndex(), s.GetToIndex()
		}
		if covered < to || after.lastOp(id) > from || (full && s.GetHashError() != "") {
			// Not as of the same op yet, or the source's data unreadable
			// this time: the next pass sees.
			live.Pending++
			continue
		}
		live.Compared++
		kind, srcText, dstText := compareChunk(s, d, full)
		if kind == "" {
			live.Equal++
			delete(v.since, id)
			continue
		}
		live.Differing++
		first, ok := v.since[id]
		if !ok {
			first, v.since[id] = now, now
		}
		if now.Sub(first) < rowDelay(v.cfg) || hasOpenRow(sh, id) {
			continue
		}
		row := &pb.ValidationRow{Chunk: id, Src: srcText, Dst: dstText, ErrorType: kind, FirstMs: first.UnixMilli(),
			Message: fmt.Sprintf("chunk %d has differed from the source's since %s (compared at source index %d)", id, first.UTC().Format(time.RFC3339), from)}
		if r := v.s.proposeLocal(ctx, v.n.Group(), &pb.Op{Op: &pb.Op_Validator{Validator: &pb.ValidatorOp{Name: v.cfg.GetName(),
			NowMs: now.UnixMilli(), Op: &pb.ValidatorOp_Add{Add: row}}}}); r.GetCode() != 0 {
			live.Error = "adding a row: " + r.GetMsg()
		}
	}
	if live.Pending == 0 && live.Differing == 0 && live.Error == "" {
		v.checkpoint(ctx, sh, covered, start, now)
	}
	return live
}

// share is the replicated share as this leader has it.
func (v *validator) share() *pb.SubTask {
	if m, ok := MachineOf(v.n); ok {
		return m.Get(v.cfg.GetName())
	}
	return nil
}

// hasOpenRow reports whether share sh has a New or Ignored row of chunk.
func hasOpenRow(sh *pb.SubTask, chunk uint64) bool {
	for _, r := range sh.GetValidation().GetRows() {
		if r.GetChunk() == chunk && (r.GetState() == dmpb.ValidateErrorState_NewErr || r.GetState() == dmpb.ValidateErrorState_IgnoredErr) {
			return true
		}
	}
	return false
}

// checkpoint moves the validator's checkpoint to index, compared by a
// pass that began at start, every checkpointEvery, or at once when it
// reaches the cutover point.
func (v *validator) checkpoint(ctx context.Context, sh *pb.SubTask, index uint64, start, now time.Time) {
	val := sh.GetValidation()
	if index < val.GetValidatedIndex() {
		return
	}
	reached := !val.GetCutoverReached() && cutoverReached(val.GetCutover(), sh, index, start)
	if !reached && (index == val.GetValidatedIndex() || now.Sub(v.lastCp) < checkpointEvery) {
		return
	}
	v.lastCp = now
	v.s.proposeLocal(ctx, v.n.Group(), &pb.Op{Op: &pb.Op_Validator{Validator: &pb.ValidatorOp{Name: v.cfg.GetName(), NowMs: now.UnixMilli(),
		Op: &pb.ValidatorOp_Checkpoint{Checkpoint: &pb.ValidatedAt{Index: index, CutoverReached: reached}}}}})
}

// The forms of a validator's cutover point (UpdateValidator).
const cutoverAtFence = "cutover"

// parseCutover checks a cutover point: a source position P/C:index.op, a
// time (RFC 3339) or "cutover" (the task's cutover fence).
func parseCutover(s string) (pos *Position, at time.Time, fence bool, err error) {
	if s == cutoverAtFence {
		return nil, time.Time{}, true, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return nil, t, false, nil
	}
	p, err := ParsePosition(s)
	if err != nil {
		return nil, time.Time{}, false, fmt.Errorf("cutover point %q: want a source position P/C:index.op, a time (RFC 3339) or %q", s, cutoverAtFence)
	}
	return &p, time.Time{}, false, nil
}

// cutoverReached reports whether a pass that began at start and compared
// every chunk of share sh as of source index index, all equal, is at or
// past the cutover point c: its position; its time (the pass began at or
// after it, so it read the source after every write acknowledged before
// it, and found the target holding them); or the task's cutover fence
// (once a cutover fenced the source).
func cutoverReached(c string, sh *pb.SubTask, index uint64, start time.Time) bool {
	if c == "" {
		return false
	}
	pos, at, fence, err := parseCutover(c)
	switch {
	case err != nil:
		return false
	case fence:
		f := sh.GetCutover().GetFenceIndex()
		return f != 0 && f <= index
	case pos != nil:
		return pos.At.GetIndex() <= index
	}
	return !start.Before(at)
}

// sourceStates reads every chunk of the source copyset from the source
// cluster.
func (v *validator) sourceStates(ctx context.Context, hash bool) (*pb.ChunksResponse, error) {
	req := &pb.ChunksRequest{Pool: v.cfg.GetSource().GetPool(), Copyset: v.srcCs, States: true, Hash: hash}
	var resp *pb.ChunksResponse
	err := v.s.onSource(ctx, v.cfg, func(ctx context.Context, cc *grpc.ClientConn) error {
		var err error
		resp, err = pb.NewDMInternalClient(cc).SourceChunks(ctx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	if resp.GetCode() != 0 {
		return nil, fmt.Errorf("source copyset %d/%d: %s", req.GetPool(), req.GetCopyset(), resp.GetMsg())
	}
	return resp, nil
}

// compareChunk compares a chunk's two sides: "" when equal, else the
// kind of difference and each side in a line.
func compareChunk(s, d sideState, full bool) (kind, src, dst string) {
	text := func(c sideState) string {
		switch {
		case c == nil:
			return "absent"
		case c.GetHashError() != "":
			return fmt.Sprintf("sn %d, corrected sn %d, snapshot sn %d, unreadable: %s", c.GetSn(), c.GetCorrectedSn(), c.GetSnapSn(), c.GetHashError())
		case full:
			return fmt.Sprintf("sn %d, corrected sn %d, snapshot sn %d, hash %s", c.GetSn(), c.GetCorrectedSn(), c.GetSnapSn(), c.GetHash())
		}
		return fmt.Sprintf("sn %d, corrected sn %d, snapshot sn %d", c.GetSn(), c.GetCorrectedSn(), c.GetSnapSn())
	}
	switch {
	case s == nil && d == nil:
		return "", "", ""
	case s == nil:
		kind = "extra at target"
	case d == nil:
		kind = "missing at target"
	case d.GetHashError() != "":
		kind = "unreadable at target"
	case s.GetSn() != d.GetSn() || s.GetCorrectedSn() != d.GetCorrectedSn() || s.GetSnapSn() != d.GetSnapSn():
		kind = "different sn"
	case full && s.GetHashError() == "" && s.GetHash() != d.GetHash():
		kind = "different data"
	default:
		return "", "", ""
	}
	return kind, text(s), text(d)
}
