package chunkserver

import (
	"errors"
	"io"

	"github.com/chunkraft/chunkraft/chunkserver/datastore"
	"github.com/chunkraft/chunkraft/copyset"
)

// The chunk machine is a copyset.Streamer: a follower gets each chunk as a
// consistent image (datastore.ChunkImage: the chunk file and its snapshot
// file as of one moment, stamped with the index of the last op on the
// chunk), because a live copy can hold a block from one moment and its
// checksum, or the snapshot blocks preserving it, from another, which a
// replayed copy-on-write would then read. Chunks are imaged one at a time,
// in id order, as the follower takes them; a chunk deleted by then is left
// out (its replayed ops create and delete it again), one created since the
// stream started is not sent (its creating op comes after the snapshot
// index, so the replay creates it).

var _ copyset.Streamer = (*chunkMachine)(nil)

// maxSnapFileName bounds the name of a chunk's snapshot file,
// "chunk_<id>_snap_<sn>" with 20-digit numbers.
const maxSnapFileName = len("chunk__snap_") + 2*20

// Stream implements copyset.Streamer.
func (m *chunkMachine) Stream() (copyset.FileStream, error) {
	return &chunkStream{store: m.store, ids: m.store.ListChunks()}, nil
}

type chunkStream struct {
	store *datastore.Store
	ids   []uint64
	snap  *datastore.Image // the image whose snapshot file is next
}

// Reserve implements copyset.FileStream: every listed chunk with a
// snapshot, since a chunk may take one before its turn comes.
func (s *chunkStream) Reserve() int64 {
	per := 2 * (10 + int64(maxSnapFileName) + s.store.FileSize())
	return int64(len(s.ids)) * per
}

// Next implements copyset.FileStream.
func (s *chunkStream) Next() (string, []byte, error) {
	if img := s.snap; img != nil {
		s.snap = nil
		return img.SnapName, img.SnapData, nil
	}
	for len(s.ids) > 0 {
		id := s.ids[0]
		s.ids = s.ids[1:]
		img, err := s.store.ChunkImage(id)
		if errors.Is(err, datastore.ErrChunkNotExist) {
			continue
		}
		if err != nil {
			return "", nil, err
		}
		if img.SnapData != nil {
			s.snap = &img
		}
		return img.Name, img.Data, nil
	}
	return "", nil, io.EOF
}

// Close implements copyset.FileStream.
func (s *chunkStream) Close() error {
	s.ids, s.snap = nil, nil
	return nil
}
