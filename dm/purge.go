package dm

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/chunkraft/chunkraft/datasync/dest"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/internal/objstore"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
	dmpb "github.com/chunkraft/chunkraft/proto/dm/pb"
)

// PurgeRelay: upstream's relay purge over the relays dm made, the exports
// of the tasks with a source cluster (source.relay). Exactly one strategy:
//   - inactive: every packet before the one each share is in (its
//     checkpoint's packet, the "active relay log");
//   - time: those of them written before the time;
//   - filename (with subDir, pool-P/copyset-C): those of them before the
//     named packet of that copyset.
//
// Refused while any share is New or Paused (upstream's rule: a paused
// share may be resumed from where it stands, or handed an operator). A
// copyset's purge record (exportfmt.PurgeName) is written before its
// first packet is deleted, so that a restore of the export refuses it with
// the reason instead of replaying what is left. Exports given as
// source.export are the user's, never purged.

// purgeStrategy is one PurgeRelay strategy.
type purgeStrategy struct {
	inactive bool
	before   time.Time // time: packets written before it
	file     string    // filename: packets before subDir/file
	subDir   string
}

func parsePurge(req *dmpb.PurgeRelayRequest) (purgeStrategy, error) {
	n := 0
	var st purgeStrategy
	if req.GetInactive() {
		n++
		st.inactive = true
	}
	if req.GetTime() > 0 {
		n++
		st.before = time.Unix(req.GetTime(), 0)
	}
	if req.GetFilename() != "" {
		n++
		st.file, st.subDir = req.GetFilename(), strings.TrimSuffix(req.GetSubDir(), "/")
		if st.subDir == "" {
			return st, fmt.Errorf("purge relay: filename %q needs its sub-dir, pool-P/copyset-C", st.file)
		}
		if !strings.HasSuffix(st.file, exportfmt.PacketSuffix) {
			return st, fmt.Errorf("purge relay: filename %q is not a packet name (…%s)", st.file, exportfmt.PacketSuffix)
		}
	}
	switch {
	case req.GetTime() < 0:
		return st, fmt.Errorf("purge relay: time %d: want a Unix time in seconds", req.GetTime())
	case n == 0:
		return st, errors.New("purge relay: the request names no strategy: set exactly one of inactive, time or filename")
	case n > 1:
		return st, errors.New("purge relay: the request names several strategies: set exactly one of inactive, time or filename")
	}
	return st, nil
}

// PurgeRelay purges the relays of dm's tasks.
func (w *workerService) PurgeRelay(ctx context.Context, req *dmpb.PurgeRelayRequest) (*dmpb.CommonWorkerResponse, error) {
	msg, err := w.s.purgeRelay(ctx, req)
	if err != nil {
		return &dmpb.CommonWorkerResponse{Msg: err.Error(), Worker: string(w.s.deps.Local)}, nil
	}
	return &dmpb.CommonWorkerResponse{Result: true, Msg: msg, Worker: string(w.s.deps.Local)}, nil
}

