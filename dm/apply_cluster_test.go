package dm_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/chunkserver"
	"github.com/chunkraft/chunkraft/chunkserver/chunkservertest"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/dm"
	"github.com/chunkraft/chunkraft/internal/chunkread"
	"github.com/chunkraft/chunkraft/internal/testwait"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	cspb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	dmpb "github.com/chunkraft/chunkraft/proto/dm/pb"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
)

// createCopyset creates copyset g on every server of c and waits for its
// leader.
func createCopyset(t *testing.T, c *chunkservertest.Cluster, g copyset.GroupID) {
	t.Helper()
	var peers []copyset.PeerID
	for _, srv := range c.Servers {
		peers = append(peers, srv.Local())
	}
	for _, srv := range c.Servers {
		if _, err := srv.Copysets().Create(context.Background(), g, peers); err != nil {
			t.Fatal(err)
		}
	}
	leaderOf(t, c, g)
}

// leaderOf returns the index of copyset g's leader among the running
// servers.
func leaderOf(t *testing.T, c *chunkservertest.Cluster, g copyset.GroupID) int {
	t.Helper()
	leader := -1
	testwait.Until(t, 10*time.Second, func() error {
		for _, i := range c.Up() {
			if n := c.Servers[i].Copysets().Get(g); n != nil && n.IsLeader() {
				leader = i
				return nil
			}
		}
		return fmt.Errorf("copyset %s has no leader", g)
	})
	return leader
}

// poolState is every chunk of copyset g as its leader has it: info, data
// and snapshot data, one line each.
func poolState(c *chunkservertest.Cluster, g copyset.GroupID) (string, error) {
	var n *copyset.Node
	for _, i := range c.Up() {
		if m := c.Servers[i].Copysets().Get(g); m != nil && m.IsLeader() {
			n = m
		}
	}
	if n == nil {
		return "", fmt.Errorf("copyset %s has no leader", g)
	}
	if _, err := n.ReadBarrier(context.Background()); err != nil {
		return "", err
	}
	return nodeState(n)
}

// nodeState is every chunk of replica n: info, data and snapshot data,
// one line each.
func nodeState(n *copyset.Node) (string, error) {
	st, err := chunkread.Of(n)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	var buf chunkread.ImageBuffers
	for _, id := range st.ListChunks() {
		im, err := st.ChunkImage(id, &buf)
		if errors.Is(err, chunkread.ErrChunkGone) {
			continue
		}
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "chunk %d sn %d corrected %d snap %d data %x", id, im.Sn, im.CorrectedSn, im.SnapSn, sha256.Sum256(im.Data))
		if im.SnapSn != 0 {
			snap := append([]byte(nil), im.Data...)
			for i, copied := range im.SnapCopied {
				if copied {
					bs := int(im.BlockSize)
					copy(snap[i*bs:(i+1)*bs], im.SnapData[i*bs:(i+1)*bs])
				}
			}
			fmt.Fprintf(&b, " snapdata %x", sha256.Sum256(snap))
		}
		b.WriteString("\n")
	}
	return b.String(), nil
}

// waitSame waits until copysets a and b hold the same chunks.
func waitSame(t *testing.T, c *chunkservertest.Cluster, a, b copyset.GroupID) string {
	t.Helper()
	var last string
	testwait.Until(t, 90*time.Second, func() error {
		sa, err := poolState(c, a)
		if err != nil {
			return err
		}
		sb, err := poolState(c, b)
		if err != nil {
			return err
		}
		if sa != sb {
			return fmt.Errorf("copyset %s:\n%s\ncopyset %s:\n%s", a, sa, b, sb)
		}
		last = sa
		return nil
	})
	return last
}

// write sends a write of 4 KiB blocks of b at block off of chunk in
// copyset g, with sn, through its leader.
func write(t *testing.T, c *chunkservertest.Cluster, g copyset.GroupID, chunk, sn uint64, off uint32, b byte) {
	t.Helper()
	data := make([]byte, 4096)
	for i := range data {
		data[i] = b
	}
	req := &cspb.ChunkRequest{OpType: cspb.CHUNK_OP_TYPE_CHUNK_OP_WRITE.Enum(), LogicPoolId: proto.Uint32(g.Pool()),
		CopysetId: proto.Uint32(g.Copyset()), ChunkId: proto.Uint64(chunk), Offset: proto.Uint32(off * 4096),
		Size: proto.Uint32(4096), Sn: proto.Uint64(sn), Data: data}
	testwait.Until(t, 10*time.Second, func() error {
		l := leaderOf(t, c, g)
		resp, err := cspb.NewChunkServiceClient(c.Conns[l]).WriteChunk(context.Background(), req)
		switch {
		case err != nil:
			return err
		case resp.GetStatus() != cspb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS:
			return fmt.Errorf("write: %v", resp.GetStatus())
		}
		return nil
	})
}

