package statefile

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/internal/atomicfile"
)

// CompactMinBytes is the size below which a state file is never compacted.
const CompactMinBytes = 1 << 20

// File is one append-only state file. Append, Sync and Close are safe for
// concurrent use; a machine calls Append from its apply goroutine.
type File struct {
	path string

	mu    sync.Mutex
	f     *os.File // nil until the first Append, and after Close or a compaction
	size  int64
	dirty bool // appended since the last Sync
	// torn is set when the file does not end with a line break (a torn
	// last write, or a prefix cut by a snapshot stream): the next Append
	// starts a new line rather than completing the fragment.
	torn bool
}

// Open removes a compaction's leftover temp file and returns the file and
// its content (nil if it does not exist yet). The file is opened for
// appending on the first Append.
func Open(path string) (*File, []byte, error) {
	if err := os.Remove(path + ".tmp"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("state file: %w", err)
	}
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("state file: %w", err)
	}
	return &File{path: path, size: int64(len(b)), torn: len(b) > 0 && b[len(b)-1] != '\n'}, b, nil
}

// EachLine calls valid for every non-empty line of b (torn-write and
// zero padding trimmed) and returns how many lines it refused.
func EachLine(b []byte, valid func(line []byte) bool) int {
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

// Newest decodes every line of b (EachLine) as protojson into a fresh()
// message and returns the one with the highest applied index, the last of
// equals (fresh() itself when none decodes), and how many lines it
// refused: the load of a state machine that appends its whole state,
// stamped with its applied index, as one line per change.
func Newest[T interface {
	proto.Message
	GetApplied() uint64
}](b []byte, fresh func() T) (T, int) {
	best := fresh()
	bad := EachLine(b, func(line []byte) bool {
		st := fresh()
		if protojson.Unmarshal(line, st) != nil {
			return false
		}
		if st.GetApplied() >= best.GetApplied() {
			best = st
		}
		return true
	})
	return best, bad
}

// Path returns the file's path.
func (s *File) Path() string { return s.path }

// Append appends one state line (without its '\n'), compacting the file to
// it when the file has grown far beyond it. It may append to line's
// backing array.
func (s *File) Append(line []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	line = append(line, '\n')
	if s.size > CompactMinBytes && s.size > 8*int64(len(line)) {
		return s.compactLocked(line)
	}
	return s.appendLocked(line)
}

// appendLocked appends line (ended by '\n').
func (s *File) appendLocked(line []byte) error {
	if s.f == nil {
		f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("state file: %w", err)
		}
		s.f = f
	}
	if s.torn {
		line = append([]byte{'\n'}, line...)
	}
	n, err := s.f.Write(line)
	s.size += int64(n)
	if n > 0 {
		s.torn = line[n-1] != '\n'
	}
	s.dirty = true
	if err != nil {
		return fmt.Errorf("state file %s: append: %w", s.path, err)
	}
	return nil
}

// AppendEntry appends one journal line (without its '\n'): a line that
// holds a change rather than the whole state, which a compaction must not
// replace the file with. The machine calls Replace with its whole state
// when the file has grown enough. It may append to line's backing array.
func (s *File) AppendEntry(line []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.appendLocked(append(line, '\n'))
}

// Replace replaces the file with line (without its '\n') alone, durably:
// a journal's compaction to its whole state. It may append to line's
// backing array.
func (s *File) Replace(line []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.compactLocked(append(line, '\n'))
}

// Size is the file's size in bytes.
func (s *File) Size() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.size
}

// compactLocked replaces the file with line alone, durably.
func (s *File) compactLocked(line []byte) error {
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
	if err := atomicfile.WriteFile(s.path, line, 0o644); err != nil {
		return fmt.Errorf("state file %s: compact: %w", s.path, err)
	}
	s.size, s.dirty, s.torn = int64(len(line)), false, false
	return nil
}

// Sync fsyncs what was appended since the last Sync.
func (s *File) Sync() error {
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

// Close closes the file; a later Append reopens it.
func (s *File) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}
