package copyset

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/chunkraft/chunkraft/internal/atomicfile"
)

// Raft snapshots of a copyset copy no data locally (Curve's model).
//
// A local snapshot (taken after the state machines fsynced everything they
// applied) is a manifest only: index, term, configuration, epoch. Sending a
// snapshot to a follower streams the manifest followed by the copyset's live
// files as they are at that moment ("fuzzy": possibly newer than the
// snapshot index), or, for a machine that is a Streamer, the consistent
// images its stream yields; the follower stages them, swaps them in as its data
// directory, and replays the log from the snapshot index on. That is correct
// because every replicated op is idempotent under replay.
//
// Stream format (all integers big-endian):
//
//	"CRSNAP" | u8 format version (1) | u8 kind (0 manifest only, 1 with files)
//	u32 n | n bytes of manifest JSON
//	kind 1 only, per file: u16 n (>0) | n bytes of name relative to the data
//	  dir | u64 size | size bytes; size's top bit (snapGone) set: the file
//	  was deleted after it was listed, before its bytes were read, and the
//	  size bytes (zeros) that follow are skipped, no file is staged
//	kind 1 only: u16 0 (end)
//	zeros up to the size raft was told (a machine stream's unused reserve,
//	see snapReader); the transport sends them as a count
//
// On disk, raft/snapshots/<id>/meta.json holds the raft metadata and the
// manifest; a received snapshot's files are staged in raft/snapshots/<id>/data
// until FSM.Restore swaps them in. A received snapshot is listed only once
// installed, so a restart never trusts a snapshot whose data is not live; a
// restart after a crash mid-install finishes the install (roll forward).

const (
	snapMagic        = "CRSNAP"
	snapFormat       = 1
	snapKindManifest = 0
	snapKindFiles    = 1
	snapRetain       = 2
	maxManifestLen   = 16 << 20
	maxSnapNameLen   = 4096
	// snapGone marks, in a file's size field, a file that vanished between
	// the listing and the read (see fileSection).
	snapGone = uint64(1) << 63
)

// snapManifest describes a snapshot. Index and Term are raft's; Epoch is
// the number of configuration entries applied up to Index.
type snapManifest struct {
	Version int    `json:"version"`
	Group   uint64 `json:"group"`
	Index   uint64 `json:"index"`
	Term    uint64 `json:"term"`
	Epoch   uint64 `json:"epoch"`
}

// snapRecord is meta.json.
type snapRecord struct {
	Meta     raft.SnapshotMeta `json:"meta"`
	Manifest snapManifest      `json:"manifest"`
	// Received is true for a snapshot streamed from a leader; Installed
	// becomes true once its files are the live data directory.
	Received  bool `json:"received"`
	Installed bool `json:"installed"`
}

// snapshotStore is the raft.SnapshotStore of one copyset.
type snapshotStore struct {
	group   GroupID
	dir     string // <copyset>/raft/snapshots
	dataDir string // <copyset>/data
	log     *slog.Logger

	// sources lists what to stream of each machine (fsm.sources).
	sources func() ([]snapSource, error)
	// checkFiles checks the names a machine's stream yields (registry).
	checkFiles func(Kind, []string) error
	// saved, when set, is told the index of every snapshot saved (taken
	// here or received), on the goroutine that saved it.
	saved func(index uint64)

	mu      sync.Mutex
	pending string // id of a received snapshot staged for Restore

	// installs counts the received snapshots installed since the store
	// was opened. Their records are not a count: after an install,
	// hashicorp/raft snapshots again every SnapshotInterval until its log
	// store holds an entry past the snapshot (shouldSnapshot subtracts the
	// snapshot index from the store's last index, unsigned), and reap may
	// then drop the received snapshot for local ones of the same index.
	installs atomic.Uint64
}

var _ raft.SnapshotStore = (*snapshotStore)(nil)

func newSnapshotStore(group GroupID, copysetDir string, log *slog.Logger) (*snapshotStore, error) {
	s := &snapshotStore{
		group:   group,
		dir:     filepath.Join(copysetDir, "raft", "snapshots"),
		dataDir: filepath.Join(copysetDir, "data"),
		log:     log,
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, fmt.Errorf("snapshot store: %w", err)
	}
	return s, nil
}

