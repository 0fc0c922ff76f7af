package integrity

// Scan execution. The scan worker is a copyset.LeaderWorker (Service.Start,
// Service.Stop): its run on each copyset this server leads (lead) advances
// the copyset's integrity jobs one chunk range at a time, and the runs take
// turns through one server-wide gate, so that the server takes one step at
// a time:
//
//  1. WAITING job due (sched_time <= now, none RUNNING): propose start.
//  2. RUNNING job: the next range is the cursor's (chunk, offset) on the
//     leader's chunk list (ascending ids; a chunk deleted meanwhile is
//     skipped). Ranges are ScanSettings.RangeSize (4 MiB) of chunk data;
//     the crc of a chunk's first range also covers its meta (sn, corrected
//     sn, snapshot sn, clone location and unwritten-block count), which is
//     the "meta" range of Curve folded into the first data range.
//  3. The range is proposed as a CHUNK_OP_SCAN op. At its log index every
//     replica computes crc32c(range) (datastore GetChunkHash, which verifies
//     every block's checksum) and followers send a ScanMap to the leader
//     with ScanService.FollowScanMap from the server's sender goroutine
//     (never inside apply). A replica that cannot read the range (a block
//     failing its checksum, an I/O error) reports Len 0: "unreadable".
//  4. The leader waits for every other member of the current configuration
//     (voters and non-voters; any number of replicas) up to
//     FollowScanMapTimeout, then compares: the crc held by a strict
//     majority of the members wins; a readable replica with another crc
//     "differs", an unreadable one is "unreadable", one that did not report
//     is "missing"; with two or more distinct crcs and no majority every
//     readable replica is "no-majority".
//  5. It proposes the progress op (cursor, counters, mismatches); a
//     mismatch is logged (slog Warn) and counted in
//     chunkraft_scan_mismatches_total{reason} once that op committed.
//
// A new leader continues RUNNING jobs from the replicated cursor; a range
// whose progress op did not commit is scanned again.
//
// Cost: a scan op reads its range on every replica inside apply, so it
// delays the copyset's later ops by that read (a few ms for 4 MiB); the
// worker scans one range at a time: it proposes the scan op, then a raft
// barrier (Node.ShareCommit) so that the followers learn at once that the
// scan op committed, and waits for their maps; a range takes about three
// commit rounds plus the followers' read.
//
// FollowScanMap extensions (the request has no sender field): the sender's
// peer id travels in the gRPC metadata key ScanPeerMetadataKey. retCode is
// a CHUNK_OP_STATUS: 0 accepted, 1 (REDIRECTED) this server does not lead
// the copyset, 4 (INVALID_REQUEST) no scan of that range is in progress or
// the sender is unknown, 6 (COPYSET_NOTEXIST).

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/chunkread"
	"github.com/chunkraft/chunkraft/internal/slack"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	"github.com/klauspost/crc32"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// ScanPeerMetadataKey is the gRPC metadata key in which a FollowScanMap
// caller names itself ("ip:port:0").
const ScanPeerMetadataKey = "chunkraft-scan-peer"

// ScanSettings are the integrity scan's tunables. All of them may change
// at runtime (Service.SetSettings); none affects what replicas apply.
type ScanSettings struct {
	// RangesPerSecond bounds the ranges the server scans per second, over
	// all copysets it leads (each range is read on every replica); 0 = no
	// limit. Default 25 (100 MiB/s of chunk data).
	RangesPerSecond float64 `yaml:"ranges_per_second"`
	// RangeSize is the bytes of chunk data one scan op covers. Default 4 MiB
	// (Curve's copyset.scan_size_byte).
	RangeSize uint32 `yaml:"range_size"`
	// FollowScanMapTimeout is how long the leader waits for the followers'
	// scan maps of a range before it records the silent ones as missing. A
	// follower keeps trying to deliver its map (100 ms apart, finding the
	// leader again each time) for as long; each call may take
	// FollowScanMapTimeout / FollowScanMapRetries. Default 3s and 3 (Curve:
	// 3 x 1000 ms).
	FollowScanMapTimeout time.Duration `yaml:"follow_scan_map_timeout"`
	FollowScanMapRetries int           `yaml:"follow_scan_map_retries"`
	// PollInterval is how often the worker looks whether a waiting job is
	// due (a copyset without running or waiting jobs waits for a job op
	// instead). Default 1s.
	PollInterval time.Duration `yaml:"poll_interval"`
	// MaxRangeFailures is how many times in a row a range may fail (its
	// scan or progress op not committing on a leader that stays leader)
	// before the job is FAILED. Default 10.
	MaxRangeFailures int `yaml:"max_range_failures"`
}

