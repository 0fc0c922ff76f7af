package datasync

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/internal/chunkop"
	"github.com/chunkraft/chunkraft/internal/kinds"
	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
)

// maxEmptySpan is the most log entries without chunk records a tailing
// export holds back before it sends them as a packet of no records.
const maxEmptySpan = 1024

// binlog exports the binlog phase from log index from, through e.pin: up
// to the binlog end in kFull (then it returns nil), for as long as ctx
// lasts in the tailing modes. A packet holds consecutive entries, up to
// PacketBytes (an entry never spans packets); the pin moves to a packet's
// next index once send accepted it.
func (e *exporter) binlog(ctx context.Context, from uint64) error {
	full := e.opts.Mode == dspb.SyncMode_kFull
	end := e.opts.BinlogEnd
	if full && end == 0 {
		end = max(e.src.CommitIndex(), from-1)
		if e.opts.OnBinlogEnd != nil {
			if err := e.opts.OnBinlogEnd(ctx, end); err != nil {
				return fmt.Errorf("record the binlog end %d: %w", end, err)
			}
		}
	}
	if full && from > end+1 {
		return fmt.Errorf("binlog point %d is past the binlog end %d", from, end)
	}
	var (
		start, cursor = from, from
		records       []*syncpb.Record
		size          int
		pend          []*syncpb.Record // the records of entry cursor, read but not in the packet yet
		pendSize      int
		havePend      bool
		opened        time.Time // when the open packet got its first entry
		lastSent      = time.Now()
		// flush: an entry read sets a write fence: what was read goes
		// out at once, then a heartbeat (the copyset takes no more writes
		// but the fence owner's, and a cutover waits for the export to
		// cover the fence).
		flush bool
		poll  = pollInterval
	)
	e.cover.period = max(pollInterval, e.opts.Idle/4)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		e.cover.barrier(ctx, e.src, e.opts.Idle)
		// Only applied entries: whether a write fence refused an op is
		// known once the copyset has applied it.
		limit := min(e.src.CommitIndex(), e.src.AppliedIndex())
		if full {
			limit = min(limit, end)
		}
		packetFull, before := false, cursor
		for cursor <= limit {
			if !havePend {
				ent, err := e.pin.Entry(cursor)
				if errors.Is(err, copyset.ErrLogBeyondLast) {
					break // not committed here yet: wait
				}
				if errors.Is(err, copyset.ErrLogCompacted) {
					return fmt.Errorf("%w: log index %d: %v", ErrLogGone, cursor, err)
				}
				if err != nil {
					return fmt.Errorf("read log index %d: %w", cursor, err)
				}
				if pend, err = e.entryRecords(ctx, ent); err != nil {
					return err
				}
				flush = flush || setsWriteFence(ent)
				pendSize, havePend = recordsSize(pend), true
			}
			if cursor > start && size+pendSize > e.opts.PacketBytes {
				packetFull = true
				break
			}
			if cursor == start {
				opened = time.Now()
			}
			records = append(records, pend...)
			size += pendSize
			pend, havePend = nil, false
			cursor++
		}
		e.cover.read(cursor - 1)
		done := full && cursor == end+1
		// A span without chunk records (the sync machine's own entries, raft
		// no-ops) waits for records or grows to maxEmptySpan: sending it
		// would replicate an Advance, one more entry of the log, and a
		// tailing export would chase its own tail forever.
		ripe := len(records) > 0 && (flush || time.Since(opened) >= e.opts.Linger) || cursor-start >= maxEmptySpan
		switch {
		case cursor > start && (packetFull || done || ripe):
			if err := e.emit(ctx, exportfmt.BinlogPoint(start), exportfmt.BinlogPoint(cursor), records, done); err != nil {
				return err
			}
			if err := e.pin.Advance(cursor); err != nil {
				return fmt.Errorf("advance the log pin to %d: %w", cursor, err)
			}
			start, records, size, lastSent = cursor, nil, 0, time.Now()
			if done {
				return nil
			}
			if packetFull {
				continue
			}
		case done: // nothing (left) to export before the end
			return e.emit(ctx, exportfmt.BinlogPoint(start), exportfmt.BinlogPoint(start), nil, true)
		case !full && len(records) == 0 && (flush || time.Since(lastSent) >= e.opts.Idle):
			// The entries read since start hold no chunk op: the export
			// covers them without a packet.
			p := exportfmt.BinlogPoint(start).Proto()
			if err := e.send(ctx, Packet{Start: p, Next: p, BinlogStart: e.binlogStart, StartStateMs: e.startStateMs,
				CoveredIndex: cursor - 1, CoveredMs: e.cover.upTo(cursor - 1), WrittenAtMs: time.Now().UnixMilli()}); err != nil {
				return err
			}
			lastSent, flush = time.Now(), false
		}
		if cursor > before {
			poll = pollInterval
		} else {
			poll = min(2*poll, maxPollInterval)
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// coverage is what the binlog phase knows of the writes the copyset
// acknowledged: a read barrier taken at time t returns an index at or
// above every write acknowledged before t; once the export has read every
// entry up to that index, a packet or heartbeat that reaches it holds
// every write acknowledged before t (Packet.CoveredMs). One barrier is
// outstanding at a time, taken at most every period.
type coverage struct {
	period time.Duration
	taken  time.Time // when the last barrier was taken
	// pending: a barrier the export has not read up to yet, at
	// pendingIndex, taken at pendingMs.
	pending      bool
	pendingIndex uint64
	pendingMs    int64
	// reachedMs is the time of the last barrier the export read up to,
	// reachedIndex its index.
	reachedIndex uint64
	reachedMs    int64
}

// barrier takes a read barrier of src, waiting at most timeout, unless
// one is outstanding or the last was taken less than period ago. A
// barrier that fails (this replica does not lead, or not for now) is
// left out: the times then stay where they were.
func (c *coverage) barrier(ctx context.Context, src Source, timeout time.Duration) {
	if c.pending || time.Since(c.taken) < c.period {
		return
	}
	c.taken = time.Now()
	bctx, cancel := context.WithTimeout(ctx, timeout)
	index, err := src.ReadBarrier(bctx)
	cancel()
	if err == nil {
		c.pending, c.pendingIndex, c.pendingMs = true, index, c.taken.UnixMilli()
	}
}

// read notes that the export has read every entry up to index.
func (c *coverage) read(index uint64) {
	if c.pending && index >= c.pendingIndex {
		c.pending, c.reachedIndex, c.reachedMs = false, c.pendingIndex, c.pendingMs
	}
}

// upTo returns a time before which every acknowledged write is at or
// below index, every entry up to which the export has read; 0 when none
// is known.
func (c *coverage) upTo(index uint64) int64 {
	c.read(index)
	if c.reachedIndex > index {
		return 0
	}
	return c.reachedMs
}

// entryRecords returns the binlog records of a log entry: one per chunk op,
// in apply order; none for ops of other machines, ops a write fence
// refused and entries without ops.
// A CREATE_CLONE op carries the materialised data of its location, so that
// a restore never reads the source cluster.
func (e *exporter) entryRecords(ctx context.Context, ent copyset.LogEntry) ([]*syncpb.Record, error) {
	if ent.Type != copyset.LogEntryOps {
		return nil, nil
	}
	at := appendedMs(ent)
	var out []*syncpb.Record
	for i, op := range ent.Ops {
		if op.Kind != kinds.Chunk {
			continue
		}
		req, data, _, owner, err := chunkop.DecodeOwned(op.Payload) // a pre-image is the views' business, not the export's
		if err != nil {
			return nil, fmt.Errorf("log index %d, op %d: %w", ent.Index, i, err)
		}
		if _, refused := e.src.WriteFenced(ent.Index, owner); refused {
			continue // it changed nothing: a replay must not apply it
		}
		req.Data = nil
		if req.GetOpType() == pb.CHUNK_OP_TYPE_CHUNK_OP_CREATE_CLONE {
			if data, err = e.src.Materialize(ctx, req.GetLocation(), req.GetSize()); err != nil {
				return nil, fmt.Errorf("log index %d: materialise clone chunk %d from %q: %w", ent.Index, req.GetChunkId(), req.GetLocation(), err)
			}
		}
		out = append(out, &syncpb.Record{Kind: &syncpb.Record_Binlog{Binlog: &syncpb.BinlogRecord{
			Index: ent.Index, Term: ent.Term, AppendedAtMs: at, Op: req, Data: data, OpPosition: uint32(i)}}})
	}
	return out, nil
}

// setsWriteFence reports whether a log entry holds a write fence op (set
// or lift: either is rare, and flushing at a lift costs one heartbeat).
func setsWriteFence(ent copyset.LogEntry) bool {
	for _, op := range ent.Ops {
		if op.Kind == kinds.WriteFence {
			return true
		}
	}
	return false
}

// appendedMs is when the entry was appended, Unix milliseconds (0 unknown).
func appendedMs(ent copyset.LogEntry) int64 {
	if ent.AppendedAt.IsZero() {
		return 0
	}
	return ent.AppendedAt.UnixMilli()
}

// FirstIndexAtOrAfter returns the log index a kIncrementalByTimestamp
// export from startMs (Unix milliseconds) starts at: the first committed
// entry appended at or after startMs, or the commit index + 1 when there is
// none yet. It binary-searches the retained log by the entries' append
// times (the leaders' clocks, taken as non-decreasing along the log). When
// the entries before that one are no longer retained, so that earlier ones
// may also have been appended at or after startMs, the error wraps
// ErrLogGone and names the earliest start time the retained log can serve.
func FirstIndexAtOrAfter(src Source, startMs uint64) (uint64, error) {
	ts := int64(min(startMs, math.MaxInt64))
	commit := src.CommitIndex()
	var readErr error
	atOrAfter := func(i uint64) bool { // entry i is retained and appended at or after ts
		ent, err := src.LogEntry(i)
		if err != nil {
			if !errors.Is(err, copyset.ErrLogCompacted) && readErr == nil {
				readErr = err
			}
			return false
		}
		return appendedMs(ent) >= ts
	}
	lo, hi := uint64(1), commit+1 // the answer is in [lo, hi]
	for lo < hi {
		mid := lo + (hi-lo)/2
		if atOrAfter(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	if readErr != nil {
		return 0, fmt.Errorf("copyset %d/%d: find the first log entry at or after %d ms: %w", src.Pool(), src.Copyset(), startMs, readErr)
	}
	k := lo
	if k == 1 {
		return 1, nil
	}
	_, err := src.LogEntry(k - 1)
	switch {
	case err == nil: // k-1 was appended before ts: k is the first at or after it
		return k, nil
	case !errors.Is(err, copyset.ErrLogCompacted):
		return 0, fmt.Errorf("copyset %d/%d: read log index %d: %w", src.Pool(), src.Copyset(), k-1, err)
	case k > commit:
		return 0, fmt.Errorf("%w: copyset %d/%d retains no log entry (commit index %d): no start time can be served",
			ErrLogGone, src.Pool(), src.Copyset(), commit)
	}
	first, err := src.LogEntry(k)
	if err != nil {
		return 0, fmt.Errorf("copyset %d/%d: read log index %d: %w", src.Pool(), src.Copyset(), k, err)
	}
	ms := appendedMs(first)
	return 0, fmt.Errorf("%w: copyset %d/%d retains its log from index %d, appended at %s (%d ms); entries before it may have been appended at or after start time %d ms: the earliest start time it can serve is %d ms",
		ErrLogGone, src.Pool(), src.Copyset(), k, time.UnixMilli(ms).UTC().Format(time.RFC3339Nano), ms, startMs, ms+1)
}
