package datastore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/klauspost/crc32"
)

// Read views: point-in-time reads of chunks for remote readers (the disagg
// service's EstablishDisaggTask / FetchDisaggPages).
//
// A view is registered by the op at sequence number I (RegisterViewAt,
// I = the op's index << 8 | position, see Replay) over ranges of chunk
// ids. It covers the chunks of those ranges that exist when it is
// applied, in the incarnation they have then; from I on, before a block
// of a covered chunk is overwritten for the first time, its content is
// saved (the pre-image), and when a covered chunk is deleted its file is
// moved aside instead of discarded. A read as of I (ReadView) takes a
// block's pre-image if it was saved, else the block of the live chunk
// (or of the moved-aside file): the content at I either way. DropViewAt
// removes the view and frees its files.
//
// # Files
//
//	view_<I>                 the view's info: budget and the caller's
//	                         opaque description (written once, at I)
//	chunk_<id>_view_<I>      pre-images of chunk id for view I
//	chunk_<id>_vbase_<D>     chunk id as it was when the op at D deleted it,
//	                         kept for the views that covered it
//
// A pre-image file is [header page][index][slots]: the header names chunk
// and view and carries the durable mark W (every slot below W is on
// disk); the index has 8 bytes per block of the chunk (little-endian slot
// number + 1, 0 when not saved, then the block's crc entry, as in a
// chunk's crc table); slot k holds the k-th block saved, at header +
// index + k*BlockSize. The file holds the slots written and at most
// viewPrealloc zeroed slots after them (a capture past the end extends it
// by that many), so its size is about what the view costs on disk, and a
// snapshot stream sends what is saved, not a chunk's worth.
//
// # Consistency with the chunks (the argument)
//
// Everything a view is (info, pre-images, moved-aside files) lives in the
// chunk store, next to the chunks, and is changed only by the chunk
// machine's ops in log order, so the two cases where a state is rebuilt
// from parts of different moments are covered by the rules the chunks
// already follow:
//
//  1. Replay after a crash (kill -9). Apply re-runs from the last durable
//     point. A capture writes the pre-image slots and their index entries,
//     syncs once (fdatasync; an fsync when it extended the file), then
//     sets the durable mark to the slots written, and only then is the
//     chunk block overwritten (a plain pwrite that may reach the disk at
//     any time after): a chunk block that changed after I on disk means
//     its pre-image and index entry are on disk. An index entry on disk
//     whose slot is not below the mark may come from a capture whose sync
//     did not complete; Open checks its slot against the entry's crc and
//     clears it when they differ (its chunk block was not overwritten, so
//     the replay saves it again), and an entry below the mark was synced
//     before the mark was written. A write whose op carries its
//     pre-image (PreImage: read by the leader when it proposed the write)
//     saves it without a sync: the raft log holds it until the store's
//     next Sync, which syncs such captures (syncViews) before the log may
//     drop the op, and a replay saves it again from the op whatever the
//     chunk block on disk holds. The files of
//     a view are created durably (file and directory fsynced) when the
//     register op applies, before any later op. On replay the register op
//     finds its files and keeps them; a replayed write before I (its
//     sequence number is below the view's) captures nothing; a replayed
//     write after I finds the blocks it already saved in the index and
//     saves the others, whose chunk blocks cannot have changed on disk
//     since I (their overwrite came after the capture, which did not
//     complete) and have been brought back to their content at I by the
//     replay of the writes before I. So a replay never records a
//     post-image. Names carry I, never a reused id: a view dropped and
//     another registered later have different files, and a replay of the
//     first cannot take the second's.
//
//     The one exception is a register op replayed after its drop was
//     durable (files gone): it creates the files again, empty, while the
//     chunk on disk may hold data newer than I, so the replay may save
//     post-images. The replay of the drop, later in the same log, removes
//     them before anything can read them: reads are served by a leader
//     that has applied its log (the disagg service waits for a read
//     barrier).
//
//  2. Snapshot install on a new follower. The chunk machine is a
//     copyset.Streamer: each chunk comes as an Image taken under the
//     chunk's lock, and the image carries the chunk's pre-image files
//     with it, so chunk and pre-images are of one moment, stamped with the
//     chunk's last op (a register op stamps every chunk it covers, a chunk
//     created after I carries a later stamp). The follower replays the log
//     from the snapshot index, skipping on each chunk the ops its stamp
//     covers: a register op applies to a chunk exactly when the chunk's
//     image predates it, and then saves from the chunk's content as of the
//     register op (the image plus the replayed ops). A pre-image store in
//     another machine's files would come from another moment than the
//     chunk images and its replay would record post-images; here it
//     cannot.
//
//     Files of deleted chunks (vbase and their pre-images) never change
//     after the delete; the stream sends them after the chunks (those that
//     existed when it started, and those of chunks deleted before their
//     turn), then the view infos, last, so that a pre-image in a chunk
//     image always finds its view's info unless the view was dropped in
//     the meantime (then Open disposes of the orphan pre-images and the
//     replayed drop finds nothing to do). A chunk imaged before its delete
//     at D arrives live with its pre-images; Open attaches them to it
//     (its stamp is below D), and the replayed delete moves it aside
//     again.
//
// # Bounds
//
// Each view has a budget of pre-image bytes (from its register op). A
// capture that would pass it is not made and the view is marked over
// budget: its reads fail (ErrViewOverBudget) from then on, on every
// replica, so an incomplete view is never read. A view's disk use is thus
// at most its budget plus a header, an index and viewPrealloc zeroed
// slots per covered chunk; a snapshot stream sends the slots written and
// reserves the budget plus a header and an index per chunk. The number of views is
// bounded by the caller (the disagg service refuses to register past its
// limit).
//
// # Locks
//
// A live chunk's pre-image files are guarded by the chunk's mu, like its
// snapshot; views.mu guards the table of views and the moved-aside files.
// Lock order: chunkFile.syncMu, chunkFile.mu, views.mu, Store.mu; a read
// of a view looks its pre-image file up under views.mu, lets it go, then
// takes the chunk's mu shared and the pre-image file's mu shared (which a
// drop takes to close the files).

