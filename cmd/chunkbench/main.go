package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/chunkraft/chunkraft/cli/bench"
)

// gcPercent is chunkbench's GOGC unless the environment sets one: the
// load generator allocates per request and should spend its CPU on
// requests, not on collecting them.
const gcPercent = 400

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := bench.NewCommand().ExecuteContext(ctx)
	stop()
	if err != nil && err.Error() != "" {
		fmt.Fprintf(os.Stderr, "chunkbench: %s\n", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	os.Exit(bench.ExitCode(err))
}
