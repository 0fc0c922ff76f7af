//go:build linux

package datastore

import (
	"io/fs"
	"syscall"
)

// datasync makes f's data durable with fdatasync(2): unlike fsync it does
// not commit the inode when only its times changed, so on a file whose
// size and extents stay the same (written over preallocated blocks) it is
// a pure data flush, without a filesystem journal commit. Files that are
// not OS files (test fault layers) get their Sync.
func datasync(f File) error {
	sc, ok := f.(syscall.Conn)
	if !ok {
		return f.Sync()
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return f.Sync()
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			if serr = syscall.Fdatasync(int(fd)); serr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if serr != nil {
		name := ""
		if n, ok := f.(interface{ Name() string }); ok {
			name = n.Name()
		}
		return &fs.PathError{Op: "fdatasync", Path: name, Err: serr}
	}
	return nil
}
