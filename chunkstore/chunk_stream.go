package chunkstore

import (
	"errors"
	"io"

	"github.com/chunkraft/chunkraft/chunkstore/datastore"
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

//
// Read views (datastore/view.go) ride along: a chunk's image carries its
// pre-image files; after the chunks come the moved-aside files of deleted
// chunks with their pre-images (those that existed when the stream
// started, and those of listed chunks deleted before their turn), then
// the view infos, last.

var _ copyset.Streamer = (*chunkMachine)(nil)

// maxSnapFileName bounds the name of a chunk's snapshot, pre-image or
// moved-aside file, "chunk_<id>_vbase_<seq>" with 20-digit numbers.
const maxSnapFileName = len("chunk__vbase_") + 2*20

// Stream implements copyset.Streamer.
func (m *chunkMachine) Stream() (copyset.FileStream, error) {
	ids := m.store.ListChunks()
	return &chunkStream{store: m.store, ids: ids, aside: m.store.MovedAside(0), sent: map[string]bool{},
		viewReserve: m.store.ViewStreamReserve(len(ids), maxSnapFileName)}, nil
}

type chunkStream struct {
	store       *datastore.Store
	ids         []uint64
	aside       []string              // moved-aside files to send after the chunks
	queue       []datastore.FileImage // files of the current chunk still to yield
	sent        map[string]bool       // pre-image files sent with their chunk
	infosSent   bool
	viewReserve int64
}

// Reserve implements copyset.FileStream: every listed chunk with a
// snapshot, since a chunk may take one before its turn comes, and the
// views' bound (datastore.Store.ViewStreamReserve).
func (s *chunkStream) Reserve() int64 {
	per := 2 * (10 + int64(maxSnapFileName) + s.store.FileSize())
	return int64(len(s.ids))*per + s.viewReserve
}

// Next implements copyset.FileStream.
func (s *chunkStream) Next() (string, []byte, error) {
	for {
		if len(s.queue) > 0 {
			fi := s.queue[0]
			s.queue = s.queue[1:]
			return fi.Name, fi.Data, nil
		}
		switch {
		case len(s.ids) > 0:
			id := s.ids[0]
			s.ids = s.ids[1:]
			img, err := s.store.ChunkImage(id)
			if errors.Is(err, datastore.ErrChunkNotExist) {
				s.aside = append(s.aside, s.store.MovedAside(id)...)
				continue
			}
			if err != nil {
				return "", nil, err
			}
			if img.SnapData != nil {
				s.queue = append(s.queue, datastore.FileImage{Name: img.SnapName, Data: img.SnapData})
			}
			for _, v := range img.Views {
				s.sent[v.Name] = true
			}
			s.queue = append(s.queue, img.Views...)
			return img.Name, img.Data, nil
		case len(s.aside) > 0:
			name := s.aside[0]
			s.aside = s.aside[1:]
			if s.sent[name] {
				continue
			}
			s.sent[name] = true
			fis, err := s.store.MovedAsideImage(name, func(n string) bool { return s.sent[n] })
			if err != nil {
				return "", nil, err
			}
			s.queue = fis
		case !s.infosSent:
			s.infosSent = true
			s.queue = s.store.ViewInfoImages()
		default:
			return "", nil, io.EOF
		}
	}
}

// Close implements copyset.FileStream.
func (s *chunkStream) Close() error {
	s.ids, s.aside, s.queue = nil, nil, nil
	return nil
}
