package dm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
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

// How a group's answer goes missing after the group applied.
type lossMode int

const (
	// answerLost: the proposal answers an error (as when the leader steps
	// down, or the wait times out, after the entry committed); the applier
	// restarts on the same leader after a barrier.
	answerLost lossMode = iota + 1
	// leaderCrash: the leader's server stops before its applier takes the
	// answer in; another run, on whichever server leads next, goes on.
	leaderCrash
)

func (m lossMode) String() string {
	if m == answerLost {
		return "answer lost"
	}
	return "leader crashed"
}

// loss is one armed loss: of the next group with chunk ops of a unit.
type loss struct {
	unit dmpb.UnitType // Load: a snapshot-phase packet's group; Sync: a binlog packet's
	mode lossMode
}

// groupLosses takes away the answers of groups the applier of copyset g
// got applied, as armed, one at a time in order: the hook of dm's applier.
type groupLosses struct {
	g       copyset.GroupID
	crashes chan *copyset.Node // a leaderCrash: the node whose server the test goroutine restarts

	mu    sync.Mutex
	armed []loss
	fired []string
}

// arm arms losses, after those armed already.
func (l *groupLosses) arm(ls ...loss) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed = append(l.armed, ls...)
}

// pending returns how many armed losses have not fired yet, and those
// that fired.
func (l *groupLosses) pending() (int, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.armed), append([]string(nil), l.fired...)
}

func (l *groupLosses) hook(ctx context.Context, n *copyset.Node, reqs []*cspb.ChunkRequest, adv *pb.Advance) error {
	if n.Group() != l.g || len(reqs) == 0 {
		return nil
	}
	unit := dmpb.UnitType_Load
	if p, err := exportfmt.ParsePoint(adv.GetFrom().GetPoint()); err == nil && adv.GetFrom().GetPoint() != nil && p.Phase == exportfmt.PhaseBinlog {
		unit = dmpb.UnitType_Sync
	}
	l.mu.Lock()
	if len(l.armed) == 0 || l.armed[0].unit != unit {
		l.mu.Unlock()
		return nil
	}
	ls := l.armed[0]
	l.armed = l.armed[1:]
	l.fired = append(l.fired, fmt.Sprintf("%v: %v after the group of %d chunk ops to %s applied", unit, ls.mode, len(reqs), dm.CheckpointString(adv.GetTo())))
	l.mu.Unlock()
	if ls.mode == answerLost {
		return errors.New("test: the answer of an applied group was lost")
	}
	// The server stops under the applier, which never learns the answer.
	select {
	case l.crashes <- n:
	case <-ctx.Done():
	}
	<-ctx.Done()
	return ctx.Err()
}

// restartCrashed waits for the crash a leaderCrash loss asks for and
// restarts that server.
func (l *groupLosses) restartCrashed(t *testing.T, c *chunkservertest.Cluster) {
	t.Helper()
	var n *copyset.Node
	select {
	case n = <-l.crashes:
	case <-time.After(time.Minute):
		_, fired := l.pending()
		t.Fatalf("no group of copyset %d/%d applied within a minute of a crash armed (fired so far: %q)", l.g.Pool(), l.g.Copyset(), fired)
	}
	for _, i := range c.Up() {
		if c.Servers[i].Copysets().Get(l.g) == n {
			t.Logf("restarting server %d, the leader of copyset %d/%d", i, l.g.Pool(), l.g.Copyset())
			c.Restart(i)
			return
		}
	}
	t.Fatalf("the crashed node of copyset %d/%d is on no running server", l.g.Pool(), l.g.Copyset())
}

// waitFired waits until every armed loss fired.
func (l *groupLosses) waitFired(t *testing.T) {
	t.Helper()
	testwait.Until(t, time.Minute, func() error {
		if n, fired := l.pending(); n > 0 {
			return fmt.Errorf("%d armed losses not fired yet (fired: %q)", n, fired)
		}
		return nil
	})
}

