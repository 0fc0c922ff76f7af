package sharedlog

import (
	"math"
	"sort"
)

// loc is where one encoded raft.Log lives on disk.
type loc struct {
	seg uint32 // segment id within the group's shard
	n   uint32 // encoded length
	off int64  // offset in the segment file
}

// run is a block of consecutive indexes first, first+1, ...
type run struct {
	first uint64
	locs  []loc
}

func (r *run) last() uint64 { return r.first + uint64(len(r.locs)) - 1 }

// index maps a group's raft indexes to disk locations. It is a sorted list of
// non-overlapping runs; normally there is exactly one, but raft may leave a
// gap (after installing a snapshot it keeps older logs and appends after the
// snapshot index), and each gap starts a new run.
//
// Every mutation is a pure function of the record applied, per raft index:
// DeleteRange(min,max) removes exactly [min,max]; storing entries starting at
// index a removes [a,∞) and then inserts them. Replaying the WAL from any
// segment at or before the oldest one holding a live entry therefore rebuilds
// the same index, which is what lets old segments be deleted.
type index struct {
	runs []run
}

func (x *index) empty() bool { return len(x.runs) == 0 }

func (x *index) first() uint64 {
	if len(x.runs) == 0 {
		return 0
	}
	return x.runs[0].first
}

func (x *index) last() uint64 {
	if len(x.runs) == 0 {
		return 0
	}
	return x.runs[len(x.runs)-1].last()
}

// oldestSeg returns the segment of the first live entry.
func (x *index) oldestSeg() (uint32, bool) {
	if len(x.runs) == 0 {
		return 0, false
	}
	return x.runs[0].locs[0].seg, true
}

func (x *index) get(i uint64) (loc, bool) {
	k := sort.Search(len(x.runs), func(k int) bool { return x.runs[k].first > i }) - 1
	if k < 0 {
		return loc{}, false
	}
	r := &x.runs[k]
	if i > r.last() {
		return loc{}, false
	}
	return r.locs[i-r.first], true
}

// appendAt stores l at index i, which must be greater than last() (callers
// deleteRange(i, MaxUint64) first).
func (x *index) appendAt(i uint64, l loc) {
	if n := len(x.runs); n > 0 && x.runs[n-1].last()+1 == i {
		x.runs[n-1].locs = append(x.runs[n-1].locs, l)
		return
	}
	locs := make([]loc, 1, 64)
	locs[0] = l
	x.runs = append(x.runs, run{first: i, locs: locs})
}

// deleteRange removes [min, max] (inclusive).
func (x *index) deleteRange(min, max uint64) {
	if min > max || len(x.runs) == 0 || min > x.last() || max < x.first() {
		return
	}
	out := x.runs[:0:0]
	for _, r := range x.runs {
		a, b := r.first, r.last()
		if b < min || a > max {
			out = append(out, r)
			continue
		}
		if a < min { // keep [a, min-1]; cap it so a later append reallocates
			k := min - a
			out = append(out, run{first: a, locs: r.locs[:k:k]})
		}
		if max < b { // keep [max+1, b]
			locs := r.locs[max+1-a:]
			// Most of the run was dropped: copy so the prefix can be freed.
			if len(r.locs) > 1024 && len(locs) < len(r.locs)/4 {
				locs = append(make([]loc, 0, 2*len(locs)), locs...)
			}
			out = append(out, run{first: max + 1, locs: locs})
		}
	}
	x.runs = out
}

// truncateFrom removes [i, ∞).
func (x *index) truncateFrom(i uint64) { x.deleteRange(i, math.MaxUint64) }
