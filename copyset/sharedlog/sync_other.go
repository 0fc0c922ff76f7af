//go:build !linux

package sharedlog

import "os"

func fdatasync(f *os.File) error { return f.Sync() }

func lockFile(*os.File) error { return nil }

const directIO = 0

func alignedZeros(n int) []byte { return make([]byte, n) }

func fullyAllocated(os.FileInfo) bool { return true }
