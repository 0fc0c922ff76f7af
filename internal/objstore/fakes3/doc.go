// Package fakes3 runs an in-memory S3 service (johannesboyne/gofakes3) on
// 127.0.0.1 over real HTTP, for the tests of anything that talks to S3
// through objstore.S3. It is test support, for _test.go files.
//
// Must not import: github.com/chunkraft/chunkraft/...
package fakes3