func snapshotID(term, index uint64) string {
	return fmt.Sprintf("%d-%d-%d", term, index, time.Now().UnixMilli())
}

// Create implements raft.SnapshotStore. The sink accepts either a
// manifest-only stream (a local snapshot) or a stream with files (from a
// leader), which it stages.
func (s *snapshotStore) Create(version raft.SnapshotVersion, index, term uint64,
	configuration raft.Configuration, configurationIndex uint64, _ raft.Transport) (raft.SnapshotSink, error) {
	id := snapshotID(term, index)
	tmp := filepath.Join(s.dir, id+".tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("create snapshot %s: %w", id, err)
	}
	pr, pw := io.Pipe()
	sk := &snapSink{
		store: s, id: id, tmp: tmp, pw: pw, done: make(chan struct{}),
		rec: snapRecord{Meta: raft.SnapshotMeta{
			Version: version, ID: id, Index: index, Term: term,
			Configuration: configuration, ConfigurationIndex: configurationIndex,
		}},
	}
	go func() {
		defer close(sk.done)
		sk.err = sk.parse(pr)
		// Unblock a writer if parsing stopped early.
		pr.CloseWithError(errors.Join(sk.err, errors.New("snapshot stream ended")))
	}()
	return sk, nil
}

// snapSink parses the stream in its own goroutine (owned: Close and Cancel
// wait for it) and stages files under tmp/data.
type snapSink struct {
	store *snapshotStore
	id    string
	tmp   string
	pw    *io.PipeWriter
	done  chan struct{}
	err   error
	size  int64
	rec   snapRecord
	kind  byte
	once  sync.Once
}

func (k *snapSink) ID() string { return k.id }

func (k *snapSink) Write(p []byte) (int, error) {
	n, err := k.pw.Write(p)
	k.size += int64(n)
	if err != nil {
		return n, fmt.Errorf("snapshot %s: %w", k.id, err)
	}
	return n, nil
}

// parse reads the stream: header, manifest and, for kind 1, the files.
func (k *snapSink) parse(r io.Reader) error {
	br := bufio.NewReaderSize(r, 1<<20)
	kind, man, err := readSnapHeader(br)
	if err != nil {
		return err
	}
	k.kind = kind
	k.rec.Manifest = man
	if kind == snapKindManifest {
		_, err := io.Copy(io.Discard, br)
		return err
	}
	k.rec.Received = true
	staging := filepath.Join(k.tmp, "data")
	if err := os.MkdirAll(staging, 0o755); err != nil {
		return err
	}
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(br, hdr[:2]); err != nil {
			return fmt.Errorf("read file name length: %w", err)
		}
		n := binary.BigEndian.Uint16(hdr[:2])
		if n == 0 {
			break
		}
		name := make([]byte, n)
		if _, err := io.ReadFull(br, name); err != nil {
			return fmt.Errorf("read file name: %w", err)
		}
		if _, err := io.ReadFull(br, hdr[:8]); err != nil {
			return fmt.Errorf("read file size: %w", err)
		}
		rel, err := cleanSnapName(string(name))
		if err != nil {
			return err
		}
		size := binary.BigEndian.Uint64(hdr[:8])
		if size&snapGone != 0 {
			// Deleted on the leader after the listing: not staged.
			if _, err := io.CopyN(io.Discard, br, int64(size&^snapGone)); err != nil {
				return fmt.Errorf("skip gone file %s: %w", rel, err)
			}
			continue
		}
		if err := stageFile(filepath.Join(staging, rel), br, int64(size)); err != nil {
			return err
		}
	}
	if _, err := io.Copy(io.Discard, br); err != nil {
		return err
	}
	return syncDirTree(staging)
}

// cleanSnapName rejects absolute names and names leaving the data dir.
func cleanSnapName(name string) (string, error) {
	c := filepath.Clean(name)
	if name == "" || filepath.IsAbs(name) || c == "." || c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("snapshot stream: bad file name %q", name)
	}
	return c, nil
}