// DefaultScanSettings returns the default scan settings.
func DefaultScanSettings() ScanSettings {
	return ScanSettings{
		RangesPerSecond:      25,
		RangeSize:            4 << 20,
		FollowScanMapTimeout: 3 * time.Second,
		FollowScanMapRetries: 3,
		PollInterval:         time.Second,
		MaxRangeFailures:     10,
	}
}

// Validate checks the settings.
func (s ScanSettings) Validate() error {
	switch {
	case s.RangesPerSecond < 0 || math.IsNaN(s.RangesPerSecond) || math.IsInf(s.RangesPerSecond, 0):
		return fmt.Errorf("scan: ranges_per_second %v must be >= 0", s.RangesPerSecond)
	case s.RangeSize == 0:
		return errors.New("scan: range_size must be > 0")
	case s.FollowScanMapTimeout <= 0:
		return errors.New("scan: follow_scan_map_timeout must be > 0")
	case s.FollowScanMapRetries < 1:
		return errors.New("scan: follow_scan_map_retries must be >= 1")
	case s.PollInterval <= 0:
		return errors.New("scan: poll_interval must be > 0")
	case s.MaxRangeFailures < 1:
		return errors.New("scan: max_range_failures must be >= 1")
	}
	return nil
}

var scanCRCTable = crc32.MakeTable(crc32.Castagnoli)

// encodeScanOp builds the replicated CHUNK_OP_SCAN op of one range.
func encodeScanOp(g copyset.GroupID, chunk uint64, off, size uint32) ([]byte, error) {
	req := &pb.ChunkRequest{
		OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_SCAN.Enum(), LogicPoolId: proto.Uint32(g.Pool()),
		CopysetId: proto.Uint32(g.Copyset()), ChunkId: proto.Uint64(chunk),
		Offset: proto.Uint32(off), Size: proto.Uint32(size),
	}
	b, err := proto.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode scan op: %w", err)
	}
	return encodeOp(integrityOpScan, b), nil
}

// scanResult is the apply result of a scan op.
type scanResult struct {
	crc   uint32
	err   error // this replica could not read the range
	stale bool  // a replayed op: nothing computed or reported
}

// applyScan computes this replica's crc of the op's range and reports it.
// A read failure is a result (an "unreadable" replica), never fatal: the
// op changes nothing.
func (m *Machine) applyScan(index uint64, payload []byte) any {
	req := &pb.ChunkRequest{}
	if err := proto.Unmarshal(payload, req); err != nil || req.GetOpType() != pb.CHUNK_OP_TYPE_CHUNK_OP_SCAN {
		return &copyset.FatalError{Err: fmt.Errorf("scan op at index %d: undecodable (%v)", index, err)}
	}
	if index <= m.Applied() {
		return scanResult{stale: true} // replay: the job moved on long ago
	}
	chunk, off, size := req.GetChunkId(), req.GetOffset(), req.GetSize()
	crc, err := RangeCRC(m.store, chunk, off, size)
	sm := &pb.ScanMap{
		LogicalPoolId: proto.Uint32(m.group.Pool()), CopysetId: proto.Uint32(m.group.Copyset()),
		ChunkId: proto.Uint64(chunk), Index: proto.Uint64(index), Crc: proto.Uint32(crc),
		Offset: proto.Uint64(uint64(off)), Len: proto.Uint64(uint64(size)),
	}
	if err != nil {
		m.log.Warn("integrity scan: range unreadable on this replica", "index", index, "chunk", chunk,
			"offset", off, "len", size, "err", err)
		sm.Crc, sm.Len = proto.Uint32(0), proto.Uint64(0)
	}
	if m.reporter != nil {
		m.reporter.reportScan(m.group, sm)
	}
	return scanResult{crc: crc, err: err}
}

