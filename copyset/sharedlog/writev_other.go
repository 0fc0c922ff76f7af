//go:build !linux

package sharedlog

import "os"

// batchWriter writes a list of buffers to a file. Without pwritev it copies
// them into one buffer, which it keeps between calls; it is not safe for
// concurrent use (each shard writer has its own).
type batchWriter struct {
	buf []byte
}

// writeAt writes the concatenation of bufs at off in f.
func (w *batchWriter) writeAt(f *os.File, bufs [][]byte, off int64) error {
	buf := w.buf[:0]
	for _, b := range bufs {
		buf = append(buf, b...)
	}
	_, err := f.WriteAt(buf, off)
	if cap(buf) > 16<<20 {
		buf = nil // do not pin a huge buffer after a burst
	}
	w.buf = buf[:0]
	return err
}