func stageFile(path string, r io.Reader, size int64) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, r, size); err != nil {
		f.Close()
		return fmt.Errorf("stage %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return f.Close()
}

// syncDirTree fsyncs every directory under root (files were synced as
// they were written).
func syncDirTree(root string) error {
	return filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		return atomicfile.SyncDir(p)
	})
}

// Close implements raft.SnapshotSink: the snapshot becomes durable and, if
// it was received, pending for Restore.
func (k *snapSink) Close() error {
	var err error
	k.once.Do(func() {
		k.pw.Close()
		<-k.done
		if k.err != nil {
			os.RemoveAll(k.tmp)
			err = fmt.Errorf("snapshot %s: %w", k.id, k.err)
			return
		}
		k.rec.Meta.Size = k.size
		k.rec.Manifest.Index, k.rec.Manifest.Term = k.rec.Meta.Index, k.rec.Meta.Term
		b, jerr := json.Marshal(&k.rec)
		if jerr != nil {
			err = jerr
			return
		}
		final := filepath.Join(k.store.dir, k.id)
		if err = atomicfile.WriteFile(filepath.Join(k.tmp, "meta.json"), b, 0o644); err != nil {
			os.RemoveAll(k.tmp)
			return
		}
		if err = os.Rename(k.tmp, final); err != nil {
			os.RemoveAll(k.tmp)
			return
		}
		if err = atomicfile.SyncDir(k.store.dir); err != nil {
			return
		}
		if k.store.saved != nil {
			k.store.saved(k.rec.Meta.Index)
		}
		if k.rec.Received {
			k.store.mu.Lock()
			k.store.pending = k.id
			k.store.mu.Unlock()
		}
		k.store.reap()
	})
	return err
}

// Cancel implements raft.SnapshotSink.
func (k *snapSink) Cancel() error {
	k.once.Do(func() {
		k.pw.CloseWithError(errors.New("snapshot canceled"))
		<-k.done
		os.RemoveAll(k.tmp)
	})
	return nil
}

func readSnapHeader(r io.Reader) (byte, snapManifest, error) {
	var man snapManifest
	var h [12]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, man, fmt.Errorf("read snapshot header: %w", err)
	}
	if string(h[:6]) != snapMagic || h[6] != snapFormat {
		return 0, man, fmt.Errorf("snapshot stream: bad header %q", h[:8])
	}
	kind := h[7]
	if kind != snapKindManifest && kind != snapKindFiles {
		return 0, man, fmt.Errorf("snapshot stream: unknown kind %d", kind)
	}
	n := binary.BigEndian.Uint32(h[8:])
	if n > maxManifestLen {
		return 0, man, fmt.Errorf("snapshot stream: manifest of %d bytes", n)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, man, fmt.Errorf("read snapshot manifest: %w", err)
	}
	if err := json.Unmarshal(buf, &man); err != nil {
		return 0, man, fmt.Errorf("decode snapshot manifest: %w", err)
	}
	return kind, man, nil
}

func snapHeader(kind byte, man snapManifest) ([]byte, error) {
	b, err := json.Marshal(&man)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 12, 12+len(b))
	copy(out, snapMagic)
	out[6], out[7] = snapFormat, kind
	binary.BigEndian.PutUint32(out[8:], uint32(len(b)))
	return append(out, b...), nil
}

func (s *snapshotStore) readRecord(id string) (snapRecord, error) {
	var rec snapRecord
	b, err := os.ReadFile(filepath.Join(s.dir, id, "meta.json"))
	if err != nil {
		return rec, fmt.Errorf("read snapshot %s: %w", id, err)
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("decode snapshot %s: %w", id, err)
	}
	return rec, nil
}

