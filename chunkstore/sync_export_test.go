package chunkstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/chunkstore/datastore"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/copyset/copysettest"
	"github.com/chunkraft/chunkraft/datasync"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/internal/chunkop"
	"github.com/chunkraft/chunkraft/internal/chunkread"
	"github.com/chunkraft/chunkraft/internal/kinds"
	"github.com/chunkraft/chunkraft/internal/testwait"
	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
)

// The sync exporter (datasync.Export) on a real copyset: the chunk machine,
// its raft log and log pins, with writes going on.

// exportSource is a datasync.Source over a replica and its chunk store, for
// the tests (no clone chunks: Materialize refuses).
type exportSource struct {
	n     *copyset.Node
	store *datastore.Store
}

func (s exportSource) Pool() uint32         { return s.n.Group().Pool() }
func (s exportSource) Copyset() uint32      { return s.n.Group().Copyset() }
func (s exportSource) ListChunks() []uint64 { return s.store.ListChunks() }
func (s exportSource) AppliedIndex() uint64 { return s.n.AppliedIndex() }
func (s exportSource) CommitIndex() uint64  { return s.n.Status().CommittedIndex }
func (s exportSource) ReadBarrier(ctx context.Context) (uint64, error) {
	return s.n.ReadBarrier(ctx)
}

func (s exportSource) LogEntry(i uint64) (copyset.LogEntry, error) { return s.n.LogEntry(i) }

func (s exportSource) PinLog(holder string, i uint64) (datasync.LogPin, error) {
	p, err := s.n.PinLog(holder, i)
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (s exportSource) Materialize(context.Context, string, uint32) ([]byte, error) {
	return nil, errors.New("no clone sources in this test")
}

func (s exportSource) WriteFenced(uint64, string) (string, bool) { return "", false }

// ChunkImage is the chunk store's own reader's (reader.go).
func (s exportSource) ChunkImage(id uint64, buf *chunkread.ImageBuffers) (chunkread.Image, error) {
	return reader{store: s.store}.ChunkImage(id, buf)
}

// exportWriter proposes random chunk ops on a copyset until stopped: writes
// at the current volume sn (some bump it, so later writes copy on write
// into chunk snapshots), snapshot deletes and chunk deletes.
type exportWriter struct {
	n  *copyset.Node
	sn *atomic.Uint64
}

func (w exportWriter) op(rng *rand.Rand) []byte {
	req := &pb.ChunkRequest{LogicPoolId: new(uint32(1)), CopysetId: new(uint32(1)), ChunkId: new(uint64(1 + rng.IntN(8)))}
	var data []byte
	switch r := rng.IntN(100); {
	case r < 8:
		req.OpType = pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE_SNAP.Enum()
		req.CorrectedSn = new(w.sn.Load())
	case r < 10:
		req.OpType = pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE.Enum()
		req.Sn = new(uint64(0))
	default:
		sn := w.sn.Load()
		if r < 16 {
			sn = w.sn.Add(1)
		}
		bs := conformanceLayout.BlockSize
		blocks := conformanceLayout.ChunkSize / bs
		n := 1 + rng.Uint32N(3)
		req.OpType, req.Sn = pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE.Enum(), new(sn)
		req.Offset = new(rng.Uint32N(blocks-n+1) * bs)
		data = make([]byte, n*bs)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		req.Size = new(uint32(len(data)))
	}
	op, err := chunkop.Encode(req, data, nil)
	if err != nil {
		panic(err)
	}
	return op
}

// run proposes ops until stop is set, one in three as a group: one to
// three chunk ops and a checkpoint op of the toy machine
// (exportCheckpointKind) in one entry. Every proposal is waited for (not
// cancelled), so that none is committed after run returns.
func (w exportWriter) run(stop *atomic.Bool, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 7))
	for i := 0; !stop.Load(); i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var err error
		if i%3 == 2 {
			ops := make([][]byte, 1+rng.IntN(3), 4)
			for j := range ops {
				ops[j] = w.op(rng)
			}
			ops = append(ops, copysettest.ToyOp(exportCheckpointKind, fmt.Sprint(seed), fmt.Sprint(i)))
			_, _, err = w.n.ProposeGroup(ctx, ops)
		} else {
			_, _, err = w.n.Propose(ctx, w.op(rng))
		}
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// exportCheckpointKind is the toy machine beside the chunk machine in the
// export tests, a checkpoint that rides in groups of chunk ops.
const exportCheckpointKind copyset.Kind = 203

