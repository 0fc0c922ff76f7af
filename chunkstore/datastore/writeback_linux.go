//go:build linux

package datastore

import "syscall"

// syncFileRangeWrite is SYNC_FILE_RANGE_WRITE: start writeback of dirty
// pages in the range that are not already under writeback; do not wait.
const syncFileRangeWrite = 2

// startWriteback asks the kernel to start writing [off, off+n) of f to disk
// now instead of when the dirty-page thresholds trip (see
// earlyWritebackMin). It is advisory: it waits for nothing, promises no
// durability (Sync does), and does nothing for files that are not OS files
// (test fault layers) or when the call fails.
func startWriteback(f File, off, n int64) {
	sc, ok := f.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_, _, _ = syscall.Syscall6(syscall.SYS_SYNC_FILE_RANGE, fd, uintptr(off), uintptr(n), syncFileRangeWrite, 0, 0)
	})
}