func (s *Service) purgeRelay(ctx context.Context, req *dmpb.PurgeRelayRequest) (string, error) {
	st, err := parsePurge(req)
	if err != nil {
		return "", err
	}
	l, err := s.listAll(ctx, 0, "")
	if err != nil {
		return "", fmt.Errorf("purge relay: %w", err)
	}
	tasks := map[string][]*pb.Located{}
	for _, sh := range l.shares {
		t := sh.GetSubtask()
		if stage := t.GetStage(); stage == dmpb.Stage_New || stage == dmpb.Stage_Paused {
			return "", fmt.Errorf("relay log purge is forbidden temporarily, because sub task %s current stage is %v", t.GetConfig().GetName(), stage)
		}
		if len(t.GetConfig().GetSource().GetCluster()) > 0 {
			tasks[t.GetConfig().GetName()] = append(tasks[t.GetConfig().GetName()], sh)
		}
	}
	if len(l.unanswered) > 0 {
		return "", fmt.Errorf("purge relay: no leader answered for %s: the relay packets their shares need are unknown; nothing was purged", strings.Join(l.unanswered, ", "))
	}
	if len(tasks) == 0 {
		return "no relay to purge: no dm task has a source cluster (an export given as source.export is never purged)", nil
	}
	names := make([]string, 0, len(tasks))
	for name := range tasks {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []string
	matched := false
	for _, name := range names {
		r, err := s.purgeTask(ctx, name, tasks[name], st)
		if err != nil {
			return "", fmt.Errorf("purge relay: %s", strings.Join(append(out, err.Error()), "; "))
		}
		matched = matched || r.matched
		out = append(out, r.msg)
	}
	if st.file != "" && !matched {
		return "", fmt.Errorf("purge relay: no relay of a dm task has the copyset %s", st.subDir)
	}
	return strings.Join(out, "; "), nil
}

// purgeResult is what purging one task's relay did.
type purgeResult struct {
	msg     string
	matched bool // it has the filename strategy's copyset
}

// purgeTask purges task name's relay as st says, each source copyset up
// to the packet its share is in.
func (s *Service) purgeTask(ctx context.Context, name string, shares []*pb.Located, st purgeStrategy) (purgeResult, error) {
	cfg := shares[0].GetSubtask().GetConfig()
	loc := cfg.GetSource().GetRelay()
	d, err := s.openLocation(ctx, loc)
	if err != nil {
		return purgeResult{}, fmt.Errorf("task %s: open its relay %s: %w", name, loc, err)
	}
	defer d.Close()
	pool := cfg.GetSource().GetPool()
	var res purgeResult
	var packets, bytes int
	for _, sh := range shares {
		cs := sh.GetSubtask().GetSourceCopyset()
		prefix := exportfmt.CopysetPrefix(pool, cs)
		if st.file != "" && strings.TrimSuffix(prefix, "/") != st.subDir {
			continue
		}
		res.matched = true
		cp := sh.GetSubtask().GetCheckpoint()
		if cp.GetPoint() == nil {
			continue // nothing applied yet
		}
		at, err := exportfmt.ParsePoint(cp.GetPoint())
		if err != nil {
			return purgeResult{}, fmt.Errorf("task %s copyset %d/%d: checkpoint: %w", name, pool, cs, err)
		}
		active := exportfmt.PacketName(pool, cs, at)
		limit := active
		if st.file != "" {
			limit = min(active, prefix+st.file)
		}
		infos, err := d.List(ctx, prefix)
		if err != nil {
			return purgeResult{}, fmt.Errorf("task %s: list %s of its relay %s: %w", name, prefix, loc, err)
		}
		// The newest packet stays whatever the share has applied: the
		// export goes on from it.
		if last := lastPacket(infos); last != "" {
			limit = min(limit, last)
		}
		var doomed []objstore.ObjectInfo
		for _, info := range infos {
			if !strings.HasSuffix(info.Name, exportfmt.PacketSuffix) || info.Name >= limit {
				continue
			}
			if !st.before.IsZero() && !info.ModTime.Before(st.before) {
				continue
			}
			doomed = append(doomed, info)
		}
		if len(doomed) == 0 {
			continue
		}
		// The first packet kept: the one after the last doomed.
		keep, err := firstKept(ctx, d, doomed[len(doomed)-1].Name)
		if err != nil {
			return purgeResult{}, fmt.Errorf("task %s copyset %d/%d: %w", name, pool, cs, err)
		}
		if err := writePurge(ctx, d, pool, cs, keep, len(doomed), "dm task "+name); err != nil {
			return purgeResult{}, fmt.Errorf("task %s copyset %d/%d: %w", name, pool, cs, err)
		}
		for _, info := range doomed {
			if err := d.Delete(ctx, info.Name); err != nil {
				return purgeResult{}, fmt.Errorf("task %s: delete %s of its relay %s: %w", name, info.Name, loc, err)
			}
			packets++
			bytes += int(info.Size)
		}
		s.log.Info("dm relay purged", "task", name, "relay", loc, "pool", pool, "copyset", cs, "packets", len(doomed), "first_kept", keep.String())
	}
	res.msg = fmt.Sprintf("task %s: purged %d packets (%d bytes) of its relay %s", name, packets, bytes, loc)
	return res, nil
}

// lastPacket is the name of the newest packet of infos (a listing of one
// copyset, in name order: point order), "" when there is none.
func lastPacket(infos []objstore.ObjectInfo) string {
	for i := len(infos) - 1; i >= 0; i-- {
		if strings.HasSuffix(infos[i].Name, exportfmt.PacketSuffix) {
			return infos[i].Name
		}
	}
	return ""
}

// firstKept is the start point of the packet after packet last: its next
// point.
func firstKept(ctx context.Context, d dest.Dest, last string) (exportfmt.Point, error) {
	_, _, next, err := exportfmt.ReadHead(ctx, d, last)
	if err != nil {
		return exportfmt.Point{}, fmt.Errorf("packet %s: %w", last, err)
	}
	return next, nil
}

// writePurge writes (or moves on) copyset (pool, cs)'s purge record:
// every packet before keep is purged, n more than it said.
func writePurge(ctx context.Context, d dest.Dest, pool, cs uint32, keep exportfmt.Point, n int, by string) error {
	name := exportfmt.PurgeName(pool, cs)
	r := &syncpb.PurgeRecord{FormatVersion: exportfmt.Version, LogicPoolId: pool, CopysetId: cs}
	switch b, err := d.Get(ctx, name); {
	case err == nil:
		old, err := exportfmt.DecodePurge(b)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		r.Packets = old.GetPackets()
	case !errors.Is(err, objstore.ErrNotExist):
		return fmt.Errorf("read %s: %w", name, err)
	}
	r.FirstKept, r.Packets, r.PurgedAtMs, r.By = keep.Proto(), r.GetPackets()+uint64(n), time.Now().UnixMilli(), by
	b, err := exportfmt.EncodePurge(r)
	if err != nil {
		return err
	}
	if err := d.Put(ctx, name, b); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}