// exportCopyset starts one server with copyset 1/1 of the chunk machine
// and returns it as a datasync.Source, with a writer of it.
func exportCopyset(t *testing.T, opts copyset.RaftOptions) (*copysettest.Cluster, copyset.GroupID, exportSource, exportWriter) {
	t.Helper()
	ckpt := copysettest.ToySpec(exportCheckpointKind, "checkpoint")
	ckpt.Group = true
	c := copysettest.NewCluster(t, 1, append(conformanceSpecs(t, kinds.Chunk), ckpt), opts)
	g := copyset.GroupID(1<<32 | 1)
	c.Create(g)
	n := c.Node(c.Leader(g), g)
	store, err := chunkStoreOf(n)
	if err != nil {
		t.Fatal(err)
	}
	sn := new(atomic.Uint64)
	sn.Store(1)
	return c, g, exportSource{n: n, store: store}, exportWriter{n: n, sn: sn}
}

// TestExportExact exports a copyset in kFullAndContinuous mode while two
// writers change its chunks (COW snapshots, snapshot and chunk deletes,
// ops sharing log entries, groups of chunk ops with a checkpoint op) and
// the receiver lets entries apply between chunk images. Its collector is restarted once inside the snapshot phase
// (resumed from the stored point and binlog start). Once the writers
// stopped and the export reached the commit index, the records replayed
// into an empty store (snapshot records as of their images, then binlog
// records in order, a chunk's from its image's as_of_index on) give every
// chunk's info, data and COW snapshot of the source. The log is truncated
// every 32 entries meanwhile: only the export's pin keeps the binlog from
// its start.
func TestExportExact(t *testing.T) {
	_, _, src, w := exportCopyset(t, copysettest.FastRaft())
	n, store := src.n, src.store
	var pre sync.WaitGroup // chunks for the snapshot phase: 80 ops, proposed together (they share entries)
	preErr := make(chan error, 8)
	for i := range 8 {
		pre.Go(func() {
			rng := rand.New(rand.NewPCG(100+uint64(i), 2))
			for range 10 {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, _, err := n.Propose(ctx, w.op(rng))
				cancel()
				if err != nil {
					preErr <- err
					return
				}
			}
		})
	}
	pre.Wait()
	close(preErr)
	for err := range preErr {
		t.Fatalf("propose: %v", err)
	}

	var stop atomic.Bool
	var writers sync.WaitGroup
	defer writers.Wait()
	defer stop.Store(true)
	werr := make(chan error, 2)
	for i := range 2 {
		writers.Go(func() { werr <- w.run(&stop, uint64(i)) })
	}

	var mu sync.Mutex
	var packets []datasync.Packet
	binlogSent := 0 // binlog records sent
	reached := make(chan struct{}, 1)
	var target atomic.Uint64 // once set: signal when a packet reaches it
	errInterrupt := errors.New("receiver restarts")
	interrupted := false
	send := func(ctx context.Context, p datasync.Packet) error {
		mu.Lock()
		if !interrupted && len(packets) == 3 { // refuse the fourth packet once: the collector starts again
			interrupted = true
			mu.Unlock()
			return errInterrupt
		}
		p.Data = bytes.Clone(p.Data) // the export reuses the buffer once send returns
		packets = append(packets, p)
		if p.Start.GetType() == dspb.SyncType_kBINLOG {
			binlogSent += int(p.Count)
		}
		mu.Unlock()
		if p.Start.GetType() != dspb.SyncType_kBINLOG { // a slow receiver: entries are applied between chunk images
			want := n.AppliedIndex() + 8
			// Up to 5 s: a receiver that waits in vain goes on all the same.
			_ = testwait.For(5*time.Second, func() error {
				if applied := n.AppliedIndex(); applied < want {
					return fmt.Errorf("applied %d, want %d", applied, want)
				}
				return nil
			})
		}
		if tg := target.Load(); tg != 0 && p.Next.GetType() == dspb.SyncType_kBINLOG && p.Next.GetOffset() > tg {
			select {
			case reached <- struct{}{}:
			default:
			}
		}
		return nil
	}
	ectx, stopExport := context.WithCancel(context.Background())
	defer stopExport()
	exported := make(chan error, 1)
	go func() {
		from, binlogStart := exportfmt.StartPoint().Proto(), uint64(0)
		for {
			err := datasync.Export(ectx, src, from, binlogStart,
				datasync.ExportOptions{Mode: dspb.SyncMode_kFullAndContinuous, PacketBytes: 40 << 10,
					Idle: 50 * time.Millisecond, Linger: 5 * time.Millisecond}, send)
			if err != errInterrupt {
				exported <- err
				return
			}
			mu.Lock() // resume from the stored point, with the stored binlog start
			from, binlogStart = packets[len(packets)-1].Next, packets[len(packets)-1].BinlogStart
			mu.Unlock()
		}
	}()

	// Let the binlog phase export some ops under the writes (not so many
	// that they overwrite every block the snapshot phase exported).
	// (A liveness bound, not a speed check: the snapshot phase before it
	// waits for entries to apply between images, slow on a loaded machine.)
	testwait.Until(t, 30*time.Second, func() error {
		select {
		case err := <-exported:
			t.Fatalf("export ended: %v", err)
		default:
		}
		mu.Lock()
		defer mu.Unlock()
		if binlogSent < 40 {
			return fmt.Errorf("only %d binlog records exported", binlogSent)
		}
		return nil
	})
	stop.Store(true)
	writers.Wait()
	close(werr)
	for err := range werr {
		if err != nil {
			t.Fatalf("writer: %v", err)
		}
	}
	if ckpt, ok := copyset.MachineOf[*copysettest.ToyKV](n, exportCheckpointKind); !ok || strings.Count(ckpt.Dump(), "=") != 2 {
		t.Fatalf("the writers' groups left no checkpoint of each writer: %v", ckpt)
	}
	commit := n.Status().CommittedIndex
	target.Store(commit)
	select {
	case <-reached:
	case err := <-exported:
		t.Fatalf("export ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatalf("the export did not reach the commit index %d in 30 s", commit)
	}
	stopExport()
	if err := <-exported; !errors.Is(err, context.Canceled) {
		t.Fatalf("export returned %v, want context.Canceled", err)
	}
	testwait.Until(t, 30*time.Second, func() error {
		if applied := n.AppliedIndex(); applied < commit {
			return fmt.Errorf("applied %d, not the commit index %d", applied, commit)
		}
		return nil
	})
	if st := n.LogPins(); st.Pins != 0 {
		t.Fatalf("%d log pins left after the export", st.Pins)
	}

	mu.Lock()
	defer mu.Unlock()
	if !interrupted || packets[3].Start.GetType() != dspb.SyncType_kSNAPSHOT || packets[3].Start.Pk == nil {
		t.Fatalf("the export was not resumed inside its snapshot phase (fourth packet from %v)", packets[3].Start)
	}
	restored, concurrent := replayExport(t, packets, commit)
	if concurrent == 0 {
		t.Fatalf("no chunk image of the snapshot phase reflects an op after the binlog start: the writes did not overlap it")
	}
	compareStores(t, store, restored)
}

// replayExport is a test-only restore: it checks the chain of packets and
// replays their records into a new store. Snapshot records rebuild each
// chunk as its image was (sn, corrected sn, data, a COW snapshot with
// exactly the copied blocks) through the store's ordinary ops; then the
// binlog records up to index last apply in order, a chunk's from its
// image's as_of_index on. concurrent counts the images that reflect ops
// at or after the binlog start.
func replayExport(t *testing.T, packets []datasync.Packet, last uint64) (_ *datastore.Store, concurrent int) {
	t.Helper()
	chain := exportfmt.NewChain(1, 1)
	type image struct {
		sn, corrected, snapSn, asOf uint64
		asOfOp                      uint32
		data, snap                  []byte
		copied                      []bool
		cow                         bool
	}
	bs := conformanceLayout.BlockSize
	images := map[uint64]*image{}
	var order []uint64
	var binlog []*syncpb.BinlogRecord
	var binlogStart uint64
	for i, p := range packets {
		if p.Data == nil {
			continue // a heartbeat
		}
		d, err := exportfmt.Decode(p.Data)
		if err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
		if err := chain.AddPacket(exportfmt.PacketName(1, 1, d.Start), d); err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
		binlogStart = p.BinlogStart
		for _, r := range d.Records {
			var id uint64
			switch k := r.Kind.(type) {
			case *syncpb.Record_Binlog:
				binlog = append(binlog, k.Binlog)
				continue
			case *syncpb.Record_Snapshot:
				id = k.Snapshot.ChunkId
			case *syncpb.Record_CowSnapshot:
				id = k.CowSnapshot.ChunkId
			}
			img := images[id]
			if img == nil {
				img = &image{data: make([]byte, conformanceLayout.ChunkSize), snap: make([]byte, conformanceLayout.ChunkSize),
					copied: make([]bool, conformanceLayout.ChunkSize/bs)}
				images[id] = img
				order = append(order, id)
			}
			if s := r.GetSnapshot(); s != nil {
				img.sn, img.corrected, img.asOf, img.asOfOp = s.Sn, s.CorrectedSn, s.AsOfIndex, s.AsOfOp
				copy(img.data[s.Offset:], s.Data)
			}
			if cw := r.GetCowSnapshot(); cw != nil {
				img.snapSn, img.cow = cw.SnapshotSn, true
				copy(img.snap[cw.Offset:], cw.Data)
				for b := cw.Offset / bs; b < (cw.Offset+uint32(len(cw.Data)))/bs; b++ {
					img.copied[b] = true
				}
			}
		}
	}
	if next, _ := chain.Next(); next.Compare(exportfmt.BinlogPoint(last+1)) < 0 {
		t.Fatalf("the export ends at %v, before binlog index %d", next, last+1)
	}

	st, err := datastore.Open(datastore.Options{Dir: t.TempDir(), ChunkSize: conformanceLayout.ChunkSize, BlockSize: bs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("replay: %s: %v", what, err)
		}
	}
	// writeRuns writes the non-zero blocks of data at sn (block 0 if none,
	// so that the chunk exists).
	writeRuns := func(id, sn uint64, data []byte, only []bool) {
		wrote := false
		for b := uint32(0); b < uint32(len(data))/bs; b++ {
			blk := data[b*bs : (b+1)*bs]
			if (only == nil && bytes.Count(blk, []byte{0}) == len(blk)) || (only != nil && !only[b]) {
				continue
			}
			must(fmt.Sprintf("write chunk %d block %d at sn %d", id, b, sn), st.WriteChunk(id, sn, blk, b*bs))
			wrote = true
		}
		if !wrote && only == nil {
			must(fmt.Sprintf("create chunk %d at sn %d", id, sn), st.WriteChunk(id, sn, make([]byte, bs), 0))
		}
	}
	for _, id := range order {
		img := images[id]
		if img.asOf >= binlogStart {
			concurrent++
		}
		base, view := img.sn, img.data
		if img.cow {
			if !slices.Contains(img.copied, true) {
				t.Fatalf("chunk %d: a COW snapshot with no block copied cannot be rebuilt by writes", id)
			}
			base, view = img.snapSn, bytes.Clone(img.data)
			for b, cp := range img.copied {
				if cp {
					copy(view[uint32(b)*bs:], img.snap[uint32(b)*bs:(uint32(b)+1)*bs])
				}
			}
		}
		// The corrected sn is set while the chunk's sn is below it.
		if img.corrected != 0 && img.corrected <= base {
			writeRuns(id, img.corrected-1, make([]byte, bs), nil)
			must("correct sn", st.DeleteChunkSnapshotOrCorrectSn(id, img.corrected))
		}
		writeRuns(id, base, view, nil)
		if info, _ := st.GetChunkInfo(id); info.SnapSn != 0 { // made by the writes above the corrected sn
			must("delete snapshot", st.DeleteChunkSnapshotOrCorrectSn(id, base))
		}
		if img.corrected > base {
			must("correct sn", st.DeleteChunkSnapshotOrCorrectSn(id, img.corrected))
		}
		if img.cow { // copy the snapshot's blocks on write
			writeRuns(id, img.sn, img.data, img.copied)
		}
	}
	for _, r := range binlog {
		if r.Index > last {
			break
		}
		op := r.Op
		id := op.GetChunkId()
		if img := images[id]; img != nil && (r.Index < img.asOf || r.Index == img.asOf && r.OpPosition < img.asOfOp) {
			continue // in the image
		}
		var err error
		switch op.GetOpType() {
		case pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE:
			err = st.WriteChunk(id, op.GetSn(), r.Data, op.GetOffset())
		case pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE:
			err = st.DeleteChunk(id, op.GetSn())
		case pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE_SNAP:
			err = st.DeleteChunkSnapshotOrCorrectSn(id, op.GetCorrectedSn())
		default:
			t.Fatalf("replay: unexpected op %v at index %d", op.GetOpType(), r.Index)
		}
		switch storeStatus(err) {
		case pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_DISK_FAIL, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_NOSPACE, pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_CRC_FAIL:
			t.Fatalf("replay: index %d: %v", r.Index, err)
		}
	}
	return st, concurrent
}

// compareStores fails unless want and got hold the same chunks with the
// same info, data and COW snapshot data.
func compareStores(t *testing.T, want, got *datastore.Store) {
	t.Helper()
	ids := want.ListChunks()
	if g := got.ListChunks(); fmt.Sprint(g) != fmt.Sprint(ids) {
		t.Fatalf("restored chunks %v, source %v", g, ids)
	}
	wb, gb := make([]byte, conformanceLayout.ChunkSize), make([]byte, conformanceLayout.ChunkSize)
	snaps := 0
	for _, id := range ids {
		wi, err1 := want.GetChunkInfo(id)
		gi, err2 := got.GetChunkInfo(id)
		if err1 != nil || err2 != nil || wi != gi {
			t.Fatalf("chunk %d: restored info %+v (%v), source %+v (%v)", id, gi, err2, wi, err1)
		}
		if err := want.ReadChunk(id, wb, 0); err != nil {
			t.Fatal(err)
		}
		if err := got.ReadChunk(id, gb, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(wb, gb) {
			t.Fatalf("chunk %d: restored data differs from the source", id)
		}
		if wi.SnapSn == 0 {
			continue
		}
		snaps++
		if err := want.ReadChunkSnapshot(id, wi.SnapSn, wb, 0); err != nil {
			t.Fatal(err)
		}
		if err := got.ReadChunkSnapshot(id, wi.SnapSn, gb, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(wb, gb) {
			t.Fatalf("chunk %d: restored snapshot sn %d differs from the source", id, wi.SnapSn)
		}
	}
	t.Logf("%d chunks equal, %d of them with a COW snapshot", len(ids), snaps)
}

// TestExportPinCapped: an export whose receiver stalls while the log grows
// past the retention bound (RaftOptions.MaxPinnedEntries) fails with the
// pin's *copyset.LogPinCappedError, and its pin is gone.
func TestExportPinCapped(t *testing.T) {
	opts := copysettest.FastRaft()
	opts.MaxPinnedEntries = 16
	c, g, src, w := exportCopyset(t, opts)
	n := src.n
	rng := rand.New(rand.NewPCG(3, 4))
	c.Propose(g, w.op(rng))
	stalled := false
	send := func(ctx context.Context, p datasync.Packet) error {
		if stalled {
			return nil
		}
		stalled = true // the first packet: 40 entries go by and the log is compacted
		for range 40 {
			c.Propose(g, w.op(rng))
		}
		c.Snapshot(0, g)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := datasync.Export(ctx, src, exportfmt.StartPoint().Proto(), 0,
		datasync.ExportOptions{Mode: dspb.SyncMode_kFullAndContinuous}, send)
	var capped *copyset.LogPinCappedError
	if !errors.As(err, &capped) {
		t.Fatalf("export past the retention bound: %v, want a LogPinCappedError", err)
	}
	t.Log(err)
	if st := n.LogPins(); st.Pins != 0 {
		t.Fatalf("%d log pins left after the export", st.Pins)
	}
}
