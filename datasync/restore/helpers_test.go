package restore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/chunkstore/datastore"
	"github.com/chunkraft/chunkraft/datasync/dest"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/internal/objstore"
	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// The tests use small chunks: 16 blocks of 4 KiB.
var testGeometry = Geometry{ChunkSize: 64 << 10, BlockSize: 4 << 10}

func openStore(t *testing.T) *datastore.Store {
	t.Helper()
	s, err := datastore.Open(datastore.Options{Dir: t.TempDir(), ChunkSize: testGeometry.ChunkSize, BlockSize: testGeometry.BlockSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// storeTarget is a Target on real chunk stores, one per copyset, with the
// chunk service's mapping of store errors (chunkserver.storeStatus).
type storeTarget struct {
	t      *testing.T
	stores map[[2]uint32]*datastore.Store
	ops    atomic.Int64
	// jitter delays each write by up to 50 µs, so that writes in flight at
	// once apply in varying orders.
	jitter bool
}

func newStoreTarget(t *testing.T) *storeTarget {
	return &storeTarget{t: t, stores: map[[2]uint32]*datastore.Store{}}
}

// store returns the store of copyset (pool, cs), creating it.
func (st *storeTarget) store(pool, cs uint32) *datastore.Store {
	k := [2]uint32{pool, cs}
	if st.stores[k] == nil {
		st.stores[k] = openStore(st.t)
	}
	return st.stores[k]
}

func (st *storeTarget) of(c Chunk) (*datastore.Store, error) {
	s := st.stores[[2]uint32{c.Pool, c.Copyset}]
	if s == nil {
		return nil, fmt.Errorf("COPYSET_NOTEXIST: copyset %d/%d", c.Pool, c.Copyset)
	}
	st.ops.Add(1)
	return s, nil
}

func outcome(err error) (Outcome, error) {
	switch {
	case err == nil:
		return Applied, nil
	case errors.Is(err, datastore.ErrBackward):
		return Backward, nil
	case errors.Is(err, datastore.ErrSnapshotConflict), errors.Is(err, datastore.ErrStatusConflict):
		return Refused, nil
	}
	return 0, err
}

func (st *storeTarget) CheckEmpty(_ context.Context, pool, cs uint32) error {
	s := st.stores[[2]uint32{pool, cs}]
	switch {
	case s == nil:
		return fmt.Errorf("copyset %d/%d does not exist", pool, cs)
	case len(s.ListChunks()) > 0:
		return fmt.Errorf("copyset %d/%d holds chunks", pool, cs)
	}
	return nil
}

func (st *storeTarget) WriteChunk(_ context.Context, c Chunk, off uint32, data []byte, sn uint64) (Outcome, error) {
	s, err := st.of(c)
	if err != nil {
		return 0, err
	}
	if st.jitter {
		time.Sleep(rand.N(50 * time.Microsecond))
	}
	return outcome(s.WriteChunk(c.ID, sn, data, off))
}

func (st *storeTarget) DeleteChunk(_ context.Context, c Chunk, sn uint64) (Outcome, error) {
	s, err := st.of(c)
	if err != nil {
		return 0, err
	}
	return outcome(s.DeleteChunk(c.ID, sn))
}

func (st *storeTarget) DeleteChunkSnapshotOrCorrectSn(_ context.Context, c Chunk, cs uint64) (Outcome, error) {
	s, err := st.of(c)
	if err != nil {
		return 0, err
	}
	return outcome(s.DeleteChunkSnapshotOrCorrectSn(c.ID, cs))
}

func (st *storeTarget) ChunkExists(_ context.Context, c Chunk) (bool, error) {
	s, err := st.of(c)
	if err != nil {
		return false, err
	}
	_, err = s.GetChunkInfo(c.ID)
	if errors.Is(err, datastore.ErrChunkNotExist) {
		return false, nil
	}
	return err == nil, err
}

// source is a copyset of the export's source: a real store, the raft index
// of its last op, and the binlog records of its ops.
type source struct {
	t      *testing.T
	s      *datastore.Store
	index  uint64
	binlog []*syncpb.Record
}

func newSource(t *testing.T) *source { return &source{t: t, s: openStore(t)} }

// op applies a chunk op as the chunk machine does, at the next index, and
// logs it; the store's refusals are kept (as the source's outcome).
func (s *source) op(req *pb.ChunkRequest, data []byte) {
	s.t.Helper()
	s.index++
	req.LogicPoolId, req.CopysetId = proto.Uint32(1), proto.Uint32(1)
	id := req.GetChunkId()
	var err error
	switch req.GetOpType() {
	case pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE:
		err = s.s.WriteChunkAt(s.index, id, req.GetSn(), data, req.GetOffset())
	case pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE:
		err = s.s.DeleteChunkAt(s.index, id, req.GetSn())
	case pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE_SNAP:
		err = s.s.DeleteChunkSnapshotOrCorrectSnAt(s.index, id, req.GetCorrectedSn())
	case pb.CHUNK_OP_TYPE_CHUNK_OP_CREATE_CLONE:
		// data is the clone source's content, the record's materialised data.
		err = s.s.CreateCloneChunkAt(s.index, id, req.GetSn(), req.GetCorrectedSn(), req.GetSize(), req.GetLocation())
	case pb.CHUNK_OP_TYPE_CHUNK_OP_PASTE:
		err = s.s.PasteChunkAt(s.index, id, data, req.GetOffset())
	default:
		s.t.Fatalf("source op %v", req.GetOpType())
	}
	if errors.Is(err, datastore.ErrChunkExist) {
		err = nil // a refused CREATE_CLONE
	}
	if _, err := outcome(err); err != nil {
		s.t.Fatalf("source op %v at %d: %v", req.GetOpType(), s.index, err)
	}
	s.binlog = append(s.binlog, &syncpb.Record{Kind: &syncpb.Record_Binlog{Binlog: &syncpb.BinlogRecord{
		Index: s.index, Term: 1, AppendedAtMs: 1000 * int64(s.index), Op: req, Data: bytes.Clone(data)}}})
}

func (s *source) write(id uint64, sn uint64, off uint32, data []byte) {
	s.t.Helper()
	s.op(&pb.ChunkRequest{OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE.Enum(), ChunkId: proto.Uint64(id), Sn: proto.Uint64(sn),
		Offset: proto.Uint32(off), Size: proto.Uint32(uint32(len(data)))}, data)
}

func (s *source) clone(id, sn, cs uint64, materialised []byte) {
	s.t.Helper()
	s.op(&pb.ChunkRequest{OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_CREATE_CLONE.Enum(), ChunkId: proto.Uint64(id), Sn: proto.Uint64(sn),
		CorrectedSn: proto.Uint64(cs), Size: proto.Uint32(testGeometry.ChunkSize), Location: proto.String("src@s3")}, materialised)
}

func (s *source) paste(id uint64, off uint32, data []byte) {
	s.t.Helper()
	s.op(&pb.ChunkRequest{OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_PASTE.Enum(), ChunkId: proto.Uint64(id),
		Offset: proto.Uint32(off), Size: proto.Uint32(uint32(len(data)))}, data)
}

func (s *source) correct(id, cs uint64) {
	s.t.Helper()
	s.op(&pb.ChunkRequest{OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE_SNAP.Enum(), ChunkId: proto.Uint64(id), CorrectedSn: proto.Uint64(cs)}, nil)
}

func (s *source) remove(id, sn uint64) {
	s.t.Helper()
	s.op(&pb.ChunkRequest{OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_DELETE.Enum(), ChunkId: proto.Uint64(id), Sn: proto.Uint64(sn)}, nil)
}

// snapshot returns the snapshot-phase records of chunk id as of now (what
// an exporter reads from a datastore.ChunkImage): data ranges of 16 KiB,
// zero ranges as zero_length, and the copied blocks of the COW snapshot.
func (s *source) snapshot(id uint64) []*syncpb.Record {
	s.t.Helper()
	img, err := s.s.ChunkImage(id)
	if err != nil {
		s.t.Fatal(err)
	}
	const piece = 16 << 10
	var out []*syncpb.Record
	for off := uint32(0); off < testGeometry.ChunkSize; off += piece {
		r := &syncpb.SnapshotRecord{ChunkId: id, Sn: img.Meta.Sn, CorrectedSn: img.Meta.CorrectedSn, Offset: off, AsOfIndex: img.Seq}
		d := img.ChunkData[off : off+piece]
		if bytes.Equal(d, make([]byte, piece)) {
			r.ZeroLength = piece
		} else {
			r.Data = bytes.Clone(d)
		}
		out = append(out, &syncpb.Record{Kind: &syncpb.Record_Snapshot{Snapshot: r}})
	}
	if img.SnapMeta != nil {
		bs := testGeometry.BlockSize
		for i := range testGeometry.blocks() {
			if datastore.BlockMarked(img.SnapMeta.Bitmap, i) {
				out = append(out, &syncpb.Record{Kind: &syncpb.Record_CowSnapshot{CowSnapshot: &syncpb.CowSnapshotRecord{
					ChunkId: id, SnapshotSn: img.SnapMeta.Sn, Offset: i * bs, AsOfIndex: img.Seq,
					Data: bytes.Clone(img.SnapChunkData[i*bs : (i+1)*bs])}}})
			}
		}
	}
	return out
}

// export is a hand-built export of one copyset.
type export struct {
	pool, cs uint32
	chunks   [][]*syncpb.Record // snapshot-phase records, one packet per chunk
	full     bool               // a snapshot phase (from the start)
	start    uint64             // first binlog index
	binlog   []*syncpb.Record
	end      uint64 // the binlog phase's next point; 0: after the last record
	per      int    // binlog records per packet (0: 3)
	// startMs is the packets' start_state_ms (0: none, as an export
	// written before the field existed).
	startMs int64
	// exportID is the packets' export_id ("": none, as an export written
	// before the field existed).
	exportID string
}

// packets encodes the export: name -> bytes.
func (e *export) packets(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	put := func(start, next exportfmt.Point, recs []*syncpb.Record) {
		b, err := exportfmt.Encode(&syncpb.PacketHeader{LogicPoolId: e.pool, CopysetId: e.cs,
			StartPoint: start.Proto(), NextPoint: next.Proto(), BinlogStart: e.start, StartStateMs: e.startMs, ExportId: e.exportID}, recs)
		if err != nil {
			t.Fatal(err)
		}
		out[exportfmt.PacketName(e.pool, e.cs, start)] = b
	}
	at := exportfmt.BinlogPoint(e.start)
	if e.full {
		at = exportfmt.StartPoint()
		for _, recs := range e.chunks {
			id := recs[0].GetSnapshot().GetChunkId()
			p := exportfmt.SnapshotPoint(id, 0)
			put(at, p, nil)
			at = p
			// The chunk's packet ends where the next chunk starts.
			next := exportfmt.SnapshotPoint(id+1, 0)
			put(at, next, recs)
			at = next
		}
		put(at, exportfmt.BinlogPoint(e.start), nil)
		at = exportfmt.BinlogPoint(e.start)
	}
	per := e.per
	if per == 0 {
		per = 3
	}
	recs := e.binlog
	for len(recs) > 0 {
		n := min(per, len(recs))
		next := exportfmt.BinlogPoint(recs[n-1].GetBinlog().Index + 1)
		if n < len(recs) {
			next = exportfmt.BinlogPoint(recs[n].GetBinlog().Index)
		} else if e.end != 0 {
			next = exportfmt.BinlogPoint(e.end)
		}
		put(at, next, recs[:n])
		at = next
		recs = recs[n:]
	}
	if e.end != 0 && at.Index != e.end {
		put(at, exportfmt.BinlogPoint(e.end), nil)
	}
	return out
}

// writeExport writes packets into a new file dest and opens it.
func writeExport(t *testing.T, pkts map[string][]byte) (dest.Dest, string) {
	t.Helper()
	dir := t.TempDir()
	for name, b := range pkts {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	u, err := dest.Parse("file://" + dir)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dest.Open(context.Background(), u, objstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, dir
}

// sameChunks fails unless every chunk of want is in got with the same sn,
// corrected sn, snapshot sn, data and snapshot data, and got has no other.
func sameChunks(t *testing.T, want, got *datastore.Store) {
	t.Helper()
	w, g := want.ListChunks(), got.ListChunks()
	if fmt.Sprint(w) != fmt.Sprint(g) {
		t.Fatalf("chunks %v, want %v", g, w)
	}
	for _, id := range w {
		wi, _ := want.GetChunkInfo(id)
		gi, err := got.GetChunkInfo(id)
		if err != nil {
			t.Fatal(err)
		}
		if wi.Sn != gi.Sn || wi.CorrectedSn != gi.CorrectedSn || wi.SnapSn != gi.SnapSn {
			t.Errorf("chunk %d: sn/corrected sn/snapshot sn %d/%d/%d, want %d/%d/%d", id, gi.Sn, gi.CorrectedSn, gi.SnapSn, wi.Sn, wi.CorrectedSn, wi.SnapSn)
			continue
		}
		wd, gd := make([]byte, testGeometry.ChunkSize), make([]byte, testGeometry.ChunkSize)
		if err := want.ReadChunk(id, wd, 0); err != nil {
			t.Fatal(err)
		}
		if err := got.ReadChunk(id, gd, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(wd, gd) {
			t.Errorf("chunk %d: data differs", id)
		}
		if wi.SnapSn == 0 {
			continue
		}
		if err := want.ReadChunkSnapshot(id, wi.SnapSn, wd, 0); err != nil {
			t.Fatal(err)
		}
		if err := got.ReadChunkSnapshot(id, wi.SnapSn, gd, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(wd, gd) {
			t.Errorf("chunk %d: snapshot sn %d data differs", id, wi.SnapSn)
		}
	}
}

// block returns a 4 KiB block filled with b.
func block(b byte) []byte { return bytes.Repeat([]byte{b}, int(testGeometry.BlockSize)) }
