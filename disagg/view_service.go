package disagg

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/klauspost/crc32"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/chunkread"
	vpb "github.com/chunkraft/chunkraft/proto/chunkraft/viewpb"
	coprocessor "github.com/chunkraft/chunkraft/proto/kvproto/coprocessor"
	dpb "github.com/chunkraft/chunkraft/proto/kvproto/disaggregated"
)

// The read-view RPCs of tikvpb.Tikv (see the package doc, "Read views").

// Codes of error_other and of a Fetch's error packet.
const (
	CodeInvalid    = 400 // a request that cannot be served as it is
	CodeNotFound   = 404 // unknown snapshot id, or segment not in it / fetched already
	CodeGone       = 410 // the view was dropped (lease, budget, cancel)
	CodeBounds     = 429 // past disagg.views bounds
	CodeNotLeader  = 503 // this server does not lead the copyset (any more)
	CodeInternal   = 500
	maxPagesPerReq = 1 << 22
)

var castagnoliTable = crc32.MakeTable(crc32.Castagnoli)

func errorOther(code int32, format string, a ...any) *dpb.EstablishDisaggTaskResponse {
	return &dpb.EstablishDisaggTaskResponse{Error: &dpb.EstablishDisaggTaskError{
		Errors: &dpb.EstablishDisaggTaskError_ErrorOther{ErrorOther: &dpb.ErrorOther{Code: code, Msg: fmt.Sprintf(format, a...)}}}}
}

func errorRegion(msg string, ids []uint64) *dpb.EstablishDisaggTaskResponse {
	return &dpb.EstablishDisaggTaskResponse{Error: &dpb.EstablishDisaggTaskError{
		Errors: &dpb.EstablishDisaggTaskError_ErrorRegion{ErrorRegion: &dpb.ErrorRegion{Msg: msg, RegionIds: ids}}}}
}

// wantView is one copyset an Establish registers a view on.
type wantView struct {
	n       *copyset.Node
	epoch   uint64
	regions []uint64
	ranges  []*vpb.ChunkRange
}

// chunkKey parses a range key: 8 bytes big-endian, empty as bound.
func chunkKey(k []byte, empty uint64) (uint64, error) {
	switch len(k) {
	case 0:
		return empty, nil
	case 8:
		return binary.BigEndian.Uint64(k), nil
	}
	return 0, fmt.Errorf("range key %x: want 8 bytes (a big-endian chunk id) or empty", k)
}

// wantedViews checks the request's regions: unknown, not led here or of
// another epoch → error_region; a bad range → error_other.
func (s *Service) wantedViews(req *dpb.EstablishDisaggTaskRequest) ([]*wantView, *dpb.EstablishDisaggTaskResponse) {
	regions := slices.Clone(req.GetRegions())
	for _, tr := range req.GetTableRegions() {
		regions = append(regions, tr.GetRegions()...)
	}
	if len(regions) == 0 {
		return nil, errorOther(CodeInvalid, "no regions: a region is a copyset (region_id = its group id)")
	}
	byGroup := map[copyset.GroupID]*wantView{}
	var order []*wantView
	var bad []uint64
	var msgs []string
	for _, r := range regions {
		g := copyset.GroupID(r.GetRegionId())
		n := s.copysets.Get(g)
		var why string
		switch {
		case n == nil:
			why = fmt.Sprintf("region %d: copyset %d/%d is not on this server", r.GetRegionId(), g.Pool(), g.Copyset())
		case !n.IsLeader() || n.Broken() != nil:
			why = fmt.Sprintf("region %d: copyset %d/%d is not led here (leader %q)", r.GetRegionId(), g.Pool(), g.Copyset(), n.Leader())
		case r.GetRegionEpoch().GetConfVer() != n.Status().Epoch:
			why = fmt.Sprintf("region %d: epoch conf_ver %d, copyset epoch is %d", r.GetRegionId(), r.GetRegionEpoch().GetConfVer(), n.Status().Epoch)
		}
		if why != "" {
			bad = append(bad, r.GetRegionId())
			msgs = append(msgs, why)
			continue
		}
		ranges, err := chunkRanges(r)
		if err != nil {
			return nil, errorOther(CodeInvalid, "region %d: %v", r.GetRegionId(), err)
		}
		w := byGroup[g]
		if w == nil {
			w = &wantView{n: n, epoch: n.Status().Epoch}
			byGroup[g] = w
			order = append(order, w)
		}
		w.regions = append(w.regions, r.GetRegionId())
		w.ranges = append(w.ranges, ranges...)
	}
	if len(bad) > 0 {
		return nil, errorRegion(fmt.Sprint(msgs), bad)
	}
	return order, nil
}