// Errors of read views.
var (
	// ErrViewNotExist: no view registered at that sequence number (never
	// registered, or dropped).
	ErrViewNotExist = errors.New("read view does not exist")
	// ErrViewOverBudget: the view passed its pre-image budget and can no
	// longer be read.
	ErrViewOverBudget = errors.New("read view is over its pre-image budget")
	// ErrNotInView: the chunk is not covered by the view.
	ErrNotInView = errors.New("chunk is not in the read view")
)

const (
	viewInfix      = "_view_"
	baseInfix      = "_vbase_"
	viewInfoPrefix = "view_"
	// viewMagic starts a pre-image file's header and a view info file.
	viewMagic = "CRVIEW01"
	// MaxViewInfo bounds a view's info.
	MaxViewInfo = 64 << 10
)

// ChunkRange is the chunk ids [Lo, Hi); Hi 0 is no upper bound.
type ChunkRange struct{ Lo, Hi uint64 }

func (r ChunkRange) has(id uint64) bool { return id >= r.Lo && (r.Hi == 0 || id < r.Hi) }

// ViewSpec is what a register op says of a view.
type ViewSpec struct {
	// Ranges are the chunk ids covered (their chunks existing at I).
	Ranges []ChunkRange
	// Budget bounds the view's pre-image bytes.
	Budget uint64
	// Info is the caller's description of the view (at most MaxViewInfo
	// bytes), returned by Views.
	Info []byte
}

// ViewState describes a live view.
type ViewState struct {
	Seq       uint64 // the register op's sequence number I
	Info      []byte
	Budget    uint64
	Saved     uint64 // pre-image bytes saved
	OverBudge bool
	Chunks    []uint64 // covered chunk ids, ascending
}

// ViewChunk is a covered chunk and its blocks that held data (not zero)
// at I.
type ViewChunk struct {
	ID     uint64
	Blocks []uint32
}

// viewTable is the Store's table of read views.
type viewTable struct {
	mu    sync.RWMutex
	byseq map[uint64]*view
	live  atomic.Int64         // len(byseq), read without mu
	bases map[string]*baseFile // by file name
	// unsynced maps the pre-image files with captures not synced yet (see
	// PreImage) to how many of their slots were written; syncViews syncs
	// them.
	unsynced map[*viewFile]uint32
}