// share returns task name's share on copyset g as its leader has it.
func share(t *testing.T, c *chunkservertest.Cluster, g copyset.GroupID, name string) *pb.SubTask {
	t.Helper()
	m, ok := dm.MachineOf(c.Servers[leaderOf(t, c, g)].Copysets().Get(g))
	if !ok {
		t.Fatal("no dm machine")
	}
	return m.Get(name)
}

// A dm task whose source is a continuous export of pool 1 copyset 1
// migrates it into pool 2 copyset 1 of the same cluster: the snapshot
// phase's images (Load), then the binlog (Sync) while writes go on, COW
// snapshots included, across a restart of the target's leader; the
// target ends equal to the source, and the share's counters agree with
// what was applied.
func TestApplyExportIntoPool(t *testing.T) {
	c := chunkservertest.Start(t, 3)
	src, dst := c.Group, copyset.NewGroupID(2, 1)
	createCopyset(t, c, dst)
	// Before the export: chunks with data, one with a COW snapshot.
	for chunk := uint64(1); chunk <= 4; chunk++ {
		for off := uint32(0); off < 3; off++ {
			write(t, c, src, chunk, 1, off*7, byte(chunk*10+uint64(off)))
		}
	}
	write(t, c, src, 2, 2, 0, 0xee) // sn 2 takes a COW snapshot of chunk 2

	exportDir := filepath.Join(t.TempDir(), "export")
	tool := dspb.NewSyncToolClient(c.Conns[0])
	cr, err := tool.CreateSyncTask(context.Background(), &dspb.CreateSyncTaskRequest{Db: proto.String("1"), Name: proto.String("relay"),
		Mode: dspb.SyncMode_kFullAndContinuous.Enum(), Dest: proto.String("file://" + exportDir)})
	if err != nil || cr.GetCode() != 0 {
		t.Fatalf("create the export: %v %v", cr, err)
	}

	cfg, err := dm.TaskFile{Name: "mig", TaskMode: "all", TargetPool: 2,
		Source: dm.SourceFile{Pool: 1, Export: "file://" + exportDir}}.Config()
	if err != nil {
		t.Fatal(err)
	}
	start := &pb.Op{Op: &pb.Op_Start{Start: &pb.Start{Config: cfg, Copyset: 1, SourceCopyset: 1,
		Stage: dmpb.Stage_Running, Unit: dmpb.UnitType_Load, NowMs: time.Now().UnixMilli()}}}
	l := leaderOf(t, c, dst)
	resp, err := pb.NewDMInternalClient(c.Conns[l]).Propose(context.Background(), &pb.ProposeRequest{Pool: 2, Copyset: 1, Op: start})
	if err != nil || resp.GetCode() != 0 {
		t.Fatalf("start: %v %v", resp, err)
	}

	// More writes while the task runs, then the target catches up.
	for chunk := uint64(3); chunk <= 6; chunk++ {
		write(t, c, src, chunk, 2, 1, byte(chunk))
	}
	waitSame(t, c, src, dst)
	sh := share(t, c, dst, "mig")
	if sh.GetUnit() != dmpb.UnitType_Sync || sh.GetStage() != dmpb.Stage_Running || sh.GetCounters().GetChunks() == 0 {
		t.Fatalf("share after catching up: %v", sh)
	}

	// The target's leader restarts; writes go on; the target catches up
	// again, nothing lost or applied twice.
	c.Restart(leaderOf(t, c, dst))
	for i := range 8 {
		write(t, c, src, 7, 3, uint32(i), byte(0x70+i))
	}
	write(t, c, src, 1, 3, 2, 0x99)
	state := waitSame(t, c, src, dst)
	if !strings.Contains(state, "chunk 7 ") {
		t.Fatalf("the target lacks the chunk written after the restart:\n%s", state)
	}
	sh = share(t, c, dst, "mig")
	if sh.GetStage() != dmpb.Stage_Running || len(sh.GetResult().GetErrors()) > 0 {
		t.Fatalf("share at the end: %v", sh)
	}
	t.Logf("share counters %v, checkpoint %s", sh.GetCounters(), dm.CheckpointString(sh.GetCheckpoint()))
}

