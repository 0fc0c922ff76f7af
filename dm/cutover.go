package dm

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/datasync/dest"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	dmpb "github.com/chunkraft/chunkraft/proto/dm/pb"
)

// A cutover (DMControl.Cutover, chunkctl dm cutover) makes the target pool
// the live copy of a task's source pool with nothing lost, modelled on
// Ceph RBD live migration's prepare/execute/commit/abort. Its steps, each
// replicated on every share (SetCutover) before the next begins, so that
// query-status shows them and a cutover run again after a crash of any
// server goes on from where it stood (every step is idempotent):
//
//  1. FENCING: the cutover is under way.
//  2. FENCED: every source copyset refuses client writes from its fence op
//     on (chunkstore's write fence, owner dm-cutover:<task>); the share
//     records the fence's index. The write downtime starts here.
//  3. SYNCED: the relay task has exported the source copyset up to its
//     fence (its covered index reached it; the export holds no op the
//     fence refused) and the share has applied every packet the relay
//     holds.
//  4. VERIFIED: the source and target copysets have the same digest.
//  5. COMMITTED: the share is Finished, then the target's fence (owner
//     dm:<task>) is lifted and the target takes client writes; the leader
//     worker lifts it too should the driver stop in between. The write
//     downtime ends here: from the first source fence to the last lift.
//
// --abort before COMMITTED lifts the source fences and marks the shares
// ABORTED: the source takes writes again and the task goes on in Sync. A
// cutover is for a task with a source cluster in mode all: an export has
// no source pool to fence.

// defaultCutoverWait bounds the wait for SYNCED when the request does not.
const defaultCutoverWait = 5 * time.Minute

// cutoverPoll is how often the driver looks at the relay and the shares
// while it waits for SYNCED.
const cutoverPoll = 50 * time.Millisecond

// cutoverRun is one run of the driver: the task's shares and what it did.
type cutoverRun struct {
	s      *Service
	name   string
	cfg    *pb.TaskConfig
	shares []*pb.Located
	resp   *pb.CutoverResponse
}

func (r *cutoverRun) step(format string, args ...any) {
	r.resp.Steps = append(r.resp.Steps, fmt.Sprintf(format, args...))
}

// fail answers the run's failure: the cutover stays where it stands.
func (r *cutoverRun) fail(format string, args ...any) *pb.CutoverResponse {
	r.resp.Result = false
	r.resp.Msg = fmt.Sprintf("cutover of task %q: ", r.name) + fmt.Sprintf(format, args...)
	r.resp.Step = slowest(r.shares)
	return r.resp
}

// Cutover runs the steps of task name's cutover still to do, or aborts it.
func (c *controlService) Cutover(ctx context.Context, req *pb.CutoverRequest) (*pb.CutoverResponse, error) {
	s := c.s
	name := req.GetName()
	no := func(format string, args ...any) (*pb.CutoverResponse, error) {
		return &pb.CutoverResponse{Result: false, Msg: fmt.Sprintf(format, args...)}, nil
	}
	if name == "" {
		return no("cutover: no task name")
	}
	if req.GetTimeoutMs() < 0 {
		return no("cutover of task %q: timeout %d ms: want 0 (the default, %v) or more", name, req.GetTimeoutMs(), defaultCutoverWait)
	}
	l, err := s.listAll(ctx, 0, name)
	if err != nil {
		return no("cutover of task %q: %v", name, err)
	}
	l = l.taskOnly()
	if len(l.shares) == 0 {
		msg := msgNoSubTask(name)
		if len(l.unanswered) > 0 {
			msg += "; no leader answered for " + strings.Join(l.unanswered, ", ")
		}
		return no("%s", msg)
	}
	if len(l.unanswered) > 0 {
		return no("cutover of task %q: no leader answered for %s: a cutover needs every copyset; nothing was done", name, strings.Join(l.unanswered, ", "))
	}
	r := &cutoverRun{s: s, name: name, cfg: l.shares[0].GetSubtask().GetConfig(), shares: l.shares, resp: &pb.CutoverResponse{}}
	switch {
	case len(r.cfg.GetSource().GetCluster()) == 0:
		return no("cutover of task %q: its source is an export (%s), not a source cluster: there is no source pool to fence; stop-task ends the task and opens the target pool to writes",
			name, r.cfg.GetSource().GetExport())
	case r.cfg.GetMode() != pb.Mode_ALL:
		return no("cutover of task %q: task-mode %s has no Sync unit to cut over from; a cutover needs task-mode all", name, ModeName(r.cfg.GetMode()))
	}
	for _, sh := range r.shares {
		r.resp.Copysets = append(r.resp.Copysets, &pb.CopysetResult{Pool: sh.GetPool(), Copyset: sh.GetCopyset(), Result: true})
	}
	if req.GetAbort() {
		return r.abort(ctx), nil
	}
	return r.run(ctx, time.Duration(req.GetTimeoutMs())*time.Millisecond), nil
}