type view struct {
	seq    uint64
	info   []byte
	budget uint64
	path   string
	saved  atomic.Uint64 // bytes
	over   atomic.Bool
	files  map[uint64]*viewFile // by chunk id; guarded by views.mu
}

// viewFile is the pre-images of one chunk for one view. While the chunk
// is live its fields are guarded by the chunk's mu; once the chunk is
// deleted (base set) it never changes.
type viewFile struct {
	v     *view
	id    uint64
	path  string
	f     File
	idx   []byte // the index, 8 bytes per block
	saved bitmap
	next  uint32 // next slot
	alloc uint32 // slots the file holds (written or preallocated)
	chunk *chunkFile
	base  atomic.Pointer[baseFile]
	// mu is held shared by reads of the view, exclusively by the drop
	// that closes its files (dropped).
	mu      sync.RWMutex
	dropped bool
}

// baseFile is a deleted chunk's file kept for the views covering it.
type baseFile struct {
	name string
	path string
	f    File
	refs int // pre-image files that read from it; guarded by views.mu
}

func viewFileName(id, seq uint64) string {
	return chunkFileName(id) + viewInfix + strconv.FormatUint(seq, 10)
}
func baseFileName(id, seq uint64) string {
	return chunkFileName(id) + baseInfix + strconv.FormatUint(seq, 10)
}
func viewInfoName(seq uint64) string { return viewInfoPrefix + strconv.FormatUint(seq, 10) }

// parseViewInfoName parses "view_<seq>".
func parseViewInfoName(name string) (uint64, bool) {
	rest, ok := strings.CutPrefix(name, viewInfoPrefix)
	if !ok {
		return 0, false
	}
	return parseDecimal(rest)
}

func (s *Store) viewIdxLen() int64 {
	return (int64(s.g.blocks)*8 + int64(s.g.pageSize) - 1) / int64(s.g.pageSize) * int64(s.g.pageSize)
}

func (s *Store) slotOff(k uint32) int64 {
	return int64(s.g.pageSize) + s.viewIdxLen() + int64(k)*int64(s.g.blockSize)
}

func encodeViewHeader(page []byte, id, seq uint64) {
	copy(page, viewMagic)
	binary.LittleEndian.PutUint64(page[8:], seq)
	binary.LittleEndian.PutUint64(page[16:], id)
	binary.LittleEndian.PutUint32(page[24:], crc32.Checksum(page[:24], castagnoli))
}

// viewDurableOff is where a pre-image file's header keeps its durable
// mark: the number of slots W below which every slot is durable (uint32)
// and a crc32c of it. A mark whose crc fails reads as 0.
const viewDurableOff = 32

// viewPrealloc is how many slots past the last one written a pre-image
// file is extended by (with zeros, then fsynced) when a capture passes its
// end, so that the captures after it write over allocated blocks and
// make them durable with an fdatasync that commits no metadata.
const viewPrealloc = 64

func encodeViewDurable(w uint32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, w)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func decodeViewDurable(page []byte) uint32 {
	b := page[viewDurableOff : viewDurableOff+8]
	if binary.LittleEndian.Uint32(b[4:]) != crc32.Checksum(b[:4], castagnoli) {
		return 0
	}
	return binary.LittleEndian.Uint32(b)
}

func checkViewHeader(page []byte, id, seq uint64) error {
	if string(page[:8]) != viewMagic || binary.LittleEndian.Uint32(page[24:]) != crc32.Checksum(page[:24], castagnoli) {
		return fmt.Errorf("pre-image header: bad magic or checksum: %w", ErrFileFormat)
	}
	if binary.LittleEndian.Uint64(page[8:]) != seq || binary.LittleEndian.Uint64(page[16:]) != id {
		return fmt.Errorf("pre-image header names another chunk or view: %w", ErrFileFormat)
	}
	return nil
}

