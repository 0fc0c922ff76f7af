package copyset

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// ProposeAs is Node.Propose for a tenant whose state machine answers its
// ops with an R: it proposes op on n and returns the op's log index and
// its apply result as an R. Errors:
//
//   - Propose's own (*NotLeaderError: nothing was appended;
//     *OutcomeUnknownError: appended, then the leadership was lost; the
//     caller's cancellation; others wrapped), with index 0;
//   - an apply result that is an error (a *FatalError: the op committed and
//     this replica failed to apply it and stops; ErrBroken; ErrUnknownKind),
//     wrapped with the copyset and index, so errors.As finds a *FatalError;
//   - an apply result of another type than R, which names both types.
//
// The last two come with the op's index: it committed. A nil result is
// accepted as R's zero value when R is an interface type (a machine that
// answers nil for success). The conversion allocates nothing when the
// result is an R.
func ProposeAs[R any](ctx context.Context, n *Node, op []byte) (uint64, R, error) {
	index, res, err := n.Propose(ctx, op)
	if err != nil {
		var zero R
		return 0, zero, err
	}
	r, err := resultAs[R](n.group, index, res)
	return index, r, err
}

// resultAs converts the apply result res of the op at index to an R
// (ProposeAs).
func resultAs[R any](g GroupID, index uint64, res any) (R, error) {
	var zero R
	if e, ok := res.(error); ok {
		return zero, fmt.Errorf("copyset %s: op at index %d: %w", g, index, e)
	}
	if r, ok := res.(R); ok {
		return r, nil
	}
	if res == nil && any(zero) == nil {
		return zero, nil
	}
	return zero, fmt.Errorf("copyset %s: op at index %d: apply result is a %T, want %v", g, index, res, reflect.TypeFor[R]())
}

// Proposal batching.
//
// Every raft log entry costs the same fixed work whatever it carries: a
// future and a hand-off to raft's leader loop, a record in the log store, an
// entry in the AppendEntries of each follower, a record in each follower's
// log, one FSM dispatch per replica and an answer to the proposer. Under
// concurrent load a copyset therefore packs waiting proposals into one
// entry, a batch envelope, and answers each proposer with its own op's
// result. Proposals wait while the copyset has MaxInflightEntries entries
// proposed and not yet applied (the in-flight window; also while raft's
// leader loop is busy storing a dispatch): the batch grows with the load
// and is a single op, sent at once, when there is none. With a window of
// one, 4 KiB writes at 64 in flight over 16 copysets take 0.47 entries per
// op instead of 0.8, for 10-20% more IOPS (docs/performance.md, "Proposal
// in-flight window").
//
// Envelope layout (a raft LogCommand's data):
//
//	byte 0     opBatchVersion
//	uvarint    number of ops (>= 1)
//	per op:    uvarint length, then the op itself (its own op header first)
//
// Every op of an envelope is applied at the envelope's log index, so only
// kinds whose machines do not use the index to recognise replays may be
// batched (MachineSpec.Batch, registry.batchable: the chunk machine never
// looks at the index; the integrity machine recognises replayed jobs by it,
// so its ops go alone). An envelope is applied op by op, in order, exactly as
// the same ops in consecutive entries would be, so replay stays idempotent.
// A grouped proposal (group.go) is an envelope too, built by its proposer
// and proposed as it is: it may also hold one op of a kind whose spec says
// Group.

// opBatchVersion is the first byte of a batch envelope. It shares the
// position of an op's header version and must differ from opVersion.
const opBatchVersion = 2

// Limits of one envelope the batcher builds. A single op larger than
// maxBatchBytes is proposed alone. The batcher leaves one of an entry's
// MaxOpsPerEntry places free, so that the ops of any entry it built and
// one op more (a checkpoint) fit in one group (group.go).
const (
	maxBatchOps   = MaxOpsPerEntry - 1
	maxBatchBytes = 1 << 20
)