// RangeCRC is the crc a scan computes of one range on one replica: crc32c
// of [off, off+size) of the chunk's data; for the first range (off 0) the
// chunk's meta is folded in. A missing chunk hashes its data as "0" and
// its meta as absent, alike on every replica.
func RangeCRC(store chunkread.Chunks, chunk uint64, off, size uint32) (uint32, error) {
	h, err := store.GetChunkHash(chunk, off, size)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(h, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("chunk %d hash %q: %w", chunk, h, err)
	}
	crc := uint32(v)
	if off != 0 {
		return crc, nil
	}
	info, ok, err := store.ChunkMeta(chunk)
	switch {
	case err != nil:
		return 0, err
	case !ok:
		return crc32.Update(crc, scanCRCTable, []byte("absent")), nil
	}
	meta := make([]byte, 0, 36+len(info.Location))
	meta = binary.BigEndian.AppendUint64(meta, info.Sn)
	meta = binary.BigEndian.AppendUint64(meta, info.CorrectedSn)
	meta = binary.BigEndian.AppendUint64(meta, info.SnapSn)
	meta = binary.BigEndian.AppendUint32(meta, uint32(info.CloneUnwritten))
	meta = binary.BigEndian.AppendUint32(meta, uint32(len(info.Location)))
	meta = append(meta, info.Location...)
	return crc32.Update(crc, scanCRCTable, meta), nil
}

// crcValue is how a crc appears in mismatches.
func crcValue(crc uint32) string { return fmt.Sprintf("0x%08x", crc) }

// stepRetryDelay is how long a copyset's run waits after a step that
// failed (the op did not commit) before it tries again.
const stepRetryDelay = 200 * time.Millisecond

// lead is the scan worker's run on a copyset this server leads, for one
// term (a copyset.LeaderWork): it waits until the machine reflects the log
// before the term, then steps the copyset's next job until there is none
// due, waiting for the machine's jobsChanged or, while a job waits for
// its time, the poll interval; a step
// that failed is tried again after stepRetryDelay.
func (in *Service) lead(ctx context.Context, n *copyset.Node) error {
	m := MachineOf(n)
	if m == nil {
		return nil
	}
	wake := in.subscribe(n.Group())
	defer in.unsubscribe(n.Group(), wake)
	if _, err := n.ReadBarrier(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("integrity scan: %w", err)
	}
	for ctx.Err() == nil {
		// The look every poll interval (coalesced with the other copysets'
		// by package slack) is for a job waiting for its time; with none,
		// only a job op (jobsChanged) gives the run work.
		var tick <-chan struct{}
		woken := wake
		switch {
		case m.nextJob(time.Now().Unix()) != nil:
			if in.stepGated(ctx, n, m) {
				continue
			}
			tick, woken = slack.After(stepRetryDelay), nil
		case m.hasOpenJob():
			tick = slack.After(in.Settings().PollInterval)
		}
		select {
		case <-ctx.Done():
		case <-woken:
		case <-tick:
		}
	}
	return nil
}

// subscribe returns the channel on which jobsChanged wakes the run of
// copyset g (a run per copyset at a time: the LeaderWorker's rule).
func (in *Service) subscribe(g copyset.GroupID) chan struct{} {
	ch := make(chan struct{}, 1)
	in.mu.Lock()
	in.wakes[g] = ch
	in.mu.Unlock()
	return ch
}

func (in *Service) unsubscribe(g copyset.GroupID, ch chan struct{}) {
	in.mu.Lock()
	if in.wakes[g] == ch {
		delete(in.wakes, g)
	}
	in.mu.Unlock()
}

// stepGated steps the copyset's next job holding the server's range gate:
// one step at a time on this server (every range is read on every
// replica), the ranges at most ScanSettings.RangesPerSecond. It reports
// whether the job moved, or there was none any more.
func (in *Service) stepGated(ctx context.Context, n *copyset.Node, m *Machine) bool {
	select {
	case in.gate <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	defer func() { <-in.gate }()
	job := m.nextJob(time.Now().Unix()) // it may have changed while waiting
	if job == nil {
		return true
	}
	if job.State == JobRunning && !in.throttle(ctx) {
		return false
	}
	return in.step(ctx, n, m, job)
}

// throttle waits until the next range may start; false when ctx ended.
// Call it holding the gate.
func (in *Service) throttle(ctx context.Context) bool {
	if rate := in.Settings().RangesPerSecond; rate > 0 {
		if d := time.Until(in.last.Add(time.Duration(float64(time.Second) / rate))); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return false
			case <-t.C:
			}
		}
	}
	in.last = time.Now()
	return ctx.Err() == nil
}