// packetFiles returns the packet files of pool 1 copyset 1 in the file
// export at dir, in name order.
func packetFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "pool-1", "copyset-1"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".pkt") {
			out = append(out, e.Name())
		}
	}
	slices.Sort(out)
	return out
}

// copyDir copies the files of directory from into to (made), recursively.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// propose proposes op on copyset g through its leader's DMInternal.
func propose(t *testing.T, c *chunkservertest.Cluster, g copyset.GroupID, op *pb.Op) *pb.ProposeResponse {
	t.Helper()
	var resp *pb.ProposeResponse
	testwait.Until(t, 10*time.Second, func() (err error) {
		resp, err = pb.NewDMInternalClient(c.Conns[leaderOf(t, c, g)]).Propose(context.Background(),
			&pb.ProposeRequest{Pool: g.Pool(), Copyset: g.Copyset(), Op: op})
		if err == nil && resp.GetNotLeader() {
			err = errors.New(resp.GetMsg())
		}
		return err
	})
	return resp
}

// waitPaused waits until task name's share on g is paused by an error and
// returns it.
func waitPaused(t *testing.T, c *chunkservertest.Cluster, g copyset.GroupID, name string) *pb.SubTask {
	t.Helper()
	var sh *pb.SubTask
	testwait.Until(t, 60*time.Second, func() error {
		sh = share(t, c, g, name)
		if sh.GetStage() != dmpb.Stage_Paused || len(sh.GetResult().GetErrors()) == 0 {
			return fmt.Errorf("share is %v", sh.GetStage())
		}
		return nil
	})
	return sh
}

// An export with a bad packet, then one with a missing packet: the share
// pauses, not resumable, naming the packet, and applies nothing past it;
// once the export is repaired, resume-task gives an exact copy.
func TestApplyStopsAtABrokenExport(t *testing.T) {
	c := chunkservertest.Start(t, 3)
	src := c.Group
	exportDir := filepath.Join(t.TempDir(), "export")
	tool := dspb.NewSyncToolClient(c.Conns[0])
	write(t, c, src, 1, 1, 0, 1)
	cr, err := tool.CreateSyncTask(context.Background(), &dspb.CreateSyncTaskRequest{Db: proto.String("1"), Name: proto.String("relay"),
		Mode: dspb.SyncMode_kFullAndContinuous.Enum(), Dest: proto.String("file://" + exportDir)})
	if err != nil || cr.GetCode() != 0 {
		t.Fatalf("create the export: %v %v", cr, err)
	}
	// Rounds of writes, each waited for until a packet more holds it,
	// until the export has four packets.
	for round := byte(2); len(packetFiles(t, exportDir)) < 4; round++ {
		have := len(packetFiles(t, exportDir))
		write(t, c, src, uint64(round%5+1), 1, uint32(round), round)
		testwait.Until(t, 30*time.Second, func() error {
			if len(packetFiles(t, exportDir)) == have {
				return errors.New("no new packet yet")
			}
			return nil
		})
	}
	// Once the export covers the last write (TaskStatus's coveredIndex),
	// a copy of it holds every write: freeze one.
	lastIndex := c.Servers[leaderOf(t, c, src)].Copysets().Get(src).AppliedIndex()
	testwait.Until(t, 30*time.Second, func() error {
		st, err := tool.TaskStatus(context.Background(), &dspb.TaskStatusRequest{})
		if err != nil || len(st.GetReadableInfo()) != 1 {
			return fmt.Errorf("task status: %v %v", st, err)
		}
		var covered uint64
		for _, kv := range strings.Split(st.GetReadableInfo()[0], ";") {
			if v, ok := strings.CutPrefix(kv, "coveredIndex="); ok {
				covered, _ = strconv.ParseUint(v, 10, 64)
			}
		}
		if covered < lastIndex {
			return fmt.Errorf("the export covers index %d, not yet %d", covered, lastIndex)
		}
		return nil
	})
	frozen := filepath.Join(t.TempDir(), "frozen")
	copyDir(t, exportDir, frozen)
	names := packetFiles(t, frozen)
	want, err := poolState(c, src)
	if err != nil {
		t.Fatal(err)
	}

	for i, tc := range []struct {
		name, code string
		harm       func(path string) []byte
	}{
		{"bad", "46002", func(path string) []byte {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			bad := append([]byte(nil), b...)
			bad[len(bad)-1] ^= 0xff
			if err := os.WriteFile(path, bad, 0o644); err != nil {
				t.Fatal(err)
			}
			return b
		}},
		{"gap", "46001", func(path string) []byte {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			return b
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := copyset.NewGroupID(2, uint32(i+1)) // a copyset of its own
			createCopyset(t, c, dst)
			victim := filepath.Join(frozen, "pool-1", "copyset-1", names[len(names)/2])
			orig := tc.harm(victim)
			cfg, err := dm.TaskFile{Name: "mig-" + tc.name, TaskMode: "all", TargetPool: 2,
				Source: dm.SourceFile{Pool: 1, Export: "file://" + frozen}}.Config()
			if err != nil {
				t.Fatal(err)
			}
			r := propose(t, c, dst, &pb.Op{Op: &pb.Op_Start{Start: &pb.Start{Config: cfg, Copyset: dst.Copyset(), SourceCopyset: 1,
				Stage: dmpb.Stage_Running, Unit: dmpb.UnitType_Load, NowMs: time.Now().UnixMilli()}}})
			if r.GetCode() != 0 {
				t.Fatalf("start: %v", r)
			}
			sh := waitPaused(t, c, dst, cfg.GetName())
			pe := sh.GetResult().GetErrors()[0]
			if sh.GetResumable() || fmt.Sprint(pe.GetErrCode()) != tc.code || !strings.Contains(pe.GetMessage(), names[len(names)/2]) || pe.GetWorkaround() == "" {
				t.Fatalf("paused share: %v", sh)
			}
			// Nothing past the broken packet was applied: the checkpoint
			// stands at it.
			if want := strings.TrimSuffix(names[len(names)/2], ".pkt"); !strings.Contains(exportfmtName(sh), want) {
				t.Fatalf("checkpoint %s, want the start of %s", dm.CheckpointString(sh.GetCheckpoint()), want)
			}
			// Repaired, resumed: the copy is exact.
			if err := os.WriteFile(victim, orig, 0o644); err != nil {
				t.Fatal(err)
			}
			r = propose(t, c, dst, &pb.Op{Op: &pb.Op_SetStage{SetStage: &pb.SetStage{Name: cfg.GetName(), Stage: dmpb.Stage_Running, ByUser: true}}})
			if r.GetCode() != 0 || r.GetSubtask().GetStage() != dmpb.Stage_Running || len(r.GetSubtask().GetResult().GetErrors()) != 0 {
				t.Fatalf("resume: %v", r)
			}
			testwait.Until(t, 60*time.Second, func() error {
				got, err := poolState(c, dst)
				if err != nil {
					return err
				}
				if got != want {
					return fmt.Errorf("target:\n%s\nwant:\n%s", got, want)
				}
				return nil
			})
		})
	}
}

