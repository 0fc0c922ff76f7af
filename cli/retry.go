package cli

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	chunkserverpb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

const (
	backoffMin = 20 * time.Millisecond
	backoffMax = 500 * time.Millisecond
	// maxRedirectHops bounds how many REDIRECTED hints are followed in a row
	// before backing off and asking the servers again.
	maxRedirectHops = 4
)

// refusedGrace is how long an operation keeps trying while every server
// refuses connections (or does not host the copyset): time for a server
// that restarts to listen again, yet a command against servers that are
// down fails within about that long rather than at its timeout.
const refusedGrace = 1500 * time.Millisecond

// retryBackoff is a jittered exponential backoff between retry rounds. It
// also keeps the operation's refusal clock: since when every round found
// no server accepting connections.
type retryBackoff struct {
	next time.Duration
	down time.Time // start of the current run of refused rounds; zero if none
}

func newBackoff() *retryBackoff { return &retryBackoff{next: backoffMin} }

// final reports whether a round's failure err ends the retries: a
// discovery every server answered with a permanent failure (see
// noLeaderError.permanent), or refusedGrace of rounds in which no server
// that might host the copyset accepted connections: a discovery that found
// every server refusing or not hosting it, or a *serverError of the one
// server an operation is for refusing. Any other outcome, err == nil
// included, stops the refusal clock.
func (b *retryBackoff) final(err error) bool {
	down := false
	var nl *noLeaderError
	switch {
	case errors.As(err, &nl):
		if nl.permanent() {
			return true
		}
		down = nl.unreachable()
	case err != nil:
		var se *serverError
		down = errors.As(err, &se) && refused(se.Err)
	}
	if !down {
		b.down = time.Time{}
		return false
	}
	now := time.Now()
	if b.down.IsZero() {
		b.down = now
	}
	return now.Sub(b.down) >= refusedGrace
}

// wait sleeps for the next interval, no longer than the refusal clock has
// left; false if ctx ended first.
func (b *retryBackoff) wait(ctx context.Context) bool {
	d := b.next/2 + rand.N(b.next/2+1)
	b.next = min(2*b.next, backoffMax)
	if !b.down.IsZero() {
		d = max(min(d, time.Until(b.down.Add(refusedGrace))), 0)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// withDeadline applies the client's operation timeout to ctx.
func (c *Client) withDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout)
}

// giveUp builds the final error of a retry loop that ran out of time.
func giveUp(parent context.Context, op string, start time.Time, last error) error {
	if err := parent.Err(); err != nil {
		if last != nil {
			return fmt.Errorf("%s: %w (last error: %v)", op, err, last)
		}
		return fmt.Errorf("%s: %w", op, err)
	}
	if last == nil {
		last = context.DeadlineExceeded
	}
	return fmt.Errorf("%s: %w", op, &GaveUpError{After: time.Since(start), Last: last})
}

// askLeader asks one server for the leader of cs, returning its peer id.
func (c *Client) askLeader(ctx context.Context, addr string, cs CopysetID) (string, error) {
	svc, err := c.cliService(addr)
	if err != nil {
		return "", err
	}
	resp, err := svc.GetLeader(ctx, &chunkserverpb.GetLeaderRequest2{
		LogicPoolId: proto.Uint32(cs.Pool),
		CopysetId:   proto.Uint32(cs.Copyset),
	})
	if err != nil {
		return "", err
	}
	raw := resp.GetLeader().GetAddress()
	if raw == "" {
		return "", errors.New("empty leader in reply")
	}
	id, err := PeerID(raw)
	if err != nil {
		return "", fmt.Errorf("leader in reply: %w", err)
	}
	return id, nil
}

// discover asks all servers at once for the leader of cs and takes the first
// answer. It makes one round (one attempt per server); the leader is cached.
func (c *Client) discover(ctx context.Context, cs CopysetID) (string, error) {
	order := c.serverOrder()
	actx, cancel := context.WithTimeout(ctx, c.attemptTimeout)
	defer cancel()
	type result struct {
		i   int
		id  string
		err error
	}
	ch := make(chan result, len(order))
	for i, addr := range order {
		go func() {
			id, err := c.askLeader(actx, addr, cs)
			ch <- result{i, id, err}
		}()
	}
	errs := make([]*serverError, len(order))
	for range order {
		r := <-ch
		if r.err == nil {
			c.setLeader(cs, r.id)
			return r.id, nil
		}
		errs[r.i] = &serverError{Addr: order[r.i], Err: r.err}
	}
	return "", &noLeaderError{cs: cs, errs: errs}
}

// leaderOf returns the cached leader of cs or discovers it (one round).
func (c *Client) leaderOf(ctx context.Context, cs CopysetID) (string, error) {
	if id, ok := c.CachedLeader(cs); ok {
		return id, nil
	}
	return c.discover(ctx, cs)
}

// chunkAttempt is one ChunkService call against one server. It returns the
// reply's status and redirect hint, or the gRPC error.
type chunkAttempt func(ctx context.Context, svc chunkserverpb.ChunkServiceClient) (chunkserverpb.CHUNK_OP_STATUS, string, error)