// step advances job by one op (start, or one range and its progress). It
// reports whether the job moved. Call it holding the gate.
func (in *Service) step(ctx context.Context, n *copyset.Node, m *Machine, job *Job) bool {
	g := n.Group()
	store := m.store
	if job.State == JobWaiting {
		op := &jobOp{Type: opStart, ID: job.ID, Now: time.Now().Unix(), Total: len(store.ListChunks())}
		return in.proposeStep(ctx, n, job, op) == nil
	}
	settings := in.Settings()
	ids := store.ListChunks()
	cur := job.Cursor
	i, _ := slices.BinarySearch(ids, cur.Chunk)
	op := &jobOp{Type: opProgress, ID: job.ID, From: &cur, ChunksDone: job.ChunksDone, RangesScanned: job.RangesScanned}
	if i == len(ids) {
		// No chunk at or after the cursor: done.
		op.To, op.Finished, op.Now = &cur, true, time.Now().Unix()
		return in.proposeStep(ctx, n, job, op) == nil
	}
	chunk, off := ids[i], uint32(0)
	if chunk == cur.Chunk {
		off = cur.Offset
	}
	chunkSize := store.ChunkSize()
	end := chunkSize
	if off < chunkSize {
		size := min(settings.RangeSize, chunkSize-off)
		end = off + size
		results, err := in.scanOne(ctx, n, chunk, off, size, settings)
		if err != nil {
			in.stepFailed(ctx, n, job, fmt.Errorf("scan chunk %d range [%d, %d): %w", chunk, off, end, err))
			return false
		}
		op.Results = results
		op.RangesScanned++
	}
	next := ScanCursor{Chunk: chunk, Offset: end}
	if end >= chunkSize {
		op.ChunksDone++
		next = ScanCursor{Chunk: chunk + 1}
		op.Finished = chunk == math.MaxUint64 || ids[len(ids)-1] < next.Chunk
	}
	op.To, op.Now = &next, time.Now().Unix()
	if job.ChunksTotal > 0 {
		op.Progress = int32(min(99, op.ChunksDone*100/job.ChunksTotal))
	}
	if err := in.proposeStep(ctx, n, job, op); err != nil {
		return false
	}
	in.rangesTotal.Inc()
	for _, r := range op.Results {
		in.mismatches.WithLabelValues(r.Reason).Inc()
		in.log.Warn("integrity scan mismatch", "pool", g.Pool(), "copyset", g.Copyset(), "job", job.ID,
			"chunk", r.Chunk, "offset", r.Offset, "len", r.Len, "index", r.Index, "peer", r.Peer,
			"reason", r.Reason, "value", r.Value, "majority", r.Majority)
	}
	return true
}

// proposeStep proposes a job op of the worker; a refusal (the job was
// paused, canceled or moved on meanwhile) is not a failure of the job.
func (in *Service) proposeStep(ctx context.Context, n *copyset.Node, job *Job, op *jobOp) error {
	res, err := proposeJobOp(ctx, n, op)
	if err == nil {
		delete(in.failures, jobKey{n.Group(), job.ID})
		if res.err != nil {
			in.log.Debug("integrity job op refused", "job", job.ID, "op", op.Type, "err", res.err)
		}
		return nil
	}
	in.stepFailed(ctx, n, job, err)
	return err
}

// stepFailed counts a failure of a job on a leader that stays leader and
// fails the job after MaxRangeFailures in a row.
func (in *Service) stepFailed(ctx context.Context, n *copyset.Node, job *Job, err error) {
	var (
		nl *copyset.NotLeaderError
		ou *copyset.OutcomeUnknownError
	)
	if ctx.Err() != nil || errors.As(err, &nl) || errors.As(err, &ou) || !n.IsLeader() {
		return
	}
	k := jobKey{n.Group(), job.ID}
	in.failures[k]++
	in.log.Warn("integrity scan step failed", "pool", k.g.Pool(), "copyset", k.g.Copyset(), "job", job.ID,
		"failures", in.failures[k], "err", err)
	if in.failures[k] < in.Settings().MaxRangeFailures {
		return
	}
	delete(in.failures, k)
	if _, ferr := proposeJobOp(ctx, n, &jobOp{Type: opFail, ID: job.ID, Now: time.Now().Unix(), Error: err.Error()}); ferr != nil {
		in.log.Warn("integrity job: proposing failure", "job", job.ID, "err", ferr)
	}
}

