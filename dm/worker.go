package dm

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/chunkraft/chunkraft/datasync"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/datasync/restore"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	dmpb "github.com/chunkraft/chunkraft/proto/dm/pb"
)

// The worker's messages, upstream's words (dm/worker/server.go and
// pkg/terror).
const (
	// msgNoWorker is ErrWorkerNoStart: the answer of every guarded RPC
	// when the cluster has no dm task at all.
	msgNoWorker = "[code=40070:class=dm-worker:scope=internal:level=high], no mysql source is being handled in the worker"
	// msgNoSubTasks: QueryStatus with no subtask.
	msgNoSubTasks = "no sub task started"
)

// msgNoSubTask: QueryStatus of a name no subtask has.
func msgNoSubTask(name string) string {
	return fmt.Sprintf("no sub task with name %s has started", name)
}

type workerService struct {
	dmpb.UnimplementedWorkerServer
	s *Service
}

// QueryStatus reports every subtask (or the one named): its stage, unit,
// errors and figures, gathered from the leaders of its copysets; a
// copyset whose leader did not answer is named in the message.
func (w *workerService) QueryStatus(ctx context.Context, req *dmpb.QueryStatusRequest) (*dmpb.QueryStatusResponse, error) {
	l, err := w.s.listAll(ctx, 0, "")
	if err != nil {
		return &dmpb.QueryStatusResponse{Result: false, Msg: err.Error()}, nil
	}
	tasks := groupByTask(l.shares)
	if len(tasks) == 0 && len(l.unanswered) == 0 {
		return &dmpb.QueryStatusResponse{Result: false, Msg: msgNoWorker}, nil
	}
	resp := &dmpb.QueryStatusResponse{Result: true,
		SourceStatus: &dmpb.SourceStatus{Worker: string(w.s.deps.Local), Result: &dmpb.ProcessResult{}}}
	if len(l.unanswered) > 0 {
		resp.Msg = "partial: " + strings.Join(l.unanswered, "; ")
	}
	names := make([]string, 0, len(tasks))
	for n := range tasks {
		names = append(names, n)
	}
	slices.Sort(names)
	switch {
	case req.GetName() != "":
		if _, ok := tasks[req.GetName()]; !ok {
			resp.SubTaskStatus = []*dmpb.SubTaskStatus{{Name: req.GetName(), Status: &dmpb.SubTaskStatus_Msg{Msg: msgNoSubTask(req.GetName())}}}
			return resp, nil
		}
		names = []string{req.GetName()}
	case len(names) == 0:
		resp.Msg = strings.TrimPrefix(strings.Join([]string{msgNoSubTasks, resp.Msg}, "; "), "; ")
		return resp, nil
	}
	for _, n := range names {
		resp.SubTaskStatus = append(resp.SubTaskStatus, subTaskStatus(n, tasks[n]))
	}
	// Upstream's worker has one source: with one task in the answer, its
	// relay is the source's.
	if len(names) == 1 {
		resp.SourceStatus.Source = names[0]
		resp.SourceStatus.RelayStatus = w.s.relayStatus(ctx, tasks[names[0]])
	}
	return resp, nil
}

// relayStatus is a task's relay (the export it reads) as upstream's
// RelayStatus: how far the source has exported (masterBinlog: where each
// source copyset's last packet ends, P/C:point), how far the task has read
// (relayBinlog: each share's checkpoint, P/C:point), whether every share
// has applied every packet (relayCatchUpMaster); a relay that cannot be
// listed pauses nothing and is reported in result.
func (s *Service) relayStatus(ctx context.Context, shares []*pb.Located) *dmpb.RelayStatus {
	cfg := shares[0].GetSubtask().GetConfig()
	out := &dmpb.RelayStatus{RelaySubDir: sourceOf(cfg), Stage: dmpb.Stage_Running, RelayCatchUpMaster: true, Result: &dmpb.ProcessResult{}}
	var read, master []string
	pool := cfg.GetSource().GetPool()
	for _, l := range shares {
		st := l.GetSubtask()
		read = append(read, fmt.Sprintf("%d/%d:%s", pool, st.GetSourceCopyset(), datasync.PointString(st.GetCheckpoint().GetPoint())))
		out.RelayCatchUpMaster = out.RelayCatchUpMaster && l.GetLive() && l.GetSynced()
	}
	out.RelayBinlog = strings.Join(read, ",")
	if Stage(shares) != dmpb.Stage_Running {
		out.Stage = dmpb.Stage_Paused
	}
	relayErr := func(err error) *dmpb.RelayStatus {
		out.Result = &dmpb.ProcessResult{Errors: []*dmpb.ProcessError{{ErrCode: codeSource, ErrClass: "relay", ErrScope: "upstream",
			ErrLevel: "low", Message: err.Error()}}}
		return out
	}
	src, err := s.openLocation(ctx, sourceOf(cfg))
	if err != nil {
		return relayErr(err)
	}
	defer src.Close()
	packets, err := restore.ExportCopysets(ctx, src, pool)
	if err != nil {
		return relayErr(err)
	}
	for _, l := range shares {
		cs := l.GetSubtask().GetSourceCopyset()
		var (
			last  exportfmt.Point
			lastN string
		)
		for _, name := range packets[cs] {
			if _, _, start, err := exportfmt.ParsePacketName(name); err == nil && (lastN == "" || start.Compare(last) > 0) {
				last, lastN = start, name
			}
		}
		if lastN == "" {
			continue
		}
		// How far it reaches: the last packet's next point (in its
		// header: the body, up to 64 MiB, is not read).
		_, _, next, err := exportfmt.ReadHead(ctx, src, lastN)
		if err != nil {
			return relayErr(fmt.Errorf("packet %s: %w", lastN, err))
		}
		master = append(master, fmt.Sprintf("%d/%d:%s", pool, cs, next))
	}
	out.MasterBinlog = strings.Join(master, ",")
	return out
}

