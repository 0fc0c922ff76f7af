package integrity_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/chunkserver"
	"github.com/chunkraft/chunkraft/chunkserver/chunkservertest"
	"github.com/chunkraft/chunkraft/chunkserver/servertest"
	"github.com/chunkraft/chunkraft/integrity"
	"github.com/chunkraft/chunkraft/internal/testwait"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	"github.com/klauspost/crc32"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// testCluster is a chunkservertest cluster serving the integrity services, with this
// package's helpers.
type testCluster struct{ *chunkservertest.Cluster }

func startTestCluster(t *testing.T, n int, opts ...func(*chunkserver.Config)) *testCluster {
	t.Helper()
	return &testCluster{chunkservertest.Start(t, n, opts...)}
}

// integrityReq builds an IntegrityRequest with every required field set.
func integrityReq(cs, id, sched int32) *pb.IntegrityRequest {
	return &pb.IntegrityRequest{Job: &pb.IntegrityJob{
		Id: proto.Int32(id), Copyset: proto.Int32(cs), State: pb.INTEGRITY_JOB_STATE_INTEGRITY_OP_STATE_WAITING.Enum(),
		Progress: proto.Int32(0), SchedTime: proto.Int32(sched), StartTime: proto.Int32(0),
	}}
}

func (c *testCluster) integrityClient(i int) pb.IntegrityServiceClient {
	return pb.NewIntegrityServiceClient(c.Conns[i])
}

// setScan changes the scan settings of every running server.
func (c *testCluster) setScan(t *testing.T, f func(*integrity.ScanSettings)) {
	t.Helper()
	for i, srv := range c.Servers {
		if !c.Running(i) {
			continue
		}
		st := srv.ScanSettings()
		f(&st)
		if err := srv.SetScanSettings(st); err != nil {
			t.Fatal(err)
		}
	}
}

// integrityCall sends an IntegrityService call to the leader, retrying
// while leadership moves, and returns the response.
func (c *testCluster) integrityCall(t *testing.T, call func(pb.IntegrityServiceClient, context.Context) (*pb.IntegrityResponse, error)) *pb.IntegrityResponse {
	t.Helper()
	var resp *pb.IntegrityResponse
	// At the timeout the last answer is the caller's to judge.
	_ = testwait.For(15*time.Second, func() error {
		l := c.Leader(t)
		var err error
		if resp, err = call(c.integrityClient(l), context.Background()); err != nil {
			t.Fatal(err)
		}
		if resp.GetStatus() != pb.INTEGRITY_OP_STATUS_INTEGRITY_OP_STATUS_SUCCESS && !c.Servers[l].Copysets().Get(c.Group).IsLeader() {
			return fmt.Errorf("server %d answered %v and no longer leads", l, resp.GetStatus())
		}
		return nil
	})
	return resp
}

// schedule schedules a scan of copyset 1/1 now and returns its id.
func (c *testCluster) schedule(t *testing.T, sched int32) int32 {
	t.Helper()
	resp := c.integrityCall(t, func(cl pb.IntegrityServiceClient, ctx context.Context) (*pb.IntegrityResponse, error) {
		return cl.ScheduleJob(ctx, integrityReq(1, 0, sched))
	})
	if resp.GetStatus() != pb.INTEGRITY_OP_STATUS_INTEGRITY_OP_STATUS_SUCCESS || len(resp.GetJob()) != 1 {
		t.Fatalf("schedule: %v", resp)
	}
	return resp.GetJob()[0].GetId()
}

// localJob returns job id as server i has applied it, or nil.
func (c *testCluster) localJob(i int, id int32) *integrity.Job {
	n := c.Servers[i].Copysets().Get(c.Group)
	if n == nil {
		return nil
	}
	if m := integrity.MachineOf(n); m != nil {
		return m.Job(id)
	}
	return nil
}

// waitJob waits until the leader's job id is in state want.
func (c *testCluster) waitJob(t *testing.T, id int32, want integrity.JobState, timeout time.Duration) *integrity.Job {
	t.Helper()
	var last *integrity.Job
	testwait.Until(t, timeout, func() error {
		if last = c.localJob(c.Leader(t), id); last == nil || last.State != want {
			return fmt.Errorf("job %d did not reach %v: %+v", id, want, last)
		}
		return nil
	})
	return last
}