// exportfmtName is the name of the packet share sh's checkpoint names.
func exportfmtName(sh *pb.SubTask) string {
	p, err := exportfmt.ParsePoint(sh.GetCheckpoint().GetPoint())
	if err != nil {
		return err.Error()
	}
	return exportfmt.PacketName(1, 1, p)
}

// A follower of the target copyset that was down while the share applied
// groups catches up by a snapshot install: its chunks and its share are
// the leader's (the Advance and the chunk ops of each group came
// together).
func TestApplyAcrossSnapshotInstall(t *testing.T) {
	c := chunkservertest.Start(t, 3, func(cfg *chunkserver.Config) {
		cfg.Raft.TrailingLogs, cfg.Raft.SnapshotThreshold = 4, 8
		cfg.Sync.SendInterval = 200 * time.Millisecond
	})
	src, dst := c.Group, copyset.NewGroupID(2, 1)
	createCopyset(t, c, dst)
	write(t, c, src, 1, 1, 0, 1)
	exportDir := startMigration(t, c, src, dst)
	f := (leaderOf(t, c, dst) + 1) % 3
	c.Stop(f)
	// Rounds of writes, each applied on the target before the next: a
	// group each, more than the trailing logs.
	for round := range 10 {
		for i := range 3 {
			write(t, c, src, uint64(2+i), 1, uint32(round), byte(round*3+i+1))
		}
		waitSame(t, c, src, dst)
	}
	l := leaderOf(t, c, dst)
	if err := c.Servers[l].Copysets().Get(dst).Snapshot(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.Start(f, nil)
	testwait.Until(t, 30*time.Second, func() error {
		n := c.Servers[f].Copysets().Get(dst)
		if n.Status().SnapshotsInstalled == 0 {
			return errors.New("the follower caught up without a snapshot install")
		}
		ln := c.Servers[leaderOf(t, c, dst)].Copysets().Get(dst)
		if n.AppliedIndex() < ln.AppliedIndex() {
			return fmt.Errorf("follower at %d, leader at %d", n.AppliedIndex(), ln.AppliedIndex())
		}
		got, err := nodeState(n)
		if err != nil {
			return err
		}
		want, err := nodeState(ln)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("follower's chunks:\n%s\nleader's:\n%s", got, want)
		}
		fm, _ := dm.MachineOf(n)
		lm, _ := dm.MachineOf(ln)
		if a, b := fm.Get("mig"), lm.Get("mig"); !proto.Equal(a, b) {
			return fmt.Errorf("follower's share %v, leader's %v", a, b)
		}
		return nil
	})

	// The replica that took the snapshot leads on: the share goes on from
	// the installed checkpoint, losing and repeating nothing.
	testwait.Until(t, 60*time.Second, func() error {
		l := leaderOf(t, c, dst)
		if l == f {
			return nil
		}
		if err := c.Servers[l].Copysets().Get(dst).TransferLeader(context.Background(), c.Servers[f].Local()); err != nil {
			return fmt.Errorf("transfer the leadership to the installed replica: %w", err)
		}
		return fmt.Errorf("copyset %s led by server %d, want %d", dst, l, f)
	})
	for round := range 5 {
		for i := range 3 {
			write(t, c, src, uint64(2+i), 1, uint32(10+round), byte(100+round*3+i))
		}
	}
	waitSame(t, c, src, dst)
	testwait.Until(t, 30*time.Second, func() error {
		sh := share(t, c, dst, "mig")
		want, err := exportRecords(exportDir, sh)
		if err != nil {
			return err
		}
		if got := sh.GetCounters().GetRecords(); got != want {
			return fmt.Errorf("the share counts %d records applied, the export holds %d before its checkpoint %s", got, want, dm.CheckpointString(sh.GetCheckpoint()))
		}
		return nil
	})
}