// proposeJobOp replicates a job op and returns its apply result.
func proposeJobOp(ctx context.Context, n *copyset.Node, op *jobOp) (jobResult, error) {
	b, err := encodeJobOp(op)
	if err != nil {
		return jobResult{}, err
	}
	_, r, err := copyset.ProposeAs[jobResult](ctx, n, b)
	if err != nil {
		return jobResult{}, fmt.Errorf("integrity op %s: %w", op.Type, err)
	}
	return r, nil
}

// scanOne proposes the scan op of one range, collects the followers' maps
// and returns the mismatches.
func (in *Service) scanOne(ctx context.Context, n *copyset.Node, chunk uint64, off, size uint32, st ScanSettings) ([]ScanMismatch, error) {
	g := n.Group()
	op, err := encodeScanOp(g, chunk, off, size)
	if err != nil {
		return nil, err
	}
	task := in.openTask(g, chunk, uint64(off))
	defer in.closeTask(g, task)
	index, sr, err := copyset.ProposeAs[scanResult](ctx, n, op)
	if err != nil {
		return nil, fmt.Errorf("scan op: %w", err)
	}
	if sr.stale {
		return nil, fmt.Errorf("scan op at index %d: stale", index)
	}
	// The followers scan when they apply the op; on an otherwise idle
	// copyset they would learn that it committed only at the next idle
	// AppendEntries (raft's commit_timeout, 1-2 s by default).
	if err := n.ShareCommit(ctx); err != nil {
		return nil, err
	}
	peers, err := n.Peers()
	if err != nil {
		return nil, err
	}
	local := in.deps.Local
	var expect []copyset.PeerID
	for _, p := range peers {
		if p != local {
			expect = append(expect, p)
		}
	}
	maps := in.collect(ctx, task, index, expect, st.FollowScanMapTimeout)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	values := map[copyset.PeerID]string{}
	if sr.err != nil {
		values[local] = replicaUnreadable
	} else {
		values[local] = crcValue(sr.crc)
	}
	for p, sm := range maps {
		if sm.GetLen() == 0 {
			values[p] = replicaUnreadable
		} else {
			values[p] = crcValue(sm.GetCrc())
		}
	}
	return compareReplicas(peers, values, chunk, off, size, index), nil
}

// compareReplicas compares the values (crc or unreadable; absent =
// missing) of the members for one range and returns one mismatch per
// member that is not consistent, in peer order.
func compareReplicas(members []copyset.PeerID, values map[copyset.PeerID]string, chunk uint64, off, size uint32, index uint64) []ScanMismatch {
	members = slices.Clone(members)
	slices.Sort(members)
	replicas := make(map[string]string, len(members))
	counts := map[string]int{}
	for _, p := range members {
		v, ok := values[p]
		if !ok {
			v = replicaMissing
		}
		replicas[string(p)] = v
		if v != replicaMissing && v != replicaUnreadable {
			counts[v]++
		}
	}
	majority := ""
	for v, c := range counts {
		if 2*c > len(members) {
			majority = v
		}
	}
	var out []ScanMismatch
	for _, p := range members {
		v, reason := replicas[string(p)], ""
		switch {
		case v == replicaMissing:
			reason = ReasonMissing
		case v == replicaUnreadable:
			reason = ReasonUnreadable
		case majority != "":
			if v != majority {
				reason = ReasonDiffers
			}
		case len(counts) > 1:
			reason = ReasonNoMajority
		}
		if reason != "" {
			out = append(out, ScanMismatch{Chunk: chunk, Offset: off, Len: size, Index: index, Peer: string(p),
				Reason: reason, Value: v, Majority: majority, Replicas: replicas})
		}
	}
	return out
}

func (in *Service) openTask(g copyset.GroupID, chunk, off uint64) *scanTask {
	t := &scanTask{chunk: chunk, offset: off, maps: map[copyset.PeerID]*pb.ScanMap{}, changed: make(chan struct{}, 1)}
	in.mu.Lock()
	in.tasks[g] = t
	in.mu.Unlock()
	return t
}

