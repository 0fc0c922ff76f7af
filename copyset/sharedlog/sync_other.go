//go:build !linux

package sharedlog

import "os"

func fdatasync(f *os.File) error { return f.Sync() }

func lockFile(*os.File) error { return nil }
