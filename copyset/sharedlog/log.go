package sharedlog

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
)

// Defaults for Options.
//
// DefaultShards is 2: it gives the most appends per CPU-second, or close to
// it, from 16 to 256 groups appending concurrently (BenchmarkShards;
// docs/performance.md, "Shared log shards"). One
// shard makes the biggest batches (fewest fdatasyncs per record) but its
// single writer becomes the bottleneck when batches reach hundreds of
// records; four halve the batches again, which costs about 40% more CPU per
// append at 16 groups.
//
// DefaultSpareSegments is 4: see Options.SpareSegments.
const (
	DefaultShards        = 2
	DefaultSegmentSize   = 64 << 20
	DefaultSpareSegments = 4
)

var (
	// ErrClosed is returned by every operation after Close.
	ErrClosed = errors.New("sharedlog: closed")
	// ErrGroupDropped is returned by a GroupStore whose group was dropped
	// with DropGroup; call Group again for a fresh, empty store.
	ErrGroupDropped = errors.New("sharedlog: group dropped")
	// ErrKeyNotFound is returned by Get and GetUint64 for a missing key.
	// hashicorp/raft compares err.Error() with exactly "not found".
	ErrKeyNotFound = errors.New("not found")
	// ErrUnsupportedFormat is returned by Open for a directory written in
	// another on-disk format version (format 1, which only existed in
	// development builds, has no segment salts or record links and is not
	// converted).
	ErrUnsupportedFormat = errors.New("sharedlog: unsupported on-disk format")
)

// Options configures Open.
type Options struct {
	// Dir holds the log (one subdirectory per shard). Created if missing.
	Dir string
	// Shards is the number of independent WALs; group g lives in shard
	// g % Shards. 0 means the number recorded in Dir, or DefaultShards for a
	// new Dir. It cannot change once the directory exists.
	Shards int
	// SegmentSize is the size of a segment file: segments are preallocated
	// (written with zeros, or recycled) to this size before they become
	// active, and a shard starts a new one when the next record does not
	// fit (a single larger record still goes into one segment, which then
	// grows). Each shard also keeps spare segments of this size on disk
	// (SpareSegments). 0 means DefaultSegmentSize.
	SegmentSize int64
	// SpareSegments is how many spare segments a shard keeps at most
	// (spare.go): segments freed by garbage collection are kept as spares
	// up to this many and removed beyond, and one is zero-filled only when
	// none is left. Copysets truncate their logs at different moments, so
	// segments are freed in bursts; spares kept from a burst are reused
	// instead of being removed and written with zeros again later. 0 means
	// DefaultSpareSegments.
	SpareSegments int
	// Logger receives recovery and failure messages; nil means slog.Default().
	Logger *slog.Logger
	// NoSync skips fdatasync, and spare segments are only extended
	// (sparse), not zero-filled. Unsafe: tests and benchmarks only.
	NoSync bool
}

// Log is the shared, group-committing raft log of one chunkserver. It is safe
// for concurrent use.
type Log struct {
	dir    string
	shards []*shard
	lock   *os.File
	closed atomic.Bool
	once   sync.Once
	cerr   error
}

const (
	metaName = "META"
	// formatVersion is the on-disk format written in META and in segment
	// headers.
	formatVersion = 2
)

