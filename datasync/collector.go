package datasync

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/internal/chunkread"
	"github.com/chunkraft/chunkraft/internal/slack"
	syncpb "github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/syncstatepb"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
)

// The DataCollector side: on every copyset this server leads, a loop (the
// leader worker's run) keeps one collector per live sub-task. A sub-task
// assigned to another server (the former leader) is taken over with a new
// token at once; one whose packets stopped for twice the check period is
// reassigned here with a new token too. A collector exports with Export
// and sends each packet to the sub-task's des_endpoint with SendData.

type collectorService struct {
	dspb.UnimplementedDataCollectorServer
	s *Service
}

// AddSyncTask creates or reassigns a sub-task on a copyset this server
// leads (upstream's DataCollector.AddSyncTask). The sub-task is the
// request's task_name's; a request without one (an upstream client's)
// names the (tid, pid)'s only task, or task "task" when it has none, and
// is refused, naming the tasks, when it has several. The record's db is
// the tid in decimal. A new sub-task takes the request's export_id, or a
// new one; a reassignment keeps the stored one.
func (c *collectorService) AddSyncTask(ctx context.Context, req *dspb.AddSyncTaskRequest) (*dspb.GeneralResponse, error) {
	s := c.s
	if req.Tid == nil || req.Pid == nil {
		return general(-1, "add sync task: tid and pid are required"), nil
	}
	g := copyset.NewGroupID(req.GetTid(), req.GetPid())
	var rec *pb.SubTask
	if n := s.copysets.Get(g); n != nil {
		if m, ok := MachineOf(n); ok {
			var err error
			rec, err = m.Lookup(req.GetTid(), req.GetPid(), req.GetTaskName())
			if errors.Is(err, ErrTaskNotNamed) {
				return general(-1, "add sync task %s: %v", csName(g), err), nil
			}
		}
	}
	req = proto.CloneOf(req)
	name := req.GetTaskName()
	switch {
	case name != "":
	case rec != nil:
		name = rec.GetName()
	default:
		name = "task"
	}
	req.TaskName = proto.String(name)
	if req.SyncPoint == nil {
		req.SyncPoint = &dspb.SyncPoint{Type: dspb.SyncType_kSNAPSHOT.Enum()}
	}
	if rec == nil && req.GetExportId() == "" {
		req.ExportId = proto.String(NewExportID())
	}
	resp := s.proposeLocal(ctx, g, &pb.Op{Op: &pb.Op_Put{Put: &pb.PutSubTask{
		Db: strconv.FormatUint(uint64(req.GetTid()), 10), Name: name, Request: req, UpdateMs: nowMs()}}})
	if resp.GetCode() != 0 {
		return general(-1, "add sync task %s: %s", csName(g), resp.GetMsg()), nil
	}
	return general(0, "ok"), nil
}

// collectorRun is one running collector.
type collectorRun struct {
	token  string
	cancel context.CancelFunc
	done   chan struct{}
}

// lead is the leader work of copyset n: it reconciles the collectors with
// the sub-task records until leadership or the server ends, at every tick
// and at once when a sub-task is created, changes status or is deleted
// (Machine.Changed).
func (s *Service) lead(ctx context.Context, n *copyset.Node) error {
	m, ok := MachineOf(n)
	if !ok {
		<-ctx.Done()
		return nil
	}
	runs := map[subKey]*collectorRun{}
	stop := func(k subKey) {
		if r := runs[k]; r != nil {
			r.cancel()
			<-r.done
			delete(runs, k)
		}
	}
	defer func() {
		for k := range runs {
			stop(k)
		}
	}()
	every := min(time.Second, s.deps.CheckPeriod)
	local := s.localAddr()
	for {
		changed := m.Changed()
		live := map[subKey]bool{}
		for _, r := range m.List() {
			p := r.GetProgress()
			k := keyOf(r)
			switch r.GetStatus() {
			case pb.Status_SUCCESS, pb.Status_FAILED:
				continue
			}
			live[k] = true
			run := runs[k]
			if run != nil && run.token != p.GetToken() {
				stop(k)
				run = nil
			}
			if run != nil {
				select {
				case <-run.done:
					stop(k)
					run = nil
				default:
				}
			}
			stale := r.GetStatus() == pb.Status_RUNNING &&
				time.Since(time.UnixMilli(r.GetLastUpdateMs())) > 2*s.deps.CheckPeriod
			if p.GetTabletEndpoint() != local || r.GetStatus() == pb.Status_REASSIGNING || stale {
				if run != nil {
					stop(k)
				}
				s.reassign(ctx, n, r, local)
				continue
			}
			if run == nil {
				rctx, cancel := context.WithCancel(ctx)
				run = &collectorRun{token: p.GetToken(), cancel: cancel, done: make(chan struct{})}
				runs[k] = run
				s.collecting.Add(1)
				go func(rec *pb.SubTask) {
					defer close(run.done)
					defer s.collecting.Add(-1)
					s.collect(rctx, n, rec)
				}(proto.CloneOf(r))
			}
		}
		for k := range runs {
			if !live[k] {
				stop(k)
			}
		}
		// With no live sub-task nothing here changes but by an op, which
		// Changed signals: the look every check period (coalesced with the
		// other copysets' by package slack) is only for live ones.
		var tick <-chan struct{}
		if len(live) > 0 {
			tick = slack.After(every)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
		case <-changed:
		}
	}
}