// records returns every complete snapshot record, newest first.
func (s *snapshotStore) records() ([]snapRecord, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	var out []snapRecord
	for _, e := range entries {
		if !e.IsDir() || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		rec, err := s.readRecord(e.Name())
		if err != nil {
			s.log.Warn("skipping unreadable snapshot", "id", e.Name(), "err", err)
			continue
		}
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Meta, out[j].Meta
		if a.Term != b.Term {
			return a.Term > b.Term
		}
		if a.Index != b.Index {
			return a.Index > b.Index
		}
		return a.ID > b.ID
	})
	return out, nil
}

// List implements raft.SnapshotStore: usable snapshots, newest first. A
// received snapshot not yet installed is left out.
func (s *snapshotStore) List() ([]*raft.SnapshotMeta, error) {
	recs, err := s.records()
	if err != nil {
		return nil, err
	}
	var out []*raft.SnapshotMeta
	for i := range recs {
		if recs[i].Received && !recs[i].Installed {
			continue
		}
		m := recs[i].Meta
		out = append(out, &m)
	}
	return out, nil
}

// latest returns the newest usable snapshot's record, if any.
func (s *snapshotStore) latest() (snapRecord, bool, error) {
	recs, err := s.records()
	if err != nil {
		return snapRecord{}, false, err
	}
	for _, r := range recs {
		if !r.Received || r.Installed {
			return r, true, nil
		}
	}
	return snapRecord{}, false, nil
}

// Open implements raft.SnapshotStore: the manifest followed by the live
// files, with the exact stream length in the returned meta's Size.
func (s *snapshotStore) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	rec, err := s.readRecord(id)
	if err != nil {
		return nil, nil, err
	}
	rec.Manifest.Index, rec.Manifest.Term = rec.Meta.Index, rec.Meta.Term
	head, err := snapHeader(snapKindFiles, rec.Manifest)
	if err != nil {
		return nil, nil, err
	}
	var sources []snapSource
	if s.sources != nil {
		if sources, err = s.sources(); err != nil {
			return nil, nil, fmt.Errorf("open snapshot %s: %w", id, err)
		}
	}
	sr := &snapReader{}
	readers := []io.Reader{bytes.NewReader(head)}
	size := int64(len(head))
	for _, src := range sources {
		if src.stream != nil {
			sr.streams = append(sr.streams, src.stream)
			readers = append(readers, &streamSections{s: src.stream, kind: src.kind, check: s.checkFiles})
			size += src.stream.Reserve()
			continue
		}
		for _, name := range src.names {
			if len(name) == 0 || len(name) > maxSnapNameLen {
				continue
			}
			path := filepath.Join(s.dataDir, name)
			st, err := os.Stat(path)
			if err != nil {
				if errors.Is(err, os.ErrNotExist) {
					continue // deleted since listing; replay deletes it again
				}
				sr.Close()
				return nil, nil, fmt.Errorf("open snapshot %s: %w", id, err)
			}
			readers = append(readers, &fileSection{r: sr, name: name, path: path, size: st.Size()})
			size += int64(2+len(name)+8) + st.Size()
		}
	}
	readers = append(readers, &endMark{r: sr, b: []byte{0, 0}})
	size += 2
	sr.body = io.MultiReader(readers...)
	sr.size = size
	meta := rec.Meta
	meta.Size = size
	return &meta, sr, nil
}

// snapReader streams a snapshot: exactly size bytes, the body (header,
// sections, end mark) followed by zeros up to size. The size is fixed when
// the snapshot is opened (raft sends it ahead) and machine streams yield
// their files later, so it counts their reserves; what they leave unused
// pads the end, which the follower's parser skips and the transport sends
// as a count (Padding) rather than as bytes. Close closes the file being
// read and the machine streams.
type snapReader struct {
	body    io.Reader
	size    int64
	read    int64 // bytes of the body read so far
	pad     int64 // zeros read so far
	ended   bool  // the body is read to its end
	open    *os.File
	streams []FileStream
}