// encodeViewInfo is a view info file: magic, budget, length, info, crc32c
// of what precedes it.
func encodeViewInfo(budget uint64, info []byte) []byte {
	b := make([]byte, 0, 24+len(info))
	b = append(b, viewMagic...)
	b = binary.LittleEndian.AppendUint64(b, budget)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(info)))
	b = append(b, info...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func decodeViewInfo(b []byte) (budget uint64, info []byte, err error) {
	if len(b) < 24 || string(b[:8]) != viewMagic {
		return 0, nil, fmt.Errorf("view info: bad magic or short: %w", ErrFileFormat)
	}
	n := binary.LittleEndian.Uint32(b[16:])
	if uint64(len(b)) != 24+uint64(n) || binary.LittleEndian.Uint32(b[20+n:]) != crc32.Checksum(b[:20+n], castagnoli) {
		return 0, nil, fmt.Errorf("view info: bad length or checksum: %w", ErrFileFormat)
	}
	return binary.LittleEndian.Uint64(b[8:]), append([]byte(nil), b[20:20+n]...), nil
}

// writeWhole creates file path with content b durably; the caller
// fsyncs the directory.
func (s *Store) writeWhole(path string, b []byte) error {
	err := writeFileDurable(s.fs, path, path+tmpSuffix, b)
	if err != nil {
		_ = s.fs.Remove(path + tmpSuffix)
	}
	return err
}

// RegisterViewAt registers the read view of the op at sequence number seq
// (see the read views section above). Applying it again keeps what exists
// (info, pre-image files); a chunk whose stamp is past seq is skipped (its
// state reflects the op already, or it was created after it).
func (s *Store) RegisterViewAt(seq uint64, spec ViewSpec) error {
	if len(spec.Info) > MaxViewInfo {
		return fmt.Errorf("datastore: register view %d: info of %d bytes, at most %d: %w", seq, len(spec.Info), MaxViewInfo, ErrInvalidArg)
	}
	if err := s.enter("register view"); err != nil {
		return err
	}
	defer s.inflight.Done()
	// One directory fsync at the end makes the files durable: no op
	// captures into them before this one has returned, and after a crash
	// before it pre-image files without their info are disposed of at
	// Open and the replay registers the view again.
	vs := &s.views
	vs.mu.Lock()
	v := vs.byseq[seq]
	vs.mu.Unlock()
	created := false
	if v == nil {
		v = &view{seq: seq, info: append([]byte(nil), spec.Info...), budget: spec.Budget,
			path: joinDir(s.opts.Dir, viewInfoName(seq)), files: map[uint64]*viewFile{}}
		if err := s.writeWhole(v.path, encodeViewInfo(spec.Budget, spec.Info)); err != nil {
			return fmt.Errorf("datastore: register view %d: write info: %w", seq, err)
		}
		vs.mu.Lock()
		vs.byseq[seq] = v
		vs.live.Store(int64(len(vs.byseq)))
		vs.mu.Unlock()
		created = true
	}
	for _, id := range s.ListChunks() {
		if !slices.ContainsFunc(spec.Ranges, func(r ChunkRange) bool { return r.has(id) }) {
			continue
		}
		c, err := s.lookup("register view on", id, lockExclusive)
		if isNotExist(err) {
			continue
		}
		if err != nil {
			return err
		}
		made, err := s.attachNewView(c, v)
		c.mu.Unlock()
		if err != nil {
			return fmt.Errorf("datastore: register view %d on chunk %d: %w", seq, id, err)
		}
		created = created || made
	}
	if created {
		if err := s.fs.SyncDir(s.opts.Dir); err != nil {
			return fmt.Errorf("datastore: register view %d: sync dir: %w", seq, err)
		}
	}
	return nil
}

// attachNewView creates chunk c's pre-image file for v unless the op is
// replayed on c or the file exists. The caller holds c.mu exclusively.
func (s *Store) attachNewView(c *chunkFile, v *view) (bool, error) {
	if !c.admit(v.seq) {
		return false, nil
	}
	s.views.mu.RLock()
	have := v.files[c.id]
	s.views.mu.RUnlock()
	if have != nil {
		return false, nil // replayed: kept (live, or moved aside with an older incarnation)
	}
	page := make([]byte, s.g.pageSize+uint32(s.viewIdxLen()))
	encodeViewHeader(page, c.id, v.seq)
	path := joinDir(s.opts.Dir, viewFileName(c.id, v.seq))
	if err := s.writeWhole(path, page); err != nil {
		return false, err
	}
	f, err := s.fs.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return false, err
	}
	vf := &viewFile{v: v, id: c.id, path: path, f: f, idx: make([]byte, 8*s.g.blocks), saved: newBitmap(s.g.blocks), chunk: c}
	c.views = append(c.views, vf)
	s.views.mu.Lock()
	v.files[c.id] = vf
	s.views.mu.Unlock()
	return true, nil
}