// writeAt writes data at byte offset off of chunk in copyset g with sn
// through its leader, until the leader answers want.
func writeAt(t *testing.T, c *chunkservertest.Cluster, g copyset.GroupID, chunk, sn uint64, off uint32, data []byte, want cspb.CHUNK_OP_STATUS) {
	t.Helper()
	req := &cspb.ChunkRequest{OpType: cspb.CHUNK_OP_TYPE_CHUNK_OP_WRITE.Enum(), LogicPoolId: proto.Uint32(g.Pool()),
		CopysetId: proto.Uint32(g.Copyset()), ChunkId: proto.Uint64(chunk), Offset: proto.Uint32(off),
		Size: proto.Uint32(uint32(len(data))), Sn: proto.Uint64(sn), Data: data}
	testwait.Until(t, 10*time.Second, func() error {
		resp, err := cspb.NewChunkServiceClient(c.Conns[leaderOf(t, c, g)]).WriteChunk(context.Background(), req)
		switch {
		case err != nil:
			return err
		case resp.GetStatus() != want:
			return fmt.Errorf("write of chunk %d: %v, want %v", chunk, resp.GetStatus(), want)
		}
		return nil
	})
}

// chunkImage is chunk id of copyset g as its leader has it.
func chunkImage(t *testing.T, c *chunkservertest.Cluster, g copyset.GroupID, id uint64) chunkread.Image {
	t.Helper()
	n := c.Servers[leaderOf(t, c, g)].Copysets().Get(g)
	if _, err := n.ReadBarrier(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, err := chunkread.Of(n)
	if err != nil {
		t.Fatal(err)
	}
	im, err := st.ChunkImage(id, &chunkread.ImageBuffers{})
	if err != nil {
		t.Fatalf("chunk %d of %s: %v", id, g, err)
	}
	return im
}

// exportCount is what the packets of pool 1 copyset 1 in the file export
// at dir before point hold: packets and records (a snapshot-phase packet's
// image records, a binlog packet's binlog records).
func exportCount(t *testing.T, dir string, before exportfmt.Point) (packets, records uint64) {
	t.Helper()
	for _, name := range packetFiles(t, dir) {
		b, err := os.ReadFile(filepath.Join(dir, "pool-1", "copyset-1", name))
		if err != nil {
			t.Fatal(err)
		}
		p, err := exportfmt.Decode(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p.Start.Compare(before) < 0 {
			packets++
			records += uint64(len(p.Records))
		}
	}
	return packets, records
}

// checkpointPoint is the packet share sh's checkpoint stands at, which it
// must stand at the start of.
func checkpointPoint(t *testing.T, sh *pb.SubTask) exportfmt.Point {
	t.Helper()
	cp := sh.GetCheckpoint()
	if cp.GetRecord() != 0 || cp.GetStep() != 0 {
		t.Fatalf("checkpoint %s is inside a packet", dm.CheckpointString(cp))
	}
	p, err := exportfmt.ParsePoint(cp.GetPoint())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// block is a 4 KiB block of b.
func block(b byte) []byte { return bytes.Repeat([]byte{b}, 4096) }

// lossRig is a continuous export of pool 1 copyset 1 (src) and two dm
// shares of it: task "mig" into pool 2 copyset 1 (dst), whose applier
// loses the answers of the groups losses arms, and task "ctl" into pool 2
// copyset 2 (ctl), whose applier loses none (a restart of dst's leader
// may stop its server too, but never between a group and its answer).
type lossRig struct {
	c             *chunkservertest.Cluster
	src, dst, ctl copyset.GroupID
	losses        *groupLosses
	exportDir     string
}

// startLossRig starts the cluster, writes the source with seed, starts the
// export and arms what load arms before the shares start.
func startLossRig(t *testing.T, seed func(c *chunkservertest.Cluster, src copyset.GroupID), load ...loss) *lossRig {
	t.Helper()
	r := &lossRig{src: copyset.NewGroupID(1, 1), dst: copyset.NewGroupID(2, 1), ctl: copyset.NewGroupID(2, 2)}
	r.losses = &groupLosses{g: r.dst, crashes: make(chan *copyset.Node, 1)}
	dm.SetAfterGroupHook(r.losses.hook)
	t.Cleanup(func() { dm.SetAfterGroupHook(nil) }) // runs after the cluster's own cleanup stopped every server
	r.c = chunkservertest.Start(t, 3, func(cfg *chunkserver.Config) {
		cfg.Sync.SendInterval = 200 * time.Millisecond
	})
	createCopyset(t, r.c, r.dst)
	createCopyset(t, r.c, r.ctl)
	seed(r.c, r.src)
	r.exportDir = filepath.Join(t.TempDir(), "export")
	cr, err := dspb.NewSyncToolClient(r.c.Conns[0]).CreateSyncTask(context.Background(), &dspb.CreateSyncTaskRequest{Db: proto.String("1"),
		Name: proto.String("relay"), Mode: dspb.SyncMode_kFullAndContinuous.Enum(), Dest: proto.String("file://" + r.exportDir)})
	if err != nil || cr.GetCode() != 0 {
		t.Fatalf("create the export: %v %v", cr, err)
	}
	r.losses.arm(load...)
	for name, g := range map[string]copyset.GroupID{"mig": r.dst, "ctl": r.ctl} {
		cfg, err := dm.TaskFile{Name: name, TaskMode: "all", TargetPool: 2, Source: dm.SourceFile{Pool: 1, Export: "file://" + r.exportDir}}.Config()
		if err != nil {
			t.Fatal(err)
		}
		if resp := propose(t, r.c, g, &pb.Op{Op: &pb.Op_Start{Start: &pb.Start{Config: cfg, Copyset: g.Copyset(), SourceCopyset: 1,
			Stage: dmpb.Stage_Running, Unit: dmpb.UnitType_Load, NowMs: time.Now().UnixMilli()}}}); resp.GetCode() != 0 {
			t.Fatalf("start %s: %v", name, resp)
		}
	}
	return r
}

// caughtUp waits until both targets hold the source's chunks.
func (r *lossRig) caughtUp(t *testing.T) {
	t.Helper()
	waitSame(t, r.c, r.src, r.dst)
	waitSame(t, r.c, r.src, r.ctl)
}

// shares waits until both shares stand at the same checkpoint (the export
// may still send packets of entries without chunk ops), checks that both
// run in Sync with no error and that each counted every packet and record
// of the export before it once, and returns them.
func (r *lossRig) shares(t *testing.T) (mig, ctl *pb.SubTask) {
	t.Helper()
	testwait.Until(t, time.Minute, func() error {
		mig, ctl = share(t, r.c, r.dst, "mig"), share(t, r.c, r.ctl, "ctl")
		if a, b := mig.GetCheckpoint(), ctl.GetCheckpoint(); !proto.Equal(a, b) {
			return fmt.Errorf("mig at %s, ctl at %s", dm.CheckpointString(a), dm.CheckpointString(b))
		}
		return nil
	})
	packets, records := exportCount(t, r.exportDir, checkpointPoint(t, mig))
	t.Logf("at %s: the export's %d packets hold %d records; mig counted %v; ctl %v",
		dm.CheckpointString(mig.GetCheckpoint()), packets, records, mig.GetCounters(), ctl.GetCounters())
	for _, sh := range []*pb.SubTask{mig, ctl} {
		name := sh.GetConfig().GetName()
		if sh.GetStage() != dmpb.Stage_Running || sh.GetUnit() != dmpb.UnitType_Sync || len(sh.GetResult().GetErrors()) > 0 {
			t.Fatalf("share %s: %v", name, sh)
		}
		if got := sh.GetCounters(); got.GetPackets() != packets || got.GetRecords() != records {
			t.Errorf("share %s counted %d packets and %d records; the export holds %d and %d before its checkpoint",
				name, got.GetPackets(), got.GetRecords(), packets, records)
		}
	}
	return mig, ctl
}

// The applier of a target copyset loses the answer of a group that
// applied (its chunk ops and its Advance committed in one entry, the
// applier never learns it): twice in Load (the leader crashes; the answer
// is lost on a leader that stays, inside a chunk's rebuild) and four
// times in Sync (twice each), while one chunk is written over and over
// with distinct data, and from some point a new sn. A run that cannot know
// whether its group applied starts again from the replicated checkpoint
// after a barrier, so nothing is lost or applied twice: the target ends
// equal to the source (chunk info, data, COW snapshot), the chunk shows
// its last version, the share counted every packet and record of the
// export once, and it counted the chunks, ops and bytes a share of the
// same export that lost no answer counted.
func TestApplyCrashAfterGroupCommitAppliesOnce(t *testing.T) {
	// Before the export: small chunks, one with a COW snapshot, one of 2
	// MiB (its rebuild is two writes of 1 MiB, a group each), and the
	// chunk written over and over, at its first version.
	const versioned = uint64(9)
	version, sn := byte(0x40), uint64(1)
	r := startLossRig(t, func(c *chunkservertest.Cluster, src copyset.GroupID) {
		for chunk := uint64(1); chunk <= 5; chunk++ {
			for off := uint32(0); off < 3; off++ {
				write(t, c, src, chunk, 1, off*7, byte(chunk*10+uint64(off)))
			}
		}
		write(t, c, src, 2, 2, 0, 0xee)
		for i := range 8 {
			writeAt(t, c, src, 8, 1, uint32(i)<<18, bytes.Repeat([]byte{byte(0x80 + i)}, 1<<18), cspb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
		}
		writeAt(t, c, src, versioned, sn, 0, block(version), cspb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	}, loss{dmpb.UnitType_Load, leaderCrash}, loss{dmpb.UnitType_Load, answerLost})
	c, src := r.c, r.src
	r.losses.restartCrashed(t, c)
	r.losses.waitFired(t)
	r.caughtUp(t)

	// Sync: rounds of writes, the versioned chunk at a new version each
	// (at sn 2 from round 3 on: a COW snapshot of it), another chunk too;
	// the first four rounds lose the answer of a group.
	for round := range 10 {
		var mode lossMode
		switch round {
		case 0, 2:
			mode = answerLost
		case 1, 3:
			mode = leaderCrash
		}
		if mode != 0 {
			r.losses.arm(loss{dmpb.UnitType_Sync, mode})
		}
		if round == 3 {
			sn = 2
		}
		version++
		writeAt(t, c, src, versioned, sn, 0, block(version), cspb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
		write(t, c, src, uint64(round%5+1), 2, uint32(round+1), byte(0xa0+round)) // sn 2: COW snapshots of chunks 1, 3, 4 and 5 too
		writeAt(t, c, src, versioned, sn, 4096*uint32(round%4+1), block(version), cspb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
		if mode == leaderCrash {
			r.losses.restartCrashed(t, c)
		}
		r.losses.waitFired(t)
		r.caughtUp(t)
	}
	_, fired := r.losses.pending()
	for _, f := range fired {
		t.Log("lost: ", f)
	}
	if len(fired) != 6 {
		t.Fatalf("%d answers lost, want 6: %q", len(fired), fired)
	}

	// The versioned chunk shows its last version on the target.
	im := chunkImage(t, c, r.dst, versioned)
	if !bytes.Equal(im.Data[:4096], block(version)) || im.Sn != sn || im.SnapSn != 1 {
		t.Fatalf("chunk %d on the target: sn %d, snapshot sn %d, block 0 starts %x; want sn %d, snapshot sn 1, block 0 all %x",
			versioned, im.Sn, im.SnapSn, im.Data[:8], sn, version)
	}
	mig, ctl := r.shares(t)
	if a, b := mig.GetCounters(), ctl.GetCounters(); a.GetChunks() != b.GetChunks() || a.GetOps() != b.GetOps() || a.GetBytes() != b.GetBytes() {
		t.Errorf("mig counted %v, ctl %v: the chunks, ops or bytes differ", a, b)
	}
}
