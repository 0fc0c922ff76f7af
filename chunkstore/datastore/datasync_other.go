//go:build !linux

package datastore

// datasync is Sync where fdatasync(2) is not used.
func datasync(f File) error { return f.Sync() }
