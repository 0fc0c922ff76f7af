package copysettest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/atomicfile"
)

// ToyFile is the toy machine's state file inside its spec's Dir.
const ToyFile = "kv.log"

// ToyKV is the toy machine: a key-value map kept in one append-only,
// index-stamped file. Op payload "key=value" sets key. Every applied op
// appends the line "index key value\n"; loading parses the complete lines
// (a torn last line is ignored), so any prefix of the file is the state as
// of the last whole line's index, and Apply skips an index at or below it.
type ToyKV struct {
	rel     string // ToyFile relative to the copyset data dir
	f       *os.File
	kv      map[string]string
	applied uint64
}

// ToySpec registers the toy machine under kind in the copyset data dir's
// subdirectory dir.
func ToySpec(kind copyset.Kind, dir string) copyset.MachineSpec {
	return copyset.MachineSpec{Kind: kind, Name: "toykv", Dir: dir,
		Open: func(env copyset.MachineEnv, _ copyset.Machines) (copyset.StateMachine, error) {
			return OpenToyKV(env.Dir, filepath.Join(dir, ToyFile))
		}}
}

// OpenToyKV opens the toy machine on dir/ToyFile; rel is that file's
// path relative to the copyset data dir (what Files lists).
func OpenToyKV(dir, rel string) (*ToyKV, error) {
	path := filepath.Join(dir, ToyFile)
	m := &ToyKV{rel: rel, kv: map[string]string{}}
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("open toy kv: %w", err)
	}
	whole := 0
	for {
		nl := bytes.IndexByte(b[whole:], '\n')
		if nl < 0 {
			break
		}
		if idx, k, v, ok := parseToyLine(b[whole : whole+nl]); ok && idx > m.applied {
			m.kv[k], m.applied = v, idx
		}
		whole += nl + 1
	}
	if m.f, err = os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644); err != nil {
		return nil, fmt.Errorf("open toy kv: %w", err)
	}
	// Drop a torn tail so that the next line starts on a line boundary.
	if err := m.f.Truncate(int64(whole)); err != nil {
		m.f.Close()
		return nil, fmt.Errorf("open toy kv: %w", err)
	}
	if _, err := m.f.Seek(int64(whole), 0); err != nil {
		m.f.Close()
		return nil, fmt.Errorf("open toy kv: %w", err)
	}
	return m, nil
}

func parseToyLine(line []byte) (uint64, string, string, bool) {
	f := strings.Fields(string(line))
	if len(f) != 3 {
		return 0, "", "", false
	}
	idx, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil || idx == 0 {
		return 0, "", "", false
	}
	return idx, f[1], f[2], true
}

// Apply implements copyset.StateMachine.
func (m *ToyKV) Apply(index uint64, payload []byte) any {
	if index <= m.applied {
		return nil // already in the state: a replay
	}
	k, v, ok := strings.Cut(string(payload), "=")
	if !ok || k == "" || v == "" || strings.ContainsAny(string(payload), " \n") {
		return fmt.Errorf("toy kv: bad op %q", payload)
	}
	if _, err := fmt.Fprintf(m.f, "%d %s %s\n", index, k, v); err != nil {
		return &copyset.FatalError{Err: fmt.Errorf("toy kv: append: %w", err)}
	}
	m.kv[k], m.applied = v, index
	return nil
}

// Sync implements copyset.StateMachine.
func (m *ToyKV) Sync() error {
	if err := m.f.Sync(); err != nil {
		return fmt.Errorf("toy kv: sync: %w", err)
	}
	return atomicfile.SyncDir(filepath.Dir(m.f.Name()))
}

// Files implements copyset.StateMachine.
func (m *ToyKV) Files() ([]string, error) { return []string{m.rel}, nil }

// Close implements copyset.StateMachine.
func (m *ToyKV) Close() error { return m.f.Close() }

// Applied returns the index of the last op in the state.
func (m *ToyKV) Applied() uint64 { return m.applied }

// Dump returns the map as sorted "key=value" lines.
func (m *ToyKV) Dump() string { return dumpMap(m.kv) }

// dumpMap returns kv as sorted "key=value" lines.
func dumpMap(kv map[string]string) string {
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, kv[k])
	}
	return b.String()
}

// ToyOp is the op (header included) setting key to value on the toy
// machine of kind.
func ToyOp(kind copyset.Kind, key, value string) []byte {
	op := make([]byte, copyset.OpHeaderLen, copyset.OpHeaderLen+len(key)+1+len(value))
	copyset.PutOpHeader(op, kind)
	return append(op, key+"="+value...)
}

// ToyWorkload is the conformance workload of the toy machine of kind:
// sets of a few keys to random values; the state is the sorted map.
func ToyWorkload(kind copyset.Kind) Workload {
	return Workload{
		Op: func(rng *rand.Rand, i int) []byte {
			return ToyOp(kind, fmt.Sprintf("k%d", rng.IntN(16)), fmt.Sprintf("v%d.%d", i, rng.IntN(1000)))
		},
		State: func(ms copyset.Machines) (string, error) {
			m, ok := copyset.MachineAs[*ToyKV](ms, kind)
			if !ok {
				return "", fmt.Errorf("no toy kv machine of kind %d", kind)
			}
			return m.Dump(), nil
		},
	}
}
