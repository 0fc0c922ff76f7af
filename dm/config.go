package dm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"go.yaml.in/yaml/v3"

	"github.com/chunkraft/chunkraft/datasync/dest"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
)

// TaskFile is a task file (`chunkctl dm start-task task.yaml`), in YAML,
// or a subtask config in TOML (CheckSubtasksCanUpdate): the same keys in
// both. Unknown keys are an error.
type TaskFile struct {
	Name            string        `yaml:"name" toml:"name"`
	TaskMode        string        `yaml:"task-mode" toml:"task-mode"`
	Source          SourceFile    `yaml:"source" toml:"source"`
	TargetPool      uint32        `yaml:"target-pool" toml:"target-pool"`
	Copysets        []uint32      `yaml:"copysets,omitempty" toml:"copysets,omitempty"`
	IncrementalFrom string        `yaml:"incremental-from,omitempty" toml:"incremental-from,omitempty"`
	Sync            SyncSettings  `yaml:"sync,omitempty" toml:"sync,omitempty"`
	Validator       ValidatorFile `yaml:"validator,omitempty" toml:"validator,omitempty"`
}

// ValidatorFile is a task file's validator: mode none, fast or full, and
// how long a chunk must keep differing before it is an error row (a Go
// duration; default 30m).
type ValidatorFile struct {
	Mode          string `yaml:"mode,omitempty" toml:"mode,omitempty"`
	RowErrorDelay string `yaml:"row-error-delay,omitempty" toml:"row-error-delay,omitempty"`
}

// DefaultRowErrorDelay is the validator's row-error-delay by default
// (upstream's).
const DefaultRowErrorDelay = 30 * time.Minute

// SourceFile is a task file's source: a cluster's pool exported to a
// relay, or an export.
type SourceFile struct {
	Cluster []string `yaml:"cluster,omitempty" toml:"cluster,omitempty"`
	Pool    uint32   `yaml:"pool" toml:"pool"`
	Relay   string   `yaml:"relay,omitempty" toml:"relay,omitempty"`
	Export  string   `yaml:"export,omitempty" toml:"export,omitempty"`
	// SendInterval (with Cluster): the relay task's send interval, a Go
	// duration from 100ms to 1h; empty: the source servers'.
	SendInterval string `yaml:"send-interval,omitempty" toml:"send-interval,omitempty"`
}

// SyncSettings are a task's settings that may change in the Sync unit:
// the chunk data a copyset's share applies per second (0: no bound).
type SyncSettings struct {
	ThrottleBytesPerSec uint64 `yaml:"throttle-bytes-per-sec,omitempty" toml:"throttle-bytes-per-sec,omitempty"`
}

// Limits of a task file.
const (
	// MaxNameLen bounds a task name.
	MaxNameLen = 64
	// MaxCopysets bounds the copysets a task lists.
	MaxCopysets = 4096
	// MaxTaskFileBytes bounds a task file.
	MaxTaskFileBytes = 1 << 20
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// Modes are the task modes by their task file names.
var modes = map[string]pb.Mode{"all": pb.Mode_ALL, "full": pb.Mode_FULL, "incremental": pb.Mode_INCREMENTAL}

// ModeName is the task file name of m.
func ModeName(m pb.Mode) string {
	for k, v := range modes {
		if v == m {
			return k
		}
	}
	return strings.ToLower(m.String())
}

// ParseTaskYAML parses and checks a task file in YAML: unknown keys,
// several documents or a bad value are errors naming the key.
func ParseTaskYAML(b []byte) (*pb.TaskConfig, error) {
	if len(b) > MaxTaskFileBytes {
		return nil, fmt.Errorf("task file: %d bytes, more than %d", len(b), MaxTaskFileBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var f TaskFile
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("task file: empty")
		}
		var te *yaml.TypeError
		if errors.As(err, &te) {
			return nil, fmt.Errorf("task file: %s", yamlTypeErrors(te))
		}
		return nil, fmt.Errorf("task file: %w", err)
	}
	var more any
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, errors.New("task file: more than one YAML document")
	}
	return f.Config()
}

