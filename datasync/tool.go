package datasync

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/datasync/dest"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/internal/objstore"
	"github.com/chunkraft/chunkraft/proto/chunkraft/clusterpb"
	syncpb "github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/syncstatepb"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
)

// The SyncTool service (upstream's SyncTool, on every server): tasks are
// created, listed and deleted from any server, which reaches each
// copyset's sync machine through its leader (SyncInternal); SendData
// writes a packet to the task's dest, then replicates the new point.

type toolService struct {
	dspb.UnimplementedSyncToolServer
	s *Service
}

func general(code int32, format string, args ...any) *dspb.GeneralResponse {
	return &dspb.GeneralResponse{Code: proto.Int32(code), Msg: proto.String(fmt.Sprintf(format, args...))}
}

// parsePool reads a task's db: a pool id in decimal.
func parsePool(db string) (uint32, error) {
	id, err := strconv.ParseUint(db, 10, 32)
	if err != nil || id == 0 || strconv.FormatUint(id, 10) != db {
		return 0, fmt.Errorf("db %q is not a pool id (a positive decimal number)", db)
	}
	return uint32(id), nil
}

// poolCopysets returns the copysets of pool found by the cluster map.
func (s *Service) poolCopysets(ctx context.Context, pool uint32) ([]*clusterpb.Copyset, *clusterpb.ClusterMapResponse, error) {
	cm, err := s.deps.Cluster(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster map: %w", err)
	}
	var out []*clusterpb.Copyset
	for _, c := range cm.GetCopysets() {
		if pool == 0 || c.GetPool() == pool {
			out = append(out, c)
		}
	}
	return out, cm, nil
}

// listAll asks every reachable server of the cluster for the sub-tasks of
// the copysets it leads (of pool, or all when 0) and merges the answers.
func (s *Service) listAll(ctx context.Context, pool uint32, cm *clusterpb.ClusterMapResponse) (*pb.ListResponse, error) {
	var mu sync.Mutex
	out := &pb.ListResponse{}
	var errs []error
	var wg sync.WaitGroup
	for _, srv := range cm.GetServers() {
		if !srv.GetReachable() {
			continue
		}
		wg.Go(func() {
			var resp *pb.ListResponse
			var err error
			if srv.GetAddress() == s.localAddr() {
				cctx, cancel := context.WithTimeout(ctx, callTimeout)
				resp = s.listLocal(cctx, pool, 0)
				cancel()
			} else {
				var c pb.SyncInternalClient
				if c, err = s.internalClient(srv.GetAddress()); err == nil {
					cctx, cancel := context.WithTimeout(ctx, callTimeout)
					resp, err = c.List(cctx, &pb.ListRequest{Pool: pool})
					cancel()
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("list sub-tasks on %s: %w", srv.GetAddress(), err))
				return
			}
			out.SubTasks = append(out.SubTasks, resp.GetSubTasks()...)
			out.Copysets = append(out.Copysets, resp.GetCopysets()...)
		})
	}
	wg.Wait()
	// Two servers may both have answered as leader during an election:
	// keep the newer record of a sub-task, and one copyset entry.
	slices.SortFunc(out.SubTasks, func(a, b *pb.Located) int {
		if c := cmpGroup(a.GetPool(), a.GetCopyset(), b.GetPool(), b.GetCopyset()); c != 0 {
			return c
		}
		return cmp.Compare(b.GetSubTask().GetUpdatedIndex(), a.GetSubTask().GetUpdatedIndex())
	})
	out.SubTasks = slices.CompactFunc(out.SubTasks, func(a, b *pb.Located) bool {
		return a.GetPool() == b.GetPool() && a.GetCopyset() == b.GetCopyset() && a.GetSubTask().GetName() == b.GetSubTask().GetName()
	})
	slices.SortFunc(out.Copysets, func(a, b *pb.LedCopyset) int {
		return cmpGroup(a.GetPool(), a.GetCopyset(), b.GetPool(), b.GetCopyset())
	})
	out.Copysets = slices.CompactFunc(out.Copysets, func(a, b *pb.LedCopyset) bool {
		return a.GetPool() == b.GetPool() && a.GetCopyset() == b.GetCopyset()
	})
	return out, errors.Join(errs...)
}

// unanswered reports the copysets of css whose leader list did not
// answer for (no leader, or its server unreachable): their sub-tasks are
// missing from the list, and a status without them is partial.
func unanswered(css []*clusterpb.Copyset, list *pb.ListResponse) error {
	led := map[[2]uint32]bool{}
	for _, c := range list.GetCopysets() {
		led[[2]uint32{c.GetPool(), c.GetCopyset()}] = true
	}
	var missing []string
	for _, c := range css {
		if !led[[2]uint32{c.GetPool(), c.GetCopyset()}] {
			missing = append(missing, fmt.Sprintf("%d/%d", c.GetPool(), c.GetCopyset()))
		}
	}
	switch {
	case len(missing) == 0:
		return nil
	case len(missing) > 8:
		missing = append(missing[:8], fmt.Sprintf("and %d more", len(missing)-8))
	}
	return fmt.Errorf("no leader answered for copysets %s", strings.Join(missing, ", "))
}