// PreImage is what a write's replicated op carries for the read views of
// its chunk: blocks [Lo, Lo+len(Data)/BlockSize) of the chunk as the
// leader read them when it proposed the write (PreImageFor), and ViewSeq,
// the newest view of the chunk then. A view at or before ViewSeq that has
// not saved a block when the write applies saves it from Data: nothing
// wrote the block since the view (a write would have saved it), so Data
// is its content at the view. The capture then needs no sync before the
// chunk is overwritten: the raft log holds the pre-image until the
// store's next Sync, and a replay saves it again from the op.
type PreImage struct {
	ViewSeq uint64
	Lo      uint32
	Data    []byte
}

// PreImageFor returns the pre-image a write of n bytes at off of chunk id
// should carry: the run of blocks of the range that some live view of
// the chunk lacks, read now; nil when there is none, when the chunk does
// not exist or is a clone chunk (a paste changes a clone's blocks without
// saving them), or when the read fails (the write's apply then reads the
// chunk itself).
func (s *Store) PreImageFor(id uint64, off uint32, n int) *PreImage {
	if s.views.live.Load() == 0 || s.checkRange("write", id, off, n) != nil {
		return nil
	}
	c, err := s.lookup("pre-image", id, lockShared)
	if err != nil {
		return nil
	}
	defer c.mu.RUnlock()
	if c.isClone() {
		return nil
	}
	lo, hi := s.blockRange(off, n)
	plo, phi := hi, lo
	var seq uint64
	for _, vf := range c.views {
		seq = max(seq, vf.v.seq)
		if vf.v.over.Load() {
			continue
		}
		_ = vf.saved.runs(lo, hi, false, func(a, b uint32) error {
			plo, phi = min(plo, a), max(phi, b)
			return nil
		})
	}
	if plo >= phi {
		return nil
	}
	buf := make([]byte, (phi-plo)*s.g.blockSize)
	if err := s.g.readBlocks(c.f, chunkName(c.id), plo, buf, &s.stats.crcFailures); err != nil {
		return nil
	}
	return &PreImage{ViewSeq: seq, Lo: plo, Data: buf}
}

