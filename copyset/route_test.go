package copyset

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// routeClient is the client a test router hands to calls: the server it
// reaches.
type routeClient struct{ at PeerID }

// routeWorld is a test router's view of the cluster: what this server's
// replicas know, the cluster map, and every call made.
type routeWorld struct {
	mu      sync.Mutex
	leads   map[GroupID]bool
	known   map[GroupID]PeerID // a hosted replica's leader
	mapped  map[GroupID]PeerID
	mapErr  error
	dialErr error
	calls   []string // "peer" per call, "local" for the local one
	maps    int
}

const (
	routeSelf PeerID = "10.0.0.1:8200:0"
	routeA    PeerID = "10.0.0.2:8200:0"
	routeB    PeerID = "10.0.0.3:8200:0"
	routeC    PeerID = "10.0.0.4:8200:0"
)

// router is a router over w with backoff b.
func (w *routeWorld) router(b Backoff) *Router[routeClient] {
	return &Router[routeClient]{
		Self: routeSelf,
		Replica: func(g GroupID) (PeerID, bool, bool) {
			w.mu.Lock()
			defer w.mu.Unlock()
			l, hosted := w.known[g]
			return l, w.leads[g], hosted || w.leads[g]
		},
		Local: routeClient{at: "local"},
		Dial: func(p PeerID) (routeClient, error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			return routeClient{at: p}, w.dialErr
		},
		Map: func(context.Context, []GroupID) (map[GroupID]PeerID, error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.maps++
			return w.mapped, w.mapErr
		},
		Backoff: b,
	}
}

// record notes a call of c at to and checks that they agree.
func (w *routeWorld) record(t *testing.T, c routeClient, to Target) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if to.Local != (c.at == "local") || (!to.Local && c.at != to.Peer) {
		t.Errorf("called client %q for target %+v", c.at, to)
	}
	w.calls = append(w.calls, string(c.at))
}

func (w *routeWorld) called() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.calls)
}

// slow is a backoff no test waits out: a test that backs off when it
// should not times out.
var slow = Backoff{First: time.Hour, Max: time.Hour}

var routeG = NewGroupID(1, 7)

// answer is a call that answers by the server called: done at the
// servers of done, redirect to next[server] elsewhere.
func answer(t *testing.T, w *routeWorld, done PeerID, next map[string]PeerID) func(context.Context, routeClient, Target) Reply {
	return func(_ context.Context, c routeClient, to Target) Reply {
		w.record(t, c, to)
		if c.at == done || (done == "local" && to.Local) {
			return Answered()
		}
		return Redirect(next[string(c.at)], fmt.Errorf("%s does not lead", c.at))
	}
}

func routeCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestRouteLocal: a copyset this server leads is called in process, with
// the Local client, whatever the caller's hint says; nothing is dialled.
func TestRouteLocal(t *testing.T) {
	w := &routeWorld{leads: map[GroupID]bool{routeG: true}, dialErr: errors.New("dialled")}
	rep := w.router(slow).Route(routeCtx(t), routeG, routeA, answer(t, w, "local", nil))
	if !rep.Done() || !slices.Equal(w.called(), []string{"local"}) {
		t.Fatalf("reply %+v, calls %q; want done by one local call", rep, w.called())
	}
}

// TestRouteFollowsHint: the caller's hint is asked first, and the leader
// an answer names is asked at once (the slow backoff is never waited).
// A leader named as this server is called in process.
func TestRouteFollowsHint(t *testing.T) {
	w := &routeWorld{known: map[GroupID]PeerID{routeG: routeC}}
	rep := w.router(slow).Route(routeCtx(t), routeG, routeA, answer(t, w, routeB, map[string]PeerID{string(routeA): routeB}))
	if want := []string{string(routeA), string(routeB)}; !rep.Done() || !slices.Equal(w.called(), want) {
		t.Fatalf("reply %+v, calls %q; want done, calls %q", rep, w.called(), want)
	}
	w = &routeWorld{}
	rep = w.router(slow).Route(routeCtx(t), routeG, routeA, answer(t, w, "local", map[string]PeerID{string(routeA): "10.0.0.1:8200"}))
	if want := []string{string(routeA), "local"}; !rep.Done() || !slices.Equal(w.called(), want) {
		t.Fatalf("reply %+v, calls %q; want done, calls %q", rep, w.called(), want)
	}
}

// TestRouteReplicaLeader: without a hint, the leader this server's replica
// knows is asked, and the cluster map is not read.
func TestRouteReplicaLeader(t *testing.T) {
	w := &routeWorld{known: map[GroupID]PeerID{routeG: routeB}, mapped: map[GroupID]PeerID{routeG: routeC}}
	rep := w.router(slow).Route(routeCtx(t), routeG, "", answer(t, w, routeB, nil))
	if !rep.Done() || !slices.Equal(w.called(), []string{string(routeB)}) || w.maps != 0 {
		t.Fatalf("reply %+v, calls %q, map reads %d; want done by %s alone, no map read", rep, w.called(), w.maps, routeB)
	}
}

// TestRouteClusterMap: a copyset this server does not host, without a
// hint, goes to the leader of the cluster map; after a failed call the
// map is read again (after the backoff), and what it names then is asked.
func TestRouteClusterMap(t *testing.T) {
	w := &routeWorld{mapped: map[GroupID]PeerID{routeG: routeA}}
	r := w.router(Backoff{First: time.Millisecond, Max: time.Millisecond})
	rep := r.Route(routeCtx(t), routeG, "", func(ctx context.Context, c routeClient, to Target) Reply {
		w.record(t, c, to)
		if c.at == routeA {
			w.mu.Lock()
			w.mapped = map[GroupID]PeerID{routeG: routeC}
			w.mu.Unlock()
			return Redirect("", errors.New("unavailable"))
		}
		return Answered()
	})
	if want := []string{string(routeA), string(routeC)}; !rep.Done() || !slices.Equal(w.called(), want) || w.maps != 2 {
		t.Fatalf("reply %+v, calls %q, map reads %d; want done, calls %q, 2 map reads", rep, w.called(), w.maps, want)
	}
}