// chunkRanges is a region's ranges as chunk id ranges; no range is every
// chunk.
func chunkRanges(r *coprocessor.RegionInfo) ([]*vpb.ChunkRange, error) {
	if len(r.GetRanges()) == 0 {
		return []*vpb.ChunkRange{{}}, nil
	}
	var out []*vpb.ChunkRange
	for _, kr := range r.GetRanges() {
		lo, err := chunkKey(kr.GetStart(), 0)
		if err != nil {
			return nil, err
		}
		hi, err := chunkKey(kr.GetEnd(), 0)
		if err != nil {
			return nil, err
		}
		if hi != 0 && hi <= lo {
			return nil, fmt.Errorf("range [%d, %d) is empty", lo, hi)
		}
		out = append(out, &vpb.ChunkRange{Lo: lo, Hi: hi})
	}
	return out, nil
}

// Establish is EstablishDisaggTask (see the package doc).
func (s *Service) Establish(ctx context.Context, req *dpb.EstablishDisaggTaskRequest) *dpb.EstablishDisaggTaskResponse {
	meta := req.GetMeta()
	if meta == nil {
		return errorOther(CodeInvalid, "no task meta")
	}
	key := taskKey(meta)
	// One Establish of a task at a time: a concurrent one of the same
	// task waits, then finds the views this one registered.
	unlock, err := s.views.running.lock(ctx, key)
	if err != nil {
		return errorOther(CodeInternal, "task %s: waiting for another Establish or Cancel of it: %v", key, err)
	}
	defer unlock()
	t := s.findTask(key)
	wants, bad := s.wantedViews(req)
	if bad != nil {
		return bad
	}
	requested := map[copyset.GroupID]bool{}
	for _, w := range wants {
		requested[w.n.Group()] = true
	}
	if t != nil {
		// A retry answers the same views; an Establish of the task on
		// copysets it has no view on yet (chunkctl establishes one copyset
		// at a time) adds views there.
		s.views.mu.Lock()
		wants = slices.DeleteFunc(wants, func(w *wantView) bool { return t.segs[w.n.Group()] != nil })
		s.views.mu.Unlock()
		if len(wants) == 0 {
			return s.describe(meta, t, requested)
		}
	}
	cfg := s.deps.Config.Views
	timeout := time.Duration(req.GetTimeoutS()) * time.Second
	switch {
	case req.GetTimeoutS() <= 0:
		timeout = cfg.DefaultTimeout
	case req.GetTimeoutS() > int64(cfg.MaxTimeout/time.Second):
		return errorOther(CodeInvalid, "timeout_s %d: at most %d (disagg.views.max_timeout)", req.GetTimeoutS(), int64(cfg.MaxTimeout/time.Second))
	}
	metaBytes, err := proto.Marshal(meta)
	if err != nil {
		return errorOther(CodeInvalid, "task meta: %v", err)
	}
	deadline := time.Now().Add(timeout)
	added := map[copyset.GroupID]*segTask{}
	made := map[copyset.GroupID]bool{} // registered by this call (not found registered)
	undo := func() {
		for g, seg := range added {
			if n := s.copysets.Get(g); n != nil && made[g] {
				_ = s.dropView(ctx, n, seg.seq, "establish failed")
			}
		}
	}
	for _, w := range wants {
		seq, registered, resp := s.registerView(ctx, w, &vpb.ViewInfo{TaskMeta: metaBytes, TaskKey: key, DeadlineUnixMs: deadline.UnixMilli(),
			RegionId: uint64(w.n.Group()), ConfVer: w.epoch, TableId: int64(w.n.Group().Pool()), SegmentId: uint64(w.n.Group().Copyset()),
			StoreId: s.deps.StoreID})
		if resp != nil {
			undo()
			return resp
		}
		added[w.n.Group()] = &segTask{seq: seq}
		made[w.n.Group()] = registered
	}
	s.views.mu.Lock()
	if t == nil {
		if t = s.views.tasks[key]; t == nil {
			t = &viewTask{key: key, segs: map[copyset.GroupID]*segTask{}}
			s.views.tasks[key] = t
		}
	}
	delete(s.views.gone, key)
	for g, seg := range added {
		t.segs[g] = seg
		if made[g] {
			s.views.leases[viewRef{g, seg.seq}] = deadline
		}
	}
	s.views.mu.Unlock()
	return s.describe(meta, t, requested)
}

