package dm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chunkraft/chunkraft/copyset"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	dmpb "github.com/chunkraft/chunkraft/proto/dm/pb"
)

// The validator's four pb.Worker RPCs: its status, its error rows, their
// state (ignore, resolve, clear) and its cutover point. As upstream, a
// task that does not exist or runs no validator is a gRPC error
// (NotFound).

// validatorShares returns task name's shares, or the gRPC error upstream
// answers when there is no such task or it runs no validator.
func (s *Service) validatorShares(ctx context.Context, name string) ([]*pb.Located, error) {
	if name == "" {
		return nil, status.Error(codes.InvalidArgument, "validator: no task name")
	}
	l, err := s.listAll(ctx, 0, name)
	if err != nil {
		return nil, status.Error(codes.Unavailable, fmt.Sprintf("validator of %q: %v", name, err))
	}
	l = l.taskOnly()
	switch {
	case len(l.shares) == 0 && len(l.unanswered) > 0:
		return nil, status.Error(codes.Unavailable, fmt.Sprintf("validator of %q: no leader answered for %s", name, strings.Join(l.unanswered, ", ")))
	case len(l.shares) == 0:
		return nil, status.Error(codes.NotFound, fmt.Sprintf("validator not found for task %s: %s", name, msgNoSubTask(name)))
	case !validating(l.shares[0].GetSubtask().GetConfig()):
		return nil, status.Error(codes.NotFound, fmt.Sprintf("validator not found for task %s: its validator.mode is none", name))
	}
	shares := slices.Clone(l.shares)
	slices.SortFunc(shares, func(a, b *pb.Located) int { return cmp.Compare(a.GetCopyset(), b.GetCopyset()) })
	return shares, nil
}

// GetWorkerValidatorStatus reports each share's validator: its stage, its
// checkpoint and cutover point, its last pass's figures, its rows by
// state; and (tableStatuses) each chunk with a row, filtered by stage.
func (w *workerService) GetWorkerValidatorStatus(ctx context.Context, req *dmpb.GetValidationStatusRequest) (*dmpb.GetValidationStatusResponse, error) {
	switch req.GetFilterStatus() {
	case dmpb.Stage_InvalidStage, dmpb.Stage_Running, dmpb.Stage_Stopped:
	default:
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("filter status %v: want Running or Stopped (or none)", req.GetFilterStatus()))
	}
	shares, err := w.s.validatorShares(ctx, req.GetTaskName())
	if err != nil {
		return nil, err
	}
	out := &dmpb.GetValidationStatusResponse{Result: true}
	for _, sh := range shares {
		st := sh.GetSubtask()
		cfg := st.GetConfig()
		src := CopysetName(cfg.GetSource().GetPool(), st.GetSourceCopyset())
		val := st.GetValidation()
		live := sh.GetValidator()
		stage := dmpb.Stage_Stopped
		if live.GetRunning() && st.GetStage() == dmpb.Stage_Running {
			stage = dmpb.Stage_Running
		}
		counts := map[dmpb.ValidateErrorState]int{}
		for _, r := range val.GetRows() {
			counts[r.GetState()]++
		}
		vs := &dmpb.ValidationStatus{Task: cfg.GetName(), Source: src, Mode: cfg.GetValidator().GetMode(), Stage: stage,
			ValidatorBinlog:     fmt.Sprintf("%d/%d:%d", cfg.GetSource().GetPool(), st.GetSourceCopyset(), val.GetValidatedIndex()),
			Result:              &dmpb.ProcessResult{},
			ProcessedRowsStatus: fmt.Sprintf("compared %d, equal %d (last pass)", live.GetCompared(), live.GetEqual()),
			PendingRowsStatus:   fmt.Sprintf("pending %d, differing %d (last pass, %d passes)", live.GetPending(), live.GetDiffering(), live.GetPasses()),
			ErrorRowsStatus: fmt.Sprintf("new %d, ignored %d, resolved %d", counts[dmpb.ValidateErrorState_NewErr],
				counts[dmpb.ValidateErrorState_IgnoredErr], counts[dmpb.ValidateErrorState_ResolvedErr]),
			CutoverBinlogPos: val.GetCutover()}
		if val.GetCutoverReached() {
			vs.CutoverBinlogPos += " (reached)"
		}
		if e := live.GetError(); e != "" {
			vs.Result.Errors = []*dmpb.ProcessError{{ErrCode: codeSource, ErrClass: "validator", ErrScope: "internal", ErrLevel: "low", Message: e}}
		}
		if !sh.GetLive() {
			vs.Result.Errors = append(vs.Result.Errors, &dmpb.ProcessError{ErrCode: codeSource, ErrClass: "validator", ErrScope: "internal",
				ErrLevel: "low", Message: "no applier runs the share on its leader (the task is not Running)"})
		}
		out.Validators = append(out.Validators, vs)
		if req.GetFilterStatus() != dmpb.Stage_InvalidStage && req.GetFilterStatus() != stage {
			continue
		}
		for _, r := range val.GetRows() {
			if r.GetState() != dmpb.ValidateErrorState_NewErr {
				continue
			}
			t := strconv.FormatUint(r.GetChunk(), 10)
			out.TableStatuses = append(out.TableStatuses, &dmpb.ValidationTableStatus{Source: src, SrcTable: t, DstTable: t,
				Stage: stage, Message: r.GetErrorType()})
		}
	}
	return out, nil
}