// Open opens or creates the log in opts.Dir, recovering every shard: it
// replays all segments, stops each shard at the end of its valid records
// (deleting later segments if that is before the end of a full segment),
// and starts a writer and a spare-preparing goroutine per shard. A
// directory of another format version fails with ErrUnsupportedFormat.
func Open(opts Options) (*Log, error) {
	if opts.Dir == "" {
		return nil, errors.New("sharedlog: Options.Dir is empty")
	}
	if opts.Shards < 0 || opts.Shards > 1024 {
		return nil, fmt.Errorf("sharedlog: invalid Shards %d", opts.Shards)
	}
	if opts.SegmentSize < 0 {
		return nil, fmt.Errorf("sharedlog: invalid SegmentSize %d", opts.SegmentSize)
	}
	if opts.SegmentSize == 0 {
		opts.SegmentSize = DefaultSegmentSize
	}
	if opts.SpareSegments < 0 {
		return nil, fmt.Errorf("sharedlog: invalid SpareSegments %d", opts.SpareSegments)
	}
	if opts.SpareSegments == 0 {
		opts.SpareSegments = DefaultSpareSegments
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("sharedlog: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(opts.Dir, "LOCK"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("sharedlog: %w", err)
	}
	if err := lockFile(lock); err != nil {
		lock.Close()
		return nil, fmt.Errorf("sharedlog: %s is in use: %w", opts.Dir, err)
	}
	n, err := loadMeta(opts.Dir, opts.Shards)
	if err != nil {
		lock.Close()
		return nil, err
	}
	opts.Shards = n

	l := &Log{dir: opts.Dir, lock: lock}
	for i := range n {
		s := newShard(i, filepath.Join(opts.Dir, fmt.Sprintf("shard-%03d", i)), &opts)
		if err := s.recover(n); err != nil {
			for _, o := range l.shards {
				o.closeFiles()
			}
			s.closeFiles()
			lock.Close()
			return nil, fmt.Errorf("sharedlog: recovering shard %d: %w", i, err)
		}
		l.shards = append(l.shards, s)
	}
	// Make the shard directories' entries durable.
	if err := syncDir(opts.Dir); err != nil {
		for _, s := range l.shards {
			s.closeFiles()
		}
		lock.Close()
		return nil, fmt.Errorf("sharedlog: %w", err)
	}
	for _, s := range l.shards {
		go s.run()
		s.startPreparer()
	}
	return l, nil
}

// loadMeta reads the shard count recorded in dir, or records want (or the
// default) for a new directory.
func loadMeta(dir string, want int) (int, error) {
	path := filepath.Join(dir, metaName)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		var v, n int
		if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "sharedlog v%d shards %d", &v, &n); err != nil || n <= 0 || v <= 0 {
			return 0, fmt.Errorf("sharedlog: bad %s: %q", path, b)
		}
		if v != formatVersion {
			return 0, fmt.Errorf("%w: %s holds format v%d, this build reads and writes v%d only; "+
				"v1 existed only in development builds: remove the directory (its raft logs are lost) and restart",
				ErrUnsupportedFormat, dir, v, formatVersion)
		}
		if want != 0 && want != n {
			return 0, fmt.Errorf("sharedlog: %s was created with %d shards, Options.Shards is %d", dir, n, want)
		}
		return n, nil
	case !errors.Is(err, os.ErrNotExist):
		return 0, fmt.Errorf("sharedlog: %w", err)
	}
	if want == 0 {
		want = DefaultShards
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return 0, fmt.Errorf("sharedlog: %w", err)
	}
	_, err = fmt.Fprintf(f, "sharedlog v%d shards %d\n", formatVersion, want)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return 0, fmt.Errorf("sharedlog: writing %s: %w", path, err)
	}
	return want, nil
}

// closeFiles closes the files of a shard whose goroutines never started
// (Open failed).
func (s *shard) closeFiles() {
	s.segMu.Lock()
	for _, seg := range s.segs {
		seg.close()
	}
	s.segMu.Unlock()
	s.closeSpares()
}

func (l *Log) shard(group uint64) *shard { return l.shards[group%uint64(len(l.shards))] }

// Group returns the raft.LogStore and raft.StableStore of group (a copyset).
// Groups need no creation: a group with no data is simply empty. After
// DropGroup(group) returns, earlier GroupStores of the group fail with
// ErrGroupDropped; call Group again.
func (l *Log) Group(group uint64) (*GroupStore, error) {
	if l.closed.Load() {
		return nil, ErrClosed
	}
	s := l.shard(group)
	return &GroupStore{l: l, s: s, st: s.state(group)}, nil
}