// registerView registers w's view of the task info names, unless the
// copyset has one already (a predecessor as leader registered it, this
// server's memory lost it): then it answers that view's sequence number
// and registered false. One view per task and copyset is the leader's
// rule, not Apply's: a replay after kill -9 sees the views that were
// live at the crash, not those of the op's place in the log (one dropped
// in between is missing), so Apply could not decide a refusal the same
// way again. Under the copyset's admit lock and after a read barrier
// (every register a predecessor committed is applied here), the look and
// the register cannot interleave with another's.
func (s *Service) registerView(ctx context.Context, w *wantView, info *vpb.ViewInfo) (seq uint64, registered bool, _ *dpb.EstablishDisaggTaskResponse) {
	g := w.n.Group()
	st, ok := s.viewStore(w.n)
	if !ok {
		return 0, false, errorOther(CodeInternal, "copyset %s: %v", g, errNoViews)
	}
	unlock, err := s.views.admit.lock(ctx, g)
	if err != nil {
		return 0, false, errorOther(CodeInternal, "copyset %d/%d: waiting to register the view: %v", g.Pool(), g.Copyset(), err)
	}
	defer unlock()
	// Leadership lost after the register op was appended answers as not
	// the leader: the view, if it commits, carries the task's key and goes
	// with the task.
	notLeader := func(err error) *dpb.EstablishDisaggTaskResponse {
		var (
			nl *copyset.NotLeaderError
			ou *copyset.OutcomeUnknownError
		)
		if errors.As(err, &nl) || errors.As(err, &ou) {
			return errorRegion(fmt.Sprintf("copyset %s: not the leader any more: %v", g, err), w.regions)
		}
		return nil
	}
	if _, err := w.n.ReadBarrier(ctx); err != nil {
		if resp := notLeader(err); resp != nil {
			return 0, false, resp
		}
		return 0, false, errorOther(CodeInternal, "copyset %d/%d: read barrier: %v", g.Pool(), g.Copyset(), err)
	}
	views := st.Views()
	for _, v := range views {
		if v.Info.GetTaskKey() == info.GetTaskKey() {
			return v.Seq, false, nil
		}
	}
	if max := s.deps.Config.Views.MaxPerCopyset; len(views) >= max {
		return 0, false, errorOther(CodeBounds, "copyset %d/%d has %d read views, at most %d (disagg.views.max_per_copyset)",
			g.Pool(), g.Copyset(), len(views), max)
	}
	res, err := proposeView(ctx, w.n, &vpb.Op{Op: &vpb.Op_Register{Register: &vpb.Register{
		Ranges: w.ranges, BudgetBytes: s.deps.Config.Views.MaxPreimageBytes, Info: info}}})
	if err != nil {
		if resp := notLeader(err); resp != nil {
			return 0, false, resp
		}
		return 0, false, errorOther(CodeInternal, "register the view: %v", err)
	}
	return res.Seq, true, nil
}