// Collecting returns how many collectors this server runs now: one per
// live sub-task of each copyset it leads. A collector counts until its
// goroutine ends, its last SendData answered or cancelled. Tests wait on
// it: a deleted task's collectors are gone once every server says 0.
func (s *Service) Collecting() int { return int(s.collecting.Load()) }

// reassign gives sub-task r a new token, with this server as its
// collector and SyncTool.
func (s *Service) reassign(ctx context.Context, n *copyset.Node, r *pb.SubTask, local string) {
	req := proto.CloneOf(r.GetProgress())
	old := req.GetTabletEndpoint()
	req.Token = proto.String(newToken())
	req.TabletEndpoint, req.DesEndpoint = proto.String(local), proto.String(local)
	resp := s.proposeLocal(ctx, n.Group(), &pb.Op{Op: &pb.Op_Put{Put: &pb.PutSubTask{Db: r.GetDb(), Name: r.GetName(), Request: req, UpdateMs: nowMs()}}})
	if resp.GetCode() != 0 {
		s.log.Warn("sync sub-task not reassigned", "pool", n.Group().Pool(), "copyset", n.Group().Copyset(), "task", r.GetName(), "err", resp.GetMsg())
		return
	}
	s.metrics.reassign.Inc()
	s.log.Info("sync sub-task reassigned to this leader", "pool", n.Group().Pool(), "copyset", n.Group().Copyset(), "task", r.GetName(), "from", old)
}

// collect runs the export of sub-task rec until it finishes, fails for
// good, is superseded or ctx ends; errors in between are retried.
func (s *Service) collect(ctx context.Context, n *copyset.Node, rec *pb.SubTask) {
	log := s.log.With("pool", n.Group().Pool(), "copyset", n.Group().Copyset(), "task", rec.GetName())
	for ctx.Err() == nil {
		err := s.export(ctx, n, rec)
		switch {
		case err == nil, ctx.Err() != nil, errors.Is(err, errSuperseded):
			return
		case errors.Is(err, ErrLogGone), errors.As(err, new(*copyset.LogPinCappedError)):
			// The log this sub-task still had to export is gone, or a
			// retention bound (sync.max_retained_bytes,
			// raft.max_pinned_entries) let it go: the sub-task fails, its
			// pins (this export's, and the sync machine's hold on every
			// replica) are released, the copyset goes on.
			msg := clipMessage(failureMessage(err))
			log.Error("sync sub-task failed", "err", msg)
			s.metrics.failed.Inc()
			s.proposeLocal(ctx, n.Group(), &pb.Op{Op: &pb.Op_SetStatus{SetStatus: &pb.SetStatus{
				Ref: recordRef(rec), Status: pb.Status_FAILED, Message: msg}}})
			return
		}
		log.Warn("sync export interrupted; retrying", "err", err)
		// The pause sends no heartbeat, so it stays well inside the
		// reassignment timeout (2 x the check period) however short
		// that is configured.
		select {
		case <-ctx.Done():
			return
		case <-time.After(retryPause(s.deps.CheckPeriod)):
		}
		m, ok := MachineOf(n)
		if !ok {
			return
		}
		cur := m.Get(rec.GetProgress().GetTid(), rec.GetProgress().GetPid(), rec.GetName())
		if cur == nil || cur.GetProgress().GetToken() != rec.GetProgress().GetToken() {
			return
		}
		rec = cur
	}
}

// retryPause is how long a collector waits before it retries an
// interrupted export: a second, or a quarter of the check period when
// that is shorter.
func retryPause(checkPeriod time.Duration) time.Duration {
	return min(time.Second, checkPeriod/4)
}

// failureMessage is the FAILED message of an export that cannot go on:
// for a pin a retention bound moved, it names the bound's setting first.
func failureMessage(err error) string {
	var ce *copyset.LogPinCappedError
	if !errors.As(err, &ce) {
		return err.Error()
	}
	setting := "raft.max_pinned_entries"
	if ce.Bound == copyset.PinBoundBytes {
		setting = "sync.max_retained_bytes"
	}
	return fmt.Sprintf("the export fell further behind the log than the retention bound %s = %d %s allows: %v", setting, ce.Limit, ce.Bound, err)
}