// DropGroup durably deletes all log entries and stable-store keys of group,
// e.g. when its copyset is deleted from this server. Space is reclaimed when
// the segments holding its entries are garbage collected.
func (l *Log) DropGroup(group uint64) error {
	if l.closed.Load() {
		return ErrClosed
	}
	s := l.shard(group)
	r := &request{op: op{kind: recDrop, group: group}, rec: encodeDrop(group), done: make(chan error, 1)}
	// Detach the state and queue its drop while holding s.mu, so that a
	// Group(group) that sees the new, empty state queues its records after
	// the drop record.
	s.mu.Lock()
	st := s.groups[group]
	if st == nil {
		st = &groupState{id: group}
	}
	delete(s.groups, group)
	s.dropping[st] = struct{}{}
	r.st = st
	err := s.enqueue(r)
	if err != nil {
		delete(s.dropping, st)
		if _, ok := s.groups[group]; !ok {
			s.groups[group] = st
		}
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return <-r.done
}

// Close commits everything already queued, stops the writer goroutines and
// closes the files. Later calls return the first call's result.
func (l *Log) Close() error {
	l.once.Do(func() {
		l.closed.Store(true)
		var wg sync.WaitGroup
		errs := make([]error, len(l.shards))
		for i, s := range l.shards {
			wg.Go(func() { errs[i] = s.close() })
		}
		wg.Wait()
		l.cerr = errors.Join(errs...)
		if err := l.lock.Close(); err != nil && l.cerr == nil {
			l.cerr = err
		}
	})
	return l.cerr
}

// Stats is a snapshot of the log's counters, for metrics.
type Stats struct {
	// Batches is the number of group commits (one pwritev + one fdatasync).
	Batches uint64
	// Records is the number of records committed (one per StoreLogs,
	// DeleteRange, Set/SetUint64 or DropGroup call).
	Records uint64
	// Bytes is the number of bytes written, segment headers included.
	Bytes uint64
	// Fsyncs counts the fdatasync calls of the writers: one per group
	// commit and one per segment started (0 with NoSync). The preparation
	// of spare segments, in the background, is not counted.
	Fsyncs uint64
	// MeanBatchSize is Records / Batches: records per group commit.
	MeanBatchSize float64
	// Recycled counts segments freed by garbage collection that became
	// spares, Prepared the spares zero-filled instead, SpareMisses the rolls
	// that found no spare ready (and started a growing segment).
	Recycled, Prepared, SpareMisses uint64
	// Spares is the number of spare segments ready now.
	Spares int
	// Groups is the number of groups holding entries or keys.
	Groups int
	// Segments is the number of segment files, DataBytes the bytes of valid
	// data in them, DiskBytes the length of the segment and spare files
	// (preallocation included).
	Segments  int
	DataBytes int64
	DiskBytes int64
	Shards    []ShardStats
}

// ShardStats describes one shard.
type ShardStats struct {
	Shard                           int
	Batches, Records, Bytes, Fsyncs uint64
	Recycled, Prepared, SpareMisses uint64
	Groups                          int
	Segments                        int
	DataBytes, DiskBytes            int64
	// SpareReady: the next segment is ready; Spares: how many are.
	SpareReady bool
	Spares     int
	// OldestSegment is the oldest segment file, ActiveSegment the one being
	// appended to.
	OldestSegment, ActiveSegment uint32
	// PinningGroups are the groups whose oldest live entry is in
	// OldestSegment, i.e. the groups that keep it from being deleted;
	// snapshotting (and so truncating) them frees it. Empty when the oldest
	// segment is the active one.
	PinningGroups []uint64
}

// Stats returns current counters.
func (l *Log) Stats() Stats {
	var st Stats
	for _, s := range l.shards {
		ss := ShardStats{
			Shard:   s.id,
			Batches: s.batches.Load(),
			Records: s.records.Load(),
			Bytes:   s.bytes.Load(),
			Fsyncs:  s.fsyncs.Load(),

			Recycled:    s.recycled.Load(),
			Prepared:    s.prepared.Load(),
			SpareMisses: s.spareMisses.Load(),
		}
		s.segMu.RLock()
		ss.Segments = len(s.segIDs)
		ss.OldestSegment = s.segIDs[0]
		ss.ActiveSegment = s.segIDs[len(s.segIDs)-1]
		for _, seg := range s.segs {
			ss.DataBytes += seg.size.Load()
			ss.DiskBytes += seg.fileSize.Load()
		}
		s.segMu.RUnlock()
		s.prepMu.Lock()
		ss.Spares, ss.SpareReady = len(s.ready), len(s.ready) > 0
		for _, sp := range s.ready {
			ss.DiskBytes += sp.size
		}
		s.prepMu.Unlock()
		oldest, pin := s.oldestLive()
		if oldest == ss.OldestSegment && oldest != ss.ActiveSegment {
			ss.PinningGroups = pin
		}
		for _, g := range s.allStates() {
			g.mu.RLock()
			if !g.idx.empty() || len(g.kv) > 0 {
				ss.Groups++
			}
			g.mu.RUnlock()
		}
		st.Batches += ss.Batches
		st.Records += ss.Records
		st.Bytes += ss.Bytes
		st.Fsyncs += ss.Fsyncs
		st.Recycled += ss.Recycled
		st.Prepared += ss.Prepared
		st.SpareMisses += ss.SpareMisses
		st.Spares += ss.Spares
		st.Groups += ss.Groups
		st.Segments += ss.Segments
		st.DataBytes += ss.DataBytes
		st.DiskBytes += ss.DiskBytes
		st.Shards = append(st.Shards, ss)
	}
	if st.Batches > 0 {
		st.MeanBatchSize = float64(st.Records) / float64(st.Batches)
	}
	return st
}