// describe answers an Establish of task t on the copysets requested: their
// segments' pages as of their views (the task's views elsewhere, which
// other Establish calls asked for, may be fetched and gone already).
func (s *Service) describe(meta *dpb.DisaggTaskMeta, t *viewTask, requested map[copyset.GroupID]bool) *dpb.EstablishDisaggTaskResponse {
	tables := map[int64]*vpb.Table{}
	var pools []int64
	s.views.mu.Lock()
	segs := maps.Clone(t.segs) // an Establish of the task elsewhere may add segments
	s.views.mu.Unlock()
	maps.DeleteFunc(segs, func(g copyset.GroupID, _ *segTask) bool { return !requested[g] })
	groups := slices.Sorted(maps.Keys(segs))
	for _, g := range groups {
		seg := segs[g]
		n := s.copysets.Get(g)
		if n == nil {
			return errorOther(CodeGone, "copyset %s of the task left this server", g)
		}
		st, ok := s.viewStore(n)
		if !ok {
			return errorOther(CodeInternal, "copyset %s: %v", g, errNoViews)
		}
		pages, err := st.Pages(seg.seq)
		if err != nil {
			return errorOther(CodeGone, "copyset %s: %v (establish again with a new task id)", g, err)
		}
		var epoch uint64
		for _, v := range st.Views() {
			if v.Seq == seg.seq {
				epoch = v.Info.GetConfVer()
			}
		}
		sg := &vpb.Segment{SegmentId: uint64(g.Copyset()), RegionId: uint64(g), ConfVer: epoch, ViewSeq: seg.seq, BlockSize: st.BlockSize()}
		for _, cp := range pages {
			for _, b := range cp.Blocks {
				sg.PageIds = append(sg.PageIds, PageID(cp.Chunk, b))
			}
		}
		tb := tables[int64(g.Pool())]
		if tb == nil {
			tb = &vpb.Table{TableId: int64(g.Pool())}
			tables[int64(g.Pool())] = tb
			pools = append(pools, int64(g.Pool()))
		}
		tb.Segments = append(tb.Segments, sg)
	}
	resp := &dpb.EstablishDisaggTaskResponse{StoreId: s.deps.StoreID, SnapshotId: meta}
	for _, p := range pools {
		b, err := proto.Marshal(tables[p])
		if err != nil {
			return errorOther(CodeInternal, "encode table %d: %v", p, err)
		}
		resp.Tables = append(resp.Tables, b)
	}
	return resp
}

// fetchError is the one error packet of a failed Fetch.
type fetchError struct {
	code int32
	msg  string
}

func (e *fetchError) Error() string { return e.msg }

func fetchErr(code int32, format string, a ...any) *fetchError {
	return &fetchError{code: code, msg: fmt.Sprintf(format, a...)}
}

// Fetch is FetchDisaggPages: the requested pages of one segment as of its
// view, cut into packets; a failure is one error packet, the stream OK.
func (s *Service) Fetch(ctx context.Context, req *dpb.FetchDisaggPagesRequest, send func(*dpb.PagesPacket) error) error {
	ferr := s.fetch(ctx, req, send)
	var fe *fetchError
	switch {
	case ferr == nil:
		return nil
	case errors.As(ferr, &fe):
		return send(&dpb.PagesPacket{Error: &dpb.DisaggReadError{Code: fe.code, Msg: fe.msg}})
	}
	return ferr // the stream itself failed
}

// notLedHere is the 503 of a Fetch on a server that does not lead g (n
// its replica, nil when it hosts none): the message names the leader's
// address when the replica knows it.
func notLedHere(g copyset.GroupID, n *copyset.Node) error {
	if n == nil {
		return fetchErr(CodeNotLeader, "copyset %d/%d is not led here (no replica here)", g.Pool(), g.Copyset())
	}
	if l := n.Leader(); l != "" {
		return fetchErr(CodeNotLeader, "copyset %d/%d is not led here; leader %s", g.Pool(), g.Copyset(), l.Addr())
	}
	return fetchErr(CodeNotLeader, "copyset %d/%d is not led here; no leader known", g.Pool(), g.Copyset())
}