// TestRouteFinal: a final reply ends the call at once, with its error.
func TestRouteFinal(t *testing.T) {
	w := &routeWorld{known: map[GroupID]PeerID{routeG: routeA}}
	refused := errors.New("invalid argument")
	rep := w.router(slow).Route(routeCtx(t), routeG, "", func(_ context.Context, c routeClient, to Target) Reply {
		w.record(t, c, to)
		return Final(refused)
	})
	if !rep.Final() || !errors.Is(rep.Err(), refused) || len(w.called()) != 1 {
		t.Fatalf("reply %+v, calls %q; want final %v after one call", rep, w.called(), refused)
	}
}

// TestRouteDeadline: a call nobody answers backs off (Waited, once) until
// the caller's context ends, and returns its error with the last reply's.
func TestRouteDeadline(t *testing.T) {
	w := &routeWorld{known: map[GroupID]PeerID{routeG: routeA}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := w.router(Backoff{First: time.Millisecond, Max: 4 * time.Millisecond})
	waits := 0
	r.Waited = func() { waits++ }
	third := make(chan struct{})
	done := make(chan Reply, 1)
	go func() {
		done <- r.Route(ctx, routeG, "", func(_ context.Context, c routeClient, to Target) Reply {
			w.record(t, c, to)
			if len(w.called()) == 3 {
				close(third)
			}
			return Redirect("", errors.New("unavailable"))
		})
	}()
	<-third
	cancel()
	rep := <-done
	if rep.Done() || rep.Final() || !errors.Is(rep.Err(), context.Canceled) || waits != 1 {
		t.Fatalf("reply %+v (err %v), Waited %d times; want a redirect wrapping context.Canceled, Waited once", rep, rep.Err(), waits)
	}
}

// TestRouteNoRetry: with a zero backoff, a call follows named leaders (at
// most maxHops in a row) and ends at the first answer naming none; two
// servers naming each other do not spin.
func TestRouteNoRetry(t *testing.T) {
	w := &routeWorld{}
	rep := w.router(Backoff{}).Route(routeCtx(t), routeG, routeA, answer(t, w, "", map[string]PeerID{string(routeA): routeB, string(routeB): routeA}))
	if n := len(w.called()); rep.Done() || rep.Hint() == "" || n != maxHops+1 {
		t.Fatalf("reply %+v, calls %q; want a redirect after %d calls", rep, w.called(), maxHops+1)
	}
	w = &routeWorld{}
	rep = w.router(Backoff{}).Route(routeCtx(t), routeG, routeA, answer(t, w, "", nil))
	if rep.Done() || len(w.called()) != 1 {
		t.Fatalf("reply %+v, calls %q; want one call", rep, w.called())
	}
}

// TestRouteUnreached: a leader that cannot be dialled, or no leader known
// at all, is a reply the router makes itself.
func TestRouteUnreached(t *testing.T) {
	w := &routeWorld{dialErr: errors.New("refused")}
	rep := w.router(Backoff{}).Route(routeCtx(t), routeG, routeA, answer(t, w, routeA, nil))
	if !rep.Unreached() || rep.Done() || len(w.called()) != 0 {
		t.Fatalf("reply %+v, calls %q; want unreached, no call", rep, w.called())
	}
	w = &routeWorld{}
	rep = w.router(Backoff{}).Route(routeCtx(t), routeG, "", answer(t, w, routeA, nil))
	if !rep.Unreached() || len(w.called()) != 0 || w.maps != 1 {
		t.Fatalf("reply %+v, calls %q, map reads %d; want unreached after a map read", rep, w.called(), w.maps)
	}
}

// TestRouteEach: copysets go to their leaders, one call per leader a
// round; with AllOfMap the copysets of the map are added, and the call
// does not end before the map was read whole.
func TestRouteEach(t *testing.T) {
	g1, g2, g3 := NewGroupID(1, 1), NewGroupID(1, 2), NewGroupID(1, 3)
	w := &routeWorld{leads: map[GroupID]bool{g1: true}, known: map[GroupID]PeerID{g2: routeA},
		mapped: map[GroupID]PeerID{g1: routeB, g2: routeB, g3: routeA}, mapErr: errors.New("server down")}
	r := w.router(Backoff{First: time.Millisecond, Max: time.Millisecond})
	var (
		mu  sync.Mutex
		got []string
	)
	res := r.RouteEach(routeCtx(t), Each{Hints: map[GroupID]PeerID{g1: "", g2: ""}, AllOfMap: true},
		func(_ context.Context, c routeClient, to Target, groups []GroupID) []Reply {
			w.record(t, c, to)
			mu.Lock()
			got = append(got, fmt.Sprint(c.at, groups))
			mu.Unlock()
			w.mu.Lock()
			w.mapErr = nil
			w.mu.Unlock()
			out := make([]Reply, len(groups))
			for i := range out {
				out[i] = Answered()
			}
			return out
		})
	slices.Sort(got)
	want := []string{fmt.Sprint(routeA, []GroupID{g2, g3}), fmt.Sprint("local", []GroupID{g1})}
	if res.Err != nil || len(res.Pending()) != 0 || len(res.Replies) != 3 || res.MapErr != nil || !slices.Equal(got, want) || w.maps != 2 {
		t.Fatalf("routed %+v, calls %q, map reads %d; want %q, 3 done, 2 map reads", res, got, w.maps, want)
	}
}
