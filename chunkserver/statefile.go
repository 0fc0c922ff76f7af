package chunkserver

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/chunkraft/chunkraft/internal/atomicfile"
)

// compactMinBytes is the size below which a state file is never compacted.
const compactMinBytes = 1 << 20

// stateFile is the append-only file of a copyset state machine whose state
// is small (integrity jobs, fences): each change appends one line holding
// the whole state as JSON. It lives in the copyset data dir, next to the
// chunk files, and is listed by the machine's Files, so it travels with
// raft snapshots. An append-only file, not one replaced on each change,
// because a raft snapshot streams a live file at the size it had when the
// stream started: a prefix of an append-only file is a consistent earlier
// state, a replaced JSON document cut to the old size is not. Loading
// ignores torn and zero-padded lines (eachStateLine). When the file
// outgrows its last line by far it is compacted to that line (write temp,
// fsync, rename). Lines are fsynced by sync, before a raft snapshot lets
// the log that produced them be truncated.
type stateFile struct {
	path string

	mu    sync.Mutex
	f     *os.File
	size  int64
	dirty bool
}

// openStateFile removes a compaction's leftover temp file and returns the
// file and its content (nil if it does not exist yet).
func openStateFile(path string) (*stateFile, []byte, error) {
	if err := os.Remove(path + ".tmp"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("state file: %w", err)
	}
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("state file: %w", err)
	}
	return &stateFile{path: path, size: int64(len(b))}, b, nil
}

// eachStateLine calls valid for every non-empty line of b (torn-write and
// zero padding trimmed) and returns how many lines it refused.
func eachStateLine(b []byte, valid func(line []byte) bool) int {
	bad := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<30)
	for sc.Scan() {
		line := bytes.Trim(sc.Bytes(), "\x00 \t\r")
		if len(line) > 0 && !valid(line) {
			bad++
		}
	}
	return bad
}

// append appends one state line, compacting the file to it when the file
// has grown far beyond it.
func (s *stateFile) append(line []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	line = append(line, '\n')
	if s.size > compactMinBytes && s.size > 8*int64(len(line)) {
		return s.compactLocked(line)
	}
	if s.f == nil {
		f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("state file: %w", err)
		}
		s.f = f
	}
	n, err := s.f.Write(line)
	s.size += int64(n)
	s.dirty = true
	if err != nil {
		return fmt.Errorf("state file %s: append: %w", s.path, err)
	}
	return nil
}

// compactLocked replaces the file with line alone, durably.
func (s *stateFile) compactLocked(line []byte) error {
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
	if err := atomicfile.WriteFile(s.path, line, 0o644); err != nil {
		return fmt.Errorf("state file %s: compact: %w", s.path, err)
	}
	s.size, s.dirty = int64(len(line)), false
	return nil
}

// sync fsyncs what was appended since the last sync.
func (s *stateFile) sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.dirty || s.f == nil {
		return nil
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("state file %s: sync: %w", s.path, err)
	}
	s.dirty = false
	return nil
}

// close closes the file; a later append reopens it.
func (s *stateFile) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}
