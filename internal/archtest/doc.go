// Package archtest holds the import rules test: every package of the module
// states in its doc.go, on a line of the package comment,
//
//	Must not import: <pattern>, <pattern>, ...
//
// and TestImportRules fails when a package's non-test code imports a
// package a pattern matches, directly or transitively (test files are
// free: the multi-process tests, for one, start in-process servers). A
// pattern is a path relative to the module (chunkserver, cli/...) or, when
// its first element holds a dot, a full import path
// (github.com/hashicorp/raft/...); a trailing /... also matches every
// package below, and a pattern starting with ! is an exception to the
// others (github.com/chunkraft/chunkraft/..., !internal/bufpool: nothing of
// this module but bufpool). A package without a doc.go (generated code under proto/)
// follows the nearest doc.go above it; a doc.go without the line fails the
// test, so a new package must state its rule.
//
// Beside it, checks of what the repository says of its packages:
// TestLayoutListsEveryPackage fails when a package has no row in
// docs/architecture.md's "Layout and file map" (a generated package is
// named in the row of the package whose doc.go it follows),
// TestNoHistoryReferences when a Go, .proto or Markdown file speaks of the
// project's issues or work sessions (the repository speaks only of itself),
// and TestTestOnlyPackages when non-test code imports a test-only package.
//
// Must not import: github.com/chunkraft/chunkraft/...
package archtest