// slowest is the step of the share furthest behind (ABORTED counts as
// none).
func slowest(shares []*pb.Located) pb.CutoverStep {
	out := pb.CutoverStep_CUTOVER_COMMITTED
	for _, sh := range shares {
		st := sh.GetSubtask().GetCutover().GetStep()
		if st == pb.CutoverStep_CUTOVER_ABORTED {
			st = pb.CutoverStep_CUTOVER_NONE
		}
		out = min(out, st)
	}
	return out
}

// cutoverUnderWay reports whether a share's cutover has begun and none
// has committed or aborted.
func cutoverUnderWay(shares []*pb.Located) bool {
	under := false
	for _, sh := range shares {
		switch sh.GetSubtask().GetCutover().GetStep() {
		case pb.CutoverStep_CUTOVER_COMMITTED:
			return false
		case pb.CutoverStep_CUTOVER_NONE, pb.CutoverStep_CUTOVER_ABORTED:
		default:
			under = true
		}
	}
	return under
}

// set proposes cutover step c on every share not past it and keeps the
// shares it answers; the first refusal is the error.
func (r *cutoverRun) set(ctx context.Context, c func(sh *pb.Located) *pb.Cutover) error {
	for i, sh := range r.shares {
		g := copyset.NewGroupID(sh.GetPool(), sh.GetCopyset())
		step := c(sh).GetStep()
		if cur := sh.GetSubtask().GetCutover().GetStep(); cur > step && cur != pb.CutoverStep_CUTOVER_ABORTED {
			continue // past it already
		}
		p := r.s.routePropose(ctx, g, &pb.Op{Op: &pb.Op_SetCutover{SetCutover: &pb.SetCutover{Name: r.name, Cutover: c(sh)}}})
		if p.GetCode() != 0 {
			r.resp.Copysets[i].Result, r.resp.Copysets[i].Msg = false, p.GetMsg()
			return fmt.Errorf("copyset %d/%d: %s", g.Pool(), g.Copyset(), p.GetMsg())
		}
		r.shares[i] = &pb.Located{Pool: sh.GetPool(), Copyset: sh.GetCopyset(), Leader: sh.GetLeader(), Subtask: p.GetSubtask()}
		r.resp.Copysets[i].Msg = p.GetSubtask().GetCutover().GetStep().String()
	}
	return nil
}

// sourceIDs are the source copysets of the shares.
func (r *cutoverRun) sourceIDs() []uint32 {
	var ids []uint32
	for _, sh := range r.shares {
		ids = append(ids, sh.GetSubtask().GetSourceCopyset())
	}
	return ids
}

