package sharedlog

import (
	"errors"
	"io"
	"os"
	"syscall"
	"testing"
	"unsafe"
)

// TestBatchWriterShortWrites has batchWriter write through a pwritev that
// writes at most a few bytes per call (ending inside a buffer, or exactly
// at the end of one), is interrupted now and then, and never gets more than
// IOV_MAX buffers; the file must hold the whole concatenation. Then errors:
// an I/O error is reported, and so is a call that makes no progress.
func TestBatchWriterShortWrites(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "w")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bufs, want := testBuffers(2100)
	const off = 4096 + 3
	calls, limit := 0, 0
	var w batchWriter
	w.pwritev = func(fd uintptr, iov []syscall.Iovec, off int64) (int, error) {
		calls++
		if len(iov) > iovMax {
			t.Fatalf("pwritev of %d buffers", len(iov))
		}
		if calls%5 == 0 {
			return 0, syscall.EINTR
		}
		// Write at most limit bytes: 1, 2, ... 70000 bytes, then again.
		limit = limit%70000 + 1 + limit/3
		done := 0
		for _, v := range iov {
			b := unsafe.Slice(v.Base, v.Len)
			b = b[:min(len(b), limit-done)]
			n, err := syscall.Pwrite(int(fd), b, off+int64(done))
			done += n
			if err != nil {
				return done, err
			}
			if done == limit {
				break
			}
		}
		return done, nil
	}
	if err := w.writeAt(f, bufs, off); err != nil {
		t.Fatal(err)
	}
	checkFile(t, f, off, want)
	t.Logf("%d bytes in %d buffers written in %d calls", len(want), len(bufs), calls)

	w.pwritev = func(fd uintptr, iov []syscall.Iovec, off int64) (int, error) { return 0, syscall.EIO }
	if err := w.writeAt(f, bufs, off); !errors.Is(err, syscall.EIO) {
		t.Fatalf("write error: got %v, want EIO", err)
	}
	w.pwritev = func(fd uintptr, iov []syscall.Iovec, off int64) (int, error) { return 0, nil }
	if err := w.writeAt(f, bufs, off); !errors.Is(err, io.ErrShortWrite) {
		t.Fatalf("no progress: got %v, want io.ErrShortWrite", err)
	}
	// Nothing to write: no call.
	w.pwritev = func(fd uintptr, iov []syscall.Iovec, off int64) (int, error) {
		t.Fatal("pwritev called with nothing to write")
		return 0, nil
	}
	if err := w.writeAt(f, [][]byte{nil, {}}, off); err != nil {
		t.Fatal(err)
	}
}

// TestBatchWriterSyscallSplit counts the real pwritev calls for more than
// IOV_MAX buffers.
func TestBatchWriterSyscallSplit(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "w")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bufs, want := testBuffers(3 * iovMax)
	nonEmpty := 0
	for _, b := range bufs {
		if len(b) > 0 {
			nonEmpty++
		}
	}
	calls := 0
	w := batchWriter{pwritev: func(fd uintptr, iov []syscall.Iovec, off int64) (int, error) {
		calls++
		return sysPwritev(fd, iov, off)
	}}
	if err := w.writeAt(f, bufs, 0); err != nil {
		t.Fatal(err)
	}
	checkFile(t, f, 0, want)
	if min := (nonEmpty + iovMax - 1) / iovMax; calls < min {
		t.Fatalf("%d pwritev calls for %d buffers, want at least %d", calls, nonEmpty, min)
	}
}