// MaxOpsPerEntry is the most ops one raft log entry carries (proposal
// batching, grouped proposals): a machine may number an entry's ops in 8
// bits.
const MaxOpsPerEntry = 256

// encodeBatch packs ops into one envelope: at least two from the
// batcher, one or more for a group (group.go).
func encodeBatch(ops [][]byte) []byte {
	parts := make([][][]byte, len(ops))
	for i := range ops {
		parts[i] = ops[i : i+1 : i+1]
	}
	return encodeBatchParts(parts)
}

// encodeBatchParts is encodeBatch of ops each given as its parts. The
// envelope is allocated at its exact size without being cleared first
// (bytes.Join), where a make would zero a large payload only to overwrite
// it, and each byte of the ops is copied once.
func encodeBatchParts(ops [][][]byte) []byte {
	pieces := 1
	for _, op := range ops {
		pieces += 1 + len(op)
	}
	// The envelope's own bytes (version, count, each op's length) are
	// appended to heads, sized so that it never moves: pieces alias it.
	heads := make([]byte, 0, 1+binary.MaxVarintLen64*(1+len(ops)))
	heads = append(heads, opBatchVersion)
	heads = binary.AppendUvarint(heads, uint64(len(ops)))
	all := make([][]byte, 0, pieces)
	all = append(all, heads)
	for _, op := range ops {
		size := 0
		for _, p := range op {
			size += len(p)
		}
		at := len(heads)
		heads = binary.AppendUvarint(heads, uint64(size))
		all = append(all, heads[at:])
		all = append(all, op...)
	}
	return bytes.Join(all, nil)
}

// decodeBatch splits an envelope into its ops; they alias data.
func decodeBatch(data []byte) ([][]byte, error) {
	if len(data) < 1 || data[0] != opBatchVersion {
		return nil, errors.New("decode batch: not a batch envelope")
	}
	rest := data[1:]
	n, k := binary.Uvarint(rest)
	if k <= 0 || n == 0 || n > uint64(len(rest)) {
		return nil, fmt.Errorf("decode batch: bad op count")
	}
	rest = rest[k:]
	ops := make([][]byte, 0, n)
	for i := uint64(0); i < n; i++ {
		l, k := binary.Uvarint(rest)
		if k <= 0 || l > uint64(len(rest)-k) {
			return nil, fmt.Errorf("decode batch: op %d of %d: bad length", i, n)
		}
		ops = append(ops, rest[k:k+int(l)])
		rest = rest[k+int(l):]
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("decode batch: %d trailing bytes", len(rest))
	}
	return ops, nil
}

// batchResult is the FSM's result for an envelope: one result per op.
type batchResult []any

// proposal is one caller of Propose waiting for its op.
type proposal struct {
	ctx  context.Context
	op   []byte
	done chan proposalResult // buffered: the answer never blocks
}

// proposals recycles proposals with their done channels. A proposal is
// answered exactly once, with one send on done that is the proposer's last
// use of it (the batcher and the waiter only read proposals not answered
// yet), so once its caller received the answer nothing refers to it and
// done is empty: recycle puts it back then, and only then.
var proposals = sync.Pool{New: func() any { return &proposal{done: make(chan proposalResult, 1)} }}

// recycle returns pr, whose answer its caller received, to proposals.
func (pr *proposal) recycle() {
	pr.ctx, pr.op = nil, nil
	proposals.Put(pr)
}

type proposalResult struct {
	index uint64
	res   any
	err   error
}

// inflightBatch is an entry handed to raft whose future is not answered
// yet, with its proposals: lone when it holds one, else props.
type inflightBatch struct {
	fut   raft.ApplyFuture
	lone  *proposal
	props []*proposal
	slot  bool // holds one of proposer.slots
}

