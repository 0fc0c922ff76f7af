package slogbridge

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"google.golang.org/grpc/grpclog"
)

// GRPC returns a grpclog.LoggerV2 writing to l with "component": "grpc".
// Install it with grpclog.SetLoggerV2 before gRPC is used.
//
// It keeps gRPC's own defaults of what is printed: errors only, unless
// GRPC_GO_LOG_SEVERITY_LEVEL is WARNING or INFO, and verbosity
// GRPC_GO_LOG_VERBOSITY_LEVEL (default 0); l's handler filters too. gRPC's
// info, warning and error are slog's info, warn and error. Fatal logs at
// error and exits the process, as gRPC expects.
func GRPC(l *slog.Logger) grpclog.LoggerV2 {
	g := &grpcLogger{l: l.With("component", "grpc"), min: slog.LevelError}
	switch strings.ToLower(os.Getenv("GRPC_GO_LOG_SEVERITY_LEVEL")) {
	case "warning":
		g.min = slog.LevelWarn
	case "info":
		g.min = slog.LevelInfo
	}
	g.verbosity, _ = strconv.Atoi(os.Getenv("GRPC_GO_LOG_VERBOSITY_LEVEL"))
	return g
}

type grpcLogger struct {
	l         *slog.Logger
	min       slog.Level
	verbosity int
}

func (g *grpcLogger) log(level slog.Level, msg string) {
	if level >= g.min {
		g.l.Log(context.Background(), level, strings.TrimRight(msg, "\n"))
	}
}

func (g *grpcLogger) Info(args ...any)   { g.log(slog.LevelInfo, fmt.Sprint(args...)) }
func (g *grpcLogger) Infoln(args ...any) { g.log(slog.LevelInfo, fmt.Sprintln(args...)) }
func (g *grpcLogger) Infof(format string, args ...any) {
	g.log(slog.LevelInfo, fmt.Sprintf(format, args...))
}
func (g *grpcLogger) Warning(args ...any)   { g.log(slog.LevelWarn, fmt.Sprint(args...)) }
func (g *grpcLogger) Warningln(args ...any) { g.log(slog.LevelWarn, fmt.Sprintln(args...)) }
func (g *grpcLogger) Warningf(format string, args ...any) {
	g.log(slog.LevelWarn, fmt.Sprintf(format, args...))
}
func (g *grpcLogger) Error(args ...any)   { g.log(slog.LevelError, fmt.Sprint(args...)) }
func (g *grpcLogger) Errorln(args ...any) { g.log(slog.LevelError, fmt.Sprintln(args...)) }
func (g *grpcLogger) Errorf(format string, args ...any) {
	g.log(slog.LevelError, fmt.Sprintf(format, args...))
}
func (g *grpcLogger) Fatal(args ...any)   { g.log(slog.LevelError, fmt.Sprint(args...)); os.Exit(1) }
func (g *grpcLogger) Fatalln(args ...any) { g.log(slog.LevelError, fmt.Sprintln(args...)); os.Exit(1) }
func (g *grpcLogger) Fatalf(format string, args ...any) {
	g.log(slog.LevelError, fmt.Sprintf(format, args...))
	os.Exit(1)
}

// V reports whether verbosity level v is on (gRPC guards its detailed info
// lines with it).
func (g *grpcLogger) V(v int) bool {
	return v <= g.verbosity && g.min <= slog.LevelInfo && g.l.Enabled(context.Background(), slog.LevelInfo)
}
