//go:build linux

package sharedlog

import (
	"io"
	"os"
	"syscall"
	"unsafe"
)

// iovMax is the most buffers one pwritev call takes (IOV_MAX; UIO_MAXIOV in
// the kernel). More make it fail with EINVAL.
const iovMax = 1024

// batchWriter writes a list of buffers to a file with pwritev(2), without
// copying them into one. It keeps its iovec array between calls; it is not
// safe for concurrent use (each shard writer has its own).
type batchWriter struct {
	iov []syscall.Iovec
	// pwritev, if not nil, replaces the system call (tests: short writes).
	pwritev func(fd uintptr, iov []syscall.Iovec, off int64) (int, error)
}

// writeAt writes the concatenation of bufs at off in f: the same bytes at
// the same offsets as f.WriteAt of one buffer holding them. It makes as
// many pwritev calls as it takes: at most iovMax buffers per call, and after
// a short write the rest is written from where it stopped. On error an
// unknown prefix of the data may have been written.
func (w *batchWriter) writeAt(f *os.File, bufs [][]byte, off int64) error {
	iov := w.iov[:0]
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		v := syscall.Iovec{Base: &b[0]}
		v.SetLen(len(b))
		iov = append(iov, v)
	}
	defer func() {
		clear(iov) // do not pin the buffers
		w.iov = iov[:0]
	}()
	if len(iov) == 0 {
		return nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return &os.PathError{Op: "pwritev", Path: f.Name(), Err: err}
	}
	var werr error
	// Control keeps the descriptor open (not reused) during the calls, as
	// WriteAt does.
	if err := rc.Control(func(fd uintptr) { werr = w.writeAll(fd, iov, off) }); err != nil {
		return &os.PathError{Op: "pwritev", Path: f.Name(), Err: err}
	}
	if werr != nil {
		return &os.PathError{Op: "pwritev", Path: f.Name(), Err: werr}
	}
	return nil
}

// writeAll writes every byte iov describes at off. It consumes iov (its
// entries are advanced past what was written).
func (w *batchWriter) writeAll(fd uintptr, iov []syscall.Iovec, off int64) error {
	pwritev := w.pwritev
	if pwritev == nil {
		pwritev = sysPwritev
	}
	for len(iov) > 0 {
		n, err := pwritev(fd, iov[:min(len(iov), iovMax)], off)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return io.ErrShortWrite // no progress and no error: do not spin
		}
		off += int64(n)
		for n > 0 {
			l := int(iov[0].Len)
			if n < l {
				iov[0].Base = (*byte)(unsafe.Add(unsafe.Pointer(iov[0].Base), n))
				iov[0].SetLen(l - n)
				break
			}
			n -= l
			iov = iov[1:]
		}
	}
	return nil
}

// sysPwritev is pwritev(2). The offset goes in two halves (pos_l, pos_h);
// on a 64-bit kernel pos_l holds all of it and pos_h is ignored.
func sysPwritev(fd uintptr, iov []syscall.Iovec, off int64) (int, error) {
	const longBits = 8 * unsafe.Sizeof(uintptr(0))
	lo, hi := uintptr(off), uintptr(uint64(off)>>(longBits-1)>>1)
	n, _, errno := syscall.Syscall6(syscall.SYS_PWRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)), lo, hi, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}