func (in *Service) closeTask(g copyset.GroupID, t *scanTask) {
	in.mu.Lock()
	if in.tasks[g] == t {
		delete(in.tasks, g)
	}
	in.mu.Unlock()
}

// collect waits until every peer of expect reported its map of index, the
// timeout passed or ctx ended, and returns the maps of index it has.
func (in *Service) collect(ctx context.Context, t *scanTask, index uint64, expect []copyset.PeerID, timeout time.Duration) map[copyset.PeerID]*pb.ScanMap {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		got := map[copyset.PeerID]*pb.ScanMap{}
		in.mu.Lock()
		for _, p := range expect {
			if sm := t.maps[p]; sm != nil && sm.GetIndex() == index {
				got[p] = sm
			}
		}
		in.mu.Unlock()
		if len(got) == len(expect) {
			return got
		}
		select {
		case <-t.changed:
		case <-deadline.C:
			return got
		case <-ctx.Done():
			return got
		}
	}
}

// Follow scan map return codes (CHUNK_OP_STATUS values).
const (
	scanRetOK          = int32(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	scanRetRedirected  = int32(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_REDIRECTED)
	scanRetInvalid     = int32(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST)
	scanRetNoCopyset   = int32(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_COPYSET_NOTEXIST)
	followScanRetryGap = 100 * time.Millisecond
)

// followScanMap is the leader's side of ScanService.FollowScanMap.
func (in *Service) followScanMap(ctx context.Context, req *pb.FollowScanMapRequest) int32 {
	sm := req.GetScanMap()
	if sm == nil {
		return scanRetInvalid
	}
	var peer copyset.PeerID
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(ScanPeerMetadataKey); len(v) > 0 {
			peer, _, _ = copyset.ParsePeer(v[0])
		}
	}
	if peer == "" {
		return scanRetInvalid
	}
	g := copyset.NewGroupID(sm.GetLogicalPoolId(), sm.GetCopysetId())
	n := in.copysets.Get(g)
	switch {
	case n == nil:
		return scanRetNoCopyset
	case !n.IsLeader():
		return scanRetRedirected
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	t := in.tasks[g]
	if t == nil || t.chunk != sm.GetChunkId() || t.offset != sm.GetOffset() {
		return scanRetInvalid
	}
	if old := t.maps[peer]; old == nil || sm.GetIndex() >= old.GetIndex() {
		t.maps[peer] = sm
	}
	select {
	case t.changed <- struct{}{}:
	default:
	}
	return scanRetOK
}

// maxConcurrentSends bounds the scan maps being delivered at once.
const maxConcurrentSends = 16

// sendLoop sends this replica's scan maps to the copysets' leaders, a few
// at a time so that one undeliverable map does not hold up the others.
func (in *Service) sendLoop(ctx context.Context) {
	sem := make(chan struct{}, maxConcurrentSends)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case sm := <-in.reports:
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				in.send(ctx, sm)
			}()
		}
	}
}

// send delivers one map to the copyset's leader (nothing when this server
// leads: the leader has its own result from the apply), retrying until the
// leader's wait for it is over.
func (in *Service) send(ctx context.Context, sm *pb.ScanMap) {
	g := copyset.NewGroupID(sm.GetLogicalPoolId(), sm.GetCopysetId())
	st := in.Settings()
	deadline := time.Now().Add(st.FollowScanMapTimeout)
	per := st.FollowScanMapTimeout / time.Duration(st.FollowScanMapRetries)
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if time.Until(deadline) < followScanRetryGap {
				return
			}
			t := time.NewTimer(followScanRetryGap)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		n := in.copysets.Get(g)
		if n == nil {
			return
		}
		leader := n.Leader()
		if leader == in.deps.Local {
			return
		}
		if leader == "" {
			continue
		}
		conn, err := in.deps.Dial(leader.Addr())
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, min(per, max(time.Until(deadline), followScanRetryGap)))
		cctx = metadata.AppendToOutgoingContext(cctx, ScanPeerMetadataKey, string(in.deps.Local))
		resp, err := pb.NewScanServiceClient(conn).FollowScanMap(cctx, &pb.FollowScanMapRequest{ScanMap: sm})
		cancel()
		if err == nil && resp.GetRetCode() != scanRetRedirected {
			return // accepted, or the leader no longer wants it
		}
		if ctx.Err() != nil {
			return
		}
	}
}
