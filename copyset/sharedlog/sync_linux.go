//go:build linux

package sharedlog

import (
	"os"
	"syscall"
)

// fdatasync flushes f's data (and the metadata needed to read it back, such
// as its size) to stable storage.
func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}

// lockFile takes an exclusive advisory lock on f so that two processes cannot
// open the same log directory.
func lockFile(f *os.File) error {
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return &os.PathError{Op: "flock", Path: f.Name(), Err: err}
	}
	return nil
}
