package slogbridge

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"reflect"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Hclog returns an hclog.Logger writing to l's handler at level and above,
// with name as the "component" attribute. Lines below level are dropped
// whatever l's handler would accept; lines at level and above are written
// whatever its level (the handler's Handle is called directly).
func Hclog(l *slog.Logger, name string, level hclog.Level) hclog.Logger {
	lv := new(atomic.Int32)
	lv.Store(int32(level))
	return &hclogger{h: l.Handler(), name: name, level: lv}
}

type hclogger struct {
	h       slog.Handler
	name    string
	level   *atomic.Int32 // shared with loggers derived by With and Named, as in hclog
	implied []any
}

// slogLevel maps an hclog level to slog's (Trace is below Debug).
func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Info, hclog.NoLevel:
		return slog.LevelInfo
	case hclog.Warn:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}

func (l *hclogger) enabled(level hclog.Level) bool {
	min := hclog.Level(l.level.Load())
	return level != hclog.Off && min != hclog.Off && level >= min
}

// Log writes one record: component, the implied arguments, then args.
func (l *hclogger) Log(level hclog.Level, msg string, args ...any) {
	if !l.enabled(level) {
		return
	}
	r := slog.NewRecord(time.Now(), slogLevel(level), msg, 0)
	if l.name != "" {
		r.AddAttrs(slog.String("component", l.name))
	}
	r.Add(attrs(l.implied)...)
	r.Add(attrs(args)...)
	_ = l.h.Handle(context.Background(), r)
}

// attrs turns hclog key/value arguments into slog ones: hclog.Format
// values are formatted, a missing last value is hclog's EXTRA_VALUE_AT_END.
func attrs(args []any) []any {
	if len(args) == 0 {
		return nil
	}
	out := make([]any, 0, len(args)+1)
	for i := 0; i < len(args); i += 2 {
		if i+1 == len(args) {
			out = append(out, hclog.MissingKey, value(args[i]))
			break
		}
		key, ok := args[i].(string)
		if !ok {
			key = fmt.Sprint(args[i])
		}
		out = append(out, key, value(args[i+1]))
	}
	return out
}

func value(v any) any {
	switch v := v.(type) {
	case hclog.Format:
		if len(v) == 0 {
			return ""
		}
		if f, ok := v[0].(string); ok {
			return fmt.Sprintf(f, v[1:]...)
		}
		return fmt.Sprint(v...)
	case fmt.Stringer:
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
			return nil
		}
		return v.String() // raft's states and the like read better than their numbers
	}
	return v
}

func (l *hclogger) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }
func (l *hclogger) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }
func (l *hclogger) Info(msg string, args ...any)  { l.Log(hclog.Info, msg, args...) }
func (l *hclogger) Warn(msg string, args ...any)  { l.Log(hclog.Warn, msg, args...) }
func (l *hclogger) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

func (l *hclogger) IsTrace() bool { return l.enabled(hclog.Trace) }
func (l *hclogger) IsDebug() bool { return l.enabled(hclog.Debug) }
func (l *hclogger) IsInfo() bool  { return l.enabled(hclog.Info) }
func (l *hclogger) IsWarn() bool  { return l.enabled(hclog.Warn) }
func (l *hclogger) IsError() bool { return l.enabled(hclog.Error) }

func (l *hclogger) ImpliedArgs() []any { return l.implied }

func (l *hclogger) With(args ...any) hclog.Logger {
	c := *l
	c.implied = append(append([]any(nil), l.implied...), args...)
	return &c
}

func (l *hclogger) Name() string { return l.name }

func (l *hclogger) Named(name string) hclog.Logger {
	if l.name != "" {
		name = l.name + "." + name
	}
	return l.ResetNamed(name)
}

func (l *hclogger) ResetNamed(name string) hclog.Logger {
	c := *l
	c.name = name
	return &c
}

func (l *hclogger) SetLevel(level hclog.Level) { l.level.Store(int32(level)) }
func (l *hclogger) GetLevel() hclog.Level      { return hclog.Level(l.level.Load()) }

// StandardLogger returns a log.Logger whose lines go through this logger
// at opts.ForceLevel (info when unset).
func (l *hclogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(l.StandardWriter(opts), "", 0)
}

func (l *hclogger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	level := hclog.Info
	if opts != nil && opts.ForceLevel != hclog.NoLevel {
		level = opts.ForceLevel
	}
	return lineWriter(func(line string) { l.Log(level, line) })
}

// lineWriter calls its function with each write, trailing newline removed.
type lineWriter func(string)

func (w lineWriter) Write(p []byte) (int, error) {
	w(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
