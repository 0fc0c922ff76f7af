package datastore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
)

// Loading read views at Open, and their files for a snapshot stream (see
// the read views section of view.go).

// viewEnt is a view file found at Open: chunk id (0 for an info file),
// sequence number (I, or D for a moved-aside chunk) and path.
type viewEnt struct {
	id, seq uint64
	path    string
}

// viewLoad is what load found of the views.
type viewLoad struct{ infos, files, bases []viewEnt }

// loadViews builds the view table from the files found; it runs after the
// chunks are loaded. A pre-image file attaches to its live chunk when the
// chunk's stamp is below the first moved-aside file of its id after the
// view (the chunk is the incarnation the view covered: a follower got it
// imaged before its delete, which the replay redoes), else to that
// moved-aside file. Pre-image files without a view info, or without a
// chunk to read the rest from, and moved-aside files no pre-image reads
// from, are disposed of (leftovers of an interrupted drop).
func (s *Store) loadViews(vl viewLoad) (changed bool, err error) {
	vs := &s.views
	vs.byseq, vs.bases, vs.unsynced = map[uint64]*view{}, map[string]*baseFile{}, map[*viewFile]uint32{}
	for _, e := range vl.infos {
		b, err := s.readWhole(e.path)
		if err != nil {
			return false, fmt.Errorf("view info %s: %w", e.path, err)
		}
		budget, info, err := decodeViewInfo(b)
		if err != nil {
			return false, fmt.Errorf("view info %s: %w", e.path, err)
		}
		vs.byseq[e.seq] = &view{seq: e.seq, info: info, budget: budget, path: e.path, files: map[uint64]*viewFile{}}
	}
	bases := map[uint64][]viewEnt{}
	for _, e := range vl.bases {
		bases[e.id] = append(bases[e.id], e)
	}
	for _, l := range bases {
		slices.SortFunc(l, func(a, b viewEnt) int { return cmpU64(a.seq, b.seq) })
	}
	dispose := func(path, why string) error {
		s.log.Warn("datastore: disposing of read view file", "file", path, "why", why)
		changed = true
		if err := s.fs.Remove(path); err != nil {
			return fmt.Errorf("dispose of %s: %w", path, err)
		}
		return nil
	}
	for _, e := range vl.files {
		v := vs.byseq[e.seq]
		if v == nil {
			if err := dispose(e.path, "its view was dropped"); err != nil {
				return changed, err
			}
			continue
		}
		var base *viewEnt
		for i, b := range bases[e.id] {
			if b.seq > e.seq {
				base = &bases[e.id][i]
				break
			}
		}
		c := s.chunks[e.id]
		live := c != nil && (base == nil || c.meta.Seq < base.seq)
		if !live && base == nil {
			if err := dispose(e.path, "its chunk is gone"); err != nil {
				return changed, err
			}
			continue
		}
		vf, err := s.openViewFile(v, e)
		if err != nil {
			return changed, err
		}
		v.files[e.id] = vf
		if live {
			vf.chunk = c
			c.views = append(c.views, vf)
			continue
		}
		name := baseFileName(e.id, base.seq)
		b := vs.bases[name]
		if b == nil {
			f, err := s.fs.OpenFile(base.path, os.O_RDONLY, 0)
			if err != nil {
				return changed, fmt.Errorf("moved-aside chunk file %s: %w", base.path, err)
			}
			b = &baseFile{name: name, path: base.path, f: f}
			vs.bases[name] = b
		}
		b.refs++
		vf.base.Store(b)
	}
	for _, e := range vl.bases {
		if vs.bases[baseFileName(e.id, e.seq)] == nil {
			if err := dispose(e.path, "no read view covers it"); err != nil {
				return changed, err
			}
		}
	}
	vs.live.Store(int64(len(vs.byseq)))
	return changed, nil
}

// readWhole reads file path whole.
func (s *Store) readWhole(path string) ([]byte, error) {
	fi, err := s.fs.Stat(path)
	if err != nil {
		return nil, err
	}
	f, err := s.fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, fi.Size())
	if err := readFull(f, b); err != nil {
		return nil, err
	}
	return b, nil
}

// openViewFile opens pre-image file e of view v and reads its index.
func (s *Store) openViewFile(v *view, e viewEnt) (*viewFile, error) {
	f, err := s.fs.OpenFile(e.path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("pre-image file %s: %w", e.path, err)
	}
	head := make([]byte, int64(s.g.pageSize)+s.viewIdxLen())
	if _, err := f.ReadAt(head, 0); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("pre-image file %s: read header: %w", e.path, err)
	}
	if err := checkViewHeader(head, e.id, e.seq); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("pre-image file %s: %w", e.path, err)
	}
	vf := &viewFile{v: v, id: e.id, path: e.path, f: f, saved: newBitmap(s.g.blocks),
		idx: slices.Clone(head[s.g.pageSize : int64(s.g.pageSize)+8*int64(s.g.blocks)])}
	durable := decodeViewDurable(head)
	if err := s.dropTornSlots(vf, durable); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("pre-image file %s: %w", e.path, err)
	}
	for i := range s.g.blocks {
		if slot := binary.LittleEndian.Uint32(vf.idx[8*i:]); slot != 0 {
			vf.saved.set(i)
			vf.next = max(vf.next, slot)
			v.saved.Add(uint64(s.g.blockSize))
		}
	}
	vf.next = max(vf.next, durable)
	vf.alloc = vf.next
	return vf, nil
}