// proposer queues a node's proposals and hands them to raft in batches. It
// owns two goroutines, started by start and stopped by stop: the batcher,
// which drains the queue into raft.Apply, and the waiter, which answers the
// proposers of each entry in log order when its future completes.
type proposer struct {
	n   *Node
	reg *registry // which kinds batch

	mu     sync.Mutex
	queue  []*proposal
	closed bool
	wake   chan struct{} // capacity 1

	inflight chan inflightBatch
	// props and ops are dispatch's scratch (the batcher's alone), emptied
	// after each entry.
	props []*proposal
	ops   [][]byte
	// slots bounds the entries handed to raft and not yet answered
	// (RaftOptions.MaxInflightEntries): the batcher takes a slot before
	// proposing an entry that could still grow (entryFull) and the waiter
	// returns it when the entry's future completes. Full entries go
	// without one: waiting could not make them carry more. Nil: no bound.
	slots   chan struct{}
	quit    chan struct{}
	batcher chan struct{} // closed when the batcher has exited
	waiter  chan struct{} // closed when the waiter has exited
}

func (p *proposer) start(n *Node) {
	p.n, p.reg = n, n.fsm.reg
	p.wake = make(chan struct{}, 1)
	p.inflight = make(chan inflightBatch, 64)
	if k := n.opts.MaxInflightEntries; k > 0 {
		p.slots = make(chan struct{}, k)
	}
	p.quit = make(chan struct{})
	p.batcher = make(chan struct{})
	p.waiter = make(chan struct{})
	go p.runBatcher()
	go p.runWaiter()
}

// submit queues op and returns its proposal, whose outcome arrives on
// done; the caller may recycle it once it received the outcome.
func (p *proposer) submit(ctx context.Context, op []byte) (*proposal, error) {
	pr := proposals.Get().(*proposal)
	pr.ctx, pr.op = ctx, op
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		pr.recycle() // never queued
		return nil, raft.ErrRaftShutdown
	}
	p.queue = append(p.queue, pr)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return pr, nil
}

// stop ends both goroutines. Queued proposals are answered with
// ErrRaftShutdown; the waiter is given until the raft instance has shut
// down plus a grace period, since raft may leave a future that was queued
// just before its shutdown unanswered.
func (p *proposer) stop() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	close(p.quit)
	<-p.batcher
	select {
	case <-p.waiter:
	case <-time.After(2 * time.Second):
		p.n.log.Warn("proposal waiter did not finish: a raft future was left unanswered")
	}
}

func (p *proposer) runBatcher() {
	defer close(p.batcher)
	defer close(p.inflight)
	var pending []*proposal // taken from the queue, not yet dispatched
	for {
		select {
		case <-p.wake:
		case <-p.quit:
			p.mu.Lock()
			rest := p.queue
			p.queue = nil
			p.mu.Unlock()
			for _, pr := range rest {
				pr.done <- proposalResult{err: raft.ErrRaftShutdown}
			}
			return
		}
		pending = p.take(pending[:0])
		for rest := pending; len(rest) > 0; {
			slot := false
			if p.slots != nil && !p.reg.entryFull(rest) {
				// Wait for a slot; what arrives meanwhile joins rest
				// (behind it, so log order stays arrival order).
				if !p.acquire() {
					for _, pr := range rest {
						pr.done <- proposalResult{err: raft.ErrRaftShutdown}
					}
					break
				}
				slot = true
				off := len(pending) - len(rest)
				pending = p.take(pending)
				rest = pending[off:]
			}
			rest = rest[p.dispatch(rest, slot):]
		}
		clear(pending)
	}
}

// take appends the queued proposals to dst and empties the queue.
func (p *proposer) take(dst []*proposal) []*proposal {
	p.mu.Lock()
	dst = append(dst, p.queue...)
	clear(p.queue)
	p.queue = p.queue[:0]
	p.mu.Unlock()
	return dst
}

// joins reports whether op may join an entry that holds n ops of size
// bytes, the first of them first.
func (r *registry) joins(first []byte, n, size int, op []byte) bool {
	return r.batchable(first) && r.batchable(op) && n < maxBatchOps && size+len(op) <= maxBatchBytes
}

