package chunkserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/chunkraft/chunkraft/internal/atomicfile"
)

// errEpochTooOld is returned by epochMap.update for a lower epoch.
var errEpochTooOld = errors.New("epoch older than the stored one")

// epochMap is the I/O fence of a chunkserver: fileId -> epoch, monotonic,
// persisted in <data_dir>/epochs.json (written to a temp file, fsynced and
// renamed on every change) so a restart keeps fencing. It is local to the
// server, not replicated: clients send UpdateEpoch to every chunkserver of
// a file (Curve's model), and requests are fenced where they arrive.
//
// Rule (documented in the README): a mutating chunk request carrying both
// fileId and epoch is refused with EPOCH_TOO_OLD, changing nothing, when
// the stored epoch of that file is greater than the request's. Requests
// without the fields, or for files never fenced, pass.
type epochMap struct {
	path string
	mu   sync.Mutex
	m    map[uint64]uint64
}

func openEpochMap(dataDir string) (*epochMap, error) {
	e := &epochMap{path: filepath.Join(dataDir, "epochs.json"), m: map[uint64]uint64{}}
	b, err := os.ReadFile(e.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return e, nil
	case err != nil:
		return nil, fmt.Errorf("load epochs: %w", err)
	}
	var raw map[string]uint64
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("load epochs %s: %w", e.path, err)
	}
	for k, v := range raw {
		id, err := strconv.ParseUint(k, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("load epochs %s: file id %q: %w", e.path, k, err)
		}
		e.m[id] = v
	}
	return e, nil
}

// allowed reports whether a request with (fileID, epoch) passes the fence.
func (e *epochMap) allowed(fileID, epoch uint64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	stored, ok := e.m[fileID]
	return !ok || epoch >= stored
}

// update stores epoch for fileID: lower than stored -> errEpochTooOld,
// equal -> no change, higher -> persisted before returning.
func (e *epochMap) update(fileID, epoch uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	stored, ok := e.m[fileID]
	if ok && epoch < stored {
		return fmt.Errorf("file %d epoch %d < %d: %w", fileID, epoch, stored, errEpochTooOld)
	}
	if ok && epoch == stored {
		return nil
	}
	e.m[fileID] = epoch
	if err := e.persist(); err != nil {
		if ok {
			e.m[fileID] = stored
		} else {
			delete(e.m, fileID)
		}
		return err
	}
	return nil
}

func (e *epochMap) persist() error {
	raw := make(map[string]uint64, len(e.m))
	for k, v := range e.m {
		raw[strconv.FormatUint(k, 10)] = v
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(e.path, b, 0o644); err != nil {
		return fmt.Errorf("persist epochs: %w", err)
	}
	return nil
}