// run runs the steps still to do.
func (r *cutoverRun) run(ctx context.Context, wait time.Duration) *pb.CutoverResponse {
	if wait == 0 {
		wait = defaultCutoverWait
	}
	again := "; the source stays fenced: run the cutover again to go on, or abort it (chunkctl dm cutover --abort)"
	if slowest(r.shares) < pb.CutoverStep_CUTOVER_COMMITTED {
		for _, sh := range r.shares {
			st := sh.GetSubtask()
			if st.GetCutover().GetStep() == pb.CutoverStep_CUTOVER_COMMITTED {
				continue
			}
			if st.GetStage() != dmpb.Stage_Running || st.GetUnit() != dmpb.UnitType_Sync {
				return r.fail("copyset %d/%d is %v in unit %v: a cutover starts from Sync with every copyset Running; nothing was done",
					sh.GetPool(), sh.GetCopyset(), st.GetStage(), st.GetUnit())
			}
		}
	}
	now := time.Now().UnixMilli()
	if err := r.set(ctx, func(*pb.Located) *pb.Cutover {
		return &pb.Cutover{Step: pb.CutoverStep_CUTOVER_FENCING, StartedMs: now}
	}); err != nil {
		return r.fail("%v", err)
	}

	// FENCED.
	if slowest(r.shares) < pb.CutoverStep_CUTOVER_FENCED {
		fencedAt := time.Now().UnixMilli()
		fences, err := r.s.onSourceFence(ctx, r.cfg, r.sourceIDs(), pb.FenceOp_FENCE_SET, false)
		if err != nil {
			return r.fail("fence the source: %v%s", err, again)
		}
		if err := r.set(ctx, func(sh *pb.Located) *pb.Cutover {
			f := fences[sh.GetSubtask().GetSourceCopyset()]
			return &pb.Cutover{Step: pb.CutoverStep_CUTOVER_FENCED, FenceIndex: f.GetSince(), FencedMs: fencedAt}
		}); err != nil {
			return r.fail("%v%s", err, again)
		}
		r.step("fenced %d source copysets of pool %d", len(fences), r.cfg.GetSource().GetPool())
	}

	// SYNCED.
	if slowest(r.shares) < pb.CutoverStep_CUTOVER_SYNCED {
		start := time.Now()
		if err := r.waitSynced(ctx, wait); err != nil {
			return r.fail("%v%s", err, again)
		}
		r.step("synced: the target applied every source write before the fences (%v)", time.Since(start).Round(time.Millisecond))
	}

	// VERIFIED.
	if slowest(r.shares) < pb.CutoverStep_CUTOVER_VERIFIED {
		digests, chunks, err := r.verify(ctx)
		if err != nil {
			return r.fail("%v; not committed%s", err, again)
		}
		now := time.Now().UnixMilli()
		if err := r.set(ctx, func(sh *pb.Located) *pb.Cutover {
			return &pb.Cutover{Step: pb.CutoverStep_CUTOVER_VERIFIED, VerifiedMs: now, Digest: digests[sh.GetCopyset()]}
		}); err != nil {
			return r.fail("%v%s", err, again)
		}
		r.step("verified: %d copysets, %d chunks, the same digests on both sides", len(r.shares), chunks)
	}

	// COMMITTED, then the target's fences lifted.
	now = time.Now().UnixMilli()
	if err := r.set(ctx, func(*pb.Located) *pb.Cutover {
		return &pb.Cutover{Step: pb.CutoverStep_CUTOVER_COMMITTED, CommittedMs: now}
	}); err != nil {
		return r.fail("commit: %v", err)
	}
	for _, sh := range r.shares {
		g := copyset.NewGroupID(sh.GetPool(), sh.GetCopyset())
		if f := r.s.routeFence(ctx, g, &pb.FenceRequest{Op: pb.FenceOp_FENCE_LIFT, Owner: fenceOwner(r.name)}); f.GetCode() != 0 {
			return r.fail("committed, but lifting the target's fence failed: %s; the leader lifts it by itself, or run the cutover again", f.GetMsg())
		}
	}
	lifted := time.Now().UnixMilli()
	if err := r.set(ctx, func(*pb.Located) *pb.Cutover {
		return &pb.Cutover{Step: pb.CutoverStep_CUTOVER_COMMITTED, LiftedMs: lifted}
	}); err != nil {
		return r.fail("committed and the target's fences lifted, but recording it failed: %v", err)
	}
	st := cutoverStatus(r.shares)
	r.resp.Result, r.resp.Step, r.resp.DowntimeMs = true, pb.CutoverStep_CUTOVER_COMMITTED, st.GetDowntimeMs()
	r.step("committed: pool %d takes writes; the source pool %d stays fenced", r.cfg.GetTargetPool(), r.cfg.GetSource().GetPool())
	r.resp.Msg = fmt.Sprintf("cutover of task %q committed: write downtime %d ms", r.name, st.GetDowntimeMs())
	r.s.log.Info("dm cutover committed", "task", r.name, "downtime_ms", st.GetDowntimeMs())
	return r.resp
}