// unknownYAMLField is how the YAML decoder names a key the task file does
// not have: "field K not found in type T".
var unknownYAMLField = regexp.MustCompile(`field (\S+) not found in type \S+`)

// yamlTypeErrors writes the decoder's errors as the task file's: "line 3:
// unknown key sauce", the type names left out; several joined with "; ".
func yamlTypeErrors(te *yaml.TypeError) string {
	out := make([]string, len(te.Errors))
	for i, e := range te.Errors {
		out[i] = unknownYAMLField.ReplaceAllString(e, "unknown key $1")
	}
	return strings.Join(out, "; ")
}

// ParseTaskTOML parses and checks a subtask config in TOML (upstream's
// subtaskCfgTomlString): unknown keys or a bad value are errors.
func ParseTaskTOML(s string) (*pb.TaskConfig, error) {
	if len(s) > MaxTaskFileBytes {
		return nil, fmt.Errorf("subtask config: %d bytes, more than %d", len(s), MaxTaskFileBytes)
	}
	var f TaskFile
	md, err := toml.Decode(s, &f)
	if err != nil {
		return nil, fmt.Errorf("subtask config: %w", err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return nil, fmt.Errorf("subtask config: unknown keys %s", strings.Join(keys, ", "))
	}
	return f.Config()
}

// TaskTOML renders c as a subtask config in TOML (ParseTaskTOML reads it
// back as c).
func TaskTOML(c *pb.TaskConfig) (string, error) {
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(FileOf(c)); err != nil {
		return "", fmt.Errorf("subtask config %s: %w", c.GetName(), err)
	}
	return buf.String(), nil
}

// FileOf is the task file of c.
func FileOf(c *pb.TaskConfig) TaskFile {
	f := TaskFile{
		Name: c.GetName(), TaskMode: ModeName(c.GetMode()), TargetPool: c.GetTargetPool(),
		Copysets: slices.Clone(c.GetCopysets()), IncrementalFrom: c.GetIncrementalFrom(),
		Source: SourceFile{Cluster: slices.Clone(c.GetSource().GetCluster()), Pool: c.GetSource().GetPool(),
			Relay: c.GetSource().GetRelay(), Export: c.GetSource().GetExport()},
		Sync: SyncSettings{ThrottleBytesPerSec: c.GetSync().GetThrottleBytesPerSec()},
	}
	if ms := c.GetSource().GetSendIntervalMs(); ms > 0 {
		f.Source.SendInterval = (time.Duration(ms) * time.Millisecond).String()
	}
	if v := c.GetValidator(); v.GetMode() != "" {
		f.Validator.Mode = v.GetMode()
		if ms := v.GetRowErrorDelayMs(); ms > 0 {
			f.Validator.RowErrorDelay = (time.Duration(ms) * time.Millisecond).String()
		}
	}
	return f
}

// Config checks f and returns it in canonical form: locations in their
// canonical URL form, copysets ascending.
func (f TaskFile) Config() (*pb.TaskConfig, error) {
	bad := func(key, format string, args ...any) error {
		return fmt.Errorf("task %q: %s: %s", f.Name, key, fmt.Sprintf(format, args...))
	}
	switch {
	case f.Name == "":
		return nil, errors.New("task: name: required")
	case len(f.Name) > MaxNameLen:
		return nil, bad("name", "%d bytes, more than %d", len(f.Name), MaxNameLen)
	case !nameRE.MatchString(f.Name):
		return nil, bad("name", "only letters, digits, '_', '.' and '-', starting with a letter or digit")
	}
	c := &pb.TaskConfig{Name: f.Name, TargetPool: f.TargetPool, Source: &pb.Source{Pool: f.Source.Pool}, Sync: &pb.SyncSettings{}}
	mode, ok := modes[f.TaskMode]
	if !ok {
		return nil, bad("task-mode", "%q is not one of all, full, incremental", f.TaskMode)
	}
	c.Mode = mode
	if f.Source.Pool == 0 {
		return nil, bad("source.pool", "required (a pool id from 1)")
	}
	if f.TargetPool == 0 {
		return nil, bad("target-pool", "required (a pool id from 1)")
	}
	switch s := f.Source; {
	case len(s.Cluster) > 0 && s.Export != "":
		return nil, bad("source", "cluster and export exclude each other")
	case len(s.Cluster) > 0:
		if s.Relay == "" {
			return nil, bad("source.relay", "required with source.cluster: where the source's export is written (file:// or s3://)")
		}
		for _, a := range s.Cluster {
			if _, _, err := net.SplitHostPort(a); err != nil {
				return nil, bad("source.cluster", "%q is not host:port", a)
			}
		}
		c.Source.Cluster = slices.Clone(s.Cluster)
		u, err := dest.Parse(s.Relay)
		if err != nil {
			return nil, bad("source.relay", "%v", err)
		}
		c.Source.Relay = u.String()
		if s.SendInterval != "" {
			d, err := time.ParseDuration(s.SendInterval)
			if err != nil || d < 100*time.Millisecond || d > time.Hour || d%time.Millisecond != 0 {
				return nil, bad("source.send-interval", "%q: want a duration from 100ms to 1h, in whole milliseconds", s.SendInterval)
			}
			c.Source.SendIntervalMs = uint32(d.Milliseconds())
		}
	case s.Export != "":
		if s.Relay != "" {
			return nil, bad("source.relay", "only with source.cluster")
		}
		if s.SendInterval != "" {
			return nil, bad("source.send-interval", "only with source.cluster (an export's interval is its task's)")
		}
		u, err := dest.Parse(s.Export)
		if err != nil {
			return nil, bad("source.export", "%v", err)
		}
		c.Source.Export = u.String()
	default:
		return nil, bad("source", "one of cluster (with relay) or export is required")
	}
	if len(f.Copysets) > MaxCopysets {
		return nil, bad("copysets", "%d listed, more than %d", len(f.Copysets), MaxCopysets)
	}
	cs := slices.Clone(f.Copysets)
	slices.Sort(cs)
	for i, id := range cs {
		switch {
		case id == 0:
			return nil, bad("copysets", "copyset ids start at 1")
		case i > 0 && cs[i-1] == id:
			return nil, bad("copysets", "copyset %d listed twice", id)
		}
	}
	c.Copysets = cs
	switch {
	case mode == pb.Mode_INCREMENTAL && f.IncrementalFrom == "":
		return nil, bad("incremental-from", "required with task-mode incremental: a restore marker's location")
	case mode != pb.Mode_INCREMENTAL && f.IncrementalFrom != "":
		return nil, bad("incremental-from", "only with task-mode incremental")
	case f.IncrementalFrom != "" && len(f.Source.Cluster) > 0:
		return nil, bad("incremental-from", "task-mode incremental goes on in the export the restore read: give it as source.export (a source cluster's relay is a new export)")
	case f.IncrementalFrom != "":
		u, err := dest.Parse(f.IncrementalFrom)
		if err != nil {
			return nil, bad("incremental-from", "%v", err)
		}
		c.IncrementalFrom = u.String()
	}
	c.Sync.ThrottleBytesPerSec = f.Sync.ThrottleBytesPerSec
	switch v := f.Validator; v.Mode {
	case "", "none":
		if v.RowErrorDelay != "" {
			return nil, bad("validator.row-error-delay", "only with validator.mode fast or full")
		}
	case "fast", "full":
		if len(f.Source.Cluster) == 0 {
			return nil, bad("validator.mode", "%s compares with the live source cluster: it needs source.cluster (an export has no chunks to compare with)", v.Mode)
		}
		c.Validator = &pb.Validator{Mode: v.Mode}
		if v.RowErrorDelay != "" {
			d, err := time.ParseDuration(v.RowErrorDelay)
			if err != nil || d < time.Second || d%time.Millisecond != 0 {
				return nil, bad("validator.row-error-delay", "%q: want a duration of at least 1s, in whole milliseconds", v.RowErrorDelay)
			}
			c.Validator.RowErrorDelayMs = uint64(d.Milliseconds())
		}
	default:
		return nil, bad("validator.mode", "%q is not one of none, fast, full", v.Mode)
	}
	return c, nil
}