// onLeader runs call against the leader of cs until it returns a final
// status (chaseLeader): REDIRECTED follows the hint, COPYSET_NOTEXIST and
// retryable gRPC errors find the leader again, OVERLOAD asks the same
// server later; SUCCESS is done and any other status is final.
func (c *Client) onLeader(parent context.Context, op fmt.Stringer, cs CopysetID, call chunkAttempt) error {
	return c.chaseLeader(parent, op, cs, c.attemptTimeout, func(ctx context.Context, cc *grpc.ClientConn, addr, _ string) leaderOutcome {
		st, redirect, err := call(ctx, chunkserverpb.NewChunkServiceClient(cc))
		switch {
		case err != nil && !retryable(err):
			return leaderOutcome{kind: outcomeFinal, err: &serverError{Addr: addr, Err: err}}
		case err != nil:
			return leaderOutcome{kind: outcomeRetry, err: &serverError{Addr: addr, Err: err}}
		}
		switch st {
		case chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS:
			return leaderOutcome{kind: outcomeDone}
		case chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_REDIRECTED:
			return leaderOutcome{kind: outcomeRedirect, hint: redirect, err: fmt.Errorf("%s: %s", addr, st)}
		case chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_COPYSET_NOTEXIST:
			return leaderOutcome{kind: outcomeRetry, err: fmt.Errorf("%s: %s", addr, st)}
		case chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_OVERLOAD:
			return leaderOutcome{kind: outcomeLater, err: fmt.Errorf("%s: %s", addr, st)}
		}
		return leaderOutcome{kind: outcomeFinal, err: &ChunkStatusError{Status: st}}
	})
}

// outcomeKind is what one attempt against the server believed to lead a
// copyset came to, as chaseLeader acts on it.
type outcomeKind int

const (
	outcomeDone     outcomeKind = iota // done: the server is the leader
	outcomeFinal                       // err ends the operation
	outcomeRedirect                    // not the leader: follow hint, else find it again
	outcomeRetry                       // forget the leader, back off, find it again
	outcomeLater                       // the same server, after a backoff (overloaded)
)

// leaderOutcome is the result of a leaderAttempt. err is the final error
// (outcomeFinal), else what the operation reports if it gives up.
type leaderOutcome struct {
	kind outcomeKind
	hint string // outcomeRedirect: the leader's peer id the server named, "" none
	err  error
}

// leaderAttempt is one call against the server believed to lead a copyset:
// addr is its address, leader its peer id.
type leaderAttempt func(ctx context.Context, cc *grpc.ClientConn, addr, leader string) leaderOutcome

// chaseLeader is the one leader-chasing loop of the client: it runs call
// against the leader of cs until an attempt is done or final. It takes the
// cached leader or discovers it (all servers at once), follows redirect
// hints (maxRedirectHops in a row at most), forgets the leader and backs
// off when an attempt says so, and ends at the client's timeout (each
// attempt gets attempt at most), or when a discovery is final
// (retryBackoff.final: the copyset is hosted nowhere, or every server has
// refused connections for refusedGrace).
//
// The common case, one successful attempt at the cached leader, costs one
// context (the attempt's, which also ends at the operation's deadline) and
// formats nothing: the operation's own context is made only when a round
// must discover the leader or back off, and op is formatted only when an
// error names it.
func (c *Client) chaseLeader(parent context.Context, op fmt.Stringer, cs CopysetID, attempt time.Duration, call leaderAttempt) error {
	start := time.Now()
	deadline := start.Add(c.timeout)
	var ctx context.Context // the whole operation's; made when first needed
	var cancel context.CancelFunc
	defer func() {
		if cancel != nil {
			cancel()
		}
	}()
	opCtx := func() context.Context {
		if ctx == nil {
			ctx, cancel = context.WithDeadline(parent, deadline)
		}
		return ctx
	}
	bo := newBackoff()
	var last error
	target := "" // peer id of the server to try next
	hops := 0
	retry := func(err error) { // forget the target, back off, start over
		last = err
		target, hops = "", 0
		bo.wait(opCtx())
	}
	for parent.Err() == nil && time.Now().Before(deadline) {
		if target == "" {
			id, ok := c.CachedLeader(cs)
			if !ok {
				var err error
				id, err = c.discover(opCtx(), cs)
				if bo.final(err) {
					return fmt.Errorf("%s: %w", op, err)
				}
				if err != nil {
					retry(err)
					continue
				}
			}
			target = id
		}
		addr, err := PeerAddr(target)
		if err != nil {
			c.forgetLeader(cs, target)
			retry(err)
			continue
		}
		cc, err := c.conn(addr)
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		actx, acancel := context.WithDeadline(parent, minTime(deadline, time.Now().Add(attempt)))
		o := call(actx, cc, addr, target)
		acancel()
		switch o.kind {
		case outcomeDone:
			c.setLeader(cs, target)
			return nil
		case outcomeFinal:
			return fmt.Errorf("%s: %w", op, o.err)
		case outcomeRedirect:
			c.forgetLeader(cs, target)
			hint, herr := PeerID(o.hint)
			if o.hint != "" && herr == nil && hint != target && hops < maxRedirectHops {
				last = fmt.Errorf("%w to %s", o.err, hint)
				target = hint
				hops++
				continue
			}
			retry(fmt.Errorf("%w (no usable leader hint %q)", o.err, o.hint))
		case outcomeRetry:
			c.forgetLeader(cs, target)
			retry(o.err)
		case outcomeLater:
			last = o.err
			bo.wait(opCtx()) // same leader, just later
		}
	}
	return giveUp(parent, op.String(), start, last)
}

// minTime returns the earlier of a and b.
func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// chunkOp names a chunk operation in onLeader's errors, formatted only when
// one is returned.
type chunkOp struct {
	verb string
	id   ChunkID
}

func (o chunkOp) String() string { return o.verb + " " + o.id.String() }

// opText is an operation name already formatted.
type opText string

func (s opText) String() string { return string(s) }
