//go:build linux

package sharedlog

import (
	"os"
	"syscall"
	"unsafe"
)

// fdatasync flushes f's data (and the metadata needed to read it back, such
// as its size) to stable storage.
func fdatasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		for {
			serr = syscall.Fdatasync(int(fd))
			if serr != syscall.EINTR {
				return
			}
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
	}
	return nil
}

// lockFile takes an exclusive advisory lock on f so that two processes cannot
// open the same log directory.
func lockFile(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB)
	}); err != nil {
		return err
	}
	if serr != nil {
		return &os.PathError{Op: "flock", Path: f.Name(), Err: serr}
	}
	return nil
}

// directIO is the open flag for writes that bypass the page cache.
const directIO = syscall.O_DIRECT

// alignedZeros returns n zero bytes at a 4096-byte aligned address, as
// O_DIRECT writes need.
func alignedZeros(n int) []byte {
	b := make([]byte, n+4096)
	off := int(-uintptr(unsafe.Pointer(&b[0])) & 4095)
	return b[off : off+n : off+n]
}

// fullyAllocated reports whether the file has disk blocks for all of its
// length (it is not sparse).
func fullyAllocated(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return !ok || st.Blocks*512 >= fi.Size()
}