// startMigration makes pool 1 (copyset src) export itself continuously
// to a new directory and starts task mig, task-mode all, applying that
// export to copyset dst of pool 2; it returns once dst holds src's chunks,
// with the export's directory.
func startMigration(t *testing.T, c *chunkservertest.Cluster, src, dst copyset.GroupID) string {
	t.Helper()
	exportDir := filepath.Join(t.TempDir(), "export")
	cr, err := dspb.NewSyncToolClient(c.Conns[0]).CreateSyncTask(context.Background(), &dspb.CreateSyncTaskRequest{Db: proto.String("1"),
		Name: proto.String("relay"), Mode: dspb.SyncMode_kFullAndContinuous.Enum(), Dest: proto.String("file://" + exportDir)})
	if err != nil || cr.GetCode() != 0 {
		t.Fatalf("create the export: %v %v", cr, err)
	}
	cfg, err := dm.TaskFile{Name: "mig", TaskMode: "all", TargetPool: 2, Source: dm.SourceFile{Pool: 1, Export: "file://" + exportDir}}.Config()
	if err != nil {
		t.Fatal(err)
	}
	if r := propose(t, c, dst, &pb.Op{Op: &pb.Op_Start{Start: &pb.Start{Config: cfg, Copyset: 1, SourceCopyset: 1,
		Stage: dmpb.Stage_Running, Unit: dmpb.UnitType_Load}}}); r.GetCode() != 0 {
		t.Fatalf("start: %v", r)
	}
	waitSame(t, c, src, dst)
	return exportDir
}

// exportRecords counts the records of the export in dir (pool 1 copyset
// 1) before share sh's checkpoint, which must be at a packet's start.
func exportRecords(dir string, sh *pb.SubTask) (uint64, error) {
	cp := sh.GetCheckpoint()
	if cp.GetRecord() != 0 || cp.GetStep() != 0 {
		return 0, fmt.Errorf("checkpoint %s inside a packet", dm.CheckpointString(cp))
	}
	end, err := exportfmt.ParsePoint(cp.GetPoint())
	if err != nil {
		return 0, err
	}
	var n uint64
	for at := exportfmt.StartPoint(); at.Compare(end) != 0; {
		b, err := os.ReadFile(filepath.Join(dir, exportfmt.PacketName(1, 1, at)))
		if err != nil {
			return 0, err
		}
		pkt, err := exportfmt.Decode(b)
		if err != nil {
			return 0, err
		}
		n += uint64(len(pkt.Records))
		at = pkt.Next
	}
	return n, nil
}
