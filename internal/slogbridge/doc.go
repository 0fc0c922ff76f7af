// Package slogbridge routes the log lines of libraries that bring their own
// logger into log/slog, so that a process writes one schema (the server's
// JSON handler: time, level, msg, then attributes) for every line:
//
//   - Hclog adapts a slog.Logger to hashicorp/go-hclog's Logger, for
//     hashicorp/raft (raft.Config.Logger). The adapter filters by its own
//     level (raft.log_level), independent of the slog handler's; hclog's
//     name becomes the "component" attribute, With arguments and hclog.Fmt
//     values become attributes.
//   - GRPC adapts a slog.Logger to grpclog.LoggerV2 (grpclog.SetLoggerV2),
//     printing what gRPC's default logger prints (errors, unless
//     GRPC_GO_LOG_SEVERITY_LEVEL asks for more) in the slog schema.
//
// It imports only log/slog and the two logging interfaces; any package may
// use it.
//
// Must not import: github.com/chunkraft/chunkraft/...
package slogbridge
