package chunkserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chunkraft/chunkraft/chunkserver/datastore"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/datasync"
)

// The chunk store of a copyset as the sync export reads it: chunk images
// (datastore.ChunkImage) with clone chunks materialised from their
// sources, so that an export never depends on the source cluster.

// cloneFillTimeout bounds the reads of one clone chunk's source.
const cloneFillTimeout = time.Minute

type syncChunks struct {
	store   *datastore.Store
	sources *cloneSource
}

var _ datasync.ChunkReader = (*syncChunks)(nil)

// syncChunksOf returns the chunk store of n for the sync service.
func (s *Server) syncChunksOf(n *copyset.Node) (datasync.ChunkReader, error) {
	m, err := chunkMachineOf(n)
	if err != nil {
		return nil, err
	}
	return &syncChunks{store: m.store, sources: s.sources}, nil
}

func (c *syncChunks) ListChunks() []uint64 { return c.store.ListChunks() }

func (c *syncChunks) ChunkImage(id uint64, buf *datasync.ImageBuffers) (datasync.ChunkImage, error) {
	if buf == nil {
		buf = &datasync.ImageBuffers{}
	}
	b := datastore.ImageBuffers{Data: buf.Data, Snap: buf.Snap}
	img, err := c.store.ChunkImageInto(id, &b)
	buf.Data, buf.Snap = b.Data, b.Snap
	if errors.Is(err, datastore.ErrChunkNotExist) {
		return datasync.ChunkImage{}, fmt.Errorf("chunk %d: %w", id, datasync.ErrChunkGone)
	}
	if err != nil {
		return datasync.ChunkImage{}, err
	}
	bs := c.store.Options().BlockSize
	out := datasync.ChunkImage{ID: id, Index: SeqIndex(img.Seq), Op: SeqOp(img.Seq), Sn: img.Meta.Sn, CorrectedSn: img.Meta.CorrectedSn,
		BlockSize: bs, Data: img.ChunkData}
	if img.Meta.Location != "" {
		if err := c.fillClone(img.Meta, out.Data, bs); err != nil {
			return datasync.ChunkImage{}, fmt.Errorf("chunk %d: %w", id, err)
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
func (c *syncChunks) fillClone(m datastore.MetaPage, data []byte, bs uint32) error {
	if c.sources == nil {
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
		if err := c.sources.fetch(ctx, loc, data[i*bs:j*bs], i*bs); err != nil {
			return fmt.Errorf("clone source %s: %w", m.Location, err)
		}
		i = j
	}
	return nil
}

func (c *syncChunks) Materialize(ctx context.Context, location string, size uint32) ([]byte, error) {
	if c.sources == nil {
		return nil, errors.New("no clone source reader")
	}
	loc, err := parseLocation(location)
	if err != nil {
		return nil, fmt.Errorf("clone location %q: %w", location, err)
	}
	buf := make([]byte, size)
	if err := c.sources.fetch(ctx, loc, buf, 0); err != nil {
		return nil, fmt.Errorf("clone source %s: %w", location, err)
	}
	return buf, nil
}
