//go:build !linux

package sharedlog

// directWriter would write group commits with O_DIRECT; other systems use
// buffered writes only.
type directWriter struct{}

// writeDirect never writes: the caller writes bufs the ordinary way.
func (s *shard) writeDirect(seg *segment, bufs [][]byte, off, n, recEnd int64) (bool, error) {
	return false, nil
}
