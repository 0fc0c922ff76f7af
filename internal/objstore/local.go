package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// staleTempAge is how old a leftover temporary file must be before NewLocal
// removes it: younger ones may belong to a Put in flight in another Local
// opened on the same root.
const staleTempAge = time.Hour

// Local is a Store keeping each object as a regular file root/name.
//
// Put writes to a temporary file in root/.objstore-tmp, fsyncs it, renames it
// over root/name and fsyncs the parent directory (and every directory it
// had to create), so a completed Put survives a crash and an interrupted one
// leaves nothing visible. Delete removes directories left empty.
//
// Because objects are files, Local cannot hold both "a" and "a/b" (S3 can):
// such a Put fails.
type Local struct {
	root   string
	tmp    string
	closed atomic.Bool

	// dirMu orders directory creation in Put (read side) against removal of
	// empty directories in Delete (write side).
	dirMu sync.RWMutex
}

var _ Store = (*Local)(nil)

// NewLocal returns a Local store rooted at root, creating the directory if
// needed and removing temporary files left behind by a crash.
func NewLocal(root string) (*Local, error) {
	if root == "" {
		return nil, errors.New("objstore: local: empty root directory")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("objstore: local root %q: %w", root, err)
	}
	l := &Local{root: abs, tmp: filepath.Join(abs, ReservedPrefix)}
	if err := os.MkdirAll(l.tmp, 0o755); err != nil {
		return nil, fmt.Errorf("objstore: local: create %s: %w", l.tmp, err)
	}
	if err := l.removeStaleTemps(time.Now().Add(-staleTempAge)); err != nil {
		return nil, err
	}
	return l, nil
}

// Root returns the absolute root directory.
func (l *Local) Root() string { return l.root }

