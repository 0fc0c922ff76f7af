// Package atomicfile replaces small files durably: a crash leaves the old
// or the new content, never a mix. It is what the chunkserver's epoch map,
// config file and integrity state and the copyset snapshot metadata use.
// It imports nothing of ours.
//
// Must not import: github.com/chunkraft/chunkraft/...
package atomicfile
