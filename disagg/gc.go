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
//  1. removes every unit under P marked longer than the grace ago: a data
//     file key whose .del object is older than the grace (its objects,
//     then the .del, as upstream's GC does), any other object whose mark
//     in the table is (its object, then its entry: Forget, through raft).
//     A crash in between leaves the mark: the next run finishes.
//  2. marks every other unit under P no lock holds, at the owner's clock:
//     a data file key as tryMarkDelete marks it (decideOnKey: refused
//     while a lock object of it is in the store or a clone lock holds
//     it), any other object in the table, MaxMarkBatch (256) names per
//     MarkObjects op (refused on a clone-locked object, in log order).
//     A unit a lock holds is kept and reported with the lock.
//
// Safety: a clone locks its source before it is created, a mark is
// refused on a locked object and a lock on a marked one, in the log's
// order; only marked units are removed. So an object a live clone reads
// from is never collected.
//
// Bounds: a run marks objects that are not data files only while the
// table has fewer than gcFill (3/4 of MaxFiles) entries, leaving the rest
// for clone locks; past that it stops and says so (Stopped), with what it
// did. A later run, after the grace, removes what it marked, freeing
// entries, and marks further. Data file marks are objects and take no
// entry.

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
	r := &gcRun{s: s, n: n, m: m, now: time.Now(), grace: time.Duration(req.GetGraceMs()) * time.Millisecond, resp: &pb.GcResponse{}}
	units := r.units(prefix, objs)
	entries, _ := m.List(prefix, 0, 0)
	ok, err = r.remove(ctx, entries, delMarks(objs), units)
	if err == nil && ok {
		ok, err = r.mark(ctx, units)
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

// delMarks maps each data file key with a .del object among objs to the
// .del object's time.
func delMarks(objs []objstore.ObjectInfo) map[string]time.Time {
	out := map[string]time.Time{}
	for _, o := range objs {
		if key, ok := strings.CutSuffix(o.Name, DelMarkSuffix); ok && isDataFileKey(key) {
			out[key] = o.ModTime
		}
	}
	return out
}

// remove deletes the units marked longer than the grace ago (data file
// keys by their .del objects, other objects by their entries, which it
// then forgets); those within the grace are reported waiting. Both leave
// units. ok is false when the owner lost its leadership.
func (r *gcRun) remove(ctx context.Context, entries []*pb.DataFile, dels map[string]time.Time, units map[string][]string) (bool, error) {
	type marked struct {
		name  string
		at    time.Time
		entry bool // a table entry, forgotten once removed
	}
	var all []marked
	for _, f := range entries {
		if f.GetDeleted() && !isDataFileKey(f.GetKey()) {
			all = append(all, marked{f.GetKey(), time.UnixMilli(f.GetMarkedMs()), true})
		}
	}
	for key, at := range dels {
		all = append(all, marked{key, at, false})
	}
	slices.SortFunc(all, func(a, b marked) int { return strings.Compare(a.name, b.name) })
	var gone []string
	for _, u := range all {
		report := &pb.GcObject{Name: u.name, MarkedMs: u.at.UnixMilli()}
		if r.now.Sub(u.at) < r.grace {
			r.resp.Waiting = append(r.resp.Waiting, report)
			delete(units, u.name)
			continue
		}
		doomed := units[u.name]
		if !u.entry {
			doomed = append(doomed, u.name+DelMarkSuffix) // the .del last: what is left stays marked
		}
		for _, o := range doomed {
			if err := r.s.deps.Objects.Delete(ctx, o); err != nil {
				r.resp.Stopped = fmt.Sprintf("deleting %s: %v (run gc again)", o, err)
				return r.forget(ctx, gone)
			}
		}
		if u.entry {
			gone = append(gone, u.name)
		}
		r.resp.Removed = append(r.resp.Removed, report)
		delete(units, u.name)
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

// mark marks every unit no lock holds, in name order: data file keys one
// by one as tryMarkDelete does, the others in batches of up to
// MaxMarkBatch names (one MarkObjects op each) while the table has room
// (gcFill).
func (r *gcRun) mark(ctx context.Context, units map[string][]string) (bool, error) {
	var todo []string
	for _, name := range slices.Sorted(maps.Keys(units)) {
		if k, err := ParseKey(name); err == nil {
			if ok, err := r.markFile(ctx, k); err != nil || !ok {
				return ok, err
			}
			continue
		}
		if by := r.m.lockBy(name); by != "" {
			r.resp.Locked = append(r.resp.Locked, &pb.GcObject{Name: name, LockBy: by})
			continue
		}
		todo = append(todo, name)
	}
	for len(todo) > 0 {
		size := r.m.size()
		if size >= gcFill {
			r.resp.Stopped = fmt.Sprintf("the lock table holds %d entries: gc marks up to %d of its %d (the rest stays for clone locks); run gc again after the grace to remove what it marked and go on",
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

// markFile marks data file k as tryMarkDelete does and reports it marked,
// or locked with the lock that refused it.
func (r *gcRun) markFile(ctx context.Context, k Key) (bool, error) {
	res, err := r.s.decideOnKey(ctx, r.n, r.m, k, true, 0, 0)
	switch {
	case err != nil:
		return false, err
	case res.GetNotOwner() != nil:
		return false, nil
	case res.GetConflict() != nil:
		reason := res.GetConflict().GetReason()
		by := reason
		if i := strings.Index(reason, "lock_by="); i >= 0 {
			by = reason[i+len("lock_by="):]
		}
		r.resp.Locked = append(r.resp.Locked, &pb.GcObject{Name: k.String(), LockBy: by})
		return true, nil
	}
	r.resp.Marked = append(r.resp.Marked, &pb.GcObject{Name: k.String(), MarkedMs: r.now.UnixMilli()})
	return true, nil
}

// markBatch proposes the marks of names (ascending, none a data file key)
// in one MarkObjects op and reports each name marked, or locked when a
// clone lock committed first.
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
		r.resp.Marked = append(r.resp.Marked, &pb.GcObject{Name: name, MarkedMs: r.now.UnixMilli()})
	}
	return true, nil
}

// lockBy names the first clone lock holding name in the table ("" none).
func (m *Machine) lockBy(name string) string {
	state := m.RLock()
	defer m.RUnlock()
	if i, found := findFile(state, name); found {
		return lockBy(state.Files[i])
	}
	return ""
}

// size is the number of entries of the table.
func (m *Machine) size() int {
	state := m.RLock()
	defer m.RUnlock()
	return len(state.Files)
}