// groupByTask groups shares by task name.
func groupByTask(shares []*pb.Located) map[string][]*pb.Located {
	out := map[string][]*pb.Located{}
	for _, l := range shares {
		n := l.GetSubtask().GetConfig().GetName()
		out[n] = append(out[n], l)
	}
	return out
}

// Stage reports a task's stage from its shares': all alike, that stage;
// some still to take a change the others took, the transitional stage
// (Pausing, Resuming, Stopping); Finished only when every share is.
func Stage(shares []*pb.Located) dmpb.Stage {
	count := map[dmpb.Stage]int{}
	for _, l := range shares {
		count[l.GetSubtask().GetStage()]++
	}
	n := len(shares)
	switch {
	case n == 0:
		return dmpb.Stage_InvalidStage
	case len(count) == 1:
		return shares[0].GetSubtask().GetStage()
	case count[dmpb.Stage_Stopped] > 0:
		return dmpb.Stage_Stopping
	case count[dmpb.Stage_Paused] > 0 && count[dmpb.Stage_Running] > 0:
		// Paused by an error on some copysets or by a user on all: which
		// way it is going is in the shares' results.
		for _, l := range shares {
			if l.GetSubtask().GetStage() == dmpb.Stage_Paused && l.GetSubtask().GetResult().GetIsCanceled() {
				return dmpb.Stage_Pausing
			}
		}
		return dmpb.Stage_Paused
	case count[dmpb.Stage_Running] > 0:
		return dmpb.Stage_Running
	}
	return dmpb.Stage_Paused
}

// subTaskStatus is task name's status from its shares.
func subTaskStatus(name string, shares []*pb.Located) *dmpb.SubTaskStatus {
	st := &dmpb.SubTaskStatus{Name: name, Stage: Stage(shares), Unit: dmpb.UnitType_Sync}
	var (
		errs  []*dmpb.ProcessError
		sum   pb.Counters
		units = map[dmpb.UnitType]int{}
		// The appliers' live figures: the largest lag, all synced, the
		// summed rates.
		lagMs              int64
		synced             = true
		opsRate, bytesRate float64
	)
	canceled := false
	for _, l := range shares {
		s := l.GetSubtask()
		units[s.GetUnit()]++
		errs = append(errs, s.GetResult().GetErrors()...)
		canceled = canceled || s.GetResult().GetIsCanceled()
		sumCounters(&sum, s.GetCounters())
		lagMs = max(lagMs, l.GetLagMs())
		synced = synced && l.GetLive() && l.GetSynced()
		opsRate += l.GetOpsPerSec()
		bytesRate += l.GetBytesPerSec()
	}
	// The task is in its slowest share's unit.
	for _, u := range []dmpb.UnitType{dmpb.UnitType_Dump, dmpb.UnitType_Load, dmpb.UnitType_Sync} {
		if units[u] > 0 {
			st.Unit = u
			break
		}
	}
	st.Cutover = cutoverStatus(shares)
	if st.Stage != dmpb.Stage_Running {
		st.Result = &dmpb.ProcessResult{IsCanceled: canceled, Errors: errs}
	}
	switch st.Unit {
	case dmpb.UnitType_Dump:
		st.Status = &dmpb.SubTaskStatus_Dump{Dump: &dmpb.DumpStatus{TotalTables: int64(len(shares)),
			Progress: fmt.Sprintf("%d of %d copysets exporting", units[dmpb.UnitType_Dump], len(shares))}}
	case dmpb.UnitType_Load:
		progress := fmt.Sprintf("%d of %d copysets loading", units[dmpb.UnitType_Load], len(shares))
		if st.Stage == dmpb.Stage_Finished {
			progress = fmt.Sprintf("%d copysets loaded", len(shares))
		}
		st.Status = &dmpb.SubTaskStatus_Load{Load: &dmpb.LoadStatus{FinishedBytes: int64(sum.Bytes), Bps: int64(bytesRate),
			Progress: fmt.Sprintf("%s; %d chunks, %d records", progress, sum.Chunks, sum.Records)}}
	default:
		st.Status = &dmpb.SubTaskStatus_Sync{Sync: &dmpb.SyncStatus{TotalEvents: int64(sum.Ops), TotalRows: int64(sum.Records),
			RecentTps: int64(opsRate), SyncerBinlog: positions(shares), Synced: synced && st.Stage == dmpb.Stage_Running,
			SecondsBehindMaster: lagMs / 1000}}
	}
	return st
}

