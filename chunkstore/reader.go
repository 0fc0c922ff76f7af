package chunkstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/chunkraft/chunkraft/chunkstore/datastore"
	"github.com/chunkraft/chunkraft/disagg"
	"github.com/chunkraft/chunkraft/internal/chunkread"
	vpb "github.com/chunkraft/chunkraft/proto/chunkraft/viewpb"
)

// reader is a copyset's chunk store as the tenants read it
// (chunkread.Store): integrity's scans, the sync export (clone chunks
// materialised from their sources, so that an export never depends on the
// source cluster), disagg's read views and clone locks.
type reader struct {
	store   *datastore.Store
	sources *cloneSource // nil: clone chunks cannot be materialised
	// gate is the copyset's write fence (chunkMachine.gate); nil: none.
	gate *atomic.Pointer[fenceGate]
	// last is chunkMachine.last; nil: not known.
	last *atomic.Uint64
}

var (
	_ chunkread.Store  = reader{}
	_ chunkread.LastOp = reader{}
)

// LastChunkOp implements chunkread.LastOp.
func (r reader) LastChunkOp() (uint64, uint32) {
	if r.last == nil {
		return 0, 0
	}
	seq := r.last.Load()
	return SeqIndex(seq), SeqOp(seq)
}

// cloneFillTimeout bounds the reads of one clone chunk's source.
const cloneFillTimeout = time.Minute

func (r reader) ListChunks() []uint64 { return r.store.ListChunks() }

func (r reader) ChunkSize() uint32 { return r.store.Options().ChunkSize }

func (r reader) BlockSize() uint32 { return r.store.Options().BlockSize }

func (r reader) GetChunkHash(id uint64, off, length uint32) (string, error) {
	return r.store.GetChunkHash(id, off, length)
}

func (r reader) ChunkMeta(id uint64) (chunkread.Meta, bool, error) {
	info, err := r.store.GetChunkInfo(id)
	switch {
	case errors.Is(err, datastore.ErrChunkNotExist):
		return chunkread.Meta{}, false, nil
	case err != nil:
		return chunkread.Meta{}, false, err
	}
	return chunkread.Meta{Sn: info.Sn, CorrectedSn: info.CorrectedSn, SnapSn: info.SnapSn,
		CloneUnwritten: info.CloneUnwritten, Location: info.Location}, true, nil
}

func (r reader) ChunkImage(id uint64, buf *chunkread.ImageBuffers) (chunkread.Image, error) {
	if buf == nil {
		buf = &chunkread.ImageBuffers{}
	}
	b := datastore.ImageBuffers{Data: buf.Data, Snap: buf.Snap}
	img, err := r.store.ChunkImageInto(id, &b)
	buf.Data, buf.Snap = b.Data, b.Snap
	if errors.Is(err, datastore.ErrChunkNotExist) {
		return chunkread.Image{}, fmt.Errorf("chunk %d: %w", id, chunkread.ErrChunkGone)
	}
	if err != nil {
		return chunkread.Image{}, err
	}
	bs := r.store.Options().BlockSize
	out := chunkread.Image{ID: id, Index: SeqIndex(img.Seq), Op: SeqOp(img.Seq), Sn: img.Meta.Sn, CorrectedSn: img.Meta.CorrectedSn,
		BlockSize: bs, Data: img.ChunkData}
	if img.Meta.Location != "" {
		if err := r.fillClone(img.Meta, out.Data, bs); err != nil {
			return chunkread.Image{}, fmt.Errorf("chunk %d: %w", id, err)
		}
	}
	if sm := img.SnapMeta; sm != nil {
		out.SnapSn, out.SnapData = sm.Sn, img.SnapChunkData
		out.SnapCopied = make([]bool, uint32(len(out.Data))/bs)
		for i := range out.SnapCopied {
			out.SnapCopied[i] = datastore.BlockMarked(sm.Bitmap, uint32(i))
		}
	}
	return out, nil
}