func (s *Service) fetch(ctx context.Context, req *dpb.FetchDisaggPagesRequest, send func(*dpb.PagesPacket) error) error {
	meta := req.GetSnapshotId()
	if meta == nil {
		return fetchErr(CodeInvalid, "no snapshot id")
	}
	if req.GetTableId() < 0 || req.GetTableId() > math.MaxUint32 || req.GetSegmentId() > math.MaxUint32 {
		return fetchErr(CodeNotFound, "Segment task not found: table %d segment %d is not a pool and copyset", req.GetTableId(), req.GetSegmentId())
	}
	if len(req.GetPageIds()) > maxPagesPerReq {
		return fetchErr(CodeInvalid, "%d page ids, at most %d", len(req.GetPageIds()), maxPagesPerReq)
	}
	g := copyset.NewGroupID(uint32(req.GetTableId()), uint32(req.GetSegmentId()))
	if n := s.copysets.Get(g); n == nil || !n.IsLeader() {
		return notLedHere(g, n)
	}
	key := taskKey(meta)
	t := s.findTask(key)
	vt := s.views
	if t == nil {
		vt.mu.Lock()
		why, ok := vt.gone[key]
		vt.mu.Unlock()
		if ok {
			return fetchErr(CodeGone, "snapshot %s: %s", key, why)
		}
		return fetchErr(CodeNotFound, "snapshot %s not found", key)
	}
	vt.mu.Lock()
	vt.extend(t, time.Now().Add(RefreshLease))
	seg := t.segs[g]
	open := seg != nil && !seg.fetched
	vt.mu.Unlock()
	if !open {
		return fetchErr(CodeNotFound, "Segment task not found: table %d segment %d (not in snapshot %s, or fetched already)", req.GetTableId(), req.GetSegmentId(), key)
	}
	n := s.copysets.Get(g)
	if n == nil || !n.IsLeader() {
		return notLedHere(g, n)
	}
	if _, err := n.ReadBarrier(ctx); err != nil {
		return fetchErr(CodeNotLeader, "copyset %d/%d: %v", g.Pool(), g.Copyset(), err)
	}
	st, ok := s.viewStore(n)
	if !ok {
		return fetchErr(CodeInternal, "%v", errNoViews)
	}
	pages, err := st.Pages(seg.seq)
	if err != nil {
		return s.viewFetchErr(key, err)
	}
	valid := map[uint64]bool{}
	for _, cp := range pages {
		for _, b := range cp.Blocks {
			valid[PageID(cp.Chunk, b)] = true
		}
	}
	for _, id := range req.GetPageIds() {
		if !valid[id] {
			c, b := SplitPageID(id)
			return fetchErr(CodeInvalid, "page id %d (chunk %d block %d) is not in segment %d of snapshot %s", id, c, b, req.GetSegmentId(), key)
		}
	}
	// Pop the segment: it is fetched once (a request refused above
	// leaves it).
	vt.mu.Lock()
	popped := !seg.fetched
	seg.fetched = true
	vt.mu.Unlock()
	if !popped {
		return fetchErr(CodeNotFound, "Segment task not found: table %d segment %d (fetched already)", req.GetTableId(), req.GetSegmentId())
	}
	defer s.fetched(ctx, t, n, seg)
	return s.streamPages(st, seg.seq, key, req.GetPageIds(), send)
}

// maxRunPages bounds the pages streamPages reads at once: consecutive
// pages of one chunk are read in one ReadPages of up to this many.
const maxRunPages = 64

// streamPages sends pages cut at disagg.views.packet_bytes, reading runs
// of consecutive pages of a chunk at once.
func (s *Service) streamPages(st chunkread.Views, seq uint64, key string, ids []uint64, send func(*dpb.PagesPacket) error) error {
	bs := st.BlockSize()
	limit := s.deps.Config.Views.PacketBytes
	pkt := &dpb.PagesPacket{}
	size := 0
	buf := make([]byte, maxRunPages*int(bs))
	for k := 0; k < len(ids); {
		c, b := SplitPageID(ids[k])
		j := k + 1 // ids[k:j]: the next page of the same chunk each
		for j < len(ids) && j-k < maxRunPages && ids[j] == ids[k]+uint64(j-k) && ids[j]>>pageBlockBits == c {
			j++
		}
		run := buf[:(j-k)*int(bs)]
		if err := st.ReadPages(seq, c, b, run); err != nil {
			return s.viewFetchErr(key, err)
		}
		for m := k; m < j; m++ {
			data := run[(m-k)*int(bs) : (m-k+1)*int(bs)]
			pb := b + uint32(m-k)
			enc, err := proto.Marshal(&vpb.Page{PageId: ids[m], ChunkId: c, Offset: pb * bs, Data: data, Crc32C: crc32.Checksum(data, castagnoliTable)})
			if err != nil {
				return fetchErr(CodeInternal, "encode page %d: %v", ids[m], err)
			}
			if size > 0 && size+len(enc) > limit {
				if err := send(pkt); err != nil {
					return err
				}
				pkt, size = &dpb.PagesPacket{}, 0
			}
			pkt.Pages = append(pkt.Pages, enc)
			size += len(enc)
		}
		k = j
	}
	if size > 0 {
		return send(pkt)
	}
	return nil
}

