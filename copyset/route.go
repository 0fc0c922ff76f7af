package copyset

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// Routing a call to a copyset's leader. A service that answers only on a
// copyset's leader (a sync proposal, a lock owner's call, a view drop, a
// fence) is called through a Router: each attempt goes to this server in
// process when it leads the copyset (no network hop), else to the leader
// the last answer named, else to the leader this server's replica knows,
// else to the leader the caller's cluster map names. An answer is done,
// final (a refusal another server would repeat: the call stops) or not
// the leader's (with the leader it names, if any: tried at once, up to
// maxHops in a row; else after the backoff). The caller's context is the
// one deadline.

// maxHops bounds the named leaders a routed call follows at once in a row,
// so that two servers that name each other do not spin: past it, it backs
// off.
const maxHops = 3

// replyKind is what one attempt answered.
type replyKind uint8

const (
	replyRedirect replyKind = iota // not the leader's answer: ask again
	replyDone                      // answered: stop
	replyFinal                     // refused for good: stop
)

// Reply is what one attempt of a routed call answered: Answered, Final or
// Redirect.
type Reply struct {
	kind      replyKind
	hint      PeerID
	err       error
	unreached bool // made by the router: no leader known, or not dialled
}

// Answered is the reply of an attempt that did the call.
func Answered() Reply { return Reply{kind: replyDone} }

// Final is the reply of an attempt refused for a reason another attempt
// would meet again (an invalid request, the caller's cancellation): the
// routed call stops with err.
func Final(err error) Reply { return Reply{kind: replyFinal, err: err} }

// Redirect is the reply of an attempt that reached no leader: the server
// does not lead the copyset (hint: the leader it names, "" if none), or
// did not answer (err). The call is tried again.
func Redirect(hint PeerID, err error) Reply { return Reply{kind: replyRedirect, hint: hint, err: err} }

// Done reports whether the call was answered.
func (r Reply) Done() bool { return r.kind == replyDone }

// Final reports whether the call was refused for good.
func (r Reply) Final() bool { return r.kind == replyFinal }

// Hint is the leader a Redirect names ("" if none).
func (r Reply) Hint() PeerID { return r.hint }

// Err is why a Final or Redirect reply is not an answer.
func (r Reply) Err() error { return r.err }

// Unreached reports whether the router made the reply itself: it knew no
// leader to ask, or could not dial the one it knew; the call function did
// not run for that attempt.
func (r Reply) Unreached() bool { return r.unreached }

// Target is where one attempt goes.
type Target struct {
	// Peer is the server called (this server's id when Local).
	Peer PeerID
	// Local: this server, called in process.
	Local bool
}

// Backoff is the pause between two rounds of attempts that named no leader
// to try at once: First, doubling up to Max. A zero Backoff does not
// retry: a routed call ends at the first round after which it has no named
// leader left to follow.
type Backoff struct {
	First, Max time.Duration
}

// Retry calls try until it reports done, pausing per b between two
// calls, until ctx ends; it reports whether try did.
func (b Backoff) Retry(ctx context.Context, try func() bool) bool {
	for wait := b.First; ; wait = b.next(wait) {
		if try() {
			return true
		}
		if pause(ctx, wait) != nil {
			return false
		}
	}
}

// pause waits d, or until ctx ends (its error).
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// next is the pause after d.
func (b Backoff) next(d time.Duration) time.Duration { return min(2*d, max(b.Max, b.First)) }

// Router routes the calls of one service to copyset leaders; C is the
// service's client type.
type Router[C any] struct {
	// Self is this server's peer id: a leader named Self is called in
	// process.
	Self PeerID
	// Replica reports what this server's replica of g knows: whether it
	// leads (and can answer), and the leader it knows; hosted is false
	// when this server has no replica of g. ReplicaOf is the usual one.
	Replica func(g GroupID) (leader PeerID, leads, hosted bool)
	// Local is this server's service as a client, called in process.
	Local C
	// Dial returns a client of the server peer.
	Dial func(peer PeerID) (C, error)
	// Map returns the leaders the cluster map names, given the copysets
	// whose leader the router does not know (a copyset it does not name,
	// or names without a leader, has none known). It may return what it
	// read with an error. nil: no cluster map.
	Map func(ctx context.Context, groups []GroupID) (map[GroupID]PeerID, error)
	// Backoff paces the rounds.
	Backoff Backoff
	// Waited, if set, is called once by a routed call that backs off for
	// the first time.
	Waited func()
}

