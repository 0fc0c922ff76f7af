// Command chunkbench benchmarks chunk I/O against a running chunkraft
// cluster; see package bench and `chunkbench --help`.
//
// Exit status: 0 the run completed without errors; 1 the run could not be
// made or some operations failed; 2 --verify found mismatches.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/chunkraft/chunkraft/cli/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := bench.NewCommand().ExecuteContext(ctx)
	stop()
	if err != nil && err.Error() != "" {
		fmt.Fprintf(os.Stderr, "chunkbench: %s\n", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	os.Exit(bench.ExitCode(err))
}
