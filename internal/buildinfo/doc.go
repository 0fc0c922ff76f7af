// Package buildinfo describes the running binary from the build information
// the Go toolchain embeds (runtime/debug.ReadBuildInfo): the module version,
// the VCS commit and whether the tree had uncommitted changes, and the Go
// version. Every chunkraft command prints it for --version.
//
// Must not import: github.com/chunkraft/chunkraft/...
package buildinfo