// TestScanHealthyCopyset: five replicas (the leader compares four
// followers' maps), chunks with data in several ranges, a COW snapshot and
// a clone: the job finishes with no mismatch, visible through ListJobs on
// the leader and the /integrity endpoint; a follower refuses.
func TestScanHealthyCopyset(t *testing.T) {
	c := startTestCluster(t, 5)
	c.setScan(t, func(s *integrity.ScanSettings) { s.RangesPerSecond, s.FollowScanMapTimeout = 0, 10*time.Second })
	c.Write(t, 1, 1, 0, servertest.Block(1), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	c.Write(t, 2, 1, 5<<20, servertest.Block(2), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	c.Write(t, 2, 1, 13<<20, servertest.Block(3), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	c.Write(t, 3, 1, 0, servertest.Block(4), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	c.Write(t, 3, 2, 4096, servertest.Block(5), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS) // COW snapshot
	c.Do(t, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS, func(cl pb.ChunkServiceClient) (*pb.ChunkResponse, error) {
		return cl.CreateCloneChunk(context.Background(), servertest.CloneReq(4, "1/1/1:0@cs"))
	})

	id := c.schedule(t, 0)
	job := c.waitJob(t, id, integrity.JobFinished, 30*time.Second)
	if job.Progress != 100 || job.ChunksTotal != 4 || job.ChunksDone != 4 || job.RangesScanned != 16 ||
		job.MismatchCount != 0 || len(job.Results) != 0 || job.StartTime == 0 {
		t.Fatalf("finished job %+v", job)
	}

	l := c.Leader(t)
	resp, err := c.integrityClient(l).ListJobs(context.Background(), integrityReq(1, 0, 0))
	if err != nil || resp.GetStatus() != pb.INTEGRITY_OP_STATUS_INTEGRITY_OP_STATUS_SUCCESS || len(resp.GetJob()) != 1 {
		t.Fatalf("ListJobs: %v %v", resp, err)
	}
	if j := resp.GetJob()[0]; j.GetId() != id || j.GetState() != pb.INTEGRITY_JOB_STATE_INTEGRITY_OP_STATE_FINISHED ||
		j.GetProgress() != 100 || j.GetCopyset() != 1 || j.GetStartTime() == 0 {
		t.Fatalf("listed job %v", j)
	}

	// A follower answers FAILURE_UNKNOWN and names the leader.
	f := (l + 1) % 5
	var trailer metadata.MD
	resp, err = c.integrityClient(f).ListJobs(context.Background(), integrityReq(1, 0, 0), grpc.Trailer(&trailer))
	if err != nil || resp.GetStatus() != pb.INTEGRITY_OP_STATUS_INTEGRITY_OP_STATUS_FAILURE_UNKNOWN || len(resp.GetJob()) != 0 {
		t.Fatalf("ListJobs on a follower: %v %v", resp, err)
	}
	if got := trailer.Get(integrity.LeaderTrailerKey); len(got) != 1 || got[0] != string(c.Servers[l].Local()) {
		t.Fatalf("leader hint %v, want %s", got, c.Servers[l].Local())
	}

	// /integrity on the leader: the job with its counters.
	rec := httptest.NewRecorder()
	c.Servers[l].HTTPHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/integrity?pool=1&copyset=1", nil))
	var rep integrity.Report
	if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("/integrity: %d %s %v", rec.Code, rec.Body, err)
	}
	if len(rep.Copysets) != 1 || !rep.Copysets[0].IsLeader || len(rep.Copysets[0].Jobs) != 1 ||
		rep.Copysets[0].Jobs[0].State != integrity.JobFinished || rep.Copysets[0].Jobs[0].RangesScanned != 16 {
		t.Fatalf("/integrity report %s", rec.Body)
	}
	if !strings.Contains(rec.Body.String(), `"state": "FINISHED"`) {
		t.Fatalf("state not rendered by name: %s", rec.Body)
	}
	rec = httptest.NewRecorder()
	c.Servers[l].HTTPHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/integrity?pool=1&copyset=9", nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("/integrity of a copyset not hosted: %d", rec.Code)
	}
	// Every replica applied the same job state.
	testwait.Until(t, 10*time.Second, func() error {
		for i := range c.Servers {
			if j := c.localJob(i, id); j == nil || !reflect.DeepEqual(j, job) {
				return fmt.Errorf("replicas' job state differs from the leader's: server %d has %+v, the leader %+v", i, j, job)
			}
		}
		return nil
	})
}

// rewrite repairs [off, off+n) of chunk as `chunkctl scan repair` does:
// the bytes of the leader, which must not be one of the bad replicas
// (leadership is moved off them first), are written back through raft at
// the chunk's current sn, 1 MiB per write, retrying while leadership moves.
func (c *testCluster) rewrite(t *testing.T, chunk uint64, off, n uint32, bad map[string]bool) {
	t.Helper()
	ctx := context.Background()
	const piece = 1 << 20
	for p := off; p < off+n; p += piece {
		size := min(uint32(piece), off+n-p)
		testwait.Until(t, 30*time.Second, func() error {
			l := c.Leader(t)
			if bad[string(c.Servers[l].Local())] {
				for i, srv := range c.Servers {
					if c.Running(i) && !bad[string(srv.Local())] {
						_ = c.Servers[l].Copysets().Get(c.Group).TransferLeader(ctx, srv.Local())
						break
					}
				}
				return fmt.Errorf("rewrite of chunk %d at %d did not succeed: bad replica %d leads", chunk, p, l)
			}
			cl := c.Chunk(l)
			info, err := cl.GetChunkInfo(ctx, &pb.GetChunkInfoRequest{LogicPoolId: proto.Uint32(1),
				CopysetId: proto.Uint32(1), ChunkId: proto.Uint64(chunk)})
			if err != nil || info.GetStatus() != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS || len(info.GetChunkSn()) == 0 {
				return fmt.Errorf("rewrite of chunk %d at %d did not succeed: chunk info %v %v", chunk, p, info.GetStatus(), err)
			}
			rd, err := cl.ReadChunk(ctx, servertest.ReadReq(chunk, p, size))
			if err != nil || rd.GetStatus() != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
				return fmt.Errorf("rewrite of chunk %d at %d did not succeed: read %v %v", chunk, p, rd.GetStatus(), err)
			}
			w := servertest.WriteReq(chunk, p, rd.GetData())
			w.Sn = proto.Uint64(info.GetChunkSn()[0])
			if wr, err := cl.WriteChunk(ctx, w); err != nil || wr.GetStatus() != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
				return fmt.Errorf("rewrite of chunk %d at %d did not succeed: write %v %v", chunk, p, wr.GetStatus(), err)
			}
			return nil
		})
	}
}

