package chunkserver

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chunkraft/chunkraft/copyset"
)

// The stale sweep finds this server's stale replicas (copyset/stale.go) and
// moves them to the trash: every stale_replica_check it looks at each
// replica that has heard from no leader for that long, asks the copyset's
// leader whether this server is still a member (verifyStale, what
// DeleteBrokenCopyset does for an operator) and deletes the replica only
// when the leader's committed and newest configurations both leave it out.
// A replica a create request named (a re-add under way, or the empty
// replica of an add still to come) is kept for a grace period first:
// staleGraceMember for one that has been a member, staleGraceJoin for an
// empty one that never was (an operator may create it well before the
// peer add).
const (
	staleGraceMember = time.Minute
	staleGraceJoin   = 10 * time.Minute
)

// staleSweep runs the sweep; start and stop are called by Serve.
type staleSweep struct {
	svc      *copysetService
	interval time.Duration // 0: off
	deleted  prometheus.Counter
	log      *slog.Logger

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newStaleSweep(svc *copysetService, interval time.Duration, reg prometheus.Registerer, log *slog.Logger) *staleSweep {
	w := &staleSweep{svc: svc, interval: interval, log: log.With("component", "stale-sweep"),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chunkraft_stale_replicas_deleted_total",
			Help: "Replicas this server moved to its trash because their copyset's leader no longer lists this server (the stale sweep).",
		})}
	reg.MustRegister(w.deleted)
	return w
}

// start runs the sweep until stop; nothing when it is off.
func (w *staleSweep) start() {
	if w.interval <= 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		t := time.NewTicker(w.interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				w.sweep(ctx, now)
			}
		}
	}()
}

// stop ends the sweep and waits for it.
func (w *staleSweep) stop() {
	if w.cancel != nil {
		w.cancel()
	}
	w.wg.Wait()
}

// sweep checks every replica unled for at least the interval.
func (w *staleSweep) sweep(ctx context.Context, now time.Time) {
	for _, n := range w.svc.copysets.List() {
		if ctx.Err() != nil {
			return
		}
		if n.Broken() != nil || n.Unled(now) < w.interval {
			continue
		}
		w.check(ctx, n, now)
	}
}

// check asks n's leader about n and deletes n when it is stale.
func (w *staleSweep) check(ctx context.Context, n *copyset.Node, now time.Time) {
	g := n.Group()
	grace := staleGraceJoin
	if n.EverMember() {
		grace = staleGraceMember
	}
	vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stale, reason, err := w.svc.verifyStale(vctx, n)
	if err != nil {
		w.log.Debug("cannot tell whether an unled replica is a member", "pool", g.Pool(), "copyset", g.Copyset(), "err", err)
		return
	}
	if !stale {
		return
	}
	err = w.svc.copysets.DeleteStale(n, now.Add(-grace))
	switch {
	case err == nil:
		w.deleted.Inc()
		w.log.Warn("stale replica moved to trash: its copyset's leader no longer lists this server",
			"pool", g.Pool(), "copyset", g.Copyset(), "reason", reason)
	case errors.Is(err, copyset.ErrClaimed):
		w.log.Info("stale replica kept: a create request named it recently", "pool", g.Pool(), "copyset", g.Copyset(), "err", err)
	case errors.Is(err, copyset.ErrNotHosted):
	default:
		w.log.Error("delete stale replica", "pool", g.Pool(), "copyset", g.Copyset(), "err", err)
	}
}