// viewFetchErr is the error packet of a chunkread.Views error.
func (s *Service) viewFetchErr(key string, err error) error {
	switch {
	case errors.Is(err, chunkread.ErrViewOverBudget):
		return fetchErr(CodeGone, "snapshot %s: dropped: over its pre-image budget (disagg.views.max_preimage_bytes): %v", key, err)
	case errors.Is(err, chunkread.ErrViewGone):
		return fetchErr(CodeGone, "snapshot %s: %v", key, err)
	case errors.Is(err, chunkread.ErrPageNotInView):
		return fetchErr(CodeInvalid, "snapshot %s: %v", key, err)
	}
	return fetchErr(CodeInternal, "snapshot %s: %v", key, err)
}

// fetched drops a fetched segment's view (it is fetched once) and the
// task when its last segment went.
func (s *Service) fetched(ctx context.Context, t *viewTask, n *copyset.Node, seg *segTask) {
	if err := s.dropView(context.WithoutCancel(ctx), n, seg.seq, "fetched"); err != nil {
		s.log.Warn("disagg: dropping a fetched read view failed (its lease drops it)", "copyset", n.Group(), "view", seg.seq, "err", err)
	}
	vt := s.views
	vt.mu.Lock()
	defer vt.mu.Unlock()
	for _, sg := range t.segs {
		if !sg.fetched {
			return
		}
	}
	delete(vt.tasks, t.key)
	vt.setGone(t.key, "every segment was fetched")
}

// ListViews lists the views of the copysets this server leads.
func (s *Service) ListViews(ctx context.Context) (*vpb.ListResponse, error) {
	out := &vpb.ListResponse{}
	for _, n := range s.copysets.List() {
		if !n.IsLeader() {
			continue
		}
		if _, err := n.ReadBarrier(ctx); err != nil {
			continue
		}
		st, ok := s.viewStore(n)
		if !ok {
			continue
		}
		for _, v := range st.Views() {
			vs := &vpb.ViewStatus{Pool: n.Group().Pool(), Copyset: n.Group().Copyset(), ViewSeq: v.Seq, Info: v.Info,
				Chunks: uint64(v.Chunks), SavedBytes: v.Saved, BudgetBytes: v.Budget, OverBudget: v.Over}
			s.views.mu.Lock()
			vs.LeaseUnixMs = s.views.leaseFor(viewRef{n.Group(), v.Seq}, v.Info, time.Now()).UnixMilli()
			if t := s.views.tasks[v.Info.GetTaskKey()]; t != nil {
				for g, sg := range t.segs {
					if sg.fetched {
						vs.Fetched = append(vs.Fetched, uint64(g.Copyset()))
					}
				}
			}
			s.views.mu.Unlock()
			out.Views = append(out.Views, vs)
		}
	}
	return out, nil
}

func (t *tikvService) EstablishDisaggTask(ctx context.Context, req *dpb.EstablishDisaggTaskRequest) (*dpb.EstablishDisaggTaskResponse, error) {
	resp := t.s.Establish(ctx, req)
	t.s.countView("establish", resp.GetError() == nil)
	return resp, nil
}

func (t *tikvService) FetchDisaggPages(req *dpb.FetchDisaggPagesRequest, stream grpc.ServerStreamingServer[dpb.PagesPacket]) error {
	failed := false
	err := t.s.Fetch(stream.Context(), req, func(p *dpb.PagesPacket) error {
		failed = failed || p.GetError() != nil
		return stream.Send(p)
	})
	t.s.countView("fetch", err == nil && !failed)
	return err
}

func (t *tikvService) CancelDisaggTask(ctx context.Context, req *dpb.CancelDisaggTaskRequest) (*dpb.CancelDisaggTaskResponse, error) {
	err := t.s.Cancel(ctx, req.GetMeta())
	t.s.countView("cancel", err == nil)
	switch {
	case err == nil:
		return &dpb.CancelDisaggTaskResponse{}, nil
	case ctx.Err() != nil:
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	t.s.log.Warn("disagg: cancel: read views may be left (their leases drop them)", "err", err)
	return nil, status.Error(codes.Unavailable, err.Error())
}

// viewsService is DisaggViews.
type viewsService struct {
	vpb.UnimplementedDisaggViewsServer
	s *Service
}

func (v *viewsService) List(ctx context.Context, _ *vpb.ListRequest) (*vpb.ListResponse, error) {
	return v.s.ListViews(ctx)
}