// corruptSilently rewrites one byte of chunk data on server i and fixes
// the block's crc entry, so the block verifies but holds other data (a
// lost or misdirected write).
func (c *testCluster) corruptSilently(t *testing.T, i int, chunk uint64, dataOff int64) {
	t.Helper()
	const page, bs, chunkSize = 4096, 4096, 16 << 20
	f, err := os.OpenFile(c.ChunkPath(i, chunk), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	blk := dataOff / bs
	buf := make([]byte, bs)
	if _, err := f.ReadAt(buf, page+blk*bs); err != nil {
		t.Fatal(err)
	}
	buf[dataOff%bs] ^= 0xff
	tab := crc32.MakeTable(crc32.Castagnoli)
	entry := crc32.Checksum(buf, tab) ^ crc32.Checksum(make([]byte, bs), tab)
	var e [4]byte
	binary.LittleEndian.PutUint32(e[:], entry)
	if _, err := f.WriteAt(buf, page+blk*bs); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(e[:], page+chunkSize+4*blk); err != nil {
		t.Fatal(err)
	}
}

// flipByte flips one byte of chunk data on server i without fixing its
// crc entry: the block now fails verification there.
func (c *testCluster) flipByte(t *testing.T, i int, chunk uint64, dataOff int64) {
	t.Helper()
	f, err := os.OpenFile(c.ChunkPath(i, chunk), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, 4096+dataOff); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x55
	if _, err := f.WriteAt(b, 4096+dataOff); err != nil {
		t.Fatal(err)
	}
}

// TestScanFindsCorruptReplicaAndRepair: one follower's chunk file gets a
// flipped byte (its block fails its checksum: the replica is "unreadable"
// for that range), another follower's gets a silently different block
// ("differs" from the majority). The scan reports exactly those two
// ranges and replicas; rewriting each range through raft from the
// leader's copy (ReadChunk, then WriteChunk of the same bytes at the
// chunk's sn) repairs them and a second scan is clean.
func TestScanFindsCorruptReplicaAndRepair(t *testing.T) {
	c := startTestCluster(t, 3)
	c.setScan(t, func(s *integrity.ScanSettings) { s.RangesPerSecond, s.FollowScanMapTimeout = 0, 10*time.Second })
	c.Write(t, 1, 1, 0, servertest.Block(1), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	c.Write(t, 1, 1, 4<<20+4096, servertest.Block(2), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	c.Write(t, 2, 1, 8<<20, servertest.Block(3), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	c.Write(t, 3, 1, 0, servertest.Block(4), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	c.WaitSame(t, []uint64{1, 2, 3})

	l := c.Leader(t)
	a, b := (l+1)%3, (l+2)%3
	c.flipByte(t, a, 1, 4<<20+4096+100)  // chunk 1, range [4 MiB, 8 MiB)
	c.corruptSilently(t, b, 2, 8<<20+10) // chunk 2, range [8 MiB, 12 MiB)

	id := c.schedule(t, 0)
	job := c.waitJob(t, id, integrity.JobFinished, 30*time.Second)
	if job.MismatchCount != 2 || len(job.Results) != 2 || job.RangesScanned != 12 {
		t.Fatalf("job %+v", job)
	}
	got := job.Results
	if r := got[0]; r.Chunk != 1 || r.Offset != 4<<20 || r.Len != 4<<20 || r.Peer != string(c.Servers[a].Local()) ||
		r.Reason != integrity.ReasonUnreadable || r.Majority == "" || len(r.Replicas) != 3 {
		t.Fatalf("first mismatch %+v", r)
	}
	if r := got[1]; r.Chunk != 2 || r.Offset != 8<<20 || r.Len != 4<<20 || r.Peer != string(c.Servers[b].Local()) ||
		r.Reason != integrity.ReasonDiffers || r.Value == r.Majority || r.Replicas[string(c.Servers[l].Local())] != r.Majority {
		t.Fatalf("second mismatch %+v", r)
	}

	// Repair: rewrite each bad range through raft from a good replica.
	bad := map[string]bool{}
	for _, r := range got {
		bad[r.Peer] = true
	}
	for _, r := range got {
		c.rewrite(t, r.Chunk, r.Offset, r.Len, bad)
	}
	c.WaitSame(t, []uint64{1, 2, 3})
	id2 := c.schedule(t, 0)
	if id2 != id+1 {
		t.Fatalf("second job id %d, want %d", id2, id+1)
	}
	job = c.waitJob(t, id2, integrity.JobFinished, 30*time.Second)
	if job.MismatchCount != 0 || job.RangesScanned != 12 {
		t.Fatalf("scan after repair %+v", job)
	}

	// ListJobs tells each job's mismatch count, in a trailer.
	var trailer metadata.MD
	resp, err := c.integrityClient(l).ListJobs(context.Background(), integrityReq(1, 0, 0), grpc.Trailer(&trailer))
	if err != nil || len(resp.GetJob()) != 2 {
		t.Fatalf("ListJobs: %v %v", resp, err)
	}
	want := []string{fmt.Sprintf("%d=2", id), fmt.Sprintf("%d=0", id2)}
	if got := trailer.Get(integrity.MismatchesTrailerKey); !slices.Equal(got, want) {
		t.Errorf("ListJobs trailer %s = %q, want %q", integrity.MismatchesTrailerKey, got, want)
	}
}

// TestScanJobSurvivesLeaderChange: leadership moves mid-scan; the new
// leader lists the job and finishes it from the replicated cursor (every
// range counted once). The jobs survive a restart of every server, and a
// follower that catches up by snapshot install gets them.
func TestScanJobSurvivesLeaderChange(t *testing.T) {
	c := startTestCluster(t, 3, func(cfg *chunkserver.Config) {
		cfg.Raft.SnapshotThreshold, cfg.Raft.TrailingLogs = 32, 8
		cfg.Raft.SnapshotInterval = 200 * time.Millisecond
	})
	const chunks = 6
	for i := range chunks {
		c.Write(t, uint64(10+i), 1, uint32(i)<<20, servertest.Block(byte(i+1)), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	}
	c.setScan(t, func(s *integrity.ScanSettings) { s.RangesPerSecond, s.FollowScanMapTimeout = 10, 10*time.Second })
	id := c.schedule(t, 0)
	old := c.Leader(t)
	testwait.Until(t, 20*time.Second, func() error {
		if j := c.localJob(old, id); j == nil || j.RangesScanned < 4 {
			return fmt.Errorf("job did not progress: %+v", j)
		}
		return nil
	})
	to := (old + 1) % 3
	if err := c.Servers[old].Copysets().Get(c.Group).TransferLeader(context.Background(), c.Servers[to].Local()); err != nil {
		t.Fatal(err)
	}
	nl := c.Leader(t)
	if nl == old {
		t.Fatal("leadership did not move")
	}
	resp := c.integrityCall(t, func(cl pb.IntegrityServiceClient, ctx context.Context) (*pb.IntegrityResponse, error) {
		return cl.ListJobs(ctx, integrityReq(1, 0, 0))
	})
	if len(resp.GetJob()) != 1 || resp.GetJob()[0].GetId() != id || resp.GetJob()[0].GetStartTime() == 0 {
		t.Fatalf("new leader lists %v", resp)
	}
	if st := resp.GetJob()[0].GetState(); st != pb.INTEGRITY_JOB_STATE_INTEGRITY_OP_STATE_RUNNING &&
		st != pb.INTEGRITY_JOB_STATE_INTEGRITY_OP_STATE_FINISHED {
		t.Fatalf("job state on the new leader %v", st)
	}
	job := c.waitJob(t, id, integrity.JobFinished, 30*time.Second)
	if job.RangesScanned != 4*chunks || job.ChunksDone != chunks || job.MismatchCount != 0 {
		t.Fatalf("job after leader change %+v", job)
	}

	// Every server restarts: the state is reloaded and replayed alike.
	for i := range c.Servers {
		c.Stop(i)
	}
	for i := range c.Servers {
		c.Start(i, nil)
	}
	if got := c.waitJob(t, id, integrity.JobFinished, 10*time.Second); !reflect.DeepEqual(got, job) {
		t.Fatalf("job after restart %+v, want %+v", got, job)
	}

	// A follower that misses a schedule, and the log after it, gets the
	// job with the snapshot it installs.
	f := (c.Leader(t) + 1) % 3
	c.Stop(f)
	later := int32(time.Now().Add(time.Hour).Unix())
	id2 := c.schedule(t, later)
	for i := range 40 {
		c.Write(t, 1, 1, uint32(i)*4096, servertest.Block(byte(i)), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	}
	leader := c.Servers[c.Leader(t)].Copysets().Get(c.Group)
	if err := leader.Snapshot(context.Background()); err != nil && !strings.Contains(err.Error(), "nothing new") {
		t.Fatal(err)
	}
	c.Start(f, nil)
	c.WaitSame(t, []uint64{1})
	c.WaitInstalled(t, f)
	if j := c.localJob(f, id2); j == nil || j.State != integrity.JobWaiting || j.SchedTime != int64(later) {
		t.Fatalf("job %d on the follower after snapshot install: %+v", id2, j)
	}
	if j := c.localJob(f, id); !reflect.DeepEqual(j, job) {
		t.Fatalf("job %d on the follower after snapshot install: %+v", id, j)
	}
	if _, err := os.Stat(filepath.Join(c.Cfgs[f].DataDir, "copysets", c.Group.String(), "data", integrity.FileName)); err != nil {
		t.Fatal(err)
	}
}

// FollowScanMap return codes (CHUNK_OP_STATUS values, see integrity/scan.go).
const (
	scanRetRedirected = int32(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_REDIRECTED)
	scanRetInvalid    = int32(pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST)
)

// TestIntegrityServiceRPCs: the RPC surface on a cluster: schedule in the
// future, pause/resume/cancel, refused transitions and unknown ids, the
// pool metadata key, and FollowScanMap's return codes.
func TestIntegrityServiceRPCs(t *testing.T) {
	c := startTestCluster(t, 3)
	later := int32(time.Now().Add(time.Hour).Unix())
	id := c.schedule(t, later)
	call := func(name string, jobID int32, md ...string) *pb.IntegrityResponse {
		t.Helper()
		return c.integrityCall(t, func(cl pb.IntegrityServiceClient, ctx context.Context) (*pb.IntegrityResponse, error) {
			if len(md) > 0 {
				ctx = metadata.AppendToOutgoingContext(ctx, md...)
			}
			req := integrityReq(1, jobID, 0)
			switch name {
			case "pause":
				return cl.PauseJob(ctx, req)
			case "resume":
				return cl.ResumeJob(ctx, req)
			case "cancel":
				return cl.CancelJob(ctx, req)
			default:
				return cl.ListJobs(ctx, req)
			}
		})
	}
	const ok, failed = pb.INTEGRITY_OP_STATUS_INTEGRITY_OP_STATUS_SUCCESS, pb.INTEGRITY_OP_STATUS_INTEGRITY_OP_STATUS_FAILURE_UNKNOWN
	steps := []struct {
		call   string
		id     int32
		status pb.INTEGRITY_OP_STATUS
		state  integrity.JobState
	}{
		{"list", 0, ok, integrity.JobWaiting},
		{"pause", id, ok, integrity.JobPaused},
		{"pause", id, ok, integrity.JobPaused},
		{"resume", id, ok, integrity.JobWaiting}, // never started: back to WAITING
		{"cancel", id, ok, integrity.JobCanceled},
		{"resume", id, failed, integrity.JobCanceled},
		{"pause", id, failed, integrity.JobCanceled},
		{"cancel", id, ok, integrity.JobCanceled},
		{"cancel", id + 7, failed, -1},
	}
	for i, s := range steps {
		resp := call(s.call, s.id)
		if resp.GetStatus() != s.status {
			t.Fatalf("step %d %s: status %v, want %v", i, s.call, resp.GetStatus(), s.status)
		}
		if s.state < 0 {
			if len(resp.GetJob()) != 0 {
				t.Fatalf("step %d: jobs %v for an unknown id", i, resp.GetJob())
			}
			continue
		}
		if len(resp.GetJob()) != 1 || resp.GetJob()[0].GetId() != id || integrity.JobState(resp.GetJob()[0].GetState()) != s.state ||
			resp.GetJob()[0].GetSchedTime() != later {
			t.Fatalf("step %d %s: jobs %v, want job %d %v", i, s.call, resp.GetJob(), id, s.state)
		}
	}
	if resp := call("list", 0, integrity.PoolMetadataKey, "2"); resp.GetStatus() != failed {
		t.Fatalf("list of pool 2 (not hosted): %v", resp)
	}
	if resp := call("list", 0, integrity.PoolMetadataKey, "1"); resp.GetStatus() != ok || len(resp.GetJob()) != 1 {
		t.Fatalf("list of pool 1: %v", resp)
	}

	// FollowScanMap: a follower redirects; the leader refuses a map
	// without the sender's id or for a range it is not scanning.
	l := c.Leader(t)
	sm := &pb.FollowScanMapRequest{ScanMap: &pb.ScanMap{LogicalPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1),
		ChunkId: proto.Uint64(1), Index: proto.Uint64(5), Crc: proto.Uint32(1), Offset: proto.Uint64(0), Len: proto.Uint64(4096)}}
	withPeer := metadata.AppendToOutgoingContext(context.Background(), integrity.ScanPeerMetadataKey, string(c.Servers[(l+1)%3].Local()))
	for _, tc := range []struct {
		server int
		ctx    context.Context
		want   int32
	}{
		{(l + 1) % 3, withPeer, scanRetRedirected},
		{l, context.Background(), scanRetInvalid},
		{l, withPeer, scanRetInvalid},
	} {
		resp, err := pb.NewScanServiceClient(c.Conns[tc.server]).FollowScanMap(tc.ctx, sm)
		if err != nil || resp.GetRetCode() != tc.want {
			t.Fatalf("FollowScanMap on server %d: %v %v, want %d", tc.server, resp, err, tc.want)
		}
	}
}
