package disagg

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/objstore"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
)

// disagg gc (chunkctl disagg gc --prefix P --grace D), on the owner. The
// objects under P are grouped into units: a DTFile's objects
// (s{store}/data/.../dmf_{id}/...) into its data file key, any other
// object is its own unit; lock objects (lock/...), delete marks (....del)
// and names longer than the table holds (512 bytes) are never units. One
// run:
//
//  1. removes every unit under P marked longer than the grace ago: its
//     objects, a data file's .del object, then its table entry (Forget,
//     through raft). A crash in between leaves the entry marked: the
//     next run deletes what is left and forgets it.
//  2. marks every other unit under P no lock holds, at the owner's clock,
//     through raft, MaxMarkBatch (256) names per MarkObjects op: each
//     marked as MarkDelete would mark a data file key (then its .del
//     object is written, as tryMarkDelete does) or MarkObject any other
//     name. A unit locked in the table (also one a lock took between the
//     look and the commit: Apply refuses it), or a data file with a lock
//     object in the store, is kept and reported with the lock.
//
// Safety: a clone locks its source before it is created, a mark is
// refused on a locked object and a lock on a marked one, in the log's
// order; only marked units are removed. So an object a live clone reads
// from is never collected. A unit marked before this version recorded
// mark times counts as marked when its .del object was written (or long
// ago without one).
//
// Bounds: a run marks only while the table has fewer than gcFill (3/4 of
// MaxFiles) entries, leaving the rest for locks; past that it stops and
// says so (Stopped), with what it did. A later run, after the grace,
// removes what it marked, freeing entries, and marks further.

// Gc is DisaggInternal.Gc on the owner.
func (is *internalService) Gc(ctx context.Context, req *pb.GcRequest) (*pb.GcResponse, error) {
	resp, err := is.gc(ctx, req)
	is.s.countInternal("gc", resp.GetNotOwner(), false, err)
	return resp, err
}

// gcRun is one run's state.
type gcRun struct {
	s     *Service
	n     *copyset.Node
	m     *Machine
	now   time.Time
	grace time.Duration
	resp  *pb.GcResponse
}

func (is *internalService) gc(ctx context.Context, req *pb.GcRequest) (*pb.GcResponse, error) {
	s := is.s
	prefix := req.GetPrefix()
	switch {
	case prefix == "":
		return nil, status.Error(codes.InvalidArgument, "gc needs a prefix: an empty one would collect the whole object store")
	case skippedByGc(prefix):
		return nil, status.Errorf(codes.InvalidArgument, "gc prefix %q: lock objects and delete marks are never collected", prefix)
	case req.GetGraceMs() < 0:
		return nil, status.Errorf(codes.InvalidArgument, "gc grace %dms: must not be negative", req.GetGraceMs())
	}
	n, m, leader, ok := s.owner()
	if !ok {
		return &pb.GcResponse{NotOwner: true, Leader: string(leader)}, nil
	}
	if _, err := n.ReadBarrier(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return &pb.GcResponse{NotOwner: true, Leader: string(n.Leader())}, nil
	}
	objs, err := s.deps.Objects.List(ctx, prefix)
	if errors.Is(err, objstore.ErrInvalidName) {
		return nil, status.Errorf(codes.InvalidArgument, "gc prefix: %v", err)
	}
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "object store: list %q: %v", prefix, err)
	}
	lockObjs, err := s.deps.Objects.List(ctx, LockPrefix)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "object store: list lock objects: %v", err)
	}
	r := &gcRun{s: s, n: n, m: m, now: time.Now(), grace: time.Duration(req.GetGraceMs()) * time.Millisecond, resp: &pb.GcResponse{}}
	units := r.units(prefix, objs)
	entries, _ := m.List(prefix, 0, 0)
	ok, err = r.remove(ctx, entries, units)
	if err == nil && ok {
		ok, err = r.mark(ctx, units, lockedFiles(lockObjs))
	}
	switch {
	case err != nil:
		return nil, err
	case !ok:
		return &pb.GcResponse{NotOwner: true, Leader: string(n.Leader())}, nil
	}
	slices.SortStableFunc(r.resp.Locked, func(a, b *pb.GcObject) int { return strings.Compare(a.GetName(), b.GetName()) })
	return r.resp, nil
}

// gcUnit is the unit of object name: a DTFile's data file key for the
// objects under it, else the name.
func gcUnit(name string) string {
	if i := strings.Index(name, "/dmf_"); i >= 0 {
		if j := strings.IndexByte(name[i+len("/dmf_"):], '/'); j >= 0 {
			k := name[:i+len("/dmf_")+j]
			if key, err := ParseKey(k); err == nil && key.DMFile {
				return k
			}
		}
	}
	return name
}

// units groups the listed objects by unit (only units under prefix;
// lock and .del objects, and names the table cannot hold, longer than 512
// bytes, are skipped, and counted).
func (r *gcRun) units(prefix string, objs []objstore.ObjectInfo) map[string][]string {
	units := map[string][]string{}
	for _, o := range objs {
		u := gcUnit(o.Name)
		if skippedByGc(o.Name) || !strings.HasPrefix(u, prefix) || validName(u) != nil {
			r.resp.Skipped++
			continue
		}
		units[u] = append(units[u], o.Name)
	}
	return units
}

// lockedFiles maps each data file key with a lock object in the store to
// its first lock object.
func lockedFiles(lockObjs []objstore.ObjectInfo) map[string]string {
	out := map[string]string{}
	for _, o := range lockObjs {
		if k, _, _, ok := parseLockObject(o.Name); ok {
			if _, seen := out[k.String()]; !seen {
				out[k.String()] = o.Name
			}
		}
	}
	return out
}