// GetValidatorError lists the task's rows in state errState (InvalidErr:
// all).
func (w *workerService) GetValidatorError(ctx context.Context, req *dmpb.GetValidationErrorRequest) (*dmpb.GetValidationErrorResponse, error) {
	shares, err := w.s.validatorShares(ctx, req.GetTaskName())
	if err != nil {
		return nil, err
	}
	out := &dmpb.GetValidationErrorResponse{Result: true}
	for _, sh := range shares {
		st := sh.GetSubtask()
		src := CopysetName(st.GetConfig().GetSource().GetPool(), st.GetSourceCopyset())
		for _, r := range st.GetValidation().GetRows() {
			if req.GetErrState() != dmpb.ValidateErrorState_InvalidErr && r.GetState() != req.GetErrState() {
				continue
			}
			t := strconv.FormatUint(r.GetChunk(), 10)
			out.Error = append(out.Error, &dmpb.ValidationError{Id: strconv.FormatUint(r.GetId(), 10), Source: src,
				SrcTable: t, SrcData: r.GetSrc(), DstTable: t, DstData: r.GetDst(), ErrorType: r.GetErrorType(), Status: r.GetState(),
				Time: time.UnixMilli(r.GetTimeMs()).UTC().Format(time.RFC3339), Message: r.GetMessage()})
		}
	}
	return out, nil
}

// OperateValidatorError ignores, resolves or clears one row (errId) or
// all (isAllError) of the task.
func (w *workerService) OperateValidatorError(ctx context.Context, req *dmpb.OperateValidationErrorRequest) (*dmpb.OperateValidationErrorResponse, error) {
	var rs *pb.RowState
	set := true
	switch req.GetOp() {
	case dmpb.ValidationErrOp_IgnoreErrOp:
		rs = &pb.RowState{State: dmpb.ValidateErrorState_IgnoredErr}
	case dmpb.ValidationErrOp_ResolveErrOp:
		rs = &pb.RowState{State: dmpb.ValidateErrorState_ResolvedErr}
	case dmpb.ValidationErrOp_ClearErrOp:
		rs, set = &pb.RowState{}, false
	default:
		return &dmpb.OperateValidationErrorResponse{Msg: fmt.Sprintf("validation error op %v: want IgnoreErrOp, ResolveErrOp or ClearErrOp", req.GetOp())}, nil
	}
	if req.GetIsAllError() == (req.GetErrId() != 0) {
		return &dmpb.OperateValidationErrorResponse{Msg: "name exactly one of an error id (errId) or all errors (isAllError)"}, nil
	}
	shares, err := w.s.validatorShares(ctx, req.GetTaskName())
	if err != nil {
		return nil, err
	}
	if !req.GetIsAllError() {
		rs.Ids = []uint64{req.GetErrId()}
		cs := uint32(req.GetErrId() >> 32)
		i := slices.IndexFunc(shares, func(sh *pb.Located) bool { return sh.GetCopyset() == cs })
		if i < 0 {
			return &dmpb.OperateValidationErrorResponse{Msg: fmt.Sprintf("task %q has no validation error %d", req.GetTaskName(), req.GetErrId())}, nil
		}
		shares = shares[i : i+1]
	} else {
		rs.All = true
	}
	var done, errs []string
	for _, sh := range shares {
		op := &pb.ValidatorOp{Name: req.GetTaskName(), NowMs: time.Now().UnixMilli()}
		if set {
			op.Op = &pb.ValidatorOp_Set{Set: rs}
		} else {
			op.Op = &pb.ValidatorOp_Clear{Clear: rs}
		}
		g := copyset.NewGroupID(sh.GetPool(), sh.GetCopyset())
		if r := w.s.routePropose(ctx, g, &pb.Op{Op: &pb.Op_Validator{Validator: op}}); r.GetCode() != 0 {
			errs = append(errs, fmt.Sprintf("copyset %d/%d: %s", g.Pool(), g.Copyset(), r.GetMsg()))
			continue
		}
		done = append(done, fmt.Sprintf("copyset %d/%d", g.Pool(), g.Copyset()))
	}
	if len(errs) > 0 {
		return &dmpb.OperateValidationErrorResponse{Msg: strings.Join(errs, "; ")}, nil
	}
	return &dmpb.OperateValidationErrorResponse{Result: true, Msg: fmt.Sprintf("%v on %s", req.GetOp(), strings.Join(done, ", "))}, nil
}