// sendInterval paces a caught-up tailing export: Deps.SendInterval, but
// at most half the check period, so that a sub-task is never silent for
// twice the check period after which it is reassigned.
func (s *Service) sendInterval() time.Duration {
	return min(s.deps.SendInterval, s.deps.CheckPeriod/2)
}

// sendIntervalOf is a sub-task's send interval: its task's own, else the
// server's; at most half the check period.
func (s *Service) sendIntervalOf(p *dspb.AddSyncTaskRequest) time.Duration {
	if ms := p.GetSendIntervalMs(); ms > 0 {
		return min(time.Duration(ms)*time.Millisecond, s.deps.CheckPeriod/2)
	}
	return s.sendInterval()
}

// packetSender is the SyncTool a collector sends its packets to.
type packetSender struct {
	via  string // sendViaLocal or sendViaGRPC
	tool interface {
		SendData(ctx context.Context, req *dspb.SendDataRequest, opts ...grpc.CallOption) (*dspb.SendDataResponse, error)
	}
	sends *prometheus.CounterVec
}

// How a collector reaches its SyncTool (the via label of
// chunkraft_sync_senddata_calls_total).
const (
	sendViaLocal = "in_process"
	sendViaGRPC  = "grpc"
)

// localTool is this server's SyncTool as a SendData client: a packet to
// the SyncTool in the same process takes no gRPC hop (no encoding, no
// copy); the call returns only once the packet is written, so the
// export's buffer is not read after it.
type localTool struct{ t *toolService }

func (l localTool) SendData(ctx context.Context, req *dspb.SendDataRequest, _ ...grpc.CallOption) (*dspb.SendDataResponse, error) {
	return l.t.SendData(ctx, req)
}

// syncTool returns the sender to the SyncTool at endpoint (a peer id or
// address): this server's own, called in process, or another's over gRPC.
func (s *Service) syncTool(endpoint string) (packetSender, error) {
	if copyset.PeerID(endpoint).Addr() == s.deps.Local.Addr() {
		return packetSender{via: sendViaLocal, tool: localTool{t: &toolService{s: s}}, sends: s.metrics.sends}, nil
	}
	cc, err := s.deps.Dial(leaderAddr(endpoint))
	if err != nil {
		return packetSender{}, fmt.Errorf("dial SyncTool %s: %w", endpoint, err)
	}
	return packetSender{via: sendViaGRPC, tool: dspb.NewSyncToolClient(cc), sends: s.metrics.sends}, nil
}

// send calls SendData, counting the call by how it went.
func (p packetSender) send(ctx context.Context, req *dspb.SendDataRequest) (*dspb.SendDataResponse, error) {
	p.sends.WithLabelValues(p.via).Inc()
	return p.tool.SendData(ctx, req)
}

// recordRef is the ref of sub-task record r under its current token.
func recordRef(r *pb.SubTask) *pb.Ref {
	p := r.GetProgress()
	return &pb.Ref{Tid: p.GetTid(), Pid: p.GetPid(), Token: p.GetToken(), Name: r.GetName()}
}

// errSuperseded: SendData told the collector to drop the sub-task.
var errSuperseded = errors.New("the SyncTool dropped this sub-task")