// ReplicaOf is Router.Replica for the copysets of m (none if m is nil): a
// replica leads when it is its copyset's leader and not broken.
func ReplicaOf(m *Manager) func(g GroupID) (PeerID, bool, bool) {
	return func(g GroupID) (PeerID, bool, bool) {
		if m == nil {
			return "", false, false
		}
		n := m.Get(g)
		if n == nil {
			return "", false, false
		}
		return n.Leader(), n.IsLeader() && n.Broken() == nil, true
	}
}

// Route calls call on the leader of g (see the comment at the top) until
// an attempt is answered or final, or ctx ends, and returns the last
// reply; hint is the leader the caller believes leads ("" if none). When
// ctx ends first, the reply's error wraps ctx's and names the last
// attempt's.
func (r *Router[C]) Route(ctx context.Context, g GroupID, hint PeerID, call func(ctx context.Context, c C, to Target) Reply) Reply {
	res := r.RouteEach(ctx, Each{Hints: map[GroupID]PeerID{g: hint}},
		func(ctx context.Context, c C, to Target, _ []GroupID) []Reply { return []Reply{call(ctx, c, to)} })
	rep := res.Replies[g]
	if res.Err != nil && !rep.Done() && !rep.Final() {
		rep.err = fmt.Errorf("%w (last: %v)", res.Err, rep.err)
	}
	return rep
}

// Each is what RouteEach routes.
type Each struct {
	// Hints are the copysets to call, each with the leader the caller
	// believes leads it ("" if none).
	Hints map[GroupID]PeerID
	// AllOfMap also routes every copyset the cluster map names (Map), and
	// does not end before Map has returned without an error once.
	AllOfMap bool
}

// Routed is what a RouteEach did.
type Routed struct {
	// Replies is the last reply of every copyset routed.
	Replies map[GroupID]Reply
	// MapErr is the error of the last Map call, if it failed.
	MapErr error
	// Err is ctx's error if ctx ended before every copyset was answered
	// or final.
	Err error
}

// Pending returns the copysets not answered and not refused for good, in
// ascending order.
func (r Routed) Pending() []GroupID {
	var out []GroupID
	for _, g := range slices.Sorted(maps.Keys(r.Replies)) {
		if rep := r.Replies[g]; !rep.Done() && !rep.Final() {
			out = append(out, g)
		}
	}
	return out
}

// RouteEach is Route for many copysets at once: each round it finds the
// target of every copyset not done yet and calls each target once with
// the copysets it is asked about (all targets at once), until every
// copyset is answered or final, or ctx ends. call returns one reply per
// group, in the order of groups.
func (r *Router[C]) RouteEach(ctx context.Context, e Each, call func(ctx context.Context, c C, to Target, groups []GroupID) []Reply) Routed {
	out := Routed{Replies: make(map[GroupID]Reply, len(e.Hints))}
	hints := maps.Clone(e.Hints)
	if hints == nil {
		hints = map[GroupID]PeerID{}
	}
	mapped := !e.AllOfMap || r.Map == nil
	wait, waited := r.Backoff.First, false
	for hops := 0; ; {
		targets, unknown := r.resolve(hints)
		if len(unknown) > 0 || !mapped {
			leaders, err := r.mapLeaders(ctx, unknown)
			out.MapErr = err
			mapped = mapped || err == nil
			if e.AllOfMap {
				for _, g := range slices.Sorted(maps.Keys(leaders)) {
					_, seen := out.Replies[g]
					if _, pending := hints[g]; !pending && !seen {
						hints[g] = ""
						unknown = append(unknown, g)
					}
				}
			}
			for _, g := range unknown {
				if l := leaders[g]; l != "" {
					targets[r.target(l)] = append(targets[r.target(l)], g)
					continue
				}
				why := fmt.Errorf("copyset %d/%d has no leader this server knows of", g.Pool(), g.Copyset())
				if err != nil {
					why = fmt.Errorf("no leader known: %w", err)
				}
				out.Replies[g] = Reply{kind: replyRedirect, err: why, unreached: true}
			}
		}
		followed := r.round(ctx, targets, call, out.Replies)
		for g := range hints {
			switch rep := out.Replies[g]; {
			case rep.Done(), rep.Final():
				delete(hints, g)
			default:
				hints[g] = rep.hint
			}
		}
		if len(hints) == 0 && mapped {
			return out
		}
		if followed && hops < maxHops {
			hops++
			continue
		}
		if r.Backoff.First <= 0 {
			return out
		}
		hops = 0
		if !waited && r.Waited != nil {
			r.Waited()
		}
		waited = true
		if err := pause(ctx, wait); err != nil {
			out.Err = err
			return out
		}
		wait = r.Backoff.next(wait)
	}
}