// entryFull reports whether the entry dispatch would build from reqs is
// as large as it may get (a lone unbatchable op, or an envelope at its op
// or byte limit), so waiting for more proposals cannot grow it.
func (r *registry) entryFull(reqs []*proposal) bool {
	first, size := reqs[0].op, len(reqs[0].op)
	for i, pr := range reqs[1:] {
		if !r.joins(first, i+1, size, pr.op) {
			return true
		}
		size += len(pr.op)
	}
	return !r.batchable(first) || size >= maxBatchBytes
}

// dispatch hands one entry built from a prefix of reqs to raft and returns
// how many proposals it took. Proposals whose context has ended are
// answered and skipped; nothing of theirs is proposed. slot says whether
// the entry holds an in-flight slot, which the waiter returns once the
// entry's future completes (or dispatch does, if nothing is proposed).
func (p *proposer) dispatch(reqs []*proposal, slot bool) int {
	var (
		props   = p.props[:0]
		ops     = p.ops[:0]
		size    int
		timeout = p.n.opts.ApplyTimeout
		taken   int
	)
	defer func() {
		clear(props)
		clear(ops)
		p.props, p.ops = props[:0], ops[:0]
	}()
	for _, pr := range reqs {
		if len(props) > 0 && !p.reg.joins(props[0].op, len(props), size, pr.op) {
			break
		}
		taken++
		if err := pr.ctx.Err(); err != nil {
			pr.done <- proposalResult{err: fmt.Errorf("copyset %s: %w", p.n.group, err)}
			continue
		}
		props = append(props, pr)
		ops = append(ops, pr.op)
		size += len(pr.op)
		if t := p.n.applyTimeout(pr.ctx); t < timeout {
			timeout = t
		}
	}
	if len(props) == 0 {
		if slot {
			p.release()
		}
		return taken
	}
	data := ops[0]
	if len(ops) > 1 {
		data = encodeBatch(ops)
	}
	fut := p.n.raft.Apply(data, timeout)
	stats := &p.n.trans.m.stats
	stats.entries.Add(1)
	stats.proposals.Add(uint64(len(props)))
	b := inflightBatch{fut: fut, slot: slot}
	if len(props) == 1 {
		b.lone = props[0]
	} else {
		b.props = slices.Clone(props)
	}
	select {
	case p.inflight <- b:
	case <-p.quit:
		// The waiter may be gone; answer here. The entry's outcome is
		// unknown to its proposers, as with any proposal cut short.
		for _, pr := range props {
			pr.done <- proposalResult{err: raft.ErrRaftShutdown}
		}
		if slot {
			p.release()
		}
	}
	return taken
}

// acquire takes an in-flight slot, waiting while MaxInflightEntries entries
// are unanswered; proposals queue meanwhile and travel together in the next
// entry. It reports false when the proposer is stopping.
func (p *proposer) acquire() bool {
	select {
	case p.slots <- struct{}{}:
		return true
	case <-p.quit:
		return false
	}
}

// release returns a slot taken by acquire.
func (p *proposer) release() { <-p.slots }

func (p *proposer) runWaiter() {
	defer close(p.waiter)
	for b := range p.inflight {
		err := b.fut.Error()
		if b.slot {
			p.release()
		}
		props := b.props
		if b.lone != nil {
			one := [1]*proposal{b.lone}
			props = one[:]
		}
		if err != nil {
			for _, pr := range props {
				pr.done <- proposalResult{err: err}
			}
			continue
		}
		index, res := b.fut.Index(), b.fut.Response()
		if len(props) == 1 {
			props[0].done <- proposalResult{index: index, res: res}
			continue
		}
		results, ok := res.(batchResult)
		for i, pr := range props {
			r := proposalResult{index: index}
			switch {
			case ok && i < len(results):
				r.res = results[i]
			case !ok:
				// The whole envelope failed to apply (undecodable,
				// broken replica): every op shares the outcome.
				r.res = res
			}
			pr.done <- r
		}
	}
}