// captureViews saves, for every view of chunk c registered before the
// write at seq, the blocks of [lo, hi) it has not saved yet (see the
// argument above for the order of writes and fsyncs), from pre where it
// may (see PreImage), else from the chunk. The caller holds c.mu
// exclusively.
func (s *Store) captureViews(c *chunkFile, seq uint64, lo, hi uint32, pre *PreImage) error {
	bs := s.g.blockSize
	for _, vf := range c.views {
		v := vf.v
		if (seq != 0 && seq <= v.seq) || v.over.Load() {
			continue
		}
		need := uint64(int(hi-lo)-vf.saved.countIn(lo, hi)) * uint64(bs)
		if need == 0 {
			continue
		}
		if v.saved.Load()+need > v.budget {
			v.over.Store(true)
			continue
		}
		first := vf.next
		idx := slices.Clone(vf.idx)
		// logged: every block saved comes from pre (see PreImage).
		logged := pre != nil && v.seq <= pre.ViewSeq
		var have func(a, b uint32) []byte
		if logged {
			end := pre.Lo + uint32(len(pre.Data))/bs
			have = func(a, b uint32) []byte {
				if a < pre.Lo || b > end {
					logged = false
					return nil
				}
				return pre.Data[(a-pre.Lo)*bs : (b-pre.Lo)*bs]
			}
		}
		n, err := s.copyOutFrom(c, vf.saved, lo, hi, have, func(a, b uint32, buf []byte) error {
			slot := vf.next
			if _, err := vf.f.WriteAt(buf, s.slotOff(slot)); err != nil {
				return err
			}
			for i := a; i < b; i++ {
				binary.LittleEndian.PutUint32(idx[8*i:], slot+1+(i-a))
				binary.LittleEndian.PutUint32(idx[8*i+4:], s.g.crcEntry(buf[(i-a)*bs:(i-a+1)*bs]))
			}
			vf.next += b - a
			return nil
		})
		alloc, sync := vf.alloc, datasync
		if logged {
			sync = nil // the store's next Sync (see PreImage)
		} else if err == nil && vf.next > alloc {
			// Past the preallocated slots: extend the file with zeros and
			// fsync, which commits its new size and extents.
			alloc, sync = min(s.g.blocks, vf.next+viewPrealloc), File.Sync
			if alloc > vf.next {
				_, err = vf.f.WriteAt(make([]byte, (alloc-vf.next)*bs), s.slotOff(vf.next))
			}
		}
		if err == nil {
			_, err = vf.f.WriteAt(idx[8*lo:8*hi], int64(s.g.pageSize)+8*int64(lo))
		}
		if err == nil && sync != nil {
			err = sync(vf.f)
			if err == nil {
				// Every slot below next is durable now: the mark says so
				// from the file's next sync on.
				_, err = vf.f.WriteAt(encodeViewDurable(vf.next), viewDurableOff)
			}
		}
		if err != nil {
			vf.next = first
			return fmt.Errorf("save pre-images for view %d: %w", v.seq, err)
		}
		vf.alloc = max(vf.alloc, alloc)
		if sync == nil {
			s.views.mu.Lock()
			s.views.unsynced[vf] = vf.next
			s.views.mu.Unlock()
		}
		vf.idx = idx
		for i := lo; i < hi; i++ {
			if binary.LittleEndian.Uint32(idx[8*i:]) != 0 {
				vf.saved.set(i)
			}
		}
		v.saved.Add(uint64(n) * uint64(bs))
	}
	return nil
}

// syncViews makes the captures that were not synced durable (see
// PreImage): it syncs each such pre-image file and then sets its durable
// mark to the slots written before the fsync. Sync and Close run it, so
// that the raft log may drop the ops whose pre-images it held.
func (s *Store) syncViews() error {
	s.views.mu.Lock()
	todo := s.views.unsynced
	s.views.unsynced = map[*viewFile]uint32{}
	s.views.mu.Unlock()
	var errs []error
	for vf, next := range todo {
		vf.mu.RLock()
		var err error
		if !vf.dropped {
			if err = datasync(vf.f); err == nil {
				_, err = vf.f.WriteAt(encodeViewDurable(next), viewDurableOff)
			}
		}
		vf.mu.RUnlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("sync pre-image file %s: %w", vf.path, err))
			s.views.mu.Lock()
			s.views.unsynced[vf] = max(s.views.unsynced[vf], next)
			s.views.mu.Unlock()
		}
	}
	return errors.Join(errs...)
}

// moveAside keeps chunk c's file, about to be deleted by the op at seq,
// for its views: renamed to chunk_<id>_vbase_<seq>. The caller holds c's
// locks for removal and fsyncs the directory; it must neither close nor
// discard c.f afterwards.
func (s *Store) moveAside(c *chunkFile, seq uint64) error {
	if seq == 0 {
		for _, vf := range c.views {
			seq = max(seq, vf.v.seq+1)
		}
	}
	name := baseFileName(c.id, seq)
	path := joinDir(s.opts.Dir, name)
	if err := s.fs.Rename(c.path, path); err != nil {
		return fmt.Errorf("move chunk file aside for its read views: %w", err)
	}
	b := &baseFile{name: name, path: path, f: c.f, refs: len(c.views)}
	s.views.mu.Lock()
	s.views.bases[name] = b
	s.views.mu.Unlock()
	for _, vf := range c.views {
		vf.chunk = nil
		vf.base.Store(b)
	}
	c.views = nil
	return nil
}