func (l *Local) removeStaleTemps(before time.Time) error {
	entries, err := os.ReadDir(l.tmp)
	if err != nil {
		return fmt.Errorf("objstore: local: read %s: %w", l.tmp, err)
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !info.ModTime().Before(before) {
			continue
		}
		if err := os.Remove(filepath.Join(l.tmp, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("objstore: local: remove stale temp file: %w", err)
		}
	}
	return nil
}

func (l *Local) path(name string) string {
	return filepath.Join(l.root, filepath.FromSlash(name))
}

// begin performs the checks every call starts with.
func (l *Local) begin(ctx context.Context, op, name string) error {
	if l.closed.Load() {
		return fmt.Errorf("objstore: local %s %q: %w", op, name, ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("objstore: local %s %q: %w", op, name, err)
	}
	return nil
}

// isNotExist reports whether err means a path (or one of its parents as a
// directory) does not exist.
func isNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

func notExist(op, name string, err error) error {
	return fmt.Errorf("objstore: local %s %q: %w: %w", op, name, ErrNotExist, err)
}

// ReadAt implements Store.
func (l *Local) ReadAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	if err := l.begin(ctx, "read", name); err != nil {
		return 0, err
	}
	if err := ValidateName(name); err != nil {
		return 0, fmt.Errorf("objstore: local read: %w", err)
	}
	if off < 0 {
		return 0, fmt.Errorf("objstore: local read %q: negative offset %d", name, off)
	}
	f, err := os.Open(l.path(name))
	if err != nil {
		if isNotExist(err) {
			return 0, notExist("read", name, err)
		}
		return 0, fmt.Errorf("objstore: local read %q: %w", name, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("objstore: local read %q: %w", name, err)
	}
	if !st.Mode().IsRegular() {
		return 0, fmt.Errorf("objstore: local read %q: %w (not a regular file)", name, ErrNotExist)
	}
	if len(p) == 0 {
		return 0, nil
	}
	n, err := f.ReadAt(p, off)
	switch {
	case err == nil:
		return n, nil
	case errors.Is(err, io.EOF):
		return n, fmt.Errorf("objstore: local read %q at %d: %w", name, off, shortObject(len(p), n))
	default:
		return n, fmt.Errorf("objstore: local read %q at %d: %w", name, off, err)
	}
}

// Put implements Store.
func (l *Local) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	if err := l.begin(ctx, "put", name); err != nil {
		return err
	}
	if err := checkPut(name, r, size); err != nil {
		return fmt.Errorf("objstore: local put %q: %w", name, err)
	}
	if err := l.put(ctx, name, r, size); err != nil {
		return fmt.Errorf("objstore: local put %q: %w", name, err)
	}
	return nil
}

func (l *Local) put(ctx context.Context, name string, r io.Reader, size int64) (err error) {
	f, err := os.CreateTemp(l.tmp, "put-*")
	if errors.Is(err, fs.ErrNotExist) {
		// The store's directory was removed under it (an operator cleared
		// an export's place): make it again rather than fail every put.
		if err = os.MkdirAll(l.tmp, 0o755); err == nil {
			f, err = os.CreateTemp(l.tmp, "put-*")
		}
	}
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if br, ok := r.(*bytes.Reader); ok && int64(br.Len()) == size {
		// Bytes in memory (a sync packet): one write, not a copy through
		// io.Copy's buffer.
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := br.WriteTo(f); err != nil {
			return err
		}
	} else {
		src := &exactReader{ctx: ctx, r: r, remaining: size}
		if _, err := io.Copy(f, src); err != nil {
			return err
		}
		if src.remaining > 0 { // cannot happen: exactReader reports short input
			return io.ErrUnexpectedEOF
		}
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	l.dirMu.RLock()
	defer l.dirMu.RUnlock()
	dst := l.path(name)
	dir := filepath.Dir(dst)
	if err := l.mkdirs(dir); err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return err
	}
	return syncDir(dir)
}

// mkdirs creates dir (inside root) and its missing parents, fsyncing the
// parent of every directory it creates.
func (l *Local) mkdirs(dir string) error {
	if st, err := os.Stat(dir); err == nil {
		if !st.IsDir() {
			return fmt.Errorf("%s exists and is not a directory", dir)
		}
		return nil
	}
	rel, err := filepath.Rel(l.root, dir)
	if err != nil {
		return err
	}
	cur := l.root
	for _, elem := range strings.Split(rel, string(filepath.Separator)) {
		next := filepath.Join(cur, elem)
		err := os.Mkdir(next, 0o755)
		switch {
		case err == nil:
			if err := syncDir(cur); err != nil {
				return err
			}
		case errors.Is(err, fs.ErrExist):
			// Mkdir reports EEXIST for a file too; the Rename will fail then.
		default:
			return err
		}
		cur = next
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// Stat implements Store.
func (l *Local) Stat(ctx context.Context, name string) (ObjectInfo, error) {
	if err := l.begin(ctx, "stat", name); err != nil {
		return ObjectInfo{}, err
	}
	if err := ValidateName(name); err != nil {
		return ObjectInfo{}, fmt.Errorf("objstore: local stat: %w", err)
	}
	st, err := os.Stat(l.path(name))
	if err != nil {
		if isNotExist(err) {
			return ObjectInfo{}, notExist("stat", name, err)
		}
		return ObjectInfo{}, fmt.Errorf("objstore: local stat %q: %w", name, err)
	}
	if !st.Mode().IsRegular() {
		return ObjectInfo{}, fmt.Errorf("objstore: local stat %q: %w (not a regular file)", name, ErrNotExist)
	}
	return ObjectInfo{Name: name, Size: st.Size(), ModTime: st.ModTime()}, nil
}

// Delete implements Store.
func (l *Local) Delete(ctx context.Context, name string) error {
	if err := l.begin(ctx, "delete", name); err != nil {
		return err
	}
	if err := ValidateName(name); err != nil {
		return fmt.Errorf("objstore: local delete: %w", err)
	}
	l.dirMu.Lock()
	defer l.dirMu.Unlock()
	p := l.path(name)
	st, err := os.Lstat(p)
	if err != nil {
		if isNotExist(err) {
			return nil
		}
		return fmt.Errorf("objstore: local delete %q: %w", name, err)
	}
	if st.IsDir() { // "a" when only "a/..." objects exist: no object "a"
		return nil
	}
	if err := os.Remove(p); err != nil {
		if isNotExist(err) {
			return nil
		}
		return fmt.Errorf("objstore: local delete %q: %w", name, err)
	}
	// Remove the directories the deletion left empty, up to the root.
	dir := filepath.Dir(p)
	for dir != l.root && strings.HasPrefix(dir, l.root) {
		if os.Remove(dir) != nil {
			break // not empty (or gone): stop
		}
		dir = filepath.Dir(dir)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("objstore: local delete %q: %w", name, err)
	}
	return nil
}

// List implements Store.
func (l *Local) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	if err := l.begin(ctx, "list", prefix); err != nil {
		return nil, err
	}
	if err := validatePrefix(prefix); err != nil {
		return nil, fmt.Errorf("objstore: local list: %w", err)
	}
	// Walk only the deepest directory the prefix fully names.
	base := ""
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		base = prefix[:i]
	}
	start := l.root
	if base != "" {
		start = l.path(base)
	}
	var out []ObjectInfo
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if isNotExist(err) { // no such directory, or removed by a concurrent Delete
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == start {
			if !d.IsDir() {
				return fs.SkipAll
			}
			return nil
		}
		rel, err := filepath.Rel(l.root, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if d.IsDir() {
			if p == l.tmp || !strings.HasPrefix(name+"/", prefix) && !strings.HasPrefix(prefix, name+"/") {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !strings.HasPrefix(name, prefix) || ValidateName(name) != nil {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			if isNotExist(err) { // deleted meanwhile
				return nil
			}
			return err
		}
		out = append(out, ObjectInfo{Name: name, Size: info.Size(), ModTime: info.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("objstore: local list %q: %w", prefix, err)
	}
	slices.SortFunc(out, func(a, b ObjectInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Close implements Store. Local holds no resources between calls.
func (l *Local) Close() error {
	l.closed.Store(true)
	return nil
}
