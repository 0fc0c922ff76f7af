package datastore

import (
	"io"
	"io/fs"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// File is an open file as the store uses it: positional reads and writes,
// fsync, and resizing. Implementations must allow ReadAt and WriteAt from
// several goroutines at once (as *os.File does). Errors should wrap the
// operating system's errno (an *fs.PathError around a syscall.Errno) so that
// errors.Is(err, syscall.ENOSPC) works for callers of the store.
type File interface {
	io.ReaderAt
	io.WriterAt
	// Sync flushes the file's data and metadata to stable storage (fsync).
	Sync() error
	// Truncate changes the file's size; growing it leaves a hole.
	Truncate(size int64) error
	// Close closes the file. Operations after Close fail.
	Close() error
}

// FS is everything the store and the file pool do to a file system. All
// names are full paths. OSFS is the real thing; FaultFS wraps any FS to
// inject errors in tests. Rename must replace newpath atomically if it exists
// and must not cross file systems (the pool relies on it to hand out
// preallocated files).
type FS interface {
	// OpenFile opens name with os.OpenFile's flag and perm semantics.
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	// Rename renames oldpath to newpath (rename(2)).
	Rename(oldpath, newpath string) error
	// Remove removes the file name.
	Remove(name string) error
	// ReadDir lists directory name (order unspecified for callers).
	ReadDir(name string) ([]fs.DirEntry, error)
	// Stat returns the file info of name, following symlinks.
	Stat(name string) (fs.FileInfo, error)
	// MkdirAll creates directory name and its parents as needed.
	MkdirAll(name string, perm fs.FileMode) error
	// SyncDir fsyncs directory name, making creations, renames and removals
	// of its entries durable.
	SyncDir(name string) error
}

// OSFS is the FS of the operating system, the default when Options.FS or
// PoolOptions.FS is nil.
type OSFS struct{}

var _ FS = OSFS{}

// OpenFile implements FS.
func (OSFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Rename implements FS.
func (OSFS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

// Remove implements FS.
func (OSFS) Remove(name string) error { return os.Remove(name) }

// ReadDir implements FS.
func (OSFS) ReadDir(name string) ([]fs.DirEntry, error) { return os.ReadDir(name) }

// Stat implements FS.
func (OSFS) Stat(name string) (fs.FileInfo, error) { return os.Stat(name) }

// MkdirAll implements FS.
func (OSFS) MkdirAll(name string, perm fs.FileMode) error { return os.MkdirAll(name, perm) }

// SyncDir implements FS.
func (OSFS) SyncDir(name string) error {
	d, err := os.Open(name)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// FaultOp is a set of operation kinds a FaultRule applies to.
type FaultOp uint32

// Operation kinds. Each FS or File method belongs to exactly one kind.
const (
	// FaultRead covers File.ReadAt and FS.ReadDir.
	FaultRead FaultOp = 1 << iota
	// FaultWrite covers File.WriteAt and File.Truncate.
	FaultWrite
	// FaultSync covers File.Sync and FS.SyncDir.
	FaultSync
	// FaultCreate covers FS.OpenFile with os.O_CREATE and FS.MkdirAll.
	FaultCreate
	// FaultOpen covers FS.OpenFile without os.O_CREATE and FS.Stat.
	FaultOpen
	// FaultRename covers FS.Rename; the rule's path matcher is tried on the
	// old and the new path.
	FaultRename
	// FaultRemove covers FS.Remove.
	FaultRemove

	// FaultAll is every kind.
	FaultAll = FaultRead | FaultWrite | FaultSync | FaultCreate | FaultOpen | FaultRename | FaultRemove
)

// String returns the kind's name as used in injected errors ("read", ...),
// or "fault" for a set of several kinds.
func (op FaultOp) String() string {
	switch op {
	case FaultRead:
		return "read"
	case FaultWrite:
		return "write"
	case FaultSync:
		return "sync"
	case FaultCreate:
		return "create"
	case FaultOpen:
		return "open"
	case FaultRename:
		return "rename"
	case FaultRemove:
		return "remove"
	default:
		return "fault"
	}
}

// FaultRule makes a FaultFS fail matching operations.
type FaultRule struct {
	// Ops is the set of operation kinds the rule applies to; 0 means none.
	Ops FaultOp
	// Path selects the paths the rule applies to; nil matches every path.
	// See PathContains and PathBase.
	Path func(path string) bool
	// Err is the error returned, wrapped in an *fs.PathError naming the
	// operation and path; typically a syscall.Errno such as syscall.EIO or
	// syscall.ENOSPC. Nil means syscall.EIO.
	Err error
	// Count limits the rule to its first Count matches; 0 means unlimited.
	Count int
}

// FaultFS is an FS that passes every call to an inner FS unless an active
// FaultRule matches it; the call then fails, without reaching the inner FS,
// with an *fs.PathError wrapping the rule's error. A failed WriteAt writes
// nothing and a failed ReadAt reads nothing. Rules are added and removed at
// run time from any goroutine; files opened before a rule was added obey it
// too. The first matching rule (in order of Inject) wins. An open file is
// matched by its current path: a Rename through the FaultFS renames the open
// files too.
type FaultFS struct {
	inner FS

	// mu guards rules, enabled, nextID, open and the names of open files.
	mu      sync.Mutex
	rules   []*faultRule
	enabled bool
	nextID  uint64
	open    map[*faultFile]struct{}

	injected atomic.Uint64
}

type faultRule struct {
	FaultRule
	id   uint64
	left int // remaining matches if Count > 0
}

var _ FS = (*FaultFS)(nil)

// NewFaultFS returns an enabled FaultFS without rules over inner (OSFS if
// nil).
func NewFaultFS(inner FS) *FaultFS {
	if inner == nil {
		inner = OSFS{}
	}
	return &FaultFS{inner: inner, enabled: true, open: make(map[*faultFile]struct{})}
}

// Inject adds r and returns a function that removes it again (idempotent).
func (f *FaultFS) Inject(r FaultRule) (remove func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	fr := &faultRule{FaultRule: r, id: f.nextID, left: r.Count}
	f.rules = append(f.rules, fr)
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for i, x := range f.rules {
			if x == fr {
				f.rules = append(f.rules[:i], f.rules[i+1:]...)
				return
			}
		}
	}
}

// Clear removes every rule.
func (f *FaultFS) Clear() {
	f.mu.Lock()
	f.rules = nil
	f.mu.Unlock()
}

// SetEnabled turns all rules on or off at once without removing them.
func (f *FaultFS) SetEnabled(on bool) {
	f.mu.Lock()
	f.enabled = on
	f.mu.Unlock()
}

// Injected returns the number of operations failed by rules so far.
func (f *FaultFS) Injected() uint64 { return f.injected.Load() }

// check returns the injected error for an operation of kind op on paths, or
// nil to let it through.
func (f *FaultFS) check(op FaultOp, paths ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.checkLocked(op, paths...)
}

// checkLocked is check with f.mu held.
func (f *FaultFS) checkLocked(op FaultOp, paths ...string) error {
	if !f.enabled {
		return nil
	}
	for i, r := range f.rules {
		if r.Ops&op == 0 {
			continue
		}
		matched := ""
		for _, p := range paths {
			if r.Path == nil || r.Path(p) {
				matched = p
				break
			}
		}
		if matched == "" {
			continue
		}
		if r.Count > 0 {
			r.left--
			if r.left == 0 {
				f.rules = append(f.rules[:i:i], f.rules[i+1:]...)
			}
		}
		f.injected.Add(1)
		err := r.Err
		if err == nil {
			err = syscall.EIO
		}
		return &fs.PathError{Op: op.String(), Path: matched, Err: err}
	}
	return nil
}

// OpenFile implements FS.
func (f *FaultFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	op := FaultOpen
	if flag&os.O_CREATE != 0 {
		op = FaultCreate
	}
	if err := f.check(op, name); err != nil {
		return nil, err
	}
	file, err := f.inner.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	ff := &faultFile{File: file, fs: f, name: name}
	f.mu.Lock()
	f.open[ff] = struct{}{}
	f.mu.Unlock()
	return ff, nil
}

// Rename implements FS.
func (f *FaultFS) Rename(oldpath, newpath string) error {
	if err := f.check(FaultRename, oldpath, newpath); err != nil {
		return err
	}
	if err := f.inner.Rename(oldpath, newpath); err != nil {
		return err
	}
	f.mu.Lock()
	for ff := range f.open {
		if ff.name == oldpath {
			ff.name = newpath
		}
	}
	f.mu.Unlock()
	return nil
}

// Remove implements FS.
func (f *FaultFS) Remove(name string) error {
	if err := f.check(FaultRemove, name); err != nil {
		return err
	}
	return f.inner.Remove(name)
}

// ReadDir implements FS.
func (f *FaultFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if err := f.check(FaultRead, name); err != nil {
		return nil, err
	}
	return f.inner.ReadDir(name)
}

// Stat implements FS.
func (f *FaultFS) Stat(name string) (fs.FileInfo, error) {
	if err := f.check(FaultOpen, name); err != nil {
		return nil, err
	}
	return f.inner.Stat(name)
}

// MkdirAll implements FS.
func (f *FaultFS) MkdirAll(name string, perm fs.FileMode) error {
	if err := f.check(FaultCreate, name); err != nil {
		return err
	}
	return f.inner.MkdirAll(name, perm)
}

// SyncDir implements FS.
func (f *FaultFS) SyncDir(name string) error {
	if err := f.check(FaultSync, name); err != nil {
		return err
	}
	return f.inner.SyncDir(name)
}

// faultFile is a File of a FaultFS; it checks the rules against its current
// path, name, which FaultFS.Rename keeps up to date (guarded by fs.mu).
type faultFile struct {
	File
	fs   *FaultFS
	name string
}

// check is FaultFS.check on the file's current path.
func (f *faultFile) check(op FaultOp) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return f.fs.checkLocked(op, f.name)
}

func (f *faultFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.check(FaultRead); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.check(FaultWrite); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f *faultFile) Sync() error {
	if err := f.check(FaultSync); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *faultFile) Truncate(size int64) error {
	if err := f.check(FaultWrite); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

func (f *faultFile) Close() error {
	f.fs.mu.Lock()
	delete(f.fs.open, f)
	f.fs.mu.Unlock()
	return f.File.Close()
}

// PathContains returns a FaultRule.Path matcher for paths containing substr.
func PathContains(substr string) func(string) bool {
	return func(p string) bool { return strings.Contains(p, substr) }
}

// PathBase returns a FaultRule.Path matcher for paths whose last element is
// exactly base (for instance "chunk_7" but not "chunk_7_snap_1").
func PathBase(base string) func(string) bool {
	return func(p string) bool {
		i := strings.LastIndexByte(p, '/')
		return p[i+1:] == base
	}
}

// writeFileDurable writes b as file path through temp file tmp: create,
// write, fsync, close, rename. The caller fsyncs the directory.
func writeFileDurable(fsys FS, path, tmp string, b []byte) error {
	f, err := fsys.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(b, 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.Rename(tmp, path)
	}
	return err
}