// DropViewAt removes the view registered at viewSeq and its files (the op
// at seq; a missing view is success, so a replay is harmless).
func (s *Store) DropViewAt(seq, viewSeq uint64) error {
	if err := s.enter("drop view"); err != nil {
		return err
	}
	defer s.inflight.Done()
	vs := &s.views
	vs.mu.Lock()
	v := vs.byseq[viewSeq]
	delete(vs.byseq, viewSeq)
	vs.live.Store(int64(len(vs.byseq)))
	vs.mu.Unlock()
	if v == nil {
		return nil
	}
	vs.mu.RLock()
	files := make([]*viewFile, 0, len(v.files))
	for _, vf := range v.files {
		files = append(files, vf)
	}
	vs.mu.RUnlock()
	var errs []error
	for _, vf := range files {
		errs = append(errs, s.dropViewFile(vf))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("datastore: drop view %d: %w", viewSeq, err)
	}
	// The info goes last; whichever removals a crash keeps, Open disposes
	// of pre-image files without info and moved-aside files without
	// pre-images, and the replayed drop finishes.
	if err := s.fs.Remove(v.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("datastore: drop view %d: %w", viewSeq, err)
	}
	if err := s.fs.SyncDir(s.opts.Dir); err != nil {
		return fmt.Errorf("datastore: drop view %d: sync dir: %w", viewSeq, err)
	}
	return nil
}