// export runs one Export of rec, sending its packets with SendData.
func (s *Service) export(ctx context.Context, n *copyset.Node, rec *pb.SubTask) error {
	p := rec.GetProgress()
	chunks, err := chunkread.Of(n)
	if err != nil {
		return err
	}
	tool, err := s.syncTool(p.GetDesEndpoint())
	if err != nil {
		return err
	}
	ref := recordRef(rec)
	src := &nodeSource{n: n, chunks: chunks}
	from := p.GetSyncPoint()
	beat := s.sendIntervalOf(p)
	opts := ExportOptions{
		Mode: p.GetMode(), BinlogEnd: rec.GetBinlogEnd(),
		Holder: "sync " + rec.GetName(), Idle: beat, Linger: beat, Gate: s.gate, StartStateMs: rec.GetStartStateMs(),
		ExportID: p.GetExportId(),
		OnBinlogEnd: func(ctx context.Context, end uint64) error {
			resp := s.proposeLocal(ctx, n.Group(), &pb.Op{Op: &pb.Op_SetBinlogEnd{SetBinlogEnd: &pb.SetBinlogEnd{Ref: ref, Index: end}}})
			if resp.GetCode() != 0 {
				return fmt.Errorf("record the binlog end %d: %s", end, resp.GetMsg())
			}
			return nil
		},
	}
	send := func(ctx context.Context, pk Packet) error {
		if pk.Data == nil && pk.Start.GetType() == dspb.SyncType_kBINLOG {
			// A binlog-phase heartbeat tells the SyncTool what it covers in
			// a packet of a header alone, which is not written.
			data, err := exportfmt.Encode(&syncpb.PacketHeader{LogicPoolId: p.GetTid(), CopysetId: p.GetPid(),
				StartPoint: pk.Start, NextPoint: pk.Next, BinlogStart: pk.BinlogStart, StartStateMs: pk.StartStateMs,
				CoveredIndex: pk.CoveredIndex, CoveredMs: pk.CoveredMs, ExportId: p.GetExportId(), WrittenAtMs: pk.WrittenAtMs}, nil)
			if err != nil {
				return fmt.Errorf("encode the heartbeat at %s: %w", PointString(pk.Start), err)
			}
			pk.Data = data
		}
		req := &dspb.SendDataRequest{
			Tid: proto.Uint32(p.GetTid()), Pid: proto.Uint32(p.GetPid()), Token: proto.String(p.GetToken()),
			StartPoint: pk.Start, NextPoint: pk.Next, Count: proto.Uint64(pk.Count), Finished: proto.Bool(pk.Finished), Data: pk.Data,
			TaskName: proto.String(rec.GetName()), ExportId: proto.String(p.GetExportId()), WrittenAtMs: proto.Int64(pk.WrittenAtMs),
		}
		cctx, cancel := context.WithTimeout(ctx, 2*s.deps.CheckPeriod)
		resp, err := tool.send(cctx, req)
		cancel()
		if err != nil {
			return fmt.Errorf("SendData to %s: %w", p.GetDesEndpoint(), err)
		}
		if resp.GetResponse().GetCode() != 0 {
			if resp.GetDeleteTask() {
				return fmt.Errorf("%w: %s", errSuperseded, resp.GetResponse().GetMsg())
			}
			return fmt.Errorf("SendData to %s: %s", p.GetDesEndpoint(), resp.GetResponse().GetMsg())
		}
		return nil
	}
	if p.GetMode() == dspb.SyncMode_kIncrementalByTimestamp && from.GetType() == dspb.SyncType_kSNAPSHOT {
		// An incremental sub-task starts at the first entry appended at or
		// after start_ts: its first packet, empty, leads from the very start
		// there, so that the chain of points has no gap. Its starting state
		// (nothing) is that of start_ts.
		k, err := FirstIndexAtOrAfter(src, p.GetStartTs())
		if err != nil {
			return err
		}
		next := exportfmt.BinlogPoint(k)
		startMs := int64(min(p.GetStartTs(), MaxUnixMs))
		written := time.Now().UnixMilli()
		data, err := exportfmt.Encode(&syncpb.PacketHeader{LogicPoolId: p.GetTid(), CopysetId: p.GetPid(),
			StartPoint: from, NextPoint: next.Proto(), BinlogStart: k, StartStateMs: startMs, ExportId: p.GetExportId(), WrittenAtMs: written}, nil)
		if err != nil {
			return err
		}
		if err := send(ctx, Packet{Start: from, Next: next.Proto(), Data: data, BinlogStart: k, StartStateMs: startMs, WrittenAtMs: written}); err != nil {
			return err
		}
		from, opts.StartStateMs = next.Proto(), startMs
	}
	return Export(ctx, src, from, rec.GetBinlogStart(), opts, send)
}

// nodeSource is a copyset as the exporter reads it.
type nodeSource struct {
	n      *copyset.Node
	chunks chunkread.Images
}

func (ns *nodeSource) Pool() uint32         { return ns.n.Group().Pool() }
func (ns *nodeSource) Copyset() uint32      { return ns.n.Group().Copyset() }
func (ns *nodeSource) ListChunks() []uint64 { return ns.chunks.ListChunks() }
func (ns *nodeSource) ChunkImage(id uint64, buf *chunkread.ImageBuffers) (chunkread.Image, error) {
	return ns.chunks.ChunkImage(id, buf)
}
func (ns *nodeSource) AppliedIndex() uint64 { return ns.n.AppliedIndex() }
func (ns *nodeSource) CommitIndex() uint64  { return ns.n.CommitIndex() }
func (ns *nodeSource) ReadBarrier(ctx context.Context) (uint64, error) {
	return ns.n.ReadBarrier(ctx)
}
func (ns *nodeSource) LogEntry(index uint64) (copyset.LogEntry, error) {
	return ns.n.LogEntry(index)
}
func (ns *nodeSource) PinLog(holder string, index uint64) (LogPin, error) {
	pin, err := ns.n.PinLog(holder, index)
	if err != nil {
		return nil, err
	}
	return pin, nil
}
func (ns *nodeSource) WriteFenced(index uint64, owner string) (string, bool) {
	return ns.chunks.WriteFenced(index, owner)
}
func (ns *nodeSource) Materialize(ctx context.Context, location string, size uint32) ([]byte, error) {
	return ns.chunks.Materialize(ctx, location, size)
}
