// Command chunkbench benchmarks chunk I/O against a running chunkraft
// cluster; see package bench and `chunkbench --help`.
//
// Exit status: 0 the run completed without errors; 1 the run could not be
// made or some operations failed; 2 --verify found mismatches.
//
// Must not import: chunkserver/..., copyset/..., cmd/..., test/...
package main
