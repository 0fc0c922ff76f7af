package chunkstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/chunkraft/chunkraft/internal/atomicfile"
)

// errEpochTooOld is returned by epochMap.update for a lower epoch.
var errEpochTooOld = errors.New("epoch older than the stored one")

// fenceTable is fileId -> epoch: chunk requests of the file carrying a
// lower epoch are refused. A table is never modified once shared; a change
// makes a new one.
type fenceTable map[uint64]uint64

// merge returns t raised by every fence of u (the greater epoch per file)
// and whether anything was raised; t itself is left as it was.
func (t fenceTable) merge(u fenceTable) (fenceTable, bool) {
	var out fenceTable
	for file, epoch := range u {
		if stored, ok := t[file]; ok && stored >= epoch {
			continue
		}
		if out == nil {
			out = maps.Clone(t)
			if out == nil {
				out = fenceTable{}
			}
		}
		out[file] = epoch
	}
	if out == nil {
		return t, false
	}
	return out, true
}

// files returns the table's file ids in ascending order.
func (t fenceTable) files() []uint64 { return slices.Sorted(maps.Keys(t)) }

// epochMap is the I/O fence of a chunkserver: fileId -> epoch, monotonic,
// persisted in <data_dir>/epochs.json (written to a temp file, fsynced and
// renamed on every change) so a restart keeps fencing. It is the union of
// the fences this server was sent (UpdateEpoch) and of the fences its
// copysets replicate (fence.go): a fence raised here is proposed to the
// copysets this server leads, and applying a copyset's fence op raises the
// map on every replica.
//
// Rule (documented in the README): a mutating chunk request carrying both
// fileId and epoch is refused with EPOCH_TOO_OLD, changing nothing, when
// the stored epoch of that file is greater than the request's. Requests
// without the fields, or for files never fenced, pass.
//
// Reads of the map (allowed, table) are one atomic load: the table is
// replaced whole, under mu, on every change.
type epochMap struct {
	path string
	mu   sync.Mutex // serialises changes and their persisting
	cur  atomic.Pointer[fenceTable]
}

func openEpochMap(dataDir string) (*epochMap, error) {
	e := &epochMap{path: filepath.Join(dataDir, "epochs.json")}
	t := fenceTable{}
	e.cur.Store(&t)
	b, err := os.ReadFile(e.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return e, nil
	case err != nil:
		return nil, fmt.Errorf("load epochs: %w", err)
	}
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("load epochs %s: %w", e.path, err)
	}
	return e, nil
}

// table returns the current fences; the caller must not modify it.
func (e *epochMap) table() fenceTable { return *e.cur.Load() }

// allowed reports whether a request with (fileID, epoch) passes the fence.
func (e *epochMap) allowed(fileID, epoch uint64) bool {
	stored, ok := e.table()[fileID]
	return !ok || epoch >= stored
}

// update stores epoch for fileID: lower than stored -> errEpochTooOld,
// equal -> no change, higher -> persisted before returning.
func (e *epochMap) update(fileID, epoch uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if stored, ok := e.table()[fileID]; ok && epoch < stored {
		return fmt.Errorf("file %d epoch %d < %d: %w", fileID, epoch, stored, errEpochTooOld)
	}
	return e.raiseLocked(fenceTable{fileID: epoch})
}

// raise raises every file of u to at least its epoch in u (a lower or
// equal epoch changes nothing) and persists the result before returning.
// On a persist error nothing changed.
func (e *epochMap) raise(u fenceTable) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.raiseLocked(u)
}

func (e *epochMap) raiseLocked(u fenceTable) error {
	next, changed := e.table().merge(u)
	if !changed {
		return nil
	}
	if err := persistFences(e.path, next); err != nil {
		return err
	}
	e.cur.Store(&next)
	return nil
}

// persistFences writes t to path as a JSON object {"<fileId>": epoch},
// atomically.
func persistFences(path string, t fenceTable) error {
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("persist epochs: %w", err)
	}
	return nil
}
