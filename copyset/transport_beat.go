package copyset

import (
	"time"

	"github.com/hashicorp/raft"

	"github.com/chunkraft/chunkraft/proto/chunkraft/raftpb"
)

// Leader beats: one clock per peer server keeps the followers of idle groups.
//
// hashicorp/raft runs one heartbeat goroutine per (group, follower) that
// wakes every HeartbeatTimeout/10 to /5; with hundreds of groups per server
// those wake-ups, and the batches they keep filling, are most of an idle
// server's CPU. So a leader runs its raft with a longer heartbeat timeout
// (RaftOptions.LeaderHeartbeatTimeout, Node.paceLeader): raft's own
// heartbeats go out less often, and the heartbeat batcher of each peer
// server sends, every TransportOptions.LeaderBeatInterval, one heartbeat
// for each group this server leads that has a follower there: a beat.
//
// A beat is raft's last heartbeat of the group to that follower, sent
// again: the same term, the same leader address. The follower takes it as
// it takes raft's (its heartbeat handler: the leader is known, the contact
// time renewed), so followers keep raft's HeartbeatTimeout, their
// elections and the read lease's argument (lease.go) unchanged. A beat is
// sent only while the group's raft is leader in that term (checked at
// every tick), and only while raft itself keeps heartbeating the follower:
// a beat lapses when raft sent none through the batcher for
// leaderBeatLapse intervals (the follower was removed, raft stepped down).
// An answer that acknowledges the term renews the leader's read lease with
// the batch's send instant, as an answer to raft's heartbeat does; an
// answer with a newer term ends the beat (raft learns the term with its
// own next heartbeat and steps down). A beat is not sent while one is
// unanswered, nor right after raft's own heartbeat to the same follower.
//
// raft's own heartbeats still carry what beats cannot: VerifyLeader rounds
// (they wake raft's heartbeat goroutines at once) and the contact times
// raft's LeaderLeaseTimeout check counts, which is why the leader's
// heartbeat timeout is bounded by the lease timeout (paceLeader).

// leaderBeatLapse is how many beat intervals a beat outlives raft's last
// heartbeat to its follower.
const leaderBeatLapse = 5

// beatHooks connect a group's beats to its node.
type beatHooks struct {
	// leading reports whether the group's raft is leader in term.
	leading func(term uint64) bool
	// acked records that id acknowledged, in term, a heartbeat sent at sent.
	acked func(term uint64, id raft.ServerID, sent time.Time)
}

// setBeatHooks lets the group's heartbeats to peers be repeated as beats.
func (g *GroupTransport) setBeatHooks(h *beatHooks) { g.beats.Store(h) }

// leaderBeat is what the batcher b repeats for one group.
type leaderBeat struct {
	b     *heartbeatBatcher
	g     *GroupTransport
	id    raft.ServerID
	req   *raftpb.AppendEntriesRequest // raft's last heartbeat to the peer
	heard time.Time                    // when raft queued it
	// inFlight: a beat of this group is queued or unanswered.
	inFlight bool
}

// heardLocked records raft's heartbeat c of group g to the peer id, as it
// is queued: the beat the batcher repeats from now on. Called with b.mu
// held.
func (b *heartbeatBatcher) heardLocked(g *GroupTransport, id raft.ServerID, c *heartbeatCall) {
	if b.m.opts.LeaderBeatInterval <= 0 || g.beats.Load() == nil {
		return
	}
	if b.beats == nil {
		b.beats = make(map[uint64]*leaderBeat)
	}
	lb := b.beats[g.group]
	if lb == nil || lb.g != g {
		lb = &leaderBeat{b: b, g: g}
		b.beats[g.group] = lb
	}
	lb.id, lb.req, lb.heard = id, c.req, time.Now()
}

// queueBeats queues a beat for every group that needs one at now.
func (b *heartbeatBatcher) queueBeats(now time.Time) {
	iv := b.m.opts.LeaderBeatInterval
	b.mu.Lock()
	defer b.mu.Unlock()
	for group, lb := range b.beats {
		h := lb.g.beats.Load()
		if h == nil || lb.g.isClosed() || now.Sub(lb.heard) > leaderBeatLapse*iv || !h.leading(lb.req.Term) {
			delete(b.beats, group)
			continue
		}
		if lb.inFlight || now.Sub(lb.heard) < iv/2 {
			continue
		}
		lb.inFlight = true
		b.queue = append(b.queue, &heartbeatCall{req: lb.req, beat: lb})
	}
}

// answered handles the answer (or failure) of a beat call c.
func (lb *leaderBeat) answered(c *heartbeatCall, resp *raftpb.AppendEntriesResponse, err error) {
	b := lb.b
	term := c.req.Term
	ok := err == nil && resp.StatusCode == 0 && resp.Error == "" && resp.Success && resp.Term == term
	b.mu.Lock()
	lb.inFlight = false
	if err == nil && resp.Term > term && b.beats[lb.g.group] == lb {
		delete(b.beats, lb.g.group)
	}
	b.mu.Unlock()
	if ok {
		if h := lb.g.beats.Load(); h != nil {
			h.acked(term, lb.id, c.at)
		}
	}
}