// UpdateValidator sets the validator's cutover point: a source position
// P/C:index.op (on the share applying copyset C), a time (RFC 3339) or
// "cutover", the task's cutover fence (on every share).
func (w *workerService) UpdateValidator(ctx context.Context, req *dmpb.UpdateValidationWorkerRequest) (*dmpb.CommonWorkerResponse, error) {
	resp, err := w.s.updateValidator(ctx, req)
	switch {
	case errors.Is(err, errRefused):
		return &dmpb.CommonWorkerResponse{Msg: strings.TrimPrefix(err.Error(), errRefused.Error()+": "), Worker: string(w.s.deps.Local)}, nil
	case err != nil:
		return nil, err // a gRPC status, as upstream
	}
	resp.Worker = string(w.s.deps.Local)
	return resp, nil
}

// errRefused marks UpdateValidator's refusals (result=false), as against
// its gRPC errors.
var errRefused = errors.New("refused")

func (s *Service) updateValidator(ctx context.Context, req *dmpb.UpdateValidationWorkerRequest) (*dmpb.CommonWorkerResponse, error) {
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", errRefused, fmt.Sprintf(format, args...))
	}
	if req.GetBinlogGTID() != "" {
		return nil, refuse("binlog GTID %q: chunk ops have no GTIDs; give the cutover point as binlogPos P/C:index.op", req.GetBinlogGTID())
	}
	if req.GetBinlogPos() == "" {
		return nil, refuse("no cutover point: give binlogPos P/C:index.op, a time (RFC 3339) or %q", cutoverAtFence)
	}
	pos, _, _, err := parseCutover(req.GetBinlogPos())
	if err != nil {
		return nil, refuse("%v", err)
	}
	shares, err := s.validatorShares(ctx, req.GetTaskName())
	if err != nil {
		return nil, err
	}
	point := req.GetBinlogPos()
	if pos != nil {
		// A position is the share's that applies its copyset.
		cfg := shares[0].GetSubtask().GetConfig()
		if pos.Pool != cfg.GetSource().GetPool() {
			return nil, refuse("binlog position %s is in pool %d; task %q migrates pool %d", pos, pos.Pool, req.GetTaskName(), cfg.GetSource().GetPool())
		}
		i := slices.IndexFunc(shares, func(sh *pb.Located) bool { return sh.GetSubtask().GetSourceCopyset() == pos.Copyset })
		if i < 0 {
			return nil, refuse("task %q has no share applying source copyset %d/%d", req.GetTaskName(), pos.Pool, pos.Copyset)
		}
		shares, point = shares[i:i+1], pos.String()
	}
	for _, sh := range shares {
		g := copyset.NewGroupID(sh.GetPool(), sh.GetCopyset())
		op := &pb.Op{Op: &pb.Op_Validator{Validator: &pb.ValidatorOp{Name: req.GetTaskName(), NowMs: time.Now().UnixMilli(),
			Op: &pb.ValidatorOp_Cutover{Cutover: point}}}}
		if r := s.routePropose(ctx, g, op); r.GetCode() != 0 {
			return nil, refuse("copyset %d/%d: %s", g.Pool(), g.Copyset(), r.GetMsg())
		}
	}
	return &dmpb.CommonWorkerResponse{Result: true, Msg: fmt.Sprintf("the validator's cutover point of task %q is %s", req.GetTaskName(), point)}, nil
}