// fillClone reads the unwritten blocks of a clone chunk from its source.
func (r reader) fillClone(m datastore.MetaPage, data []byte, bs uint32) error {
	if r.sources == nil {
		return errors.New("clone chunk: no clone source reader")
	}
	loc, err := parseLocation(m.Location)
	if err != nil {
		return fmt.Errorf("clone location %q: %w", m.Location, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cloneFillTimeout)
	defer cancel()
	blocks := uint32(len(data)) / bs
	for i := uint32(0); i < blocks; {
		if datastore.BlockMarked(m.Bitmap, i) {
			i++
			continue
		}
		j := i
		for j < blocks && !datastore.BlockMarked(m.Bitmap, j) {
			j++
		}
		if err := r.sources.fetch(ctx, loc, data[i*bs:j*bs], i*bs); err != nil {
			return fmt.Errorf("clone source %s: %w", m.Location, err)
		}
		i = j
	}
	return nil
}

func (r reader) Materialize(ctx context.Context, location string, size uint32) ([]byte, error) {
	if r.sources == nil {
		return nil, errors.New("no clone source reader")
	}
	loc, err := parseLocation(location)
	if err != nil {
		return nil, fmt.Errorf("clone location %q: %w", location, err)
	}
	buf := make([]byte, size)
	if err := r.sources.fetch(ctx, loc, buf, 0); err != nil {
		return nil, fmt.Errorf("clone source %s: %w", location, err)
	}
	return buf, nil
}

// WriteFenced tells the export which chunk ops a write fence refused at
// apply, so that no restore or migration replays them.
func (r reader) WriteFenced(index uint64, owner string) (string, bool) {
	if r.gate == nil {
		return "", false
	}
	return r.gate.Load().refuses(index, owner)
}

// CloneObject is disagg's clone check: the object the chunk reads from
// when it is an @s3 clone chunk, "" when it is a normal chunk, another kind
// of clone or missing.
func (r reader) CloneObject(chunk uint64) (string, error) {
	info, err := r.store.GetChunkInfo(chunk)
	switch {
	case errors.Is(err, datastore.ErrChunkNotExist):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("chunk info: %w", err)
	case info.Location == "":
		return "", nil
	}
	loc, err := parseLocation(info.Location)
	if err != nil || !loc.s3 {
		return "", nil
	}
	return loc.object, nil
}

func (r reader) Views() []chunkread.View {
	var out []chunkread.View
	for _, st := range r.store.Views() {
		info, err := disagg.UnmarshalViewInfo(st.Info)
		if err != nil {
			info = &vpb.ViewInfo{} // written by Apply from a proto: not reached
		}
		out = append(out, chunkread.View{Seq: st.Seq, Info: info, Chunks: len(st.Chunks), Saved: st.Saved, Budget: st.Budget, Over: st.OverBudge})
	}
	return out
}

func (r reader) Pages(seq uint64) ([]chunkread.ChunkPages, error) {
	cs, err := r.store.ViewPages(seq)
	if err != nil {
		return nil, viewErr(err)
	}
	out := make([]chunkread.ChunkPages, len(cs))
	for i, c := range cs {
		out[i] = chunkread.ChunkPages{Chunk: c.ID, Blocks: c.Blocks}
	}
	return out, nil
}

func (r reader) ReadPages(seq, chunk uint64, first uint32, buf []byte) error {
	return viewErr(r.store.ReadView(seq, chunk, first, buf))
}

// viewErr maps the datastore's view errors onto chunkread's.
func viewErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, datastore.ErrViewNotExist):
		return fmt.Errorf("%w: %v", chunkread.ErrViewGone, err)
	case errors.Is(err, datastore.ErrViewOverBudget):
		return fmt.Errorf("%w: %v", chunkread.ErrViewOverBudget, err)
	case errors.Is(err, datastore.ErrNotInView), errors.Is(err, datastore.ErrInvalidArg):
		return fmt.Errorf("%w: %v", chunkread.ErrPageNotInView, err)
	}
	return err
}