// dropTornSlots clears the index entries of vf whose slot is not below
// the durable mark and does not hold the block the entry's crc names: a
// capture writes its slots and their index entries and then syncs once,
// so a crash before that sync can leave an entry whose slot never reached
// the disk. Its chunk block was not overwritten yet (that comes after the
// sync), so the replayed write saves it again. The cleared entries are
// written back; the next capture's sync makes them durable before the
// mark can pass their slots.
func (s *Store) dropTornSlots(vf *viewFile, durable uint32) error {
	var buf []byte
	for i := range s.g.blocks {
		e := vf.idx[8*i : 8*i+8]
		slot := binary.LittleEndian.Uint32(e)
		if slot == 0 || slot-1 < durable {
			continue
		}
		if buf == nil {
			buf = make([]byte, s.g.blockSize)
		}
		n, err := vf.f.ReadAt(buf, s.slotOff(slot-1))
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read slot %d: %w", slot-1, err)
		}
		clear(buf[n:])
		if s.g.crcEntry(buf) == binary.LittleEndian.Uint32(e[4:]) {
			continue
		}
		clear(e)
		if _, err := vf.f.WriteAt(e, int64(s.g.pageSize)+8*int64(i)); err != nil {
			return fmt.Errorf("clear the index entry of block %d: %w", i, err)
		}
	}
	return nil
}

// closeViews closes every view file.
func (s *Store) closeViews() {
	vs := &s.views
	vs.mu.Lock()
	defer vs.mu.Unlock()
	for _, v := range vs.byseq {
		for _, vf := range v.files {
			_ = vf.f.Close()
		}
	}
	for _, b := range vs.bases {
		_ = b.f.Close()
	}
}

// viewFileNames lists the views' files (Files): pre-images of live
// chunks and of moved-aside ones, the moved-aside files, the infos.
func (s *Store) viewFileNames() []string {
	vs := &s.views
	vs.mu.RLock()
	defer vs.mu.RUnlock()
	var out, infos []string
	for _, v := range vs.byseq {
		for _, vf := range v.files {
			out = append(out, viewFileName(vf.id, v.seq))
		}
		infos = append(infos, viewInfoName(v.seq))
	}
	for name := range vs.bases {
		out = append(out, name)
	}
	slices.Sort(out)
	slices.Sort(infos)
	return append(out, infos...)
}

// FileImage is one whole file of a snapshot stream.
type FileImage struct {
	Name string
	Data []byte
}

// imageViewFile reads pre-image file vf whole (as long as its slots). The
// caller holds what guards vf (the chunk's mu, or views.mu for a file of a
// deleted chunk).
func (s *Store) imageViewFile(vf *viewFile) (FileImage, error) {
	data := make([]byte, s.slotOff(vf.next))
	if _, err := vf.f.ReadAt(data, 0); err != nil {
		return FileImage{}, fmt.Errorf("image of pre-image file %s: %w", vf.path, err)
	}
	return FileImage{Name: viewFileName(vf.id, vf.v.seq), Data: data}, nil
}

// MovedAside returns the names of the moved-aside chunk files now, and
// of those of chunk id when id is not 0.
func (s *Store) MovedAside(id uint64) []string {
	vs := &s.views
	vs.mu.RLock()
	defer vs.mu.RUnlock()
	var out []string
	for name := range vs.bases {
		if cid, _, _ := parseFileName(name); id == 0 || cid == id {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// MovedAsideImage returns moved-aside file name and the pre-image files
// that read from it, skipping those sent says were sent already (with
// their live chunk); nil if it is gone.
func (s *Store) MovedAsideImage(name string, sent func(string) bool) ([]FileImage, error) {
	vs := &s.views
	vs.mu.RLock()
	defer vs.mu.RUnlock()
	b := vs.bases[name]
	if b == nil {
		return nil, nil
	}
	var out []FileImage
	for _, v := range vs.byseq {
		for _, vf := range v.files {
			if vf.base.Load() != b {
				continue
			}
			if sent(viewFileName(vf.id, v.seq)) {
				return nil, nil // its chunk was imaged live before the delete: the replay moves it aside
			}
			img, err := s.imageViewFile(vf)
			if err != nil {
				return nil, err
			}
			out = append(out, img)
		}
	}
	data := make([]byte, s.g.fileSize)
	if err := readFull(b.f, data); err != nil {
		return nil, fmt.Errorf("image of %s: %w", name, err)
	}
	return append([]FileImage{{Name: name, Data: data}}, out...), nil
}

// ViewInfoImages returns every live view's info file.
func (s *Store) ViewInfoImages() []FileImage {
	vs := &s.views
	vs.mu.RLock()
	defer vs.mu.RUnlock()
	out := make([]FileImage, 0, len(vs.byseq))
	for _, v := range vs.byseq {
		out = append(out, FileImage{Name: viewInfoName(v.seq), Data: encodeViewInfo(v.budget, v.info)})
	}
	slices.SortFunc(out, func(a, b FileImage) int {
		if a.Name < b.Name {
			return -1
		}
		return 1
	})
	return out
}

// ViewStreamReserve bounds what a snapshot stream started now yields of
// the views for chunks listed chunks, as a FileStream's Reserve counts
// (name + 10 + data per file): for every live view, a header and index
// per listed chunk and per file it has, plus its budget and its info;
// every moved-aside file. maxName bounds a file name. A view registered
// after the stream started is not counted: its files would pass the
// reserve, and the stream fails (a later one is retried).
func (s *Store) ViewStreamReserve(chunks int, maxName int) int64 {
	vs := &s.views
	vs.mu.RLock()
	defer vs.mu.RUnlock()
	head := int64(maxName) + 10 + int64(s.g.pageSize) + s.viewIdxLen()
	var n int64
	for _, v := range vs.byseq {
		n += int64(chunks+len(v.files))*head + int64(v.budget) + int64(maxName) + 10 + int64(24+len(v.info))
	}
	n += int64(len(vs.bases)) * (int64(maxName) + 10 + s.g.fileSize)
	return n
}