func (r *snapReader) Read(p []byte) (int, error) {
	n := 0
	if !r.ended {
		var err error
		n, err = r.body.Read(p)
		r.read += int64(n)
		switch {
		case r.read > r.size:
			return 0, fmt.Errorf("snapshot stream: %d bytes exceed the %d reserved", r.read, r.size)
		case errors.Is(err, io.EOF):
			r.ended = true
		case err != nil:
			return n, err
		}
		if n > 0 {
			return n, nil
		}
	}
	left := r.size - r.read - r.pad
	if left == 0 {
		return 0, io.EOF
	}
	n = int(min(int64(len(p)), left))
	clear(p[:n])
	r.pad += int64(n)
	return n, nil
}

// endMark is the stream's end mark; reading its last byte ends the body,
// so that Padding knows at once that the rest is padding.
type endMark struct {
	r *snapReader
	b []byte
}

func (e *endMark) Read(p []byte) (int, error) {
	if len(e.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, e.b)
	e.b = e.b[n:]
	if len(e.b) == 0 {
		e.r.ended = true
	}
	return n, nil
}

// Padding returns how many bytes are left to read once they are all zero
// padding, else 0: the transport sends such a tail as a count.
func (r *snapReader) Padding() int64 {
	if !r.ended {
		return 0
	}
	return r.size - r.read - r.pad
}

func (r *snapReader) Close() error {
	var errs []error
	if r.open != nil {
		errs = append(errs, r.open.Close())
		r.open = nil
	}
	for _, st := range r.streams {
		errs = append(errs, st.Close())
	}
	r.streams = nil
	return errors.Join(errs...)
}

// sectionHeader is the header of a file's section of the stream: the
// name's length, the name, the size field.
func sectionHeader(name string, size uint64) []byte {
	h := make([]byte, 2+len(name)+8)
	binary.BigEndian.PutUint16(h, uint16(len(name)))
	copy(h[2:], name)
	binary.BigEndian.PutUint64(h[2+len(name):], size)
	return h
}

// streamSections yields the sections of one machine's FileStream, each
// file taken from the stream when the previous one has been read.
type streamSections struct {
	s     FileStream
	kind  Kind
	check func(Kind, []string) error
	hdr   []byte // what is left of the current section's header
	data  []byte // and of its content
	done  bool
}

func (ss *streamSections) Read(p []byte) (int, error) {
	for len(ss.hdr) == 0 && len(ss.data) == 0 {
		if ss.done {
			return 0, io.EOF
		}
		name, data, err := ss.s.Next()
		if errors.Is(err, io.EOF) {
			ss.done = true
			return 0, io.EOF
		}
		if err == nil && (len(name) == 0 || len(name) > maxSnapNameLen) {
			err = fmt.Errorf("file name of %d bytes", len(name))
		}
		if err == nil && ss.check != nil {
			err = ss.check(ss.kind, []string{name})
		}
		if err != nil {
			return 0, fmt.Errorf("snapshot stream of state machine %d: %w", ss.kind, err)
		}
		ss.hdr = sectionHeader(name, uint64(len(data)))
		ss.data = data
	}
	if len(ss.hdr) > 0 {
		n := copy(p, ss.hdr)
		ss.hdr = ss.hdr[n:]
		return n, nil
	}
	n := copy(p, ss.data)
	ss.data = ss.data[n:]
	return n, nil
}

// fileSection yields one file's entry of the stream: its header, then
// exactly size bytes of the live file, size being what the listing saw.
// The file is opened when the section is reached: one that is gone by then
// (deleted since the listing) is sent as gone (snapGone in the header, the
// size padded with zeros) so that the follower does not create it, which
// its replay of the deletion would expect; once open, the file reads to
// the end even if it is deleted meanwhile (its later ops are replayed
// after install). A file that shrank is padded with zeros, one that grew
// is cut.
type fileSection struct {
	r    *snapReader
	name string
	path string
	size int64
	hdr  []byte // nil until the section is reached; what of it is left to send
	off  int64
	f    *os.File
	gone bool
}