// ledCopysets returns the copysets of pool and the list their leaders
// answered, once a leader answered for every one of them: while some have
// none (an election in progress), it crawls and lists again, every
// leaderRetry at first and at most every second, for at most leaderWait or
// until ctx ends. The copysets come from the last crawl, so the leaders
// they name are the newest known.
func (s *Service) ledCopysets(ctx context.Context, pool uint32) ([]*clusterpb.Copyset, *pb.ListResponse, error) {
	var (
		css        []*clusterpb.Copyset
		list       *pb.ListResponse
		err, final error // final: an error no wait mends
	)
	led := s.waitForLeaders(ctx, func(bool) bool {
		var cm *clusterpb.ClusterMapResponse
		if css, cm, final = s.poolCopysets(ctx, pool); final == nil && len(css) == 0 {
			final = fmt.Errorf("pool %d: no copysets found in the cluster", pool)
		}
		if final != nil {
			return true
		}
		// A server that does not answer matters only if it was what some
		// copyset's leader answer lacks: the leaders' records are the
		// copysets' whole replicated state.
		var lerr error
		list, lerr = s.listAll(ctx, pool, cm)
		if err = unanswered(css, list); err != nil && lerr != nil {
			err = fmt.Errorf("%w; %w", err, lerr)
		}
		return err == nil
	})
	switch {
	case final != nil:
		return nil, nil, final
	case led:
		return css, list, nil
	case ctx.Err() != nil:
		return nil, nil, fmt.Errorf("%w (%w)", err, ctx.Err())
	}
	return nil, nil, fmt.Errorf("%w (waited %v)", err, leaderWait)
}

// localAddr is this server's address (host:port).
func (s *Service) localAddr() string { return s.deps.Local.Addr() }