// waitSynced waits, up to wait, until every source copyset's relay export
// covers its fence and every share has applied every packet of the relay.
func (r *cutoverRun) waitSynced(ctx context.Context, wait time.Duration) error {
	u, err := dest.Parse(sourceOf(r.cfg))
	if err != nil {
		return err
	}
	relay, err := dest.Open(ctx, u, r.s.deps.ObjectStore)
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	defer relay.Close()
	deadline := time.Now().Add(wait)
	var behind []string
	for {
		behind = behind[:0]
		covered, err := r.s.onSourceFence(ctx, r.cfg, r.sourceIDs(), pb.FenceOp_FENCE_GET, false)
		if err != nil {
			behind = append(behind, err.Error())
		}
		l, err := r.s.listAll(ctx, 0, r.name)
		if err != nil {
			behind = append(behind, err.Error())
		} else {
			byCopyset := map[uint32]*pb.Located{}
			for _, sh := range l.shares {
				byCopyset[sh.GetCopyset()] = sh
			}
			for i, sh := range r.shares {
				if cur := byCopyset[sh.GetCopyset()]; cur != nil {
					r.shares[i] = cur
				}
			}
		}
		for _, sh := range r.shares {
			st := sh.GetSubtask()
			c := st.GetCutover()
			if c.GetStep() >= pb.CutoverStep_CUTOVER_SYNCED {
				continue
			}
			if st.GetStage() != dmpb.Stage_Running {
				return fmt.Errorf("copyset %d/%d is %v: %s", sh.GetPool(), sh.GetCopyset(), st.GetStage(), errorsLine(st.GetResult()))
			}
			f := covered[st.GetSourceCopyset()]
			if f == nil || f.GetCoveredIndex() < c.GetFenceIndex() {
				behind = append(behind, fmt.Sprintf("copyset %d/%d: the relay covers the source to index %d, its fence is at %d",
					sh.GetPool(), sh.GetCopyset(), f.GetCoveredIndex(), c.GetFenceIndex()))
				continue
			}
			if more, err := r.packetAt(ctx, relay, st); err != nil || more != "" {
				behind = append(behind, fmt.Sprintf("copyset %d/%d: at %s, packet %s to apply%v",
					sh.GetPool(), sh.GetCopyset(), CheckpointString(st.GetCheckpoint()), more, errSuffix(err)))
				continue
			}
			g := copyset.NewGroupID(sh.GetPool(), sh.GetCopyset())
			p := r.s.routePropose(ctx, g, &pb.Op{Op: &pb.Op_SetCutover{SetCutover: &pb.SetCutover{Name: r.name,
				Cutover: &pb.Cutover{Step: pb.CutoverStep_CUTOVER_SYNCED, SyncedMs: time.Now().UnixMilli()}}}})
			if p.GetCode() != 0 {
				return fmt.Errorf("copyset %d/%d: %s", g.Pool(), g.Copyset(), p.GetMsg())
			}
			sh.Subtask = p.GetSubtask()
		}
		if len(behind) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not synced after %v: %s", wait, strings.Join(behind, "; "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(cutoverPoll):
		}
	}
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}

// packetAt names the relay's packet at share st's checkpoint ("" when
// there is none: the share has applied every packet the relay holds).
func (r *cutoverRun) packetAt(ctx context.Context, relay dest.Dest, st *pb.SubTask) (string, error) {
	cp := st.GetCheckpoint()
	if cp.GetRecord() != 0 || cp.GetStep() != 0 || cp.GetPoint() == nil {
		return "the one in progress", nil
	}
	at, err := exportfmt.ParsePoint(cp.GetPoint())
	if err != nil {
		return "", err
	}
	name := exportfmt.PacketName(r.cfg.GetSource().GetPool(), st.GetSourceCopyset(), at)
	infos, err := relay.List(ctx, name)
	if err != nil {
		return "", err
	}
	for _, info := range infos {
		if info.Name == name {
			return name, nil
		}
	}
	return "", nil
}

// verify compares every copyset's digest on both sides and returns the
// target's by copyset and the chunks counted.
func (r *cutoverRun) verify(ctx context.Context) (map[uint32]string, uint64, error) {
	// Both sides, every copyset, at once.
	var (
		wg     sync.WaitGroup
		src    map[uint32]*pb.FenceResponse
		srcErr error
		target = make([]*pb.FenceResponse, len(r.shares))
	)
	wg.Go(func() { src, srcErr = r.s.onSourceFence(ctx, r.cfg, r.sourceIDs(), pb.FenceOp_FENCE_GET, true) })
	for i, sh := range r.shares {
		wg.Go(func() {
			target[i] = r.s.routeFence(ctx, copyset.NewGroupID(sh.GetPool(), sh.GetCopyset()), &pb.FenceRequest{Op: pb.FenceOp_FENCE_GET, Digest: true})
		})
	}
	wg.Wait()
	if srcErr != nil {
		return nil, 0, fmt.Errorf("digest the source: %w", srcErr)
	}
	out := map[uint32]string{}
	var chunks uint64
	var differ []string
	for i, sh := range r.shares {
		g := copyset.NewGroupID(sh.GetPool(), sh.GetCopyset())
		t := target[i]
		if t.GetCode() != 0 {
			return nil, 0, fmt.Errorf("digest the target: %s", t.GetMsg())
		}
		s := src[sh.GetSubtask().GetSourceCopyset()]
		if s.GetDigest() != t.GetDigest() {
			differ = append(differ, fmt.Sprintf("copyset %d/%d: source %s (%d chunks), target %s (%d chunks)",
				r.cfg.GetSource().GetPool(), sh.GetSubtask().GetSourceCopyset(), s.GetDigest(), s.GetChunks(), t.GetDigest(), t.GetChunks()))
		}
		out[g.Copyset()] = t.GetDigest()
		chunks += t.GetChunks()
	}
	if len(differ) > 0 {
		slices.Sort(differ)
		return nil, 0, fmt.Errorf("the copysets differ: %s", strings.Join(differ, "; "))
	}
	return out, chunks, nil
}

