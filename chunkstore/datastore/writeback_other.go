//go:build !linux

package datastore

// startWriteback is a no-op where sync_file_range(2) does not exist; the
// kernel writes dirty pages back on its own schedule.
func startWriteback(File, int64, int64) {}