// markedAt is when entry f was marked: its recorded time, else a data
// file's .del object's, else long ago.
func (r *gcRun) markedAt(ctx context.Context, f *pb.DataFile) (time.Time, error) {
	if f.GetMarkedMs() != 0 {
		return time.UnixMilli(f.GetMarkedMs()), nil
	}
	k, err := ParseKey(f.GetKey())
	if err != nil {
		return time.Time{}, nil
	}
	info, err := r.s.deps.Objects.Stat(ctx, k.DelMarkKey())
	switch {
	case err == nil:
		return info.ModTime, nil
	case errors.Is(err, objstore.ErrNotExist):
		return time.Time{}, nil
	}
	return time.Time{}, status.Errorf(codes.Unavailable, "object store: %v", err)
}

// remove deletes the units marked longer than the grace ago and forgets
// their entries; those within the grace are reported waiting. Both leave
// units. ok is false when the owner lost its leadership.
func (r *gcRun) remove(ctx context.Context, entries []*pb.DataFile, units map[string][]string) (bool, error) {
	var gone []string
	for _, f := range entries {
		if !f.GetDeleted() {
			continue
		}
		name := f.GetKey()
		at, err := r.markedAt(ctx, f)
		if err != nil {
			return false, err
		}
		report := &pb.GcObject{Name: name, MarkedMs: at.UnixMilli()}
		if r.now.Sub(at) < r.grace {
			r.resp.Waiting = append(r.resp.Waiting, report)
			delete(units, name)
			continue
		}
		doomed := units[name]
		if k, err := ParseKey(name); err == nil {
			doomed = append(doomed, k.DelMarkKey())
		}
		for _, o := range doomed {
			if err := r.s.deps.Objects.Delete(ctx, o); err != nil {
				r.resp.Stopped = fmt.Sprintf("deleting %s: %v (run gc again)", o, err)
				return r.forget(ctx, gone)
			}
		}
		gone = append(gone, name)
		r.resp.Removed = append(r.resp.Removed, report)
		delete(units, name)
	}
	return r.forget(ctx, gone)
}

// forget commits the removal of the entries of names, MaxForget at a time.
func (r *gcRun) forget(ctx context.Context, names []string) (bool, error) {
	for chunk := range slices.Chunk(names, MaxForget) {
		res, ok, err := r.s.propose(ctx, r.n, &pb.Op{Op: &pb.Op_Forget{Forget: &pb.Forget{Names: chunk}}})
		switch {
		case err != nil || !ok:
			return ok, err
		case res.Err != nil:
			return false, status.Error(codes.Internal, res.Err.Error())
		}
	}
	return true, nil
}

// mark marks every unit no lock holds, in name order, in batches of up to
// MaxMarkBatch names (one MarkObjects op each), while the table has room
// (gcFill).
func (r *gcRun) mark(ctx context.Context, units map[string][]string, lockObjs map[string]string) (bool, error) {
	var todo []string
	for _, name := range slices.Sorted(maps.Keys(units)) {
		if by := r.m.lockBy(name); by != "" {
			r.resp.Locked = append(r.resp.Locked, &pb.GcObject{Name: name, LockBy: by})
			continue
		}
		if by, ok := lockObjs[name]; ok {
			r.resp.Locked = append(r.resp.Locked, &pb.GcObject{Name: name, LockBy: by})
			continue
		}
		todo = append(todo, name)
	}
	for len(todo) > 0 {
		size := r.m.size()
		if size >= gcFill {
			r.resp.Stopped = fmt.Sprintf("the lock table holds %d entries: gc marks up to %d of its %d (the rest stays for locks); run gc again after the grace to remove what it marked and go on",
				size, gcFill, MaxFiles)
			return true, nil
		}
		batch := todo[:min(len(todo), MaxMarkBatch, gcFill-size)] // every name is a new entry: marked ones are not units any more
		todo = todo[len(batch):]
		if ok, err := r.markBatch(ctx, batch); err != nil || !ok {
			return ok, err
		}
	}
	return true, nil
}

// markBatch proposes the marks of names (ascending) in one MarkObjects op,
// writes the .del objects of the data file keys it marked (as
// tryMarkDelete does) and reports each name marked, or locked when a lock
// committed first.
func (r *gcRun) markBatch(ctx context.Context, names []string) (bool, error) {
	op := &pb.Op{Op: &pb.Op_MarkObjects{MarkObjects: &pb.MarkObjects{Names: names, TimeMs: r.now.UnixMilli()}}}
	res, ok, err := r.s.propose(ctx, r.n, op)
	switch {
	case err != nil || !ok:
		return ok, err
	case res.Err != nil:
		return false, status.Error(codes.ResourceExhausted, res.Err.Error())
	}
	for _, name := range names {
		if _, locked := slices.BinarySearch(res.Locked, name); locked {
			r.resp.Locked = append(r.resp.Locked, &pb.GcObject{Name: name, LockBy: r.m.lockBy(name)})
			continue
		}
		if k, err := ParseKey(name); err == nil {
			if err := r.s.putEmpty(ctx, k.DelMarkKey(), "the delete mark"); err != nil {
				return false, err
			}
		}
		r.resp.Marked = append(r.resp.Marked, &pb.GcObject{Name: name, MarkedMs: r.now.UnixMilli()})
	}
	return true, nil
}

// lockBy names the first lock holding name in the table ("" none).
func (m *Machine) lockBy(name string) string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if i, found := findFile(m.st, name); found {
		return lockBy(m.st.Files[i])
	}
	return ""
}

// size is the number of entries of the table.
func (m *Machine) size() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.st.Files)
}