// abort lifts the source fences and marks the shares ABORTED.
func (r *cutoverRun) abort(ctx context.Context) *pb.CutoverResponse {
	for _, sh := range r.shares {
		if sh.GetSubtask().GetCutover().GetStep() == pb.CutoverStep_CUTOVER_COMMITTED {
			return r.fail("copyset %d/%d has committed: a committed cutover cannot be aborted", sh.GetPool(), sh.GetCopyset())
		}
	}
	if _, err := r.s.onSourceFence(ctx, r.cfg, r.sourceIDs(), pb.FenceOp_FENCE_LIFT, false); err != nil {
		return r.fail("lift the source's fences: %v; run the abort again", err)
	}
	r.step("lifted the fences of %d source copysets of pool %d", len(r.shares), r.cfg.GetSource().GetPool())
	now := time.Now().UnixMilli()
	var under []*pb.Located
	for _, sh := range r.shares {
		if st := sh.GetSubtask().GetCutover().GetStep(); st != pb.CutoverStep_CUTOVER_NONE {
			under = append(under, sh)
		}
	}
	all := r.shares
	r.shares = under
	err := r.set(ctx, func(*pb.Located) *pb.Cutover {
		return &pb.Cutover{Step: pb.CutoverStep_CUTOVER_ABORTED, AbortedMs: now}
	})
	r.shares = all
	if err != nil {
		return r.fail("the source takes writes again, but: %v; run the abort again", err)
	}
	r.resp.Result, r.resp.Step = true, pb.CutoverStep_CUTOVER_ABORTED
	r.resp.Msg = fmt.Sprintf("cutover of task %q aborted: source pool %d takes writes again; the task goes on in Sync", r.name, r.cfg.GetSource().GetPool())
	r.s.log.Info("dm cutover aborted", "task", r.name)
	return r.resp
}

// cutoverStatus is the cutover of a task's shares as query-status shows
// it; nil when none was started.
func cutoverStatus(shares []*pb.Located) *dmpb.CutoverStatus {
	var (
		out     = &dmpb.CutoverStatus{}
		started bool
		allLift = true
	)
	for _, sh := range shares {
		c := sh.GetSubtask().GetCutover()
		if c == nil {
			allLift = false
			continue
		}
		started = true
		if f := c.GetFencedMs(); f != 0 && (out.FencedMs == 0 || f < out.FencedMs) {
			out.FencedMs = f
		}
		out.LiftedMs = max(out.LiftedMs, c.GetLiftedMs())
		allLift = allLift && c.GetLiftedMs() != 0
		out.Copysets = append(out.Copysets, fmt.Sprintf("%d/%d: %s (source fenced at index %d)", sh.GetPool(), sh.GetCopyset(),
			stepName(c.GetStep()), c.GetFenceIndex()))
	}
	if !started {
		return nil
	}
	out.Step = stepName(slowest(shares))
	if slices.ContainsFunc(shares, func(sh *pb.Located) bool {
		return sh.GetSubtask().GetCutover().GetStep() == pb.CutoverStep_CUTOVER_ABORTED
	}) && slowest(shares) == pb.CutoverStep_CUTOVER_NONE {
		out.Step = stepName(pb.CutoverStep_CUTOVER_ABORTED)
	}
	if allLift && out.FencedMs != 0 {
		out.DowntimeMs = out.LiftedMs - out.FencedMs
	} else {
		out.LiftedMs = 0
	}
	return out
}

// stepName is a step as query-status writes it: "fenced", "committed".
func stepName(s pb.CutoverStep) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "CUTOVER_"))
}

// errorsLine writes a result's errors in a line.
func errorsLine(r *dmpb.ProcessResult) string {
	var out []string
	for _, e := range r.GetErrors() {
		out = append(out, e.GetMessage())
	}
	if r.GetIsCanceled() {
		out = append(out, "paused by a user")
	}
	if len(out) == 0 {
		return "no error"
	}
	return strings.Join(out, "; ")
}
