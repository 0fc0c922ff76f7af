package copyset

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/chunkraft/chunkraft/internal/atomicfile"
)

// The trash: a replica that leaves this server (removed from its copyset,
// deleted as broken) is not deleted at once but moved to
// <data_dir>/trash/<groupId>.<unixmillis>, as Curve's recycler, and the
// manager's lifecycle goroutine deletes entries older than MaxAge.

// TrashOptions configure the trash purge.
type TrashOptions struct {
	ScanInterval time.Duration // how often the trash is scanned (default 120s)
	MaxAge       time.Duration // how long a replica stays there (default 300s)
}

func (o TrashOptions) withDefaults() TrashOptions {
	if o.ScanInterval <= 0 {
		o.ScanInterval = 120 * time.Second
	}
	if o.MaxAge <= 0 {
		o.MaxAge = 300 * time.Second
	}
	return o
}

// TrashDir returns the directory removed replicas are moved to.
func (m *Manager) TrashDir() string { return filepath.Join(m.opts.Dir, "trash") }

func dirExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// moveToTrash moves g's copyset directory to the trash and returns its new
// path.
func (m *Manager) moveToTrash(g GroupID) (string, error) {
	src := m.groupDir(g)
	if !dirExists(src) {
		return "", fmt.Errorf("move copyset %s to trash: %w", g, os.ErrNotExist)
	}
	trash := m.TrashDir()
	if err := os.MkdirAll(trash, 0o755); err != nil {
		return "", fmt.Errorf("move copyset %s to trash: %w", g, err)
	}
	ms := time.Now().UnixMilli()
	dst := filepath.Join(trash, fmt.Sprintf("%s.%d", g, ms))
	for dirExists(dst) { // twice within a millisecond
		ms++
		dst = filepath.Join(trash, fmt.Sprintf("%s.%d", g, ms))
	}
	if err := os.Rename(src, dst); err != nil {
		return "", fmt.Errorf("move copyset %s to trash: %w", g, err)
	}
	err := errors.Join(atomicfile.SyncDir(trash), atomicfile.SyncDir(filepath.Dir(src)))
	if err != nil {
		return dst, fmt.Errorf("move copyset %s to trash: %w", g, err)
	}
	return dst, nil
}

// trashTime is when a trash entry was made: the suffix of its name, or
// its modification time for a name without one.
func trashTime(e os.DirEntry) (time.Time, bool) {
	name := e.Name()
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		if ms, err := strconv.ParseInt(name[i+1:], 10, 64); err == nil {
			return time.UnixMilli(ms), true
		}
	}
	info, err := e.Info()
	if err != nil {
		return time.Time{}, false
	}
	return info.ModTime(), true
}

// PurgeTrash deletes the trash entries older than the maximum age at now
// and returns how many it deleted. The manager runs it every scan interval.
func (m *Manager) PurgeTrash(now time.Time) int {
	entries, err := os.ReadDir(m.TrashDir())
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			m.log.Warn("scan trash", "err", err)
		}
		return 0
	}
	purged := 0
	for _, e := range entries {
		t, ok := trashTime(e)
		if !ok || now.Sub(t) < m.trash.MaxAge {
			continue
		}
		path := filepath.Join(m.TrashDir(), e.Name())
		if err := os.RemoveAll(path); err != nil {
			m.log.Warn("purge trash", "path", path, "err", err)
			continue
		}
		m.log.Info("purged from trash", "path", path)
		purged++
	}
	return purged
}