func newToken() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// NewExportID returns a new export id: 128 random bits in lowercase hex
// (ExportIDLen digits).
func NewExportID() string {
	b := make([]byte, ExportIDLen/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// CreateSyncTask creates the sub-tasks of a task on every copyset of its
// pool (db), each exported by its copyset's leader to that leader's own
// SyncTool, all of one new export id. A pool has at most MaxTasksPerPool
// tasks, each of its own name. Nothing is created unless every check
// passes; a failure half-way removes what was created (the sub-tasks of
// this export id only).
// MinSendIntervalMs is the shortest send interval a task may ask for: each
// packet is a durable write on the dest and a replicated Advance.
const MinSendIntervalMs = 100

func (t *toolService) CreateSyncTask(ctx context.Context, req *dspb.CreateSyncTaskRequest) (*dspb.GeneralResponse, error) {
	s := t.s
	pool, err := parsePool(req.GetDb())
	if err != nil {
		return general(-1, "create sync task: %v", err), nil
	}
	if err := validateTask(req.GetDb(), req.GetName()); err != nil {
		return general(-1, "create sync task: %v", err), nil
	}
	if req.Mode == nil {
		return general(-1, "create sync task %s/%s: mode is missing or unknown (kFull, kIncrementalByTimestamp or kFullAndContinuous)", req.GetDb(), req.GetName()), nil
	}
	mode := req.GetMode()
	if ms := req.GetSendIntervalMs(); ms != 0 && ms < MinSendIntervalMs {
		return general(-1, "create sync task %s/%s: send_interval_ms %d: want 0 (the server's) or at least %d", req.GetDb(), req.GetName(), ms, MinSendIntervalMs), nil
	}
	if mode == dspb.SyncMode_kIncrementalByTimestamp && req.GetStartTs() == 0 {
		return general(-1, "create sync task %s/%s: kIncrementalByTimestamp needs start_ts (unix ms)", req.GetDb(), req.GetName()), nil
	}
	u, err := dest.Parse(req.GetDest())
	if err != nil {
		return general(-1, "create sync task %s/%s: %v", req.GetDb(), req.GetName(), err), nil
	}
	css, list, err := s.ledCopysets(ctx, pool)
	if err != nil {
		return general(-1, "create sync task %s/%s: %v", req.GetDb(), req.GetName(), err), nil
	}
	var tasks []string
	for _, st := range list.GetSubTasks() {
		if st.GetSubTask().GetName() == req.GetName() {
			return general(-1, "create sync task %s/%s: %v", req.GetDb(), req.GetName(), ErrTaskExists), nil
		}
		if !slices.Contains(tasks, st.GetSubTask().GetName()) {
			tasks = append(tasks, st.GetSubTask().GetName())
		}
	}
	if len(tasks) >= MaxTasksPerPool {
		slices.Sort(tasks)
		return general(-1, "create sync task %s/%s: pool %d has %d sync tasks (%s), the most a pool may have (MaxTasksPerPool %d): delete one first",
			req.GetDb(), req.GetName(), pool, len(tasks), strings.Join(tasks, ", "), MaxTasksPerPool), nil
	}
	// Opening the dest creates a file dest's directory: only once the
	// task may be created.
	if err := s.dests.check(ctx, u); err != nil {
		return general(-1, "create sync task %s/%s: %v", req.GetDb(), req.GetName(), err), nil
	}
	led := map[[2]uint32]*pb.LedCopyset{}
	for _, c := range list.GetCopysets() {
		led[[2]uint32{c.GetPool(), c.GetCopyset()}] = c
	}
	for _, c := range css {
		l := led[[2]uint32{c.GetPool(), c.GetCopyset()}]
		if mode == dspb.SyncMode_kIncrementalByTimestamp && l.GetOldestIndex() > 1 && l.GetOldestMs() > int64(req.GetStartTs()) {
			return general(-1, "create sync task %s/%s: copyset %d/%d retains its log from %s (%d ms) only: start_ts %d is older; the oldest time it can start from is %d",
				req.GetDb(), req.GetName(), c.GetPool(), c.GetCopyset(), time.UnixMilli(l.GetOldestMs()).UTC().Format(time.RFC3339Nano), l.GetOldestMs(), req.GetStartTs(), l.GetOldestMs()), nil
		}
	}
	exportID := NewExportID()
	resps := s.proposeEach(ctx, css, func(c *clusterpb.Copyset) *pb.Op {
		addr := leaderAddr(c.GetLeader())
		return &pb.Op{Op: &pb.Op_Put{Put: &pb.PutSubTask{Db: req.GetDb(), Name: req.GetName(), UpdateMs: nowMs(),
			Request: &dspb.AddSyncTaskRequest{
				Tid: proto.Uint32(pool), Pid: proto.Uint32(c.GetCopyset()), Mode: mode.Enum(), StartTs: proto.Uint64(req.GetStartTs()),
				SyncPoint:      exportfmt.StartPoint().Proto(),
				TabletEndpoint: proto.String(addr), DesEndpoint: proto.String(addr),
				Token: proto.String(newToken()), Dest: proto.String(u.String()),
				TaskName: proto.String(req.GetName()), ExportId: proto.String(exportID),
				SendIntervalMs: req.SendIntervalMs,
			}}}}
	})
	for i, resp := range resps {
		if resp.GetCode() == 0 {
			continue
		}
		// Undo on every copyset, the failed one too (a proposal that timed
		// out may still commit), with a context of its own: the caller's
		// may be what ran out.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_, left := s.removeEach(uctx, css, &pb.Op{Op: &pb.Op_DeleteTask{DeleteTask: &pb.DeleteTask{Db: req.GetDb(), Name: req.GetName(), ExportId: exportID}}})
		undo := "nothing was created"
		if len(left) > 0 {
			undo = fmt.Sprintf("sub-tasks may be left on %v: remove them with DeleteSyncTask", left)
		}
		return general(-1, "create sync task %s/%s: copyset %d/%d: %s (%s)", req.GetDb(), req.GetName(), pool, css[i].GetCopyset(), resp.GetMsg(), undo), nil
	}
	s.log.Info("sync task created", "db", req.GetDb(), "name", req.GetName(), "mode", mode.String(), "dest", u.String(), "copysets", len(css), "export", exportID)
	return general(0, "ok: %d sub-tasks, export %s", len(css), exportID), nil
}

// leaderAddr is the address of a peer id, or of an address ("" stays "").
func leaderAddr(peer string) string { return copyset.PeerID(peer).Addr() }

// DelelteSyncTask is upstream's misspelled DeleteSyncTask.
func (t *toolService) DelelteSyncTask(ctx context.Context, req *dspb.DeleteSyncTaskRequest) (*dspb.GeneralResponse, error) {
	return t.DeleteSyncTask(ctx, req)
}

// DeleteSyncTask removes the task's sub-tasks from every copyset of its
// pool (the pool's other tasks stay); their collectors stop when their
// records go.
func (t *toolService) DeleteSyncTask(ctx context.Context, req *dspb.DeleteSyncTaskRequest) (*dspb.GeneralResponse, error) {
	s := t.s
	pool, err := parsePool(req.GetDb())
	if err == nil {
		err = validateTask(req.GetDb(), req.GetName())
	}
	if err != nil {
		return general(-1, "delete sync task: %v", err), nil
	}
	css, _, err := s.poolCopysets(ctx, pool)
	if err != nil {
		return general(-1, "delete sync task %s/%s: %v", req.GetDb(), req.GetName(), err), nil
	}
	removed, errs := s.removeEach(ctx, css, &pb.Op{Op: &pb.Op_DeleteTask{DeleteTask: &pb.DeleteTask{Db: req.GetDb(), Name: req.GetName()}}})
	switch {
	case len(errs) > 0:
		return general(-1, "delete sync task %s/%s: removed %d sub-tasks; failed on %v", req.GetDb(), req.GetName(), removed, errs), nil
	case removed == 0:
		return general(-1, "delete sync task %s/%s: no such task", req.GetDb(), req.GetName()), nil
	}
	s.log.Info("sync task deleted", "db", req.GetDb(), "name", req.GetName(), "sub_tasks", removed)
	return general(0, "ok: %d sub-tasks removed", removed), nil
}

// TaskStatus lists every sub-task of every task (clear_all: deletes them
// all).
func (t *toolService) TaskStatus(ctx context.Context, req *dspb.TaskStatusRequest) (*dspb.TaskStatusResponse, error) {
	s := t.s
	css, cm, err := s.poolCopysets(ctx, 0)
	if err != nil {
		return &dspb.TaskStatusResponse{Response: general(-1, "task status: %v", err)}, nil
	}
	if req.GetClearAll() {
		removed, errs := s.removeEach(ctx, css, &pb.Op{Op: &pb.Op_DeleteAll{DeleteAll: &pb.DeleteAll{}}})
		if len(errs) > 0 {
			return &dspb.TaskStatusResponse{Response: general(-1, "clear all: removed %d sub-tasks; failed on %v", removed, errs)}, nil
		}
		return &dspb.TaskStatusResponse{Response: general(0, "ok: %d sub-tasks removed", removed)}, nil
	}
	list, err := s.listAll(ctx, 0, cm)
	if err == nil {
		err = unanswered(css, list)
	}
	resp := &dspb.TaskStatusResponse{Response: general(0, "ok")}
	if err != nil {
		resp.Response = general(-1, "task status (partial): %v", err)
	}
	for _, l := range list.GetSubTasks() {
		st := l.GetSubTask()
		progress := &dspb.AddSyncTaskRequest{}
		if st.GetProgress() != nil {
			progress = proto.CloneOf(st.GetProgress())
		}
		progress.TaskName = proto.String(st.GetName()) // absent in records made before several tasks per pool
		resp.Task = append(resp.Task, &dspb.Task{
			Progress:      progress,
			DataCollector: proto.String(st.GetProgress().GetTabletEndpoint()),
			Count:         proto.Uint64(st.GetCount()),
			Status:        proto.String(st.GetStatus().String()),
		})
		covered, coveredMs := Covered(st)
		info := fmt.Sprintf("lastUpdateTime=%d;coveredIndex=%d;coveredTime=%d;lastPacketTime=%d;exportId=%s;progressPath=copyset %d/%d sync machine (%s/%s), leader %s",
			st.GetLastUpdateMs(), covered, coveredMs, st.GetLastPacketMs(), st.GetProgress().GetExportId(), l.GetPool(), l.GetCopyset(), Dir, FileName, leaderAddr(l.GetLeader()))
		if st.GetMessage() != "" {
			info += ";message=" + st.GetMessage()
		}
		resp.ReadableInfo = append(resp.ReadableInfo, info)
	}
	return resp, nil
}

// sendDataFail is SendData's refusal: the collector must drop the task.
func sendDataFail(format string, args ...any) *dspb.SendDataResponse {
	return &dspb.SendDataResponse{Response: general(-1, format, args...), DeleteTask: proto.Bool(true)}
}

// SendData answers with sendData, counting the packets it wrote and
// acknowledged (not heartbeats, which carry at most a header and are not
// written) and what it refused.
func (t *toolService) SendData(ctx context.Context, req *dspb.SendDataRequest) (*dspb.SendDataResponse, error) {
	resp := t.sendData(ctx, req)
	m := t.s.metrics
	heartbeat := proto.Equal(req.GetStartPoint(), req.GetNextPoint()) && !req.GetFinished()
	switch {
	case resp.GetResponse().GetCode() == 0 && len(req.GetData()) > 0 && !heartbeat:
		m.packets.Inc()
		m.records.Add(float64(req.GetCount()))
		m.bytes.Add(float64(len(req.GetData())))
	case resp.GetDeleteTask():
		m.refused.Inc()
	}
	return resp, nil
}

// record returns the sub-task (tid, pid, name) names (Machine.Lookup) as
// its copyset's leader has it (past a read barrier when this server leads
// it), and that leader; nil when there is no such sub-task. An error
// wrapping ErrTaskNotNamed says that name is "" and the copyset has
// sub-tasks of several tasks; any other, that the leader could not be
// asked.
func (s *Service) record(ctx context.Context, tid, pid uint32, name string) (*pb.SubTask, string, error) {
	g := copyset.NewGroupID(tid, pid)
	if n := s.copysets.Get(g); n != nil && n.IsLeader() {
		if m, ok := MachineOf(n); ok {
			if _, err := n.ReadBarrier(ctx); err == nil {
				r, err := m.Lookup(tid, pid, name)
				return found(r, string(s.deps.Local), err)
			}
		}
	}
	css, _, err := s.poolCopysets(ctx, tid)
	if err != nil {
		return nil, "", err
	}
	for _, c := range css {
		if c.GetCopyset() != pid || c.GetLeader() == "" {
			continue
		}
		cl, err := s.internalClient(c.GetLeader())
		if err != nil {
			return nil, "", err
		}
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		resp, err := cl.List(cctx, &pb.ListRequest{Pool: tid, Copyset: pid})
		cancel()
		if err != nil {
			return nil, "", fmt.Errorf("copyset %s: leader %s: %w", csName(g), c.GetLeader(), err)
		}
		st := &pb.State{}
		for _, l := range resp.GetSubTasks() {
			st.SubTasks = append(st.SubTasks, l.GetSubTask())
		}
		slices.SortFunc(st.SubTasks, func(a, b *pb.SubTask) int {
			return compareKey(a, b.GetProgress().GetTid(), b.GetProgress().GetPid(), b.GetName())
		})
		r, err := resolve(st, tid, pid, name)
		return found(r, c.GetLeader(), err)
	}
	return nil, "", nil
}

// found is record's answer for a lookup's result (r, err) on leader: a
// sub-task not found is nil and no error.
func found(r *pb.SubTask, leader string, err error) (*pb.SubTask, string, error) {
	if errors.Is(err, ErrNotFound) {
		return nil, leader, nil
	}
	return r, leader, err
}

// SendData takes one packet of a sub-task: the sub-task must exist (the
// request's task_name's, or the (tid, pid)'s only one), be INIT or
// RUNNING, have the packet's token and export id and stand at its start
// point. The packet is written to the dest (named by its start point,
// replacing a resent one), then the new point is replicated; only then is
// it acknowledged. An empty packet refreshes the last update time. A
// packet whose copyset directory in the dest holds another export's
// packets or manifest is not written: the sub-task turns FAILED, with a
// message naming both exports.
func (t *toolService) sendData(ctx context.Context, req *dspb.SendDataRequest) *dspb.SendDataResponse {
	s := t.s
	tid, pid := req.GetTid(), req.GetPid()
	if req.Tid == nil || req.Pid == nil || req.GetToken() == "" || req.StartPoint == nil || req.NextPoint == nil {
		return sendDataFail("send data: tid, pid, token, start_point and next_point are required")
	}
	sub := subName(tid, pid, req.GetTaskName())
	start, err := exportfmt.ParsePoint(req.GetStartPoint())
	if err != nil {
		return sendDataFail("send data %s: start_point: %v", sub, err)
	}
	next, err := exportfmt.ParsePoint(req.GetNextPoint())
	if err != nil {
		return sendDataFail("send data %s: next_point: %v", sub, err)
	}
	rec, leader, err := s.record(ctx, tid, pid, req.GetTaskName())
	switch {
	case errors.Is(err, ErrTaskNotNamed):
		return sendDataFail("send data %s: %v", sub, err)
	case err != nil:
		return &dspb.SendDataResponse{Response: general(-1, "send data %s: %v", sub, err)}
	case rec == nil:
		return sendDataFail("send data %s: no such sub-task", sub)
	}
	sub = subName(tid, pid, rec.GetName())
	exportID := rec.GetProgress().GetExportId()
	switch {
	case rec.GetProgress().GetToken() != req.GetToken():
		return sendDataFail("send data %s: %v", sub, ErrTokenMismatch)
	case rec.GetStatus() != pb.Status_INIT && rec.GetStatus() != pb.Status_RUNNING:
		return sendDataFail("send data %s: status %s takes no data", sub, rec.GetStatus())
	case !proto.Equal(rec.GetProgress().GetSyncPoint(), req.GetStartPoint()):
		return sendDataFail("send data %s: start point %s is not the sub-task's %s", sub, start, PointString(rec.GetProgress().GetSyncPoint()))
	case req.ExportId != nil && req.GetExportId() != exportID:
		return sendDataFail("send data %s: the request is of export %s, the sub-task's is %s", sub,
			exportfmt.ExportIDString(req.GetExportId()), exportfmt.ExportIDString(exportID))
	}
	ref := recordRef(rec)
	if len(req.GetData()) == 0 {
		if req.GetCount() != 0 || start.Compare(next) != 0 {
			return sendDataFail("send data %s: a packet without data must have count 0 and next_point = start_point", sub)
		}
		return s.touch(ctx, sub, leader, &pb.Touch{Ref: ref, UpdateMs: nowMs(), WrittenAtMs: req.GetWrittenAtMs()})
	}
	pkt, err := exportfmt.Verify(req.GetData()) // every check of Decode, the data not copied
	if err != nil {
		return sendDataFail("send data %s: %v", sub, err)
	}
	h := pkt.Header
	switch {
	case h.GetLogicPoolId() != tid || h.GetCopysetId() != pid:
		return sendDataFail("send data %s: the packet is of copyset %d/%d", sub, h.GetLogicPoolId(), h.GetCopysetId())
	case pkt.Start.Compare(start) != 0 || pkt.Next.Compare(next) != 0:
		return sendDataFail("send data %s: the packet covers [%s, %s), the request [%s, %s)", sub, pkt.Start, pkt.Next, start, next)
	case h.GetRecordCount() != req.GetCount():
		return sendDataFail("send data %s: count %d, the packet holds %d records", sub, req.GetCount(), h.GetRecordCount())
	case h.GetFinished() != req.GetFinished():
		return sendDataFail("send data %s: finished %v, the packet says %v", sub, req.GetFinished(), h.GetFinished())
	case h.GetCoveredIndex() != 0 && (start.Compare(next) != 0 || start.Phase != exportfmt.PhaseBinlog):
		return sendDataFail("send data %s: covered_index %d in a packet that is not a binlog-phase heartbeat", sub, h.GetCoveredIndex())
	case h.GetExportId() != exportID:
		return sendDataFail("send data %s: the packet is of export %s, the sub-task's is %s", sub,
			exportfmt.ExportIDString(h.GetExportId()), exportfmt.ExportIDString(exportID))
	}
	written := req.GetWrittenAtMs()
	if written == 0 {
		written = h.GetWrittenAtMs()
	}
	if start.Compare(next) == 0 && !h.GetFinished() {
		// A heartbeat that says what it covers: nothing to write.
		return s.touch(ctx, sub, leader, &pb.Touch{Ref: ref, UpdateMs: nowMs(), WrittenAtMs: written,
			At: req.GetStartPoint(), CoveredIndex: h.GetCoveredIndex(), CoveredMs: h.GetCoveredMs()})
	}
	u, err := dest.Parse(rec.GetProgress().GetDest())
	if err != nil {
		return sendDataFail("send data %s: the sub-task's dest: %v", sub, err)
	}
	name := exportfmt.PacketName(tid, pid, start)
	if err := s.dests.put(ctx, u, tid, pid, name, req.GetData(), pkt); err != nil {
		var conflict *exportConflictError
		if errors.As(err, &conflict) {
			return s.failSubTask(ctx, sub, leader, ref, err)
		}
		return &dspb.SendDataResponse{Response: general(-1, "send data %s: %v", sub, err)}
	}
	resp := s.propose(ctx, tid, pid, leader, &pb.Op{Op: &pb.Op_Advance{Advance: &pb.Advance{
		Ref: ref, Start: req.GetStartPoint(), Next: req.GetNextPoint(), Count: req.GetCount(),
		UpdateMs: nowMs(), Finished: req.GetFinished(), BinlogStart: h.GetBinlogStart(),
		StartStateMs: h.GetStartStateMs(), CoveredMs: h.GetCoveredMs(), WrittenAtMs: written,
	}}})
	if resp.GetCode() != 0 {
		if resp.GetNotLeader() {
			return &dspb.SendDataResponse{Response: general(-1, "send data %s: %s", sub, resp.GetMsg())}
		}
		return sendDataFail("send data %s: %s", sub, resp.GetMsg())
	}
	return &dspb.SendDataResponse{Response: general(0, "ok")}
}

// touch replicates heartbeat t of sub-task sub (on leader, the leader the
// caller found) and answers SendData.
func (s *Service) touch(ctx context.Context, sub, leader string, t *pb.Touch) *dspb.SendDataResponse {
	ref := t.GetRef()
	resp := s.propose(ctx, ref.GetTid(), ref.GetPid(), leader, &pb.Op{Op: &pb.Op_Touch{Touch: t}})
	if resp.GetCode() != 0 {
		return sendDataFail("send data %s: %s", sub, resp.GetMsg())
	}
	return &dspb.SendDataResponse{Response: general(0, "ok")}
}

// failSubTask turns sub-task sub (ref, on leader) FAILED with why as its
// message and refuses the packet: its collector drops the sub-task, and
// the leader's worker does not start another one for it.
func (s *Service) failSubTask(ctx context.Context, sub, leader string, ref *pb.Ref, why error) *dspb.SendDataResponse {
	msg := clipMessage(why.Error())
	s.log.Error("sync sub-task failed", "pool", ref.GetTid(), "copyset", ref.GetPid(), "task", ref.GetName(), "err", msg)
	s.metrics.failed.Inc()
	resp := s.propose(ctx, ref.GetTid(), ref.GetPid(), leader, &pb.Op{Op: &pb.Op_SetStatus{SetStatus: &pb.SetStatus{
		Ref: ref, Status: pb.Status_FAILED, Message: msg}}})
	if resp.GetCode() != 0 {
		return sendDataFail("send data %s: %s (and it could not be marked FAILED: %s)", sub, msg, resp.GetMsg())
	}
	return sendDataFail("send data %s: %s", sub, msg)
}

// clipMessage cuts msg to MaxMessageLen bytes (at a rune boundary), the
// most a SetStatus message may have.
func clipMessage(msg string) string {
	if len(msg) <= MaxMessageLen {
		return msg
	}
	cut := MaxMessageLen - len("...")
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "..."
}

// destCache keeps the dests SendData writes to open, and each copyset's
// manifest.
type destCache struct {
	server objstore.Config
	// partEntries is how many entries a sealed manifest part holds
	// (exportfmt.ManifestPartEntries unless a test sets it).
	partEntries int

	mu        sync.Mutex
	open      map[string]dest.Dest
	manifests map[manifestKey]*manifestState
	// claims is the export each copyset directory was found to hold (or
	// to hold nothing of another) when this SyncTool last looked, and
	// locks serialises the puts of one directory, so that two exports
	// checking it at once cannot both find it free.
	claims map[manifestKey]string
	locks  map[manifestKey]*sync.Mutex
}

// manifestKey names a copyset's manifest on a dest.
type manifestKey struct {
	dest     string // the dest URL
	pool, cs uint32
}

// manifestState is a copyset's manifest as this SyncTool keeps it: the
// entries of every packet it acknowledged after the manifest's sealed
// parts, written to the dest at most every manifestPeriod (and with every
// finished packet, and when parts were sealed). A manifest on the
// dest may thus lag its packets; the next SyncTool that loads it catches
// it up from the packets after its last entry (catchUp).
type manifestState struct {
	m       *syncpb.Manifest
	written time.Time
	dirty   bool
}

// manifestPeriod is how often at most a copyset's manifest is rewritten
// while packets arrive: each write is a durable put (an fsync or a PUT).
const manifestPeriod = 10 * time.Second

func newDestCache(server objstore.Config) *destCache {
	return &destCache{server: server, partEntries: exportfmt.ManifestPartEntries, open: map[string]dest.Dest{},
		manifests: map[manifestKey]*manifestState{}, claims: map[manifestKey]string{}, locks: map[manifestKey]*sync.Mutex{}}
}

// check opens u (which checks it is usable) and closes it again.
func (c *destCache) check(ctx context.Context, u dest.URL) error {
	d, err := dest.Open(ctx, u, c.server)
	if err != nil {
		return err
	}
	return d.Close()
}

func (c *destCache) get(ctx context.Context, u dest.URL) (dest.Dest, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d, ok := c.open[u.String()]; ok {
		return d, nil
	}
	d, err := dest.Open(ctx, u, c.server)
	if err != nil {
		return nil, err
	}
	c.open[u.String()] = d
	return d, nil
}

// put writes packet data as name, then records it in the copyset's
// manifest. A copyset directory holds one export: a packet of another
// export than the one the directory holds is not written (an
// *exportConflictError).
func (c *destCache) put(ctx context.Context, u dest.URL, pool, cs uint32, name string, data []byte, pkt *exportfmt.Packet) error {
	d, err := c.get(ctx, u)
	if err != nil {
		return err
	}
	key := manifestKey{u.String(), pool, cs}
	lock := c.lock(key)
	lock.Lock()
	defer lock.Unlock()
	id := pkt.Header.GetExportId()
	if err := c.claim(ctx, d, key, id); err != nil {
		return err
	}
	if err := d.Put(ctx, name, data); err != nil {
		return fmt.Errorf("write packet %s to %s: %w", name, d, err)
	}
	c.mu.Lock()
	st := c.manifests[key]
	c.mu.Unlock()
	if st == nil {
		st = &manifestState{}
	}
	mname := exportfmt.ManifestName(pool, cs)
	// Every export begins at the very start: a manifest held here or on
	// the dest is then an earlier export's to the same place.
	m := exportfmt.NewManifest(pool, cs)
	if pkt.Start.Phase != exportfmt.PhaseStart {
		if st.m == nil {
			if st.m, err = loadManifest(ctx, d, pool, cs); err != nil {
				return err
			}
		}
		m = proto.CloneOf(st.m) // flush reads st.m under c.mu
	}
	if (len(m.GetPackets()) == 0 && pkt.Start.Phase != exportfmt.PhaseStart) || exportfmt.Append(m, pkt.Entry(name)) != nil {
		// The manifest lags the packets (written by a SyncTool that
		// stopped before its next write), or is an earlier export's:
		// catch it up from the packets. (A refused Append left m as it was.)
		if m, err = catchUp(ctx, d, m, pool, cs, name, pkt); err != nil {
			return fmt.Errorf("manifest %s: %w", mname, err)
		}
	}
	m.ExportId = id // the manifest loaded or caught up is of this export (claim)
	// A long export's manifest is cut into sealed parts, each written once,
	// before the manifest that counts them.
	parts := exportfmt.Seal(m, c.partEntries)
	for _, p := range parts {
		b, err := exportfmt.EncodeManifest(p)
		if err != nil {
			return err
		}
		pname := exportfmt.ManifestPartName(pool, cs, p.Part)
		if err := d.Put(ctx, pname, b); err != nil {
			return fmt.Errorf("write manifest part %s to %s: %w", pname, d, err)
		}
	}
	st = &manifestState{m: m, written: st.written, dirty: true}
	if pkt.Header.GetFinished() || len(parts) > 0 || time.Since(st.written) >= manifestPeriod {
		b, err := exportfmt.EncodeManifest(m)
		if err != nil {
			return err
		}
		if err := d.Put(ctx, mname, b); err != nil {
			return fmt.Errorf("write manifest %s to %s: %w", mname, d, err)
		}
		st.written, st.dirty = time.Now(), false
	}
	c.mu.Lock()
	c.manifests[key] = st
	c.mu.Unlock()
	return nil
}

// lock returns the lock of the puts of copyset directory key.
func (c *destCache) lock(key manifestKey) *sync.Mutex {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.locks[key]
	if l == nil {
		l = &sync.Mutex{}
		c.locks[key] = l
	}
	return l
}

// claim checks that copyset directory key of d holds nothing of another
// export than id (its manifest and its first and last packets are of id,
// or it has none), once: then this SyncTool remembers the directory as
// id's. A claim of another export than the one remembered looks again
// (the directory may have been emptied since). The caller holds key's
// lock. An empty id (an export created before export ids) goes with empty
// ids only, and so does a directory written before them.
func (c *destCache) claim(ctx context.Context, d dest.Dest, key manifestKey, id string) error {
	c.mu.Lock()
	held, ok := c.claims[key]
	c.mu.Unlock()
	if ok && held == id {
		return nil
	}
	if err := checkExport(ctx, d, key.pool, key.cs, id); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ok {
		delete(c.manifests, key) // the other export's, which is gone
	}
	c.claims[key] = id
	return nil
}

// exportConflictError refuses a packet of export Ours for a copyset
// directory that holds Object of export Theirs.
type exportConflictError struct {
	Ours, Theirs string
	Dest         string
	Object       string
}

func (e *exportConflictError) Error() string {
	return fmt.Sprintf("export %s refused: %s holds %s of export %s; a copyset directory holds one export (give the task another dest, or empty that directory)",
		exportfmt.ExportIDString(e.Ours), e.Dest, e.Object, exportfmt.ExportIDString(e.Theirs))
}

// checkExport returns an *exportConflictError when copyset (pool, cs) of
// d holds a manifest or packets of another export than id: it reads the
// manifest and the first and last packets (every packet of a directory
// the SyncTool writes is of one export).
func checkExport(ctx context.Context, d dest.Dest, pool, cs uint32, id string) error {
	conflict := func(object, theirs string) error {
		return &exportConflictError{Ours: id, Theirs: theirs, Dest: d.String(), Object: object}
	}
	if m, err := loadManifest(ctx, d, pool, cs); err != nil {
		return err
	} else if m.GetExportId() != id && (len(m.GetPackets()) > 0 || m.GetSealedParts() > 0) {
		return conflict(exportfmt.ManifestName(pool, cs), m.GetExportId())
	}
	infos, err := d.List(ctx, exportfmt.CopysetPrefix(pool, cs))
	if err != nil {
		return fmt.Errorf("list %s: %w", exportfmt.CopysetPrefix(pool, cs), err)
	}
	var packets []string
	for _, info := range infos {
		if p, c, _, err := exportfmt.ParsePacketName(info.Name); err == nil && p == pool && c == cs {
			packets = append(packets, info.Name)
		}
	}
	if len(packets) == 0 {
		return nil
	}
	for _, name := range []string{packets[0], packets[len(packets)-1]} {
		p, err := readPacket(ctx, d, name)
		switch {
		case errors.Is(err, objstore.ErrNotExist):
			continue // replaced or removed since the listing
		case err != nil:
			return err
		case p.Header.GetExportId() != id:
			return conflict(name, p.Header.GetExportId())
		}
	}
	return nil
}

// loadManifest reads a copyset's manifest.pb from d (a new one if it has
// none): the entries after its sealed parts, from whose last the writer
// goes on; the parts themselves only a reader needs.
func loadManifest(ctx context.Context, d dest.Dest, pool, cs uint32) (*syncpb.Manifest, error) {
	mname := exportfmt.ManifestName(pool, cs)
	b, err := d.Get(ctx, mname)
	switch {
	case errors.Is(err, objstore.ErrNotExist):
		return exportfmt.NewManifest(pool, cs), nil
	case err != nil:
		return nil, fmt.Errorf("read manifest %s: %w", mname, err)
	}
	m, err := exportfmt.DecodeManifest(b)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", mname, err)
	}
	return m, nil
}

// catchUp returns m (the copyset's manifest as this SyncTool had it or
// found it on d) caught up to pkt (just written as name): the packets
// that follow m's last entry on d, found by following the chain of points
// (each packet is named by its start point, so the next one is named by
// the point the one before ends at), then pkt. When m does not lead to
// pkt that way — it is empty (the manifest not written yet when another
// SyncTool took over), or an earlier export's to the same place — the
// manifest is rebuilt along the chain from the export's start packet; a
// manifest of pkt alone if even that chain is broken.
func catchUp(ctx context.Context, d dest.Dest, m *syncpb.Manifest, pool, cs uint32, name string, pkt *exportfmt.Packet) (*syncpb.Manifest, error) {
	if n := len(m.GetPackets()); n > 0 && m.GetPackets()[n-1].GetName() < name {
		next, err := exportfmt.ParsePoint(m.GetPackets()[n-1].GetNextPoint())
		if err == nil {
			if got, ok, err := chainFrom(ctx, d, m, pool, cs, next, name, pkt); err != nil || ok {
				return got, err
			}
		}
	}
	got, ok, err := chainFrom(ctx, d, exportfmt.NewManifest(pool, cs), pool, cs, exportfmt.StartPoint(), name, pkt)
	if err != nil || ok {
		return got, err
	}
	m = exportfmt.NewManifest(pool, cs)
	if err := exportfmt.Append(m, pkt.Entry(name)); err != nil {
		return nil, err
	}
	return m, nil
}

// chainFrom appends to m the packets of d from the one named by point at
// on, each the one named by where the one before ends, until pkt (name);
// false if the chain breaks before it.
func chainFrom(ctx context.Context, d dest.Dest, m *syncpb.Manifest, pool, cs uint32, at exportfmt.Point, name string, pkt *exportfmt.Packet) (*syncpb.Manifest, bool, error) {
	for range maxCatchUp {
		cur := exportfmt.PacketName(pool, cs, at)
		if cur == name {
			return m, exportfmt.Append(m, pkt.Entry(name)) == nil, nil
		}
		if cur > name {
			return nil, false, nil
		}
		p, err := readPacket(ctx, d, cur)
		if errors.Is(err, objstore.ErrNotExist) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		if exportfmt.Append(m, p.Entry(cur)) != nil || p.Next.Compare(p.Start) == 0 {
			return nil, false, nil
		}
		at = p.Next
	}
	return nil, false, nil
}

// maxCatchUp bounds the packets one catch-up reads.
const maxCatchUp = 1 << 20

// readPacket reads and checks packet name of d.
func readPacket(ctx context.Context, d dest.Dest, name string) (*exportfmt.Packet, error) {
	b, err := d.Get(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("read packet %s: %w", name, err)
	}
	p, err := exportfmt.Verify(b)
	if err != nil {
		return nil, fmt.Errorf("packet %s: %w", name, err)
	}
	return p, nil
}

// flush writes every manifest with entries not written yet.
func (c *destCache) flush(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, st := range c.manifests {
		if !st.dirty {
			continue
		}
		d, ok := c.open[key.dest]
		if !ok {
			continue
		}
		b, err := exportfmt.EncodeManifest(st.m)
		if err == nil {
			err = d.Put(ctx, exportfmt.ManifestName(key.pool, key.cs), b)
		}
		if err == nil {
			st.written, st.dirty = time.Now(), false
		}
	}
}

func (c *destCache) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	c.flush(ctx)
	cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, d := range c.open {
		_ = d.Close()
		delete(c.open, k)
	}
}