// positions writes the shares' applied source positions, P/C:index.op,
// ascending by copyset.
func positions(shares []*pb.Located) string {
	var out []string
	for _, l := range shares {
		s := l.GetSubtask()
		cp := s.GetCheckpoint()
		out = append(out, fmt.Sprintf("%d/%d:%d.%d", s.GetConfig().GetSource().GetPool(), s.GetSourceCopyset(), cp.GetSourceIndex(), cp.GetSourceOp()))
	}
	return strings.Join(out, ",")
}

// GetWorkerCfg answers this server's dm configuration as TOML.
func (w *workerService) GetWorkerCfg(context.Context, *dmpb.GetWorkerCfgRequest) (*dmpb.GetWorkerCfgResponse, error) {
	var buf bytes.Buffer
	cfg := struct {
		Name string `toml:"name"`
		Config
	}{string(w.s.deps.Local), w.s.deps.Config}
	if err := toml.NewEncoder(&buf).Encode(cfg); err != nil {
		return nil, fmt.Errorf("dm worker config: %w", err)
	}
	return &dmpb.GetWorkerCfgResponse{Cfg: buf.String()}, nil
}

// CheckSubtasksCanUpdate says whether the subtask config may replace the
// running one's: the subtask must exist and be in the Sync unit, and only
// its sync settings may differ (CanUpdate); every refusal is named.
func (w *workerService) CheckSubtasksCanUpdate(ctx context.Context, req *dmpb.CheckSubtasksCanUpdateRequest) (*dmpb.CheckSubtasksCanUpdateResponse, error) {
	no := func(format string, args ...any) (*dmpb.CheckSubtasksCanUpdateResponse, error) {
		return &dmpb.CheckSubtasksCanUpdateResponse{Success: false, Msg: fmt.Sprintf(format, args...)}, nil
	}
	next, err := ParseTaskTOML(req.GetSubtaskCfgTomlString())
	if err != nil {
		return no("%v", err)
	}
	l, err := w.s.listAll(ctx, 0, next.GetName())
	if err != nil {
		return no("%v", err)
	}
	shares := groupByTask(l.shares)[next.GetName()]
	switch {
	case len(shares) == 0 && len(l.unanswered) > 0:
		return no("%s; the leaders of %s did not answer", msgNoSubTask(next.GetName()), strings.Join(l.unanswered, ", "))
	case len(shares) == 0:
		return no("%s", msgNoSubTask(next.GetName()))
	}
	var why []string
	for _, sh := range shares {
		s := sh.GetSubtask()
		if s.GetUnit() != dmpb.UnitType_Sync {
			why = append(why, fmt.Sprintf("copyset %d/%d is in unit %v, not Sync", sh.GetPool(), sh.GetCopyset(), s.GetUnit()))
		}
	}
	why = append(why, CanUpdate(shares[0].GetSubtask().GetConfig(), next)...)
	if len(why) > 0 {
		return no("%s", strings.Join(why, "; "))
	}
	return &dmpb.CheckSubtasksCanUpdateResponse{Success: true}, nil
}

// OperateV1Meta: chunkraft never had DM v1.0's meta: Get answers an empty
// map, Remove succeeds.
func (w *workerService) OperateV1Meta(_ context.Context, req *dmpb.OperateV1MetaRequest) (*dmpb.OperateV1MetaResponse, error) {
	switch req.GetOp() {
	case dmpb.V1MetaOp_GetV1Meta:
		return &dmpb.OperateV1MetaResponse{Result: true, Meta: map[string]*dmpb.V1SubTaskMeta{}}, nil
	case dmpb.V1MetaOp_RemoveV1Meta:
		return &dmpb.OperateV1MetaResponse{Result: true}, nil
	}
	return &dmpb.OperateV1MetaResponse{Result: false, Msg: fmt.Sprintf("invalid op %v: want GetV1Meta or RemoveV1Meta", req.GetOp())}, nil
}
