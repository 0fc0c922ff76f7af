// Package location parses clone-chunk source locations, the one grammar
// both the chunkserver (which reads the sources) and chunkctl (which checks
// its arguments early) use. It imports only internal/objstore (object name
// rules).
//
// Forms (Curve's, with <file> naming a chunk of this cluster):
//
//	<pool>/<copyset>/<chunkId>:<offset>@cs  clone block X reads source chunk bytes offset+X
//	<object>@s3                             clone block X reads object bytes X
//
// The parser splits at the last '@' and, for cs, at the last ':'.
//
// Must not import: github.com/chunkraft/chunkraft/..., !internal/objstore
package location