// dropViewFile detaches vf from its chunk (or its moved-aside file, which
// goes with its last pre-image file) and removes it.
func (s *Store) dropViewFile(vf *viewFile) error {
	if vf.base.Load() == nil {
		if c, err := s.lookup("drop view on", vf.id, lockExclusive); err == nil {
			c.views = slices.DeleteFunc(c.views, func(x *viewFile) bool { return x == vf })
			c.mu.Unlock()
		}
	}
	vf.mu.Lock()
	vf.dropped = true
	_ = vf.f.Close()
	vf.mu.Unlock()
	if err := s.fs.Remove(vf.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if b := vf.base.Load(); b != nil {
		s.views.mu.Lock()
		b.refs--
		last := b.refs <= 0
		if last {
			delete(s.views.bases, b.name)
		}
		s.views.mu.Unlock()
		if last {
			_ = b.f.Close()
			if err := s.fs.Remove(b.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// Views returns the live views in ascending sequence order.
func (s *Store) Views() []ViewState {
	vs := &s.views
	vs.mu.RLock()
	defer vs.mu.RUnlock()
	out := make([]ViewState, 0, len(vs.byseq))
	for _, v := range vs.byseq {
		st := ViewState{Seq: v.seq, Info: v.info, Budget: v.budget, Saved: v.saved.Load(), OverBudge: v.over.Load()}
		for id := range v.files {
			st.Chunks = append(st.Chunks, id)
		}
		slices.Sort(st.Chunks)
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b ViewState) int { return cmpU64(a.Seq, b.Seq) })
	return out
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// viewFileOf returns the pre-image file of chunk id in the live view seq.
// The caller holds views.mu.
func (s *Store) viewFileOf(seq, id uint64) (*viewFile, error) {
	v := s.views.byseq[seq]
	switch {
	case v == nil:
		return nil, fmt.Errorf("datastore: view %d: %w", seq, ErrViewNotExist)
	case v.over.Load():
		return nil, fmt.Errorf("datastore: view %d (budget %d bytes): %w", seq, v.budget, ErrViewOverBudget)
	}
	vf := v.files[id]
	if vf == nil {
		return nil, fmt.Errorf("datastore: view %d, chunk %d: %w", seq, id, ErrNotInView)
	}
	return vf, nil
}

// withViewChunk runs fn on chunk id of view seq with the file its unsaved
// blocks read from: the live chunk, under its shared lock, or the
// moved-aside file. views.mu is not held meanwhile (an apply holding the
// chunk's lock takes it); vf.mu shared keeps a drop from closing the
// files under fn.
func (s *Store) withViewChunk(seq, id uint64, fn func(vf *viewFile, src File) error) error {
	s.views.mu.RLock()
	vf, err := s.viewFileOf(seq, id)
	s.views.mu.RUnlock()
	if err != nil {
		return err
	}
	gone := fmt.Errorf("datastore: view %d, chunk %d: dropped: %w", seq, id, ErrViewNotExist)
	run := func(src File) error {
		vf.mu.RLock()
		defer vf.mu.RUnlock()
		if vf.dropped {
			return gone
		}
		return fn(vf, src)
	}
	for {
		if b := vf.base.Load(); b != nil {
			return run(b.f)
		}
		c, err := s.lookup("read view of", id, lockShared)
		if err == nil {
			if vf.base.Load() == nil && vf.chunk == c {
				defer c.mu.RUnlock()
				return run(c.f)
			}
			c.mu.RUnlock()
		} else if !isNotExist(err) {
			return err
		}
		if vf.base.Load() == nil {
			return gone // dropped, and its chunk deleted since
		}
	}
}

// ReadView reads the len(buf)/BlockSize consecutive blocks of chunk id
// from block i on, as of view seq, into buf (a non-zero multiple of
// BlockSize), each verified against its checksum. Runs of blocks the view
// has not saved are read from the chunk (or its moved-aside file) in one
// read each.
func (s *Store) ReadView(seq, id uint64, i uint32, buf []byte) error {
	bs := s.g.blockSize
	n := uint32(len(buf)) / bs
	if len(buf) == 0 || uint32(len(buf))%bs != 0 || i >= s.g.blocks || n > s.g.blocks-i {
		return fmt.Errorf("datastore: read view %d chunk %d: blocks [%d, +%d bytes) of %d, buffer %d bytes: %w",
			seq, id, i, len(buf), s.g.blocks, len(buf), ErrInvalidArg)
	}
	return s.withViewChunk(seq, id, func(vf *viewFile, src File) error {
		what := "" // named once, at the first saved block
		for k := uint32(0); k < n; {
			b := i + k
			if vf.saved.test(b) {
				out := buf[k*bs : (k+1)*bs]
				slot := binary.LittleEndian.Uint32(vf.idx[8*b:]) - 1
				if _, err := vf.f.ReadAt(out, s.slotOff(slot)); err != nil {
					return fmt.Errorf("datastore: read view %d chunk %d block %d: %w", seq, id, b, err)
				}
				if what == "" {
					what = fmt.Sprintf("view %d chunk %d pre-image", seq, id)
				}
				if err := s.g.verifyBlock(what, b, out, vf.idx[8*b+4:], &s.stats.crcFailures); err != nil {
					return err
				}
				k++
				continue
			}
			j := k + 1
			for j < n && !vf.saved.test(i+j) {
				j++
			}
			if err := s.g.readBlocks(src, chunkName(id), b, buf[k*bs:j*bs], &s.stats.crcFailures); err != nil {
				return err
			}
			k = j
		}
		return nil
	})
}

// ViewPages lists, for every chunk of view seq, the blocks that held data
// (were not zero) at the view's register op.
func (s *Store) ViewPages(seq uint64) ([]ViewChunk, error) {
	s.views.mu.RLock()
	v := s.views.byseq[seq]
	var ids []uint64
	if v != nil {
		for id := range v.files {
			ids = append(ids, id)
		}
	}
	s.views.mu.RUnlock()
	switch {
	case v == nil:
		return nil, fmt.Errorf("datastore: view %d: %w", seq, ErrViewNotExist)
	case v.over.Load():
		return nil, fmt.Errorf("datastore: view %d (budget %d bytes): %w", seq, v.budget, ErrViewOverBudget)
	}
	slices.Sort(ids)
	out := make([]ViewChunk, 0, len(ids))
	tbl := make([]byte, 4*s.g.blocks)
	for _, id := range ids {
		vc := ViewChunk{ID: id}
		err := s.withViewChunk(seq, id, func(vf *viewFile, src File) error {
			if _, err := src.ReadAt(tbl, s.g.crcOff); err != nil {
				return err
			}
			for i := range s.g.blocks {
				e := binary.LittleEndian.Uint32(tbl[4*i:])
				if vf.saved.test(i) {
					e = binary.LittleEndian.Uint32(vf.idx[8*i+4:])
				}
				if e != 0 {
					vc.Blocks = append(vc.Blocks, i)
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		out = append(out, vc)
	}
	return out, nil
}