// resolve finds the target of every copyset of hints (with the leader
// last named); unknown are those it found none for.
func (r *Router[C]) resolve(hints map[GroupID]PeerID) (map[Target][]GroupID, []GroupID) {
	targets := map[Target][]GroupID{}
	var unknown []GroupID
	for _, g := range slices.Sorted(maps.Keys(hints)) {
		var leader, known PeerID
		var leads bool
		if r.Replica != nil {
			known, leads, _ = r.Replica(g)
		}
		switch {
		case leads:
			leader = r.Self
		case hints[g] != "":
			leader = hints[g]
		default:
			leader = known
		}
		if leader == "" {
			unknown = append(unknown, g)
			continue
		}
		t := r.target(leader)
		targets[t] = append(targets[t], g)
	}
	return targets, unknown
}

// target is where a call to leader goes (this server when leader names
// it, as a peer id or an address).
func (r *Router[C]) target(leader PeerID) Target {
	return Target{Peer: leader, Local: leader.Addr() == r.Self.Addr()}
}

// mapLeaders calls Map, if any.
func (r *Router[C]) mapLeaders(ctx context.Context, groups []GroupID) (map[GroupID]PeerID, error) {
	if r.Map == nil {
		return nil, nil
	}
	leaders, err := r.Map(ctx, groups)
	if err != nil {
		return leaders, fmt.Errorf("cluster map: %w", err)
	}
	return leaders, nil
}

// round calls every target at once (one in the caller's goroutine) and
// records the replies; it reports whether a reply named a leader other
// than the one that answered, to follow at once.
func (r *Router[C]) round(ctx context.Context, targets map[Target][]GroupID, call func(context.Context, C, Target, []GroupID) []Reply, replies map[GroupID]Reply) bool {
	type attempt struct {
		to      Target
		groups  []GroupID
		replies []Reply
	}
	var attempts []*attempt
	for t, gs := range targets {
		attempts = append(attempts, &attempt{to: t, groups: gs})
	}
	one := func(a *attempt) { a.replies = r.attempt(ctx, a.to, a.groups, call) }
	if len(attempts) == 1 {
		one(attempts[0])
	} else {
		var wg sync.WaitGroup
		for _, a := range attempts {
			wg.Go(func() { one(a) })
		}
		wg.Wait()
	}
	followed := false
	for _, a := range attempts {
		for i, g := range a.groups {
			rep := Redirect("", fmt.Errorf("%s did not answer for copyset %d/%d", a.to.Peer, g.Pool(), g.Copyset()))
			if i < len(a.replies) {
				rep = a.replies[i]
			}
			if rep.hint != "" && rep.hint.Addr() == a.to.Peer.Addr() {
				rep.hint = "" // named itself: ask who leads now
			}
			followed = followed || rep.hint != ""
			replies[g] = rep
		}
	}
	return followed
}

// attempt calls to about groups.
func (r *Router[C]) attempt(ctx context.Context, to Target, groups []GroupID, call func(context.Context, C, Target, []GroupID) []Reply) []Reply {
	c := r.Local
	if !to.Local {
		var err error
		if r.Dial == nil {
			err = fmt.Errorf("dial %s: no connections to other servers", to.Peer)
		} else if c, err = r.Dial(to.Peer); err != nil {
			err = fmt.Errorf("dial %s: %w", to.Peer, err)
		}
		if err != nil {
			out := make([]Reply, len(groups))
			for i := range out {
				out[i] = Reply{kind: replyRedirect, err: err, unreached: true}
			}
			return out
		}
	}
	return call(ctx, c, to, groups)
}
