// Command chunkctl is the admin CLI of chunkraft; see package cli.
//
// Must not import: chunkserver/..., copyset/..., cmd/..., test/...
package main