func (fs *fileSection) Read(p []byte) (int, error) {
	if fs.hdr == nil {
		f, err := os.Open(fs.path)
		if err != nil {
			fs.gone = true
		} else {
			fs.f, fs.r.open = f, f
		}
		size := uint64(fs.size)
		if fs.gone {
			size |= snapGone
		}
		fs.hdr = sectionHeader(fs.name, size)
	}
	if len(fs.hdr) > 0 {
		n := copy(p, fs.hdr)
		fs.hdr = fs.hdr[n:]
		return n, nil
	}
	if fs.off >= fs.size {
		if fs.f != nil {
			fs.f.Close()
			fs.f, fs.r.open = nil, nil
		}
		return 0, io.EOF
	}
	if int64(len(p)) > fs.size-fs.off {
		p = p[:fs.size-fs.off]
	}
	n := 0
	if fs.f != nil {
		var err error
		n, err = fs.f.ReadAt(p, fs.off)
		if err != nil && !errors.Is(err, io.EOF) {
			return n, fmt.Errorf("snapshot read %s: %w", fs.path, err)
		}
	}
	if n == 0 {
		clear(p)
		n = len(p)
	}
	fs.off += int64(n)
	return n, nil
}

// takePending returns the id of the received snapshot awaiting Restore.
func (s *snapshotStore) takePending() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.pending
	s.pending = ""
	return id
}

// install makes received snapshot id's staged files the live data dir and
// marks it installed. Crash-safe: each step can be redone by recover.
//
//  1. rename data -> data.old   2. rename staged -> data
//  3. meta.json Installed=true  4. remove data.old
func (s *snapshotStore) install(id string) error {
	rec, err := s.readRecord(id)
	if err != nil {
		return err
	}
	staged := filepath.Join(s.dir, id, "data")
	old := s.dataDir + ".old"
	if _, err := os.Stat(staged); err == nil {
		if _, err := os.Stat(old); errors.Is(err, os.ErrNotExist) {
			if err := os.Rename(s.dataDir, old); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("install snapshot %s: %w", id, err)
			}
		}
		if err := os.Rename(staged, s.dataDir); err != nil {
			return fmt.Errorf("install snapshot %s: %w", id, err)
		}
		if err := atomicfile.SyncDir(filepath.Dir(s.dataDir)); err != nil {
			return err
		}
	}
	rec.Installed = true
	b, err := json.Marshal(&rec)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(s.dir, id, "meta.json"), b, 0o644); err != nil {
		return fmt.Errorf("install snapshot %s: %w", id, err)
	}
	if err := os.RemoveAll(old); err != nil {
		return fmt.Errorf("install snapshot %s: remove old data: %w", id, err)
	}
	s.log.Info("snapshot installed", "id", id, "index", rec.Meta.Index)
	s.installs.Add(1)
	s.reap()
	return nil
}

// recover finishes an install interrupted by a crash (a received snapshot
// whose staged data was complete, newer than every installed one) and
// removes leftovers of unfinished sinks.
func (s *snapshotStore) recover() error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("recover snapshots: %w", err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tmp") {
			os.RemoveAll(filepath.Join(s.dir, e.Name()))
		}
	}
	recs, err := s.records()
	if err != nil {
		return err
	}
	if len(recs) > 0 && recs[0].Received && !recs[0].Installed {
		s.log.Warn("finishing interrupted snapshot install", "id", recs[0].Meta.ID)
		return s.install(recs[0].Meta.ID)
	}
	if _, err := os.Stat(s.dataDir); errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(s.dataDir + ".old"); err == nil {
			return os.Rename(s.dataDir+".old", s.dataDir)
		}
	}
	return nil
}

// reap keeps the newest snapRetain usable snapshots and drops older ones
// (and stale, never-installed received ones older than the newest usable).
func (s *snapshotStore) reap() {
	recs, err := s.records()
	if err != nil {
		return
	}
	s.mu.Lock()
	pending := s.pending
	s.mu.Unlock()
	kept := 0
	for _, r := range recs {
		usable := !r.Received || r.Installed
		if r.Meta.ID == pending || (usable && kept < snapRetain) {
			if usable {
				kept++
			}
			continue
		}
		if !usable && kept == 0 {
			continue // newest received, still to be installed
		}
		os.RemoveAll(filepath.Join(s.dir, r.Meta.ID))
	}
}
