package chunkstore

import (
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Admission holds the server-wide checks a chunk request passes before it
// touches a copyset: the in-flight limit (OVERLOAD) and the free-space
// floor below which copysets are read-only (NOSPACE for mutations; reads
// keep working, and writes succeed again once space is freed).
//
// The limit and the floor change at runtime (ConfigService max_inflight and
// min_free_bytes): SetMaxInflight and SetMinFree.
type Admission struct {
	maxInflight int64 // read and written atomically once serving
	inflight    atomic.Int64

	dataDir  string
	minFree  uint64
	diskFree func(path string) (uint64, error) // free bytes; a test seam

	mu        sync.Mutex
	checkedAt time.Time
	ro        bool
}

// statfsFree returns the bytes available to unprivileged users on path's
// filesystem.
func statfsFree(path string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// enter counts a request in; false means the server is over its limit and
// the request must get OVERLOAD (leave must not be called then).
func (a *Admission) enter() bool {
	if a.inflight.Add(1) > atomic.LoadInt64(&a.maxInflight) {
		a.inflight.Add(-1)
		return false
	}
	return true
}

func (a *Admission) leave() { a.inflight.Add(-1) }

// ReadOnly reports whether free space on the data dir is below the floor.
// The filesystem is asked at most every 500 ms; a failing statfs keeps the
// previous answer.
func (a *Admission) ReadOnly() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if time.Since(a.checkedAt) >= 500*time.Millisecond {
		a.checkLocked()
	}
	return a.ro
}

// checkLocked asks the filesystem for the free space and updates the
// read-only answer (a failing statfs keeps the previous one). a.mu is held.
func (a *Admission) checkLocked() (free uint64, err error) {
	free, err = a.diskFree(a.dataDir)
	if err == nil {
		a.ro = free < a.minFree
	}
	a.checkedAt = time.Now()
	return free, err
}

// space asks the filesystem now (the metrics scrape) and returns the free
// bytes, the floor and whether the server is read-only.
func (a *Admission) space() (free, floor uint64, ro bool, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	free, err = a.checkLocked()
	return free, a.minFree, a.ro, err
}

// Load returns the requests in flight and the limit.
func (a *Admission) Load() (inflight, limit int64) {
	return a.inflight.Load(), atomic.LoadInt64(&a.maxInflight)
}

// Recheck forgets the cached answer (tests, and after space is freed).
func (a *Admission) Recheck() {
	a.mu.Lock()
	a.checkedAt = time.Time{}
	a.mu.Unlock()
}

// SetMaxInflight changes the in-flight limit; requests already in flight
// finish, new ones are counted against n (0 refuses all).
func (a *Admission) SetMaxInflight(n int64) { atomic.StoreInt64(&a.maxInflight, n) }

// SetMinFree changes the free-space floor and re-evaluates the read-only
// state at the next request.
func (a *Admission) SetMinFree(n uint64) {
	a.mu.Lock()
	a.minFree = n
	a.checkedAt = time.Time{}
	a.mu.Unlock()
}

// MaxInflight returns the in-flight limit.
func (a *Admission) MaxInflight() int64 { return atomic.LoadInt64(&a.maxInflight) }

// SetDiskFree replaces how free space is asked (tests: a full disk; nil:
// statfs again) and forgets the cached answer.
func (a *Admission) SetDiskFree(fn func(path string) (uint64, error)) {
	if fn == nil {
		fn = statfsFree
	}
	a.mu.Lock()
	a.diskFree, a.checkedAt = fn, time.Time{}
	a.mu.Unlock()
}
